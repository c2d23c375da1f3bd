"""Profiling: peaks from the CPU allocator's events, and the statement program of a wrapper
built by running it statement by statement under the profiler (storages, effects, measured
transients)."""

from __future__ import annotations

import ast
import contextlib
from typing import Any, Callable

from memopt.adapters.inductor.wrapper import InductorCaptureError, _kernel_signatures, _names, _split, _torch, _written_names
from memopt.core.program import Program, Statement
from memopt.errors import InternalError


def _alloc_events(prof) -> list:
    """CPU allocation events of a finished profiler run, in allocator order, each as
    ``(marker, alloc_size, total_allocated)``; ``marker`` is the innermost enclosing
    ``memopt#<i>`` record-function index (``None`` outside)."""
    return [(tag, size, total) for _, tag, size, total in _timed_alloc_events(prof)[0]]


def _timed_alloc_events(prof) -> tuple[list, dict]:
    """:func:`_alloc_events` with each event's start time first, ``(time_ns, marker,
    alloc_size, total_allocated)``, and the ``memopt#<i>`` record functions' spans
    ``{i: (start_ns, end_ns)}``."""
    from torch._C._profiler import _EventType

    out = []
    spans: dict = {}
    stack = [(r, None) for r in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        e, tag = stack.pop()
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            if f.device.type == "cpu":
                out.append((e.start_time_ns, len(out), tag, int(f.alloc_size), int(f.total_allocated)))
        name = e.name
        if name.startswith("memopt#"):
            tag = int(name[7:])
            spans[tag] = (e.start_time_ns, e.end_time_ns)
        stack.extend((c, tag) for c in e.children)
    out.sort(key=lambda r: (r[0], r[1]))
    events = [(time_ns, tag, size, total) for time_ns, _, tag, size, total in out]
    # the allocator's running total orders the events exactly: check the chain
    for (_, _, _, t0), (_, _, s1, t1) in zip(events, events[1:]):
        if t0 + s1 != t1:
            raise InternalError("allocation-chain", "profiler allocation events are not a consistent chain "
                                                    f"({t0} + {s1} != {t1}): concurrent allocations?")
    return events, spans


def marked_peaks(prof) -> dict:
    """``{i: peak}`` of every ``memopt#<i>`` record function of a finished profiler run: the
    highest bytes allocated during its span above what was allocated just before its first
    allocation event (:func:`measure_peak`'s measure of the same span; 0 without events). An event
    belongs to the span its start time falls in, not to the record function it is nested under
    (an allocation the profiler records on another thread counts too), as it would to a
    profiler started and stopped around the span."""
    return {i: peak - start for i, (start, peak) in marked_levels(prof).items()}


def marked_levels(prof) -> dict:
    """``{i: (start, peak)}`` of every ``memopt#<i>`` record function of a finished profiler
    run, both relative to what was allocated when the run's first allocation event happened:
    ``start`` what was allocated when the span began (just before its first allocation event:
    the allocator's chain makes the two the same), ``peak`` the most allocated during it (at
    least ``start``). Events belong to spans by start time, as in :func:`marked_peaks`."""
    import bisect

    events, spans = _timed_alloc_events(prof)
    if not events:
        return {i: (0, 0) for i in spans}
    base = events[0][3] - events[0][2]
    times = [e[0] for e in events]
    out = {}
    for i, (start, end) in spans.items():
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        level = (events[lo - 1][3] if lo > 0 else base) - base
        out[i] = (level, max([level] + [total - base for _, _, _, total in events[lo:hi]]))
    return out


@contextlib.contextmanager
def _profile():
    """A CPU memory profiler (``with _profile() as prof``) with Python's cyclic garbage
    collector run before and off during the run: a collection the collector starts mid-run
    (when its allocation count, which all earlier work in the process moves, crosses its
    threshold) frees unrelated tensors and lowers a measured peak by their bytes."""
    import gc

    _torch()
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            yield prof
    finally:
        if enabled:
            gc.enable()


def measure_peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Run ``fn()`` under PyTorch's CPU memory profiler; return ``(peak, result)`` where
    ``peak`` is the highest number of bytes allocated at the CPU allocator during the call,
    above what was allocated when it started (exact: the allocator reports every
    allocation's and free's byte count, and its own running total)."""
    with _profile() as prof:
        result = fn()
    return _peak(_alloc_events(prof)), result


def _peak(events: list) -> int:
    """The highest bytes allocated during a run's allocation events (:func:`_alloc_events`),
    above what was allocated when the first one happened."""
    if not events:
        return 0
    start = events[0][2] - events[0][1]
    return max(0, max(t for _, _, t in events) - start)


def compiled_module(source: str):
    """The Python module of wrapper ``source``: the one Inductor loaded when it compiled it
    (same source, same file), else loaded now. Loading the wrapper again runs every kernel's
    loader again (seconds on a large program)."""
    from torch._inductor.codecache import PyCodeCache

    _, path = PyCodeCache.write(source)
    for mod in reversed(PyCodeCache.modules):
        if getattr(mod, "__file__", None) == path:
            return mod
    return PyCodeCache.load(source)


def _storages(value, torch) -> list:
    """``(key, nbytes)`` of every tensor storage a value holds (tensor, tuple/list of them)."""
    if isinstance(value, torch.Tensor):
        st = value.untyped_storage()
        n = int(st.nbytes())
        return [((st.data_ptr(), n) if n else ("empty", id(value)), n)]
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _storages(v, torch)]
    return []


def _build_program(source: str, args: list, name: str = "", measure: bool = True,
                   seconds: dict | None = None, warm_up: bool = True,
                   observed: dict | None = None) -> tuple[Program, list]:
    """The wrapper ``source`` as a statement program, from one statement-by-statement run on
    ``args`` (which learns the storages every name binds). ``measure``: the run is under the CPU
    memory profiler, which measures each statement's transient and checks its net allocation
    against the model (the mismatches are returned), after a warm-up run of the whole program
    unless ``warm_up`` is ``False`` (the caller has just run this program on inputs of these
    shapes: the compile's first call); otherwise no profiler and every transient is 0.
    ``seconds`` (if given) receives the time of each phase. ``observed`` (if given, with
    ``measure``) receives that run's ``"peak"`` (:func:`measure_peak`'s measure, from the same
    allocator events) and ``"outputs"``: one measured run of the program in its own order."""
    torch = _torch()

    clock = _Clock(seconds)
    src = _split(source)
    mod = compiled_module(source)
    kernels = _kernel_signatures(source)
    ns = dict(mod.__dict__)
    ns[src.args_name] = list(args)
    local: set[str] = set()
    for s in src.prologue:
        exec(compile(ast.Module([s], []), "<prologue>", "exec"), ns)  # noqa: S102
        local.update(n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    arg_names = sorted(local)
    for s in src.body:
        local.update(n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)))
    codes = [compile(ast.Module([s], []), f"<memopt stmt {i}>", "exec") for i, s in enumerate(src.body)]

    # storage bookkeeping (runtime)
    sid_of: dict = {}                 # live storage key -> storage id
    size_of: dict[int, int] = {}      # storage id -> bytes (0 for external)
    external: set[int] = set()
    refs: dict[str, list[int]] = {}   # name -> storage ids it holds
    key_of: dict[int, Any] = {}       # storage id -> its key while live
    for a in arg_names:
        for key, n in _storages(ns.get(a), torch):
            if key not in sid_of:
                sid_of[key] = len(size_of)
                key_of[sid_of[key]] = key
                size_of[sid_of[key]] = n
                external.add(sid_of[key])
        refs[a] = [sid_of[k] for k, _ in _storages(ns.get(a), torch)]
    # while the program runs: the storage ids each bound name holds, and how many names hold each
    names_of: dict[str, set[int]] = {a: set(refs[a]) for a in arg_names}
    holders: dict[int, int] = {}
    for sid in (sid for ids in names_of.values() for sid in ids):
        holders[sid] = holders.get(sid, 0) + 1

    effects = []  # per statement: dict of sets
    clock.lap("load wrapper")
    if measure and warm_up:  # library caches (primitive caches, lazy inits) settle before the measured run
        warm = dict(ns)
        warm[src.args_name] = list(args)
        with torch.no_grad():
            for c in codes:
                exec(c, warm)  # noqa: S102
        del warm
        clock.lap("warm-up run")
    with torch.no_grad(), (_profile() if measure else contextlib.nullcontext()) as prof:
        for i, (s, c) in enumerate(zip(src.body, codes)):
            loaded = set(_names(s, local, ast.Load))
            stored = [n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
            deleted = [n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)]
            # comprehensions only: a tensor held by a local variable of this loop would outlive
            # the statement that deletes its last name, and its free would be recorded later,
            # outside every statement (the "del attributed nowhere" of earlier versions)
            versions = {n: ns[n]._version for n in loaded if isinstance(ns.get(n), torch.Tensor)}
            with torch._C._profiler._RecordFunctionFast(f"memopt#{i}"):
                exec(c, ns)  # noqa: S102
            written = _written_names(s, local, kernels, ns)
            if written is None:
                written = set(loaded)
            written |= {n for n, ver in versions.items() if isinstance(ns.get(n), torch.Tensor) and ns[n]._version != ver}
            effects.append((loaded, stored, deleted, written))
            # new bindings: learn their storages now (before later statements free anything)
            new_storages = []
            for n in stored:
                ids = []
                for key, nbytes in _storages(ns.get(n), torch):
                    if key not in sid_of:
                        sid_of[key] = len(size_of)
                        key_of[sid_of[key]] = key
                        size_of[sid_of[key]] = nbytes
                        new_storages.append(sid_of[key])
                    ids.append(sid_of[key])
                effects[-1] = effects[-1] + ((n, ids),)
            effects[-1] = (effects[-1], new_storages)
            # forget keys of storages no name refers to any more (their address may be reused);
            # only the names this statement touched can have changed what they hold, so only
            # theirs are looked at again (all names per statement was quadratic in the program)
            touched = {n for n in (*loaded, *stored, *deleted) if n in local}
            released = set()
            for n in touched:
                for sid in names_of.pop(n, ()):
                    holders[sid] -= 1
                    released.add(sid)
                if n in ns:
                    names_of[n] = {sid_of[k] for k, _ in _storages(ns[n], torch) if k in sid_of}
                    for sid in names_of[n]:
                        holders[sid] = holders.get(sid, 0) + 1
            for sid in released:
                if not holders[sid] and sid not in external:
                    del sid_of[key_of.pop(sid)]
    clock.lap("profiled run" if measure else "run")
    events = _alloc_events(prof) if measure else []
    if measure and observed is not None:
        observed["peak"] = _peak(events)
        observed["outputs"] = (eval(compile(ast.Expression(src.returns), "<return>", "eval"), ns)  # noqa: S307
                               if src.returns is not None else None)
    del ns

    # measured net allocation and in-statement peak, per statement
    net = [0] * len(codes)
    high = [0] * len(codes)
    for tag, size, _ in events:
        if tag is None:
            continue
        net[tag] += size
        high[tag] = max(high[tag], net[tag])

    # storage lifetimes by name references, in the captured order
    holders: dict[int, set[str]] = {}
    for a in arg_names:
        for sid in refs[a]:
            holders.setdefault(sid, set()).add(a)
    stmts = []
    mismatches = []
    bound: set[str] = set(arg_names)
    for i, ((base_eff, new_storages), text) in enumerate(zip(effects, src.texts)):
        loaded, stored, deleted, written = base_eff[:4]
        bindings = base_eff[4:]
        allocs: list = []
        frees: list = []
        reads: set = set()
        writes: set = set()
        for n in loaded:
            reads.add(f"n:{n}")
            reads.update(f"s:{sid}" for sid in refs.get(n, ()))
        for n in written:
            writes.update(f"s:{sid}" for sid in refs.get(n, ()))
        for sid in new_storages:
            allocs.append((f"s:{sid}", size_of[sid]))
        # rebinding drops the old value's references
        for n, ids in bindings:
            if n in bound:
                writes.add(f"n:{n}")
                for sid in refs.get(n, ()):
                    holders[sid].discard(n)
                    if not holders[sid] and sid not in external:
                        frees.append(f"s:{sid}")
            else:
                allocs.append((f"n:{n}", 0))
                bound.add(n)
            refs[n] = list(ids)
            for sid in ids:
                holders.setdefault(sid, set()).add(n)
                if sid not in new_storages:
                    reads.add(f"s:{sid}")
        for n in deleted:
            if n not in bound:
                raise InductorCaptureError(f"statement {i} deletes {n!r}, which is not bound")
            frees.append(f"n:{n}")
            bound.discard(n)
            for sid in refs.pop(n, ()):
                holders[sid].discard(n)
                if not holders[sid] and sid not in external:
                    frees.append(f"s:{sid}")
                else:
                    reads.add(f"s:{sid}")
        frees = list(dict.fromkeys(frees))
        freed_storage = set(b for b in frees if b.startswith("s:"))
        reads -= freed_storage
        reads -= {b for b, _ in allocs}
        writes -= {b for b, _ in allocs} | freed_storage
        reads -= writes
        delta = sum(z for _, z in allocs) - sum(size_of[int(b[2:])] for b in freed_storage)
        if measure and net[i] != delta:
            mismatches.append((i, text, delta, net[i]))
        # memory while the statement runs = before + delta + transient = before + high
        transient = max(0, high[i] - delta) if high[i] > 0 else 0
        stmts.append(Statement(f"s{i}", allocs=tuple(allocs), frees=tuple(frees), reads=tuple(sorted(reads)),
                               writes=tuple(sorted(writes)), transient=int(transient), payload=text))
    program = Program(stmts, inputs={f"n:{a}": 0 for a in arg_names}, name=name)
    clock.lap("model")
    return program, mismatches


class _Clock:
    """Adds the seconds since the last lap to ``seconds[phase]`` (no-op without a dict)."""

    def __init__(self, seconds: dict | None):
        import time

        self._now = time.perf_counter
        self.seconds = seconds
        self.t = self._now()

    def lap(self, phase: str) -> None:
        t = self._now()
        if self.seconds is not None:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + t - self.t
        self.t = t

