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

**KV-cache sweeps** on an attention trace (:mod:`memopt.cache.kv_trace`) run on the same
machinery: :func:`run_kv_sweep` replays every KV policy (:data:`memopt.cache.KV_POLICIES`, and
``opt``, the exact offline optimum :func:`memopt.cache.kv_optimum`) at every budget (past
positions per head) and, for fixed-lag commit ``rmm``, every commit lag, one task per
(policy, budget, lag). Workers read the trace once from its path (:class:`AttentionSource`).
:func:`plot_kv_sweep` draws retained attention against budget and, for ``rmm``, against the
commit lag (the lag axis ends at the optimum).

>>> from memopt.cache.kv_trace import make_attention_trace
>>> tr = make_attention_trace([[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]],
...                           [True] * 4, scale=8)
>>> res = run_kv_sweep(tr, "h2o,opt", [1, 2])
>>> [(p.policy, p.budget, p.retained) for p in res.points]
[('h2o', 1, 15), ('h2o', 2, 16), ('opt', 1, 15), ('opt', 2, 19)]
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from memopt.errors import OptionError

__all__ = ["TraceSource", "CacheSweepPoint", "CacheSweepResult", "parse_capacities", "parse_policies",
           "run_cache_sweep", "plot_cache_sweep", "format_cache_sweep", "MAX_POINTS", "AttentionSource",
           "KVSweepPoint", "KVSweepResult", "parse_kv_policies", "parse_lags", "run_kv_sweep",
           "format_kv_sweep", "plot_kv_sweep", "is_attention_file"]

#: Most (policy, capacity) points of one sweep: a typo such as ``1:1e9:1`` is an error.
MAX_POINTS = 100_000


# ---------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------


def _int(text: str, what: str, spec: str) -> int:
    from memopt.cli._options import whole

    return whole(text, f"bad capacities {spec!r}: {what}", low=0, high=2**62 - 1)


def parse_capacities(spec: str) -> tuple[int, ...]:
    """Capacities (bytes per cache) from ``A:B:STEP`` (``A, A+STEP, ...`` while ``<= B``) or a
    comma list ``A,B,C`` (sorted, duplicates dropped); each a whole number in ``[0, 2**62)``,
    at most :data:`MAX_POINTS` of them, counted before any is built.

    >>> parse_capacities("4:16:4"), parse_capacities("8,2,8")
    ((4, 8, 12, 16), (2, 8))
    """
    from memopt.cli._options import arithmetic_grid

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
        return arithmetic_grid(start, stop, step, f"bad capacities {spec!r}", MAX_POINTS)
    parts = spec.split(",")
    if len(parts) > MAX_POINTS:
        raise OptionError(f"bad capacities {spec[:40]!r}...: {len(parts)} capacities (at most {MAX_POINTS})")
    return tuple(sorted({_int(p, "capacity", spec) for p in parts}))


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


@dataclass(frozen=True)
class AttentionSource:
    """A ``memopt-attention`` trace by path (:func:`memopt.cache.load_attention`), sent to
    workers instead of the trace."""

    paths: tuple[str]

    @classmethod
    def of(cls, path) -> "AttentionSource":
        return cls((os.path.abspath(os.fspath(path)),))

    def load(self):
        from memopt.cache import load_attention

        return load_attention(self.paths[0])


def is_attention_file(path) -> bool:
    """Whether ``path`` starts like a ``memopt-attention`` trace (its header names the format,
    or it is a zip archive: the binary ``.npz`` form)."""
    from memopt.cache.kv_trace import is_npz

    with open(os.fspath(path), "rb") as fh:
        head = fh.read(200)
    return b'"memopt-attention"' in head or is_npz(path)


# Per-process cache: source -> (file identities, trace). One sweep at a time per worker.
_SOURCE_CACHE: dict[Any, tuple[tuple, Any]] = {}


def _identity(source: TraceSource | AttentionSource) -> tuple:
    out = []
    for p in source.paths:
        st = os.stat(p)
        out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


def cached_source(source: TraceSource | AttentionSource):
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
    if isinstance(source, (TraceSource, AttentionSource)):
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


# ---------------------------------------------------------------------------------------
# KV-cache sweeps: policies x budgets x commit lags on an attention trace
# ---------------------------------------------------------------------------------------


def parse_kv_policies(spec: str | Iterable[str]) -> tuple[str, ...]:
    """KV policy names (:data:`memopt.cache.KV_POLICIES` and ``opt``, the offline optimum)
    from ``h2o,rmm,opt`` or a list; duplicates dropped, order kept."""
    from memopt.cache.kv_policies import KV_POLICIES

    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for name in names:
        key = name.strip().lower() if isinstance(name, str) else ""
        if key not in KV_POLICIES + ("opt",):
            raise OptionError(f"unknown KV policy {name!r} in {spec!r}; choose from "
                              f"{', '.join(KV_POLICIES + ('opt',))}")
        if key not in out:
            out.append(key)
    if not out:
        raise OptionError("a KV sweep needs at least one policy")
    return tuple(out)


def parse_lags(spec: str | Iterable) -> tuple[float, ...]:
    """Commit lags of ``rmm``: whole numbers of steps in ``[0, 2**63)`` or ``inf``, ascending.

    >>> parse_lags("16,0,inf,4")
    (0, 4, 16, inf)
    """
    import math

    from memopt.cli._options import whole_or_inf

    items = spec.split(",") if isinstance(spec, str) else list(spec)
    if len(items) > MAX_POINTS:
        raise OptionError(f"bad lags: {len(items)} lags (at most {MAX_POINTS})")
    out = set()
    for item in items:
        if isinstance(item, float) and math.isinf(item) and item > 0:
            out.add(math.inf)
        else:
            out.add(whole_or_inf(str(item), f"bad lags {spec!r}: lag"))
    if not out:
        raise OptionError("a KV sweep needs at least one lag")
    return tuple(sorted(out))


def kv_point(source, policy: str, budget: int, lag, prefill: int, share: str = "head") -> dict:
    """One point of a KV sweep (the task a worker runs): retained attention of ``policy``."""
    from memopt.cache import kv_optimum, simulate_kv

    trace = cached_source(source) if isinstance(source, AttentionSource) else source
    if policy == "opt":
        res = kv_optimum(trace, budget, prefill=prefill)
        return {"retained": res.retained, "total": res.total, "optimal": True}
    extra = {"lag": lag} if policy == "rmm" else {}
    res = simulate_kv(trace, policy, budget, prefill=prefill, share=share, **extra)
    return {"retained": res.retained, "total": res.total, "optimal": False}


@dataclass(frozen=True)
class KVSweepPoint:
    """One (policy, budget, lag) of a KV sweep (``lag`` is ``None`` except for ``rmm``);
    ``status`` is ``ok``, ``timeout`` or ``lost`` (then ``reason`` says why)."""

    policy: str
    budget: int
    lag: float | None
    status: str
    retained: int = 0
    total: int = 0
    optimal: bool = False
    reason: str = ""

    @property
    def fraction(self) -> float:
        return self.retained / self.total if self.total else 1.0

    @property
    def label(self) -> str:
        return self.policy if self.lag is None else f"{self.policy} (lag {_lag_text(self.lag)})"

    def to_dict(self) -> dict:
        out = {"policy": self.policy, "budget": self.budget,
               "lag": None if self.lag is None else _lag_text(self.lag), "status": self.status}
        if self.status == "ok":
            out.update(retained=self.retained, total=self.total, fraction=round(self.fraction, 6),
                       optimal=self.optimal)
        else:
            out["reason"] = self.reason
        return out


def _lag_text(lag) -> int | str:
    import math

    return "inf" if math.isinf(lag) else int(lag)


@dataclass(frozen=True)
class KVSweepResult:
    """Every point, policy-major in the order asked, then budgets ascending, then lags."""

    trace: str
    steps: int
    heads: int
    prefill: int
    policies: tuple[str, ...]
    budgets: tuple[int, ...]
    lags: tuple[float, ...]
    points: tuple[KVSweepPoint, ...]
    seconds: float
    share: str = "head"

    @property
    def lost(self) -> list[KVSweepPoint]:
        return [p for p in self.points if p.status == "lost"]

    @property
    def timeouts(self) -> list[KVSweepPoint]:
        return [p for p in self.points if p.status == "timeout"]

    def point(self, policy: str, budget: int, lag=None) -> KVSweepPoint:
        for p in self.points:
            if p.policy == policy and p.budget == budget and p.lag == lag:
                return p
        raise KeyError((policy, budget, lag))

    def to_dict(self) -> dict:
        where = [{"policy": p.policy, "budget": p.budget, "lag": p.to_dict()["lag"]} for p in self.points]
        return {
            "trace": self.trace,
            "steps": self.steps,
            "heads": self.heads,
            "prefill": self.prefill,
            "share": self.share,
            "policies": list(self.policies),
            "budgets": list(self.budgets),
            "lags": [_lag_text(h) for h in self.lags],
            "points": [p.to_dict() for p in self.points],
            "lost": [dict(w, reason=p.reason) for w, p in zip(where, self.points) if p.status == "lost"],
            "timeouts": [w for w, p in zip(where, self.points) if p.status == "timeout"],
            "seconds": round(self.seconds, 3),
        }


def run_kv_sweep(trace, policies: str | Sequence[str], budgets: Iterable, *, lags: str | Iterable = (0,),
                 prefill: int = 0, share: str = "head", executor: Any = None, jobs: int = 1,
                 timeout: float | None = None, progress: bool = False) -> KVSweepResult:
    """Retained attention of every KV policy at every budget (past positions per head: an
    integer, or a fraction of the trace length in ``(0, 1]``, see
    :func:`memopt.cache.kv_policies.check_budget`) and, for ``rmm``, every commit lag, on
    ``trace`` (an :class:`AttentionSource`, a trace path, or an
    :class:`~memopt.cache.kv_trace.AttentionTrace`, then shipped with every task).

    ``share="layer"``: a layer's KV heads share ``kv_heads x budget`` positions
    (:mod:`memopt.cache.kv_policies`); the offline optimum (``opt``) is per head, so it is
    refused there (a per-head optimum bounds no layer-shared policy from above).

    ``executor``/``jobs``/``timeout``/``progress`` as in :func:`memopt.sweep.run_tasks`.
    """
    from memopt.cache.kv_policies import check_budget, check_prefill, check_share
    from memopt.cache.kv_trace import AttentionTrace
    from memopt.sweep import run_tasks

    labels = parse_kv_policies(policies)
    lag_list = parse_lags(lags)
    if check_share(share) == "layer" and "opt" in labels:
        raise OptionError("the offline optimum (opt) is per KV head: it bounds no layer-shared budget; "
                          "drop opt or use share head")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OptionError(f"jobs must be an integer >= 1, got {jobs!r}")
    if isinstance(trace, AttentionTrace):
        source, loaded, name = trace, trace, trace.name
    else:
        source = trace if isinstance(trace, AttentionSource) else AttentionSource.of(trace)
        loaded = cached_source(source)  # read here first: bad input fails before any worker starts
        name = os.path.basename(source.paths[0])
    P = check_prefill(prefill, loaded)
    budget_list = tuple(sorted({check_budget(b, loaded) for b in budgets}))
    if not budget_list:
        raise OptionError("a KV sweep needs at least one budget")
    keys = [(pol, b, lag) for pol in labels for b in budget_list
            for lag in (lag_list if pol == "rmm" else (None,))]
    if len(keys) > MAX_POINTS:
        raise OptionError(f"{len(keys)} KV sweep points is more than {MAX_POINTS}")
    tasks = [(key, (source, key[0], key[1], key[2], P, share)) for key in keys]
    done: dict[tuple, tuple[str, Any]] = {}
    t0 = time.perf_counter()

    def describe(key, kind, payload) -> str:
        pol, b, lag = key
        what = f"retained {payload['retained'] / payload['total']:.1%}" \
            if kind == "done" and payload["total"] else kind
        return f"{pol}{'' if lag is None else f' lag {_lag_text(lag)}'} @ {b}: {what}"

    for key, kind, payload in run_tasks(kv_point, tasks, executor=executor, jobs=jobs, timeout=timeout,
                                        initializer=_worker_init, initargs=(source,), progress=progress,
                                        desc="KV sweep", describe=describe):
        done[key] = (kind, payload)

    points = []
    for key in keys:
        kind, payload = done[key]
        if kind == "done":
            points.append(KVSweepPoint(*key, "ok", payload["retained"], payload["total"], payload["optimal"]))
        else:
            points.append(KVSweepPoint(*key, kind, reason=payload if kind == "lost" else f"stopped after {payload}s"))
    return KVSweepResult(name, loaded.steps, loaded.n_heads, P, labels, budget_list,
                         lag_list if "rmm" in labels else (), tuple(points), time.perf_counter() - t0, share)


def format_kv_sweep(result: KVSweepResult) -> list[tuple]:
    """Table rows ``(policy, lag, budget, retained fraction, retained)`` (lost points say so)."""
    rows = []
    for p in result.points:
        lag = "-" if p.lag is None else str(_lag_text(p.lag))
        if p.status == "ok":
            rows.append((p.policy, lag, str(p.budget), f"{p.fraction:.4%}", str(p.retained)))
        else:
            rows.append((p.policy, lag, str(p.budget), p.status, "-"))
    return rows


def plot_kv_sweep(result: KVSweepResult, path, lag_path=None) -> None:
    """Retained attention against budget (one line per policy, and per lag of ``rmm``) to
    ``path``; with ``lag_path`` and at least two lags, retained attention against the commit
    lag of ``rmm`` (one line per budget; ``inf`` drawn at twice the largest finite lag; the
    optimum, when swept, as a flat line: where the lag axis ends)."""
    import math

    from memopt.sweep import plot_lines

    title = f"{result.trace[:60]} - T={result.steps}, {result.heads} heads, prefill {result.prefill}"
    series = []
    for label in dict.fromkeys(p.label for p in result.points):
        pts = [p for p in result.points if p.label == label]
        series.append((label, [p.budget for p in pts], [p.fraction if p.status == "ok" else math.nan for p in pts]))
    undecided = [p.budget for p in result.points if p.status != "ok"]
    plot_lines(path, series, xlabel="budget (past positions per head)", ylabel="retained attention",
               title=title, marks=[("lost / timeout", undecided, 0.0)])
    if lag_path is None or len(result.lags) < 2:
        return
    finite = [h for h in result.lags if not math.isinf(h)]
    at_inf = 2 * max(finite) if finite and max(finite) > 0 else 1
    xs = [at_inf if math.isinf(h) else h for h in result.lags]
    series = []
    for b in result.budgets:
        pts = [result.point("rmm", b, h) for h in result.lags]
        series.append((f"rmm @ {b}", xs, [p.fraction if p.status == "ok" else math.nan for p in pts]))
        if "opt" in result.policies and result.point("opt", b).status == "ok":
            series.append((f"optimum @ {b}", [min(xs), max(xs)], [result.point("opt", b).fraction] * 2))
    plot_lines(lag_path, series, xlabel=f"commit lag H (steps; inf drawn at {at_inf})",
               ylabel="retained attention", title=title)
