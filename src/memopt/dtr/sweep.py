"""Budget sweeps of a DTR trace replay, and detection of feasibility holes.

Model
-----
Dynamic Tensor Rematerialization (DTR; Kirisame et al., "Dynamic Tensor
Rematerialization", ICLR 2021) trains under a memory budget by evicting tensors
greedily and recomputing them on demand. Its reference simulator, simrd
(``uwsampl/dtr-prototype``, folder ``simrd/``), replays a logged training step under the
budget ``int(ratio * baseline_peak)``, where ``baseline_peak`` is the peak memory of the
same log replayed with an unbounded budget. A replay ends ``pass``, ``OOM`` (nothing
evictable is left while an allocation does not fit) or ``thrash`` (the recomputation
exceeded simrd's remat limit).

Because DTR is greedy, feasibility is *not* monotone in the budget: a larger budget
changes which tensors are evicted, and when, and can lead the run into a state whose
recomputation cascade no longer fits. A sweep replays every ratio of a grid
``START:STOP:STEP`` and reports the **feasibility holes**: each maximal run of failing
budgets that has a passing budget below *and* above it, as
``[first_failing_ratio, last_failing_ratio]``.

Grid points are computed exactly in decimal arithmetic (``start + k * step`` with
:class:`decimal.Decimal`), so a 0.001 grid has no float drift and ``STOP`` is included
whenever it lies on the grid. A point's budget is then ``int(float(ratio) * peak)``, the
expression simrd's drivers use, so that a sweep point and a single replay at the same
ratio literal (``memopt dtr replay --ratio 0.431``) replay the very same budget.

Execution
---------
Budgets are independent replays, run by the shared sweep machinery (:mod:`memopt.sweep`):
by default (``local``) on ``jobs`` worker processes of memopt's own, in-process when
``jobs == 1``; or on threads, a Dask cluster (``dask://HOST:PORT`` or a ``Client``) or any
:class:`concurrent.futures.Executor` the caller passes. A task carries only the trace *path*;
each worker parses the trace once and keeps it (with its baseline) in a per-process
cache, so a trace is never re-parsed per budget and never pickled per task. Remote
executors therefore need the trace at the same path on the workers.

At small budgets a replay can recompute for a very long time (simrd's answer is its
remat limit, ``--overhead-limit``). ``timeout`` instead bounds the time of each budget:
the local workers then end a worker whose replay overruns and record that budget as
``timeout`` -- undecided, excluded from the holes, and listed separately. The limit is CPU
time where the OS enforces one (RLIMIT_CPU on Unix, whole seconds), so that the set of
timed-out budgets does not depend on the machine's load; elsewhere it is wall time.

A budget whose worker dies (killed, out of memory, a crash in compiled code) is recorded
as ``lost`` with the reason; it is undecided like a timeout, every finished budget is kept,
and the sweep goes on (``SweepResult.lost``; the JSON gains a ``lost`` list only then).

``repeats = N`` submits every budget N times as separate tasks (which a pool spreads
over worker processes, started with ``spawn`` and thus with independent hash seeds), and
flags every budget whose outcomes are not identical: the simulator must be
deterministic, as simrd is.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Sequence

from memopt.errors import FormatError, OptionError
from memopt.sweep import (WALL_GUARD_FACTOR, ExecutorSpec, InlineExecutor, _limit_cpu,  # noqa: F401 (re-exported)
                          parse_executor_spec, run_tasks)

#: Fields of a replay outcome that must be identical across repeats (wall time is not).
OUTCOME_FIELDS = (
    "status",
    "budget",
    "clock",
    "model_compute",
    "remat_compute",
    "max_memory",
    "heuristic_evals",
)

#: Statuses of budgets that did not run to an outcome: stopped at the sweep's time limit, or
#: lost with their worker. Neither a pass nor a failure for the holes.
UNDECIDED = ("timeout", "lost")

#: Upper bound on the number of grid points, so that a typo such as ``0:1:1e-9`` is an
#: error instead of an attempt to build a billion-point list.
MAX_GRID_POINTS = 1_000_000

#: Largest budget ratio accepted (a budget a million times the baseline peak is no
#: experiment); larger ones, and non-finite ones, are refused with OptionError.
MAX_RATIO = Decimal(10**6)

#: Largest per-budget timeout accepted, in seconds (about 116 days).
MAX_TIMEOUT = 1e7


# ---------------------------------------------------------------------------------------
# Grid
# ---------------------------------------------------------------------------------------


def _decimal(text: str, what: str, spec: str) -> Decimal:
    from memopt.cli._options import decimal

    return decimal(text, f"bad grid {spec!r}: {what}", low=-MAX_RATIO, high=MAX_RATIO)


def parse_grid(spec: str) -> tuple[Decimal, ...]:
    """The ratios of the grid ``START:STOP:STEP``, ascending, computed exactly.

    The points are ``START + k * STEP`` for ``k = 0, 1, ...`` while ``<= STOP`` (so STOP
    is included when it is on the grid). ``0 < START <= STOP`` and ``STEP > 0`` are
    required; each is an exact decimal (:func:`memopt.cli._options.decimal`: at most 28
    significant digits, nonzero values at least ``1e-30``, at most :data:`MAX_RATIO`), and
    at most :data:`MAX_GRID_POINTS` points, counted before any is built. ``START:STOP``
    alone is not accepted: a step must be explicit.
    """
    from memopt.cli._options import arithmetic_grid

    if not isinstance(spec, str):
        raise OptionError(f"a grid is a START:STOP:STEP string, got {type(spec).__name__}")
    parts = spec.split(":")
    if len(parts) != 3:
        raise OptionError(f"bad grid {spec[:40]!r}: expected START:STOP:STEP, e.g. 0.1:1.0:0.01")
    start = _decimal(parts[0], "START", spec)
    stop = _decimal(parts[1], "STOP", spec)
    step = _decimal(parts[2], "STEP", spec)
    if start <= 0:
        raise OptionError(f"bad grid {spec!r}: START must be > 0 (a budget ratio)")
    if step <= 0:
        raise OptionError(f"bad grid {spec!r}: STEP must be > 0")
    if stop < start:
        raise OptionError(f"bad grid {spec!r}: STOP must be >= START")
    return arithmetic_grid(start, stop, step, f"bad grid {spec!r}", MAX_GRID_POINTS)


def ratio_budget(ratio: Decimal | float, peak: int) -> int:
    """``int(ratio * peak)`` in floating point, as simrd's drivers compute a budget."""
    return int(float(ratio) * peak)


# ---------------------------------------------------------------------------------------
# Holes
# ---------------------------------------------------------------------------------------


def find_holes(passed: Sequence[bool]) -> list[tuple[int, int]]:
    """Index ranges ``(i, j)`` (inclusive) of the feasibility holes of a pass/fail list.

    ``passed`` is ordered by increasing budget. A hole is a maximal run of failures
    ``passed[i..j]`` with a pass at some index ``< i`` and one at some index ``> j``;
    failures below the first pass or above the last pass are not holes.
    """
    holes: list[tuple[int, int]] = []
    seen_pass = False
    run_start: int | None = None
    for index, ok in enumerate(passed):
        if ok:
            if run_start is not None and seen_pass:
                holes.append((run_start, index - 1))
            run_start = None
            seen_pass = True
        elif run_start is None:
            run_start = index
    return holes


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPoint:
    """The outcome of one budget of a sweep (its first run when repeated)."""

    ratio: Decimal
    budget: int
    status: str
    clock: int
    model_compute: int
    remat_compute: int
    max_memory: int
    heuristic_evals: int
    seconds: float
    #: Whether every repeat of this budget gave the same outcome (always true for 1 run).
    deterministic: bool = True
    #: The distinct outcomes seen when ``deterministic`` is false.
    variants: tuple[dict, ...] = ()
    #: Why the budget has no outcome, when ``status == 'lost'`` (its worker died).
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def overhead(self, baseline_compute: int) -> float:
        """Compute overhead (slowdown) of the run: (model + remat compute) / model compute.

        This is the y axis of the DTR paper's budget/overhead plots; it is meaningful
        for passing runs only (a failed run stopped part way).
        """
        if baseline_compute <= 0:
            return math.nan
        return (baseline_compute + self.remat_compute) / baseline_compute

    def to_dict(self, baseline_compute: int | None = None) -> dict:
        out = {
            "ratio": float(self.ratio),
            "budget": self.budget,
            "status": self.status,
            "clock": self.clock,
            "model_compute": self.model_compute,
            "remat_compute": self.remat_compute,
            "max_memory": self.max_memory,
            "heuristic_evals": self.heuristic_evals,
            "seconds": round(self.seconds, 6),
        }
        if baseline_compute is not None and self.passed:
            out["overhead"] = round(self.overhead(baseline_compute), 6)
        if not self.deterministic:
            out["deterministic"] = False
            out["variants"] = list(self.variants)
        if self.status == "lost":
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, doc: dict) -> "SweepPoint":
        """Inverse of :meth:`to_dict` (``overhead`` is derived, so it is not read back)."""
        try:
            return cls(ratio=Decimal(str(doc["ratio"])), budget=int(doc["budget"]), status=str(doc["status"]),
                       clock=int(doc["clock"]), model_compute=int(doc["model_compute"]),
                       remat_compute=int(doc["remat_compute"]), max_memory=int(doc["max_memory"]),
                       heuristic_evals=int(doc["heuristic_evals"]), seconds=float(doc.get("seconds", 0.0)),
                       deterministic=bool(doc.get("deterministic", True)),
                       variants=tuple(dict(v) for v in doc.get("variants", ())),
                       reason=str(doc.get("reason", "")))
        except (KeyError, TypeError, ValueError, AttributeError, InvalidOperation) as exc:
            from memopt.errors import FormatError

            raise FormatError(f"not a sweep point: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class SweepResult:
    """Every budget of a sweep, in increasing ratio order, and the holes among them."""

    trace: str
    heuristic: str
    overhead_limit: float | None
    grid: str
    baseline_peak: int
    baseline_compute: int
    repeats: int
    points: tuple[SweepPoint, ...]
    seconds: float
    #: Per-budget time limit of the sweep (``None``: none); see :func:`run_sweep`.
    timeout: float | None = None
    holes: tuple[tuple[Decimal, Decimal], ...] = field(init=False)

    def __post_init__(self) -> None:
        # Holes are found among the decided budgets; a budget stopped by the sweep's
        # time limit is neither a pass nor a failure.
        decided = [p for p in self.points if p.status not in UNDECIDED]
        index_holes = find_holes([p.passed for p in decided])
        holes = tuple((decided[i].ratio, decided[j].ratio) for i, j in index_holes)
        object.__setattr__(self, "holes", holes)

    @property
    def failing(self) -> list[SweepPoint]:
        """Budgets that ran to a failure (OOM or thrash)."""
        return [p for p in self.points if not p.passed and p.status not in UNDECIDED]

    @property
    def timeouts(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "timeout"]

    @property
    def lost(self) -> list[SweepPoint]:
        """Budgets whose worker died before they finished (each with its ``reason``)."""
        return [p for p in self.points if p.status == "lost"]

    @property
    def nondeterministic(self) -> list[SweepPoint]:
        return [p for p in self.points if not p.deterministic]

    @property
    def min_passing_ratio(self) -> Decimal | None:
        passing = [p.ratio for p in self.points if p.passed]
        return passing[0] if passing else None

    def hole_points(self) -> list[SweepPoint]:
        """The failing points that lie inside a hole."""
        inside: list[SweepPoint] = []
        for lo, hi in self.holes:
            inside.extend(p for p in self.failing if lo <= p.ratio <= hi)
        return inside

    def to_dict(self) -> dict:
        min_pass = self.min_passing_ratio
        out = {
            "trace": self.trace,
            "heuristic": self.heuristic,
            "overhead_limit": self.overhead_limit,
            "grid": self.grid,
            "baseline_peak": self.baseline_peak,
            "baseline_compute": self.baseline_compute,
            "repeats": self.repeats,
            "points": [p.to_dict(self.baseline_compute) for p in self.points],
            "failing": len(self.failing),
            "min_passing_ratio": None if min_pass is None else float(min_pass),
            "holes": [[float(lo), float(hi)] for lo, hi in self.holes],
            "hole_budgets": len(self.hole_points()),
            "nondeterministic": [float(p.ratio) for p in self.nondeterministic],
            "timeout": self.timeout,
            "timeouts": [float(p.ratio) for p in self.timeouts],
            "seconds": round(self.seconds, 3),
        }
        if self.lost:  # only then, so that a complete sweep's JSON is unchanged
            out["lost"] = [{"ratio": float(p.ratio), "reason": p.reason} for p in self.lost]
        return out

    @classmethod
    def from_dict(cls, doc: dict) -> "SweepResult":
        """Inverse of :meth:`to_dict` (holes and the summary counts are derived from the points)."""
        try:
            limit, timeout = doc.get("overhead_limit"), doc.get("timeout")
            return cls(trace=str(doc["trace"]), heuristic=str(doc["heuristic"]),
                       overhead_limit=None if limit is None else float(limit), grid=str(doc["grid"]),
                       baseline_peak=int(doc["baseline_peak"]), baseline_compute=int(doc["baseline_compute"]),
                       repeats=int(doc.get("repeats", 1)),
                       points=tuple(SweepPoint.from_dict(p) for p in doc["points"]),
                       seconds=float(doc.get("seconds", 0.0)),
                       timeout=None if timeout is None else float(timeout))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            from memopt.errors import FormatError

            raise FormatError(f"not a sweep result: {type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------------------------------
# Worker side: one parse per process
# ---------------------------------------------------------------------------------------

# Per-process cache: path -> (file identity, trace, baseline). A worker replays many
# budgets of the same trace; parsing and the unbounded baseline replay are done once.
_TRACE_CACHE: dict[str, tuple[tuple[int, int], Any, Any]] = {}


def _file_identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size)


def cached_trace(path: str | os.PathLike) -> tuple[Any, Any]:
    """The parsed trace at ``path`` and its baseline, parsed at most once per process
    (re-parsed only if the file changed)."""
    from memopt.dtr import baseline, load_trace

    key = os.path.abspath(os.fspath(path))
    ident = _file_identity(key)
    hit = _TRACE_CACHE.get(key)
    if hit is not None and hit[0] == ident:
        return hit[1], hit[2]
    trace = load_trace(key)
    base = baseline(trace)
    _TRACE_CACHE.clear()  # a worker serves one sweep at a time; do not hoard traces
    _TRACE_CACHE[key] = (ident, trace, base)
    return trace, base


def _worker_init(path: str, heuristic: Any = None) -> None:
    """Initializer of a worker process: parse the trace (and its baseline) once. With a
    ``heuristic`` (per-budget timeouts), also replay once at the baseline peak (few
    evictions): that loads or compiles the JIT kernel now, so that compilation is not
    charged to the first budget's time limit."""
    trace, base = cached_trace(path)
    if heuristic is not None:
        from memopt.dtr import replay

        replay(trace, base.peak, heuristic)


def replay_point(path: str, ratio: str, heuristic: Any, overhead_limit: float | None) -> dict:
    """Replay one budget of a sweep (the task a worker runs). ``ratio`` is a decimal
    string so that the exact grid point crosses process boundaries unchanged."""
    from memopt.dtr import replay

    trace, base = cached_trace(path)
    budget = ratio_budget(Decimal(ratio), base.peak)
    t0 = time.perf_counter()
    result = replay(trace, budget, heuristic, overhead_limit=overhead_limit)
    seconds = time.perf_counter() - t0
    out = {name: getattr(result, name) for name in OUTCOME_FIELDS}
    out["baseline_peak"] = base.peak
    out["baseline_compute"] = base.compute
    out["seconds"] = seconds
    return out


def make_executor(path: str, jobs: int) -> cf.Executor:
    """A plain ``concurrent.futures`` executor for a sweep of ``path``: in-process for one
    job, else a process pool whose workers parse the trace once at start-up. (:func:`run_sweep`
    itself runs ``local`` sweeps on memopt's own workers, which survive a worker's death.)"""
    if jobs <= 1:
        return InlineExecutor()
    return cf.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_pool_init,
        initargs=(path,),
    )


def _pool_init(path: str) -> None:
    # An error here would only break the pool ("BrokenProcessPool"); swallow it so that
    # the first task raises it again, with its message, through its future.
    try:
        cached_trace(path)
    except Exception:
        pass


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def heuristic_name(heuristic: Any) -> str:
    if isinstance(heuristic, str):
        return heuristic
    return getattr(heuristic, "name", None) or getattr(heuristic, "__name__", None) or repr(heuristic)


def check_heuristic(heuristic: Any) -> None:
    """Reject an unknown heuristic name early, with the list of known ones."""
    if not isinstance(heuristic, str):
        return  # a user-defined heuristic object: the simulator validates it
    from memopt.dtr import HEURISTICS

    if heuristic not in HEURISTICS:
        known = ", ".join(sorted(HEURISTICS, key=lambda n: (n != n.lower(), n)))
        raise OptionError(f"unknown heuristic {heuristic!r}; known: {known}")


def check_trace_path(path: str | os.PathLike) -> str:
    try:
        path = os.fspath(path)
    except TypeError:
        raise OptionError(f"a trace path must be a string or a path, got {type(path).__name__}") from None
    if not os.path.exists(path):
        raise FormatError(f"{path}: cannot read (no such file); trace file not found")
    if os.path.isdir(path):
        raise FormatError(f"{path}: is a directory, not a DTR log file")
    return path


def _is_local(executor: Any) -> bool:
    if executor is None:
        return True
    if isinstance(executor, str):
        executor = parse_executor_spec(executor)
    return isinstance(executor, ExecutorSpec) and executor.kind == "local"


def run_sweep(
    trace_path: str | os.PathLike,
    grid: str | Iterable[Decimal | str | float],
    heuristic: Any = "dtr",
    *,
    overhead_limit: float | None = None,
    repeats: int = 1,
    jobs: int = 1,
    executor: Any = None,
    timeout: float | None = None,
    progress: bool = False,
) -> SweepResult:
    """Replay ``trace_path`` at every ratio of ``grid`` and collect outcomes and holes.

    ``grid`` is a ``START:STOP:STEP`` string or an iterable of ratios (sorted here).
    ``executor`` runs the tasks (see :mod:`memopt.sweep`): a spec (``local``, ``threads``,
    ``dask://HOST:PORT``), any ``concurrent.futures`` executor (used and not shut down) or a
    Dask ``Client``; by default (``local``) ``jobs`` worker processes of memopt's own, or the
    calling process when ``jobs == 1``. ``repeats`` re-runs
    every budget; differing outcomes are flagged on the point (``deterministic=False``)
    and listed by :attr:`SweepResult.nondeterministic`. ``timeout`` (CPU seconds per
    budget where enforceable, else wall seconds; local processes only) stops a replay
    that runs longer and records the
    budget as ``status = 'timeout'``: undecided, so it is neither a pass nor a failure
    for the holes. A budget whose worker died is kept as ``status = 'lost'`` with the
    reason (undecided too); every finished budget is kept.
    """
    path = check_trace_path(trace_path)
    check_heuristic(heuristic)
    for what, value in (("repeats", repeats), ("jobs", jobs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"{what} must be an integer >= 1, got {value!r}")
    if overhead_limit is not None:
        if isinstance(overhead_limit, bool) or not isinstance(overhead_limit, (int, float)) \
                or not overhead_limit >= 1:
            raise OptionError(f"overhead limit must be a number >= 1 (a slowdown factor), got {overhead_limit!r}")
    local = _is_local(executor)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise OptionError(f"timeout must be a number of seconds, got {timeout!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise OptionError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if timeout > MAX_TIMEOUT:
            raise OptionError(f"timeout {timeout!r} s is beyond the largest accepted, {MAX_TIMEOUT:g} s")
        if not local:
            raise OptionError("a per-budget timeout needs the built-in local worker processes, not an executor")
    if isinstance(grid, str):
        grid_text = grid
        ratios = parse_grid(grid)
    else:
        try:
            given = {Decimal(str(r)) for r in grid}
        except (TypeError, InvalidOperation):
            raise OptionError("a sweep grid is a START:STOP:STEP string or an iterable of ratios") from None
        bad = [r for r in given if not r.is_finite() or r <= 0 or r > MAX_RATIO]
        if bad:
            raise OptionError(f"ratio {bad[0]} is not a finite number in (0, {MAX_RATIO}]")
        ratios = tuple(sorted(given))
        if not ratios:
            raise OptionError("a sweep needs at least one ratio, all > 0")
        grid_text = ",".join(str(r) for r in ratios)

    abspath = os.path.abspath(path)
    # Interleave repeats (all budgets once, then again) so that a pool spreads the
    # repeats of one budget over different workers.
    tasks = [
        ((i, rep), (abspath, str(ratio), heuristic, overhead_limit))
        for rep in range(repeats)
        for i, ratio in enumerate(ratios)
    ]
    runs: dict[int, list[tuple[str, Any] | None]] = {i: [None] * repeats for i in range(len(ratios))}
    t0 = time.perf_counter()
    name = Path(path).name
    failing = 0

    def describe(key, kind, payload) -> str:
        nonlocal failing
        i, rep = key
        status = payload["status"] if kind == "done" else kind
        if rep == 0 and status != "pass":
            failing += 1
        return f"r={ratios[i]} {status} not-pass={failing}"

    warm = heuristic if timeout is not None else None
    for (i, rep), kind, payload in run_tasks(replay_point, tasks, executor=executor, jobs=jobs, timeout=timeout,
                                             initializer=_worker_init, initargs=(abspath, warm),
                                             progress=progress, desc=f"sweep {name[:24]}", describe=describe):
        runs[i][rep] = (kind, payload)

    # The baseline of budgets that did not finish (timeout, lost): from a finished one, or
    # parsed here if none finished.
    done = [r[1] for outs in runs.values() for r in outs if r is not None and r[0] == "done"]
    if done:
        base_peak, base_compute = done[0]["baseline_peak"], done[0]["baseline_compute"]
    elif ratios:
        _, base = cached_trace(abspath)
        base_peak, base_compute = base.peak, base.compute
    else:
        base_peak = base_compute = 0

    def outcome(ratio: Decimal, run: tuple[str, Any]) -> dict:
        kind, payload = run
        if kind == "done":
            return payload
        out = {field_name: 0 for field_name in OUTCOME_FIELDS}
        out.update(status=kind, budget=ratio_budget(ratio, base_peak), baseline_peak=base_peak,
                   baseline_compute=base_compute, seconds=timeout if kind == "timeout" else 0.0)
        if kind == "lost":
            out["reason"] = payload
        return out

    points = []
    for i, ratio in enumerate(ratios):
        outs = [outcome(ratio, run) for run in runs[i]]  # type: ignore[arg-type]
        base = outs[0]
        distinct: list[dict] = []
        for out in outs:
            if out["status"] in UNDECIDED:
                continue  # a stopped or lost run says nothing about determinism
            key = {f: out[f] for f in OUTCOME_FIELDS}
            if key not in distinct:
                distinct.append(key)
        points.append(
            SweepPoint(
                ratio=ratio,
                budget=base["budget"],
                status=base["status"],
                clock=base["clock"],
                model_compute=base["model_compute"],
                remat_compute=base["remat_compute"],
                max_memory=base["max_memory"],
                heuristic_evals=base["heuristic_evals"],
                seconds=base["seconds"],
                deterministic=len(distinct) <= 1,
                variants=tuple(distinct) if len(distinct) > 1 else (),
                reason=base.get("reason", ""),
            )
        )
    return SweepResult(
        trace=name,
        heuristic=heuristic_name(heuristic),
        overhead_limit=overhead_limit,
        grid=grid_text,
        baseline_peak=base_peak,
        baseline_compute=base_compute,
        repeats=repeats,
        points=tuple(points),
        seconds=time.perf_counter() - t0,
        timeout=timeout,
    )


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def format_sweep(result: SweepResult, *, all_points: bool = False) -> str:
    """A readable summary: header, failing budgets (or every budget), and the holes."""
    lines = [
        f"trace      {result.trace}",
        f"heuristic  {result.heuristic}"
        + (f"   overhead limit {result.overhead_limit}" if result.overhead_limit else ""),
        f"baseline   peak {result.baseline_peak} B, compute {result.baseline_compute}",
        f"grid       {result.grid}  ({len(result.points)} budgets x {result.repeats} run(s), "
        f"{result.seconds:.1f}s)",
    ]
    shown = result.points if all_points else result.failing
    if shown:
        lines.append("")
        lines.append(f"{'ratio':>8} {'budget':>14} {'status':>7} {'overhead':>9} {'max_memory':>14}")
        for p in shown:
            over = f"{p.overhead(result.baseline_compute):.4f}" if p.passed else "-"
            flag = "  NONDETERMINISTIC" if not p.deterministic else ""
            lines.append(
                f"{str(p.ratio):>8} {p.budget:>14} {p.status:>7} {over:>9} {p.max_memory:>14}{flag}"
            )
    lines.append("")
    min_pass = result.min_passing_ratio
    lines.append(
        f"failing    {len(result.failing)} of {len(result.points)} budgets; "
        f"smallest passing ratio {min_pass if min_pass is not None else 'none'}"
    )
    if result.holes:
        text = ", ".join(f"[{lo}, {hi}]" for lo, hi in result.holes)
        lines.append(f"holes      {len(result.holes)}: {text}")
    else:
        lines.append("holes      none")
    if result.timeouts:
        lines.append(
            f"timeouts   {len(result.timeouts)} budget(s) stopped after {result.timeout}s "
            "(undecided; not counted as failures): "
            + ", ".join(str(p.ratio) for p in result.timeouts[:20])
            + (" ..." if len(result.timeouts) > 20 else "")
        )
    if result.lost:
        lines.append(f"lost       {len(result.lost)} budget(s) whose worker died (undecided): "
                     + "; ".join(f"{p.ratio} ({p.reason})" for p in result.lost[:5])
                     + (" ..." if len(result.lost) > 5 else ""))
    if result.nondeterministic:
        lines.append(
            "NONDETERMINISTIC at ratios " + ", ".join(str(p.ratio) for p in result.nondeterministic)
        )
    return "\n".join(lines)


def plot_sweep(result: SweepResult, path: str | os.PathLike) -> None:
    """Plot ratio vs. compute overhead: passing budgets as a line, failing budgets as
    red marks on the x axis, holes shaded. matplotlib is imported here, with Agg."""
    from memopt.sweep import pyplot, save_figure

    plt = pyplot()
    base = result.baseline_compute
    fig, ax = plt.subplots(figsize=(8, 4.5))
    # NaN at non-passing budgets breaks the line there, so a hole shows as a gap.
    xs = [float(p.ratio) for p in result.points]
    ys = [p.overhead(base) if p.passed else math.nan for p in result.points]
    ax.plot(xs, ys, ".-", lw=1, ms=3, label="pass: compute overhead")
    fails = {"OOM": "x", "thrash": "v", "timeout": "|", "lost": "1"}
    for status, marker in fails.items():
        fx = [float(p.ratio) for p in result.points if p.status == status]
        if fx:
            color = "gray" if status in UNDECIDED else "red"
            ax.scatter(fx, [1.0] * len(fx), marker=marker, color=color, s=18, zorder=3, label=status)
    # Shade each hole out to the neighbouring passing grid points' midpoints so that
    # one-point holes are visible.
    ratios = [float(p.ratio) for p in result.points]
    for n, (lo, hi) in enumerate(result.holes):
        i = ratios.index(float(lo))
        j = ratios.index(float(hi))
        left = (ratios[i - 1] + ratios[i]) / 2 if i > 0 else ratios[i]
        right = (ratios[j] + ratios[j + 1]) / 2 if j + 1 < len(ratios) else ratios[j]
        ax.axvspan(left, right, color="orange", alpha=0.3, label="hole" if n == 0 else None)
    title = f"{result.trace} - {result.heuristic}"
    if result.overhead_limit:
        title += f" (overhead limit {result.overhead_limit})"
    save_figure(plt, fig, ax, path, xlabel="budget / baseline peak",
                ylabel="(model + remat compute) / model compute", title=title)
