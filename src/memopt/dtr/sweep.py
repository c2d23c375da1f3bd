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
Budgets are independent replays, submitted to a :class:`concurrent.futures.Executor`:
a local :class:`~concurrent.futures.ProcessPoolExecutor` (``jobs`` workers) by default,
in-process when ``jobs == 1``, or any executor the caller passes (for instance a Dask
cluster's ``Client.get_executor()``). A task carries only the trace *path*;
each worker parses the trace once and keeps it (with its baseline) in a per-process
cache, so a trace is never re-parsed per budget and never pickled per task. Remote
executors therefore need the trace at the same path on the workers.

At small budgets a replay can recompute for a very long time (simrd's answer is its
remat limit, ``--overhead-limit``). ``timeout`` instead bounds the time of each budget:
the sweep then runs on worker processes of its own, ends a worker whose replay overruns
and records that budget as ``timeout`` -- undecided, excluded from the holes, and listed
separately. The limit is CPU time where the OS enforces one (RLIMIT_CPU on Unix, whole
seconds), so that the set of timed-out budgets does not depend on the machine's load;
elsewhere it is wall time.

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
import signal
import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Sequence

from memopt._progress import Progress
from memopt.errors import FormatError, MemoptError, OptionError

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
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise OptionError(f"bad grid {spec!r}: {what} {text!r} is not a number") from None
    if not value.is_finite():
        raise OptionError(f"bad grid {spec!r}: {what} {text!r} is not a finite number")
    if abs(value) > MAX_RATIO:
        raise OptionError(f"bad grid {spec!r}: {what} {text!r} is beyond the largest ratio, {MAX_RATIO}")
    return value


def parse_grid(spec: str) -> tuple[Decimal, ...]:
    """The ratios of the grid ``START:STOP:STEP``, ascending, computed exactly.

    The points are ``START + k * STEP`` for ``k = 0, 1, ...`` while ``<= STOP`` (so STOP
    is included when it is on the grid). ``0 < START <= STOP`` and ``STEP > 0`` are
    required. ``START:STOP`` alone is not accepted: a step must be explicit.
    """
    if not isinstance(spec, str):
        raise OptionError(f"a grid is a START:STOP:STEP string, got {type(spec).__name__}")
    parts = spec.split(":")
    if len(parts) != 3:
        raise OptionError(f"bad grid {spec!r}: expected START:STOP:STEP, e.g. 0.1:1.0:0.01")
    start = _decimal(parts[0], "START", spec)
    stop = _decimal(parts[1], "STOP", spec)
    step = _decimal(parts[2], "STEP", spec)
    if start <= 0:
        raise OptionError(f"bad grid {spec!r}: START must be > 0 (a budget ratio)")
    if step <= 0:
        raise OptionError(f"bad grid {spec!r}: STEP must be > 0")
    if stop < start:
        raise OptionError(f"bad grid {spec!r}: STOP must be >= START")
    count = int((stop - start) / step) + 1  # Decimal division: exact for decimal inputs
    if count > MAX_GRID_POINTS:
        raise OptionError(f"bad grid {spec!r}: {count} points (at most {MAX_GRID_POINTS})")
    points = [start + k * step for k in range(count)]
    # Decimal division rounds to 28 significant digits; make the ends exact either way.
    while points and points[-1] > stop:
        points.pop()
    if start + len(points) * step <= stop:
        points.append(start + len(points) * step)
    return tuple(points)


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
                       variants=tuple(dict(v) for v in doc.get("variants", ())))
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
        decided = [p for p in self.points if p.status != "timeout"]
        index_holes = find_holes([p.passed for p in decided])
        holes = tuple((decided[i].ratio, decided[j].ratio) for i, j in index_holes)
        object.__setattr__(self, "holes", holes)

    @property
    def failing(self) -> list[SweepPoint]:
        """Budgets that ran to a failure (OOM or thrash)."""
        return [p for p in self.points if not p.passed and p.status != "timeout"]

    @property
    def timeouts(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "timeout"]

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
        return {
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


def _worker_init(path: str) -> None:
    # Parse eagerly when the pool starts, so that the first budgets are not slower.
    # An error here would only break the pool ("BrokenProcessPool"); swallow it so
    # that the first task raises it again, with its message, through its future.
    try:
        cached_trace(path)
    except Exception:
        pass


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


class InlineExecutor(cf.Executor):
    """Runs each task in the calling process at ``submit`` time (``jobs == 1``)."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def make_executor(path: str, jobs: int) -> cf.Executor:
    """The default executor of a sweep: in-process for one job, else a process pool
    whose workers parse the trace once at start-up."""
    if jobs <= 1:
        return InlineExecutor()
    # spawn rather than fork: no inherited threads/locks (numba, BLAS), and each worker
    # gets its own hash seed, which makes ``repeats`` a real cross-process check.
    return cf.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_init,
        initargs=(path,),
    )


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


def _executor_results(pool: cf.Executor, tasks: list[tuple[Any, tuple]]):
    """Run ``tasks`` ``(key, args for replay_point)`` on a concurrent.futures executor;
    yield ``(key, outcome)`` as they complete."""
    if isinstance(pool, InlineExecutor):
        # Submitting would run every task before the first result is seen; run them one
        # by one instead so that progress is reported as it happens.
        for key, args in tasks:
            yield key, pool.submit(replay_point, *args).result()
        return
    futures = {pool.submit(replay_point, *args): key for key, args in tasks}
    try:
        for fut in cf.as_completed(futures):
            yield futures[fut], fut.result()
    finally:
        for fut in futures:
            fut.cancel()


#: With CPU-time limits, the parent still kills a replay after this many times the
#: limit in wall time (a guard against a worker that makes no progress at all).
WALL_GUARD_FACTOR = 20


def _limit_cpu(seconds: float) -> bool:
    """Let the calling process use about ``seconds`` more CPU time (RLIMIT_CPU, whole
    seconds): past it the kernel sends SIGXCPU, whose default action ends the process.
    False where this is unavailable (no ``resource`` module, or a hard limit in the way)."""
    try:
        import resource
    except ImportError:
        return False
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(math.ceil(usage.ru_utime + usage.ru_stime + seconds))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and soft > hard:
        return False
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return True


def _killable_worker(conn, path: str, timeout: float, heuristic: Any) -> None:
    """Body of a worker process of :func:`_killable_results`: parse once, then serve,
    each replay under a CPU-time limit of ``timeout`` seconds where the OS supports it."""
    from memopt.dtr import replay

    try:
        trace, base = cached_trace(path)
        # Warm up: one replay at the baseline peak (few evictions) loads or compiles the
        # JIT kernel now, so that compilation is not charged to the first budget's limit.
        replay(trace, base.peak, heuristic)
        cpu_limited = _limit_cpu(timeout)  # probe once; set again before every task
        conn.send(("ready", (base.peak, base.compute, cpu_limited)))
    except Exception as exc:  # reported by the parent as the sweep's error
        conn.send(("error", exc))
        return
    while True:
        msg = conn.recv()
        if msg is None:
            return
        key, args = msg
        if cpu_limited:
            _limit_cpu(timeout)
        try:
            conn.send(("done", (key, replay_point(*args))))
        except Exception as exc:
            conn.send(("error", exc))
            return


def _killable_results(path: str, jobs: int, tasks: list[tuple[Any, tuple]], timeout: float,
                      heuristic: Any = "dtr"):
    """Like :func:`_executor_results`, on ``jobs`` processes of our own, so that a budget
    whose replay runs longer than ``timeout`` seconds can be stopped: its worker ends (or
    is killed) and is replaced, and the budget's outcome is ``status = 'timeout'``.

    The limit is on the worker's *CPU time* where the OS allows it (RLIMIT_CPU), so that
    which budgets time out does not depend on how loaded the machine is; elsewhere it is
    wall time. (A compiled replay kernel cannot be interrupted from inside its process,
    and concurrent.futures cannot cancel a running task; hence processes we can end.)
    """
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = list(reversed(tasks))
    workers: dict[Any, dict] = {}  # conn -> {"proc", "task", "deadline", "ready"}
    base: tuple[int, int] | None = None

    def spawn() -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_killable_worker, args=(child, path, timeout, heuristic), daemon=True)
        proc.start()
        child.close()
        workers[parent] = {"proc": proc, "task": None, "deadline": None, "ready": False, "cpu": False}

    def retire(conn) -> None:
        w = workers.pop(conn)
        if w["proc"].is_alive():
            w["proc"].kill()
        w["proc"].join()
        conn.close()

    def expire(conn) -> tuple:
        """End the worker whose replay overran; its budget is undecided and a fresh worker
        takes its place while budgets remain."""
        key, args = workers[conn]["task"]
        retire(conn)
        if pending:
            spawn()
        return key, timed_out(args)

    def timed_out(args: tuple) -> dict:
        peak, compute = base if base is not None else (0, 0)
        out = {name: 0 for name in OUTCOME_FIELDS}
        out.update(status="timeout", budget=ratio_budget(Decimal(args[1]), peak),
                   baseline_peak=peak, baseline_compute=compute, seconds=timeout)
        return out

    try:
        for _ in range(min(jobs, len(tasks))):
            spawn()
        busy = 0
        while pending or busy:
            for conn, w in list(workers.items()):
                if w["ready"] and w["task"] is None and pending:
                    key, args = pending.pop()
                    w["task"] = (key, args)
                    wall = timeout * WALL_GUARD_FACTOR if w["cpu"] else timeout
                    w["deadline"] = time.monotonic() + wall
                    conn.send((key, args))
                    busy += 1
            deadlines = [w["deadline"] for w in workers.values() if w["task"] is not None]
            wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for conn in wait(list(workers), timeout=wait_for):
                w = workers[conn]
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    w["proc"].join(5)
                    code = w["proc"].exitcode
                    if w["task"] is not None and w["cpu"] and code in (-signal.SIGXCPU, -signal.SIGKILL):
                        # The kernel ended the replay at its CPU-time limit.
                        busy -= 1
                        yield expire(conn)
                        continue
                    raise MemoptError(f"a sweep worker process died unexpectedly (exit code {code})") from None
                if kind == "error":
                    raise payload
                if kind == "ready":
                    peak, compute, w["cpu"] = payload
                    w["ready"] = True
                    base = (peak, compute)
                    continue
                key, out = payload
                w["task"], w["deadline"] = None, None
                busy -= 1
                yield key, out
            now = time.monotonic()
            for conn, w in list(workers.items()):
                if w["task"] is not None and w["deadline"] <= now:
                    busy -= 1
                    yield expire(conn)
    finally:
        for conn, w in list(workers.items()):
            if w["proc"].is_alive() and w["task"] is None:
                try:
                    conn.send(None)
                except OSError:
                    pass
            retire(conn)


def run_sweep(
    trace_path: str | os.PathLike,
    grid: str | Iterable[Decimal | str | float],
    heuristic: Any = "dtr",
    *,
    overhead_limit: float | None = None,
    repeats: int = 1,
    jobs: int = 1,
    executor: cf.Executor | None = None,
    timeout: float | None = None,
    progress: bool = False,
) -> SweepResult:
    """Replay ``trace_path`` at every ratio of ``grid`` and collect outcomes and holes.

    ``grid`` is a ``START:STOP:STEP`` string or an iterable of ratios (sorted here).
    ``executor``, when given, runs the tasks (and is not shut down); otherwise ``jobs``
    local processes (or the calling process when ``jobs == 1``). ``repeats`` re-runs
    every budget; differing outcomes are flagged on the point (``deterministic=False``)
    and listed by :attr:`SweepResult.nondeterministic`. ``timeout`` (CPU seconds per
    budget where enforceable, else wall seconds; local processes only) stops a replay
    that runs longer and records the
    budget as ``status = 'timeout'``: undecided, so it is neither a pass nor a failure
    for the holes.
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
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise OptionError(f"timeout must be a number of seconds, got {timeout!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise OptionError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if timeout > MAX_TIMEOUT:
            raise OptionError(f"timeout {timeout!r} s is beyond the largest accepted, {MAX_TIMEOUT:g} s")
        if executor is not None:
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
    runs: dict[int, list[dict | None]] = {i: [None] * repeats for i in range(len(ratios))}
    t0 = time.perf_counter()
    name = Path(path).name
    failing = 0
    own_executor = executor is None and timeout is None
    pool = make_executor(abspath, jobs) if own_executor else executor
    try:
        if timeout is not None:
            stream = _killable_results(abspath, jobs, tasks, timeout, heuristic)
        else:
            stream = _executor_results(pool, tasks)
        with Progress(len(tasks), f"sweep {name[:24]}", enabled=progress) as bar:
            for (i, rep), out in stream:
                runs[i][rep] = out
                if rep == 0 and out["status"] != "pass":
                    failing += 1
                bar.update(1, status=f"r={ratios[i]} {out['status']} not-pass={failing}")
    finally:
        if own_executor:
            pool.shutdown(wait=True, cancel_futures=True)

    points = []
    first = runs[0][0] if ratios else None
    for i, ratio in enumerate(ratios):
        outs = runs[i]
        base = outs[0]
        assert base is not None
        distinct: list[dict] = []
        for out in outs:
            if out["status"] == "timeout":  # type: ignore[index]
                continue  # a stopped run says nothing about determinism
            key = {f: out[f] for f in OUTCOME_FIELDS}  # type: ignore[index]
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
            )
        )
    return SweepResult(
        trace=name,
        heuristic=heuristic_name(heuristic),
        overhead_limit=overhead_limit,
        grid=grid_text,
        baseline_peak=first["baseline_peak"] if first else 0,
        baseline_compute=first["baseline_compute"] if first else 0,
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
    if result.nondeterministic:
        lines.append(
            "NONDETERMINISTIC at ratios " + ", ".join(str(p.ratio) for p in result.nondeterministic)
        )
    return "\n".join(lines)


def plot_sweep(result: SweepResult, path: str | os.PathLike) -> None:
    """Plot ratio vs. compute overhead: passing budgets as a line, failing budgets as
    red marks on the x axis, holes shaded. matplotlib is imported here, with Agg."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MemoptError("--plot needs matplotlib (pip install 'memopt[plot]')") from None

    base = result.baseline_compute
    fig, ax = plt.subplots(figsize=(8, 4.5))
    # NaN at non-passing budgets breaks the line there, so a hole shows as a gap.
    xs = [float(p.ratio) for p in result.points]
    ys = [p.overhead(base) if p.passed else math.nan for p in result.points]
    ax.plot(xs, ys, ".-", lw=1, ms=3, label="pass: compute overhead")
    fails = {"OOM": "x", "thrash": "v", "timeout": "|"}
    for status, marker in fails.items():
        fx = [float(p.ratio) for p in result.points if p.status == status]
        if fx:
            color = "gray" if status == "timeout" else "red"
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
    ax.set_xlabel("budget / baseline peak")
    ax.set_ylabel("(model + remat compute) / model compute")
    title = f"{result.trace} - {result.heuristic}"
    if result.overhead_limit:
        title += f" (overhead limit {result.overhead_limit})"
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=120)
    plt.close(fig)
