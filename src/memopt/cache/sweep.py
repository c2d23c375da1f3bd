"""Policies x capacities sweeps of expert caches, on the shared sweep machinery.

:func:`run_cache_sweep` simulates every policy of a list (``lru``, ``lfu``, ``lru-k``/``lru-2``...,
``belady``) at every capacity of a grid (``A:B:STEP`` or ``A,B,C``, bytes per cache) with
:func:`memopt.cache.simulate`, each (policy, capacity) pair one task of :func:`memopt.sweep.run_tasks`:
in-process, on local worker processes, threads, or a Dask cluster (``dask://HOST:PORT`` or a
``Client``). Results are exact counts and do not depend on where a point ran.

A task carries the *recipe* of the trace (:class:`TraceSource`: the route files and the
reading options), not the trace: each worker process reads it once and keeps it in a
per-process cache (re-read only if a file changed), so remote workers need the files at the
same paths. A :class:`~memopt.cache.routes.RequestTrace` may be given instead; it is then
shipped with every task.

A point whose worker died is kept as ``status = 'lost'`` with the reason; every finished
point is kept. :func:`plot_cache_sweep` draws hit rate against capacity, one line per policy.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from memopt.errors import OptionError

__all__ = ["TraceSource", "CacheSweepPoint", "CacheSweepResult", "parse_capacities", "parse_policies",
           "run_cache_sweep", "plot_cache_sweep", "format_cache_sweep", "MAX_POINTS"]

#: Most (policy, capacity) points of one sweep: a typo such as ``1:1e9:1`` is an error.
MAX_POINTS = 100_000


# ---------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------


def _int(text: str, what: str, spec: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"bad capacities {spec!r}: {what} {text.strip()!r} is not a whole number of bytes") \
            from None
    if value < 0 or value >= 2**62:
        raise OptionError(f"bad capacities {spec!r}: {what} {value} is not in [0, 2**62) bytes")
    return value


def parse_capacities(spec: str) -> tuple[int, ...]:
    """Capacities (bytes per cache) from ``A:B:STEP`` (``A, A+STEP, ...`` while ``<= B``) or a
    comma list ``A,B,C`` (sorted, duplicates dropped).

    >>> parse_capacities("4:16:4"), parse_capacities("8,2,8")
    ((4, 8, 12, 16), (2, 8))
    """
    if not isinstance(spec, str) or not spec.strip():
        raise OptionError(f"capacities are A:B:STEP or A,B,C (bytes per cache), got {spec!r}")
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise OptionError(f"bad capacities {spec!r}: expected A:B:STEP or A,B,C")
        start, stop, step = (_int(p, w, spec) for p, w in zip(parts, ("A", "B", "STEP")))
        if step <= 0:
            raise OptionError(f"bad capacities {spec!r}: STEP must be > 0")
        if stop < start:
            raise OptionError(f"bad capacities {spec!r}: B must be >= A")
        count = (stop - start) // step + 1
        if count > MAX_POINTS:
            raise OptionError(f"bad capacities {spec!r}: {count} capacities (at most {MAX_POINTS})")
        return tuple(range(start, stop + 1, step))
    values = sorted({_int(p, "capacity", spec) for p in spec.split(",")})
    if len(values) > MAX_POINTS:
        raise OptionError(f"bad capacities {spec!r}: {len(values)} capacities (at most {MAX_POINTS})")
    return tuple(values)


def parse_policies(spec: str | Iterable[str], k: int | None = None) -> tuple[str, ...]:
    """Canonical policy labels (``lru``, ``lfu``, ``lru-2``..., ``belady``) from ``lru,lfu,belady``
    or a list; duplicates dropped, order kept. ``k`` is the k of a bare ``lru-k``."""
    from memopt.cache.policies import parse_policy

    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise OptionError(f"bad policy list {spec!r}: an empty name")
        canon, kk = parse_policy(name, k if name.strip().lower() == "lru-k" else None)
        label = f"lru-{kk}" if canon == "lru-k" else canon
        if label not in out:
            out.append(label)
    if not out:
        raise OptionError("a cache sweep needs at least one policy")
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Traces on workers
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSource:
    """How to read a request trace (the arguments of :func:`memopt.cache.load_routes`, or one
    ``memopt-requests`` file): small, hashable, and sent to workers instead of the trace."""

    paths: tuple[str, ...]
    object_bytes: int | tuple[tuple[int, int], ...] = 1
    per_layer: bool = False
    drop_warmup: bool = False
    skip_passes: int = 0

    @classmethod
    def of(cls, paths, *, object_bytes=1, per_layer=False, drop_warmup=False, skip_passes=0) -> "TraceSource":
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        if isinstance(object_bytes, dict):
            object_bytes = tuple(sorted(object_bytes.items()))
        return cls(tuple(os.path.abspath(os.fspath(p)) for p in paths), object_bytes, bool(per_layer),
                   bool(drop_warmup), skip_passes)

    def load(self):
        from memopt.cache import load_requests, load_routes

        if len(self.paths) == 1:
            with open(self.paths[0], "rb") as fh:
                if b"memopt-requests" in fh.read(200):
                    return load_requests(self.paths[0])
        ob = dict(self.object_bytes) if isinstance(self.object_bytes, tuple) else self.object_bytes
        return load_routes(list(self.paths), object_bytes=ob, per_layer=self.per_layer,
                           drop_warmup=self.drop_warmup, skip_passes=self.skip_passes)


# Per-process cache: source -> (file identities, trace). One sweep at a time per worker.
_SOURCE_CACHE: dict[TraceSource, tuple[tuple, Any]] = {}


def _identity(source: TraceSource) -> tuple:
    out = []
    for p in source.paths:
        st = os.stat(p)
        out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


def cached_source(source: TraceSource):
    """The trace of ``source``, read at most once per process (again only if a file changed)."""
    ident = _identity(source)
    hit = _SOURCE_CACHE.get(source)
    if hit is not None and hit[0] == ident:
        return hit[1]
    trace = source.load()
    _SOURCE_CACHE.clear()
    _SOURCE_CACHE[source] = (ident, trace)
    return trace


def _worker_init(source) -> None:
    if isinstance(source, TraceSource):
        cached_source(source)


def simulate_point(source, policy: str, capacity: int) -> dict:
    """One point of a sweep (the task a worker runs): ``simulate(trace, policy, capacity)``."""
    from memopt.cache import simulate

    trace = cached_source(source) if isinstance(source, TraceSource) else source
    return simulate(trace, policy, capacity).to_dict()


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSweepPoint:
    """One (policy, capacity) of a sweep: ``status`` is ``ok``, ``timeout`` or ``lost``
    (then the counts are 0 and ``reason`` says why)."""

    policy: str
    capacity: int
    status: str
    requests: int = 0
    hits: int = 0
    misses: int = 0
    bytes_moved: int = 0
    bytes_requested: int = 0
    optimal: bool = False
    reason: str = ""

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    def to_dict(self) -> dict:
        out = {"policy": self.policy, "capacity": self.capacity, "status": self.status}
        if self.status == "ok":
            out.update(requests=self.requests, hits=self.hits, misses=self.misses,
                       hit_rate=round(self.hit_rate, 6), bytes_moved=self.bytes_moved,
                       bytes_requested=self.bytes_requested, optimal=self.optimal)
        else:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class CacheSweepResult:
    """Every (policy, capacity) point, policy-major in the order asked, capacities ascending."""

    trace: tuple[str, ...]
    caches: int
    requests: int
    policies: tuple[str, ...]
    capacities: tuple[int, ...]
    points: tuple[CacheSweepPoint, ...]
    seconds: float

    @property
    def lost(self) -> list[CacheSweepPoint]:
        return [p for p in self.points if p.status == "lost"]

    @property
    def timeouts(self) -> list[CacheSweepPoint]:
        return [p for p in self.points if p.status == "timeout"]

    def point(self, policy: str, capacity: int) -> CacheSweepPoint:
        for p in self.points:
            if p.policy == policy and p.capacity == capacity:
                return p
        raise KeyError((policy, capacity))

    def to_dict(self) -> dict:
        return {
            "trace": list(self.trace),
            "caches": self.caches,
            "requests": self.requests,
            "policies": list(self.policies),
            "capacities": list(self.capacities),
            "points": [p.to_dict() for p in self.points],
            "lost": [{"policy": p.policy, "capacity": p.capacity, "reason": p.reason} for p in self.lost],
            "timeouts": [{"policy": p.policy, "capacity": p.capacity} for p in self.timeouts],
            "seconds": round(self.seconds, 3),
        }


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def run_cache_sweep(trace, policies: str | Sequence[str], capacities: str | Iterable[int], *,
                    k: int | None = None, executor: Any = None, jobs: int = 1, timeout: float | None = None,
                    progress: bool = False) -> CacheSweepResult:
    """Simulate every policy at every capacity of ``trace`` (a :class:`TraceSource`, route
    file path(s) read with the defaults of :func:`~memopt.cache.load_routes`, or a
    :class:`~memopt.cache.routes.RequestTrace`).

    ``executor``/``jobs``/``timeout``/``progress`` as in :func:`memopt.sweep.run_tasks`
    (``local`` by default: in-process for ``jobs == 1``).

    >>> from memopt.cache import make_trace
    >>> tr = make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1])
    >>> res = run_cache_sweep(tr, "lru,belady", "2:3:1")
    >>> [(p.policy, p.capacity, p.misses) for p in res.points]
    [('lru', 2, 7), ('lru', 3, 4), ('belady', 2, 5), ('belady', 3, 4)]
    """
    from memopt.cache.policies import check_capacity
    from memopt.cache.routes import RequestTrace
    from memopt.sweep import run_tasks

    labels = parse_policies(policies, k)
    if isinstance(capacities, str):
        caps = parse_capacities(capacities)
    else:
        caps = tuple(sorted({check_capacity(c) for c in capacities}))
        if not caps:
            raise OptionError("a cache sweep needs at least one capacity")
    if len(labels) * len(caps) > MAX_POINTS:
        raise OptionError(f"{len(labels)} policies x {len(caps)} capacities is more than {MAX_POINTS} points")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OptionError(f"jobs must be an integer >= 1, got {jobs!r}")
    if isinstance(trace, RequestTrace):
        source, loaded, names = trace, trace, (trace.name,)
    else:
        source = trace if isinstance(trace, TraceSource) else TraceSource.of(trace)
        loaded = cached_source(source)  # read here first: bad input fails before any worker starts
        names = tuple(os.path.basename(p) for p in source.paths)

    tasks = [((policy, cap), (source, policy, cap)) for policy in labels for cap in caps]
    done: dict[tuple[str, int], tuple[str, Any]] = {}
    t0 = time.perf_counter()

    def describe(key, kind, payload) -> str:
        policy, cap = key
        what = f"hit rate {payload['hits'] / payload['requests']:.1%}" if kind == "done" and payload["requests"] \
            else kind
        return f"{policy} @ {cap}: {what}"

    for key, kind, payload in run_tasks(simulate_point, tasks, executor=executor, jobs=jobs, timeout=timeout,
                                        initializer=_worker_init, initargs=(source,), progress=progress,
                                        desc="cache sweep", describe=describe):
        done[key] = (kind, payload)

    points = []
    for (policy, cap), _ in tasks:
        kind, payload = done[(policy, cap)]
        if kind == "done":
            points.append(CacheSweepPoint(policy, cap, "ok", payload["requests"], payload["hits"],
                                          payload["misses"], payload["bytes_moved"], payload["bytes_requested"],
                                          bool(payload["optimal"])))
        else:
            points.append(CacheSweepPoint(policy, cap, kind,
                                          reason=payload if kind == "lost" else f"stopped after {payload}s"))
    return CacheSweepResult(names, len(loaded.caches), loaded.n_requests, labels, caps, tuple(points),
                            time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def format_cache_sweep(result: CacheSweepResult) -> list[tuple]:
    """Table rows ``(policy, capacity, hits, misses, hit rate, bytes moved)`` (lost points say so)."""
    rows = []
    for p in result.points:
        if p.status == "ok":
            rows.append((p.policy, str(p.capacity), str(p.hits), str(p.misses),
                         f"{p.hit_rate:.1%}" if p.requests else "-", str(p.bytes_moved)))
        else:
            rows.append((p.policy, str(p.capacity), "-", "-", p.status, "-"))
    return rows


def plot_cache_sweep(result: CacheSweepResult, path) -> None:
    """Hit rate against capacity, one line per policy; lost/timed-out points as gray crosses."""
    import math

    from memopt.sweep import plot_lines

    series = []
    for policy in result.policies:
        pts = [p for p in result.points if p.policy == policy]
        series.append((policy, [p.capacity for p in pts],
                       [p.hit_rate if p.status == "ok" else math.nan for p in pts]))
    undecided = [p.capacity for p in result.points if p.status != "ok"]
    plot_lines(path, series, xlabel="capacity (bytes per cache)", ylabel="hit rate",
               title=f"{', '.join(result.trace)[:80]} - {result.caches} cache(s), {result.requests} requests",
               marks=[("lost / timeout", undecided, 0.0)])
