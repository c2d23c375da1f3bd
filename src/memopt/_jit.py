"""Compiled kernels that need no compilation on small instances.

Every scheduling kernel is an ordinary numba function (``@kernel`` is
``numba.njit(cache=True, ...)``; kernels call each other in nopython mode as usual). A call
site asks :func:`choose` which implementation to run:

* the numba **dispatcher** (compiled on first use, or loaded from numba's on-disk cache in
  ``__pycache__`` / ``NUMBA_CACHE_DIR``), or
* its **pure-Python twin**: the kernel's ``py_func`` rebuilt over a copy of its module's
  globals in which every numba dispatcher (also ones imported from other modules,
  transitively) is replaced by its own twin, and ``np.random`` by a private legacy
  ``RandomState`` that reproduces numba's generator. The twin computes bit for bit what the
  compiled kernel computes.

Policy (``auto``): pure Python when the instance is small (``size <=`` the kernel's
threshold, :data:`PURE_MAX` unless the kernel sets its own; up to :data:`COLD_FACTOR` times
that when the kernel is not in numba's disk cache either, so that a first run does not
compile for seconds to save milliseconds), unless the kernel is already compiled in this
process; compiled otherwise. The CPU time spent in a kernel's twin is accounted: once it
reaches about what loading (:data:`ESCALATE_SECONDS`) or compiling
(:data:`ESCALATE_COLD_SECONDS`) the kernel costs, later calls - and resumable searches
mid-way (:class:`Adaptive`) - use the compiled kernel. A whole solve can be put in one
mode with ``with mode("pure" | "compiled" | "auto", size=n)``; the environment variable
``MEMOPT_JIT=pure|compiled|auto`` sets the mode of calls made outside such a block and
overrides ``auto`` blocks (for tests and benchmarks).

Measurements behind the thresholds (recorded 2026-11-30 on the 2-core reference machine,
warm disk cache, fresh process; they vary with the machine and its load): loading the exact
search's kernels costs ~0.5 s of CPU (LLVM start-up included),
the greedy or trap kernels ~10-30 ms each once LLVM is up; pure Python runs greedy + forward
trap in 2 ms on 34 nodes, 30 ms on 153, 110 ms on 351 (compiled: ~1 ms once loaded), graph
construction in 50 ms on 1000 ops (first compiled load: 0.35 s). Compiling from a cold cache
costs 0.3-4 s per kernel, 7 s for the exact search's ``_search``, 12 s for the local search's
``_ils`` (with its callees), about 37 s of CPU for every kernel in one process and 23 s in the
busier of two (2026-12-02, measured under load 8-13; ``benchmarks/jit_table.py --times`` prints
the table). ``benchmarks/latency.py`` measures the resulting start-up and call latencies.

Ahead of the clock: :func:`warm` compiles (or loads from the disk cache) every kernel of a
kind of call (``"remat"``) or of one phase of a call (``"schedule:local-search"``) that the
mode in effect would run compiled at the instance's size, for the signatures listed in
:mod:`memopt._jit_signatures` (the kernels and signatures each kind and phase uses, recorded
by ``benchmarks/jit_table.py``). ``memopt.remat`` warms its kind before its deadline exists;
``memopt.schedule`` warms what it runs outside its phases before its clock starts, and its
:class:`~memopt.schedule.portfolio.Session` warms each phase right before the phase and moves
the deadline by the seconds that took, so a call compiles only the phases it reaches (a
training graph certified by its first bounds never compiles the searches). Both report those
seconds as ``stats["compile_seconds"]``, outside their ``seconds``. A solve therefore compiles
nothing on its clock. The ski-rental switch above is the one compilation that happens
mid-solve: the switch compiles the kernel's table signatures at once and accounts the seconds
(:func:`escalation_seconds`), which the session gives back to its deadline when the phase
ends; it happens only after the kernel's pure-Python calls have cost
:data:`ESCALATE_SECONDS` (or :data:`ESCALATE_COLD_SECONDS`), so the phase in which it happens
has already run that long. Kernels missing from the disk cache compile in two processes when
two CPUs are available (:func:`compile_kernels`): a child process compiles about half of them
into numba's disk cache while this one compiles the rest, then loads the child's. Every
kernel's cache reads and writes are locked between processes (numba's own save is not safe
against a concurrent save of another overload of the same kernel). An unknown ``MEMOPT_JIT``
value raises :class:`~memopt.errors.OptionError`.

numba itself is imported lazily, the first time a kernel module is imported; ``import
memopt`` does not import it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
import types
from typing import Callable, Iterator

__all__ = ["kernel", "choose", "mode", "current_mode", "pure", "is_compiled", "on_disk", "note_compiling",
           "compile_notes", "set_compile_hook", "Adaptive", "pure_seconds", "PURE_MAX", "COLD_FACTOR",
           "ESCALATE_SECONDS", "ESCALATE_COLD_SECONDS", "MODES", "warm", "kernels_of", "recorded_signatures",
           "phase", "record_uses", "readonly", "compile_kernels", "workers", "escalation_seconds"]

MODES = ("auto", "pure", "compiled")

#: ``auto``: pure Python up to this size (nodes of the DAG / ops of the graph) when the
#: kernel would only have to be loaded from numba's disk cache (kernels may set their own)
PURE_MAX = 200
#: ``auto``: when the kernel is not in the disk cache either (it would have to compile,
#: 1-3 s per kernel), pure Python up to this many times its threshold
COLD_FACTOR = 3

#: ``auto``: a kernel's pure-Python calls switch to the compiled kernel once they have cost
#: this many CPU seconds in this process when numba's disk cache holds the kernel (loading
#: the exact search from a warm cache costs ~0.5 s of CPU in a fresh process) ...
ESCALATE_SECONDS = 0.5
#: ... and after this many when it would have to compile (10-20 s for the exact search on
#: the 2-core reference machine): pay at most about what compiling would cost (ski rental),
#: so that a first run within a default time limit never stops to compile
ESCALATE_COLD_SECONDS = 5.0

_ENV = "MEMOPT_JIT"
#: the phase of a call running now (:func:`phase`), for :func:`record_uses`
_PHASE: contextvars.ContextVar = contextvars.ContextVar("memopt_jit_phase", default=None)
_USES: dict | None = None  # phase -> names of the kernels chosen in it, while recording
_MODE: contextvars.ContextVar = contextvars.ContextVar("memopt_jit_mode", default=None)

_numba = None
_Dispatcher = None
_TWINS: dict = {}        # id(dispatcher) -> (dispatcher, pure twin)
_PURE_IMPL: dict = {}    # id(dispatcher) -> (dispatcher, python function used instead of py_func)
_LIMIT: dict = {}        # id(dispatcher) -> (dispatcher, its pure_max)
_ON_DISK: dict = {}      # id(dispatcher) -> bool: numba's cache index holds an overload
_SPENT: dict = {}        # id(dispatcher) -> [dispatcher, pure CPU seconds in auto mode, timed twin]
_NOTE = {"enabled": False, "done": False, "hook": None}
#: id -> dispatcher, for the kernels seen compiled in this process (:func:`is_compiled`)
_COMPILED: dict = {}


def _load_numba():
    global _numba, _Dispatcher
    if _numba is None:
        import numba
        from numba.core.dispatcher import Dispatcher

        _numba, _Dispatcher = numba, Dispatcher
    return _numba


def kernel(func: Callable | None = None, *, pure: Callable | None = None, pure_max: int | None = None,
           inner: bool = False, **options):
    """``numba.njit(cache=True, **options)``; returns the ordinary numba dispatcher.

    ``inner=True`` marks a kernel that only other kernels call: numba then builds no CPython
    or C entry point for it (``no_cpython_wrapper``, ``no_cfunc_wrapper``). The wrappers are
    compiled for every signature, unboxing each argument, and cost a tenth of a second or more
    of compilation per kernel; an inner kernel cannot be called from Python, its pure twin
    (:func:`pure`) can.

    ``pure_max`` is the kernel's own ``auto`` threshold (default :data:`PURE_MAX`): linear-time
    kernels stay faster in pure Python than a cache load up to larger sizes, kernels that
    run long searches up to smaller ones.

    ``pure`` optionally gives the Python function the pure-Python twin runs instead of the
    kernel's own ``py_func`` (same signature and results; e.g. 64-bit hashing written with
    masked Python ints, where numpy scalars would warn on wrap-around). Usable bare
    (``@kernel``) or with options (``@kernel(inline="always")``).
    """
    options.setdefault("cache", True)
    if inner:
        options.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)

    def wrap(f):
        d = _load_numba().njit(**options)(f)
        _lock_cache(d)
        if pure is not None:
            _PURE_IMPL[id(d)] = (d, pure)
        if pure_max is not None:
            _LIMIT[id(d)] = (d, int(pure_max))
        return d

    return wrap(func) if func is not None else wrap


def _lock_cache(dispatcher) -> None:
    """Make the kernel's disk-cache reads and writes exclusive between processes (an advisory
    ``flock`` on a file beside numba's index). numba saves an overload by reading its index,
    naming a data file after the entries it holds, writing the index, then the data: two
    processes saving different overloads of one kernel at once can leave the index pointing at
    the other's data. :func:`warm` compiles in two processes, which may both compile a shared
    callee; with the lock each save and load is whole. Where no lock file can be made (a
    read-only cache, no ``fcntl``), numba's own behaviour is kept."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is None or not hasattr(cache_file, "_index_path"):
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: warm compiles in one process
        return
    path = cache_file._index_path + ".lock"
    save, load = cache_file.save, cache_file.load

    def locked(f, *args):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return f(*args)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return f(*args)
        finally:
            os.close(fd)  # releases the lock

    cache_file.save = lambda key, data: locked(save, key, data)
    cache_file.load = lambda key: locked(load, key)
    cache_file.memopt_locked = True


# ---------------------------------------------------------------------------- pure twins

class _PureRandom:
    """``np.random`` for pure twins: one legacy ``RandomState`` shared by all of them, as
    numba shares one generator per thread; numba's ``np.random.seed`` / ``randint`` /
    ``permutation`` produce the same numbers as the legacy generator. It never touches
    numpy's global generator."""

    def __init__(self):
        import numpy as np

        self._rs = np.random.RandomState(0)

    def seed(self, seed=None):
        self._rs.seed(seed)

    def __getattr__(self, name):
        return getattr(self._rs, name)


_PURE_NP = None


def _pure_numpy():
    global _PURE_NP
    if _PURE_NP is None:
        import numpy as np

        m = types.ModuleType("numpy")
        m.__dict__.update(np.__dict__)
        m.random = _PureRandom()
        _PURE_NP = m
    return _PURE_NP


def _is_dispatcher(obj) -> bool:
    return _Dispatcher is not None and isinstance(obj, _Dispatcher)


def pure(dispatcher):
    """The pure-Python twin of a kernel (cached). Anything that is not a numba dispatcher is
    returned unchanged."""
    if not _is_dispatcher(dispatcher):
        return dispatcher
    hit = _TWINS.get(id(dispatcher))
    if hit is not None and hit[0] is dispatcher:
        return hit[1]
    import numpy as np

    impl = _PURE_IMPL.get(id(dispatcher))
    f = impl[1] if impl is not None and impl[0] is dispatcher else dispatcher.py_func
    env = dict(f.__globals__)
    twin = types.FunctionType(f.__code__, env, f.__name__, f.__defaults__, f.__closure__)
    twin.__kwdefaults__ = f.__kwdefaults__
    twin.__doc__ = f.__doc__
    twin.__qualname__ = f.__qualname__
    twin.__module__ = f.__module__
    twin.__wrapped_kernel__ = dispatcher
    _TWINS[id(dispatcher)] = (dispatcher, twin)   # before recursing: kernels may call each other
    for name, value in list(env.items()):
        if _is_dispatcher(value):
            env[name] = pure(value)
        elif value is np:
            env[name] = _pure_numpy()
        elif value is np.random:
            env[name] = _pure_numpy().random
    return twin


# ---------------------------------------------------------------------------- policy

def current_mode() -> tuple[str, int | None]:
    """``(mode, size)`` in effect: the innermost :func:`mode` block, else ``$MEMOPT_JIT``, else auto.
    ``MEMOPT_JIT=pure|compiled`` also overrides ``auto`` blocks."""
    cur = _MODE.get()
    env = env_mode()
    if cur is None:
        return env, None
    m, size = cur
    if m == "auto" and env != "auto":
        return env, size
    return m, size


def env_mode() -> str:
    """``$MEMOPT_JIT`` (``auto`` when unset or empty), or :class:`~memopt.errors.OptionError`
    naming the variable and the accepted values when it is anything else."""
    raw = os.environ.get(_ENV, "")
    env = raw.strip().lower()
    if not env:
        return "auto"
    if env not in MODES:
        from memopt.errors import OptionError

        raise OptionError(f"environment variable {_ENV}={raw!r} is not a kernel mode; use one of {', '.join(MODES)}")
    return env


@contextlib.contextmanager
def mode(m: str = "auto", size: int | None = None) -> Iterator[None]:
    """Run the block in one mode: ``"pure"``, ``"compiled"`` or ``"auto"`` (decide per kernel
    from ``size``, the instance size, when the call site gives none)."""
    if m not in MODES:
        from memopt.errors import OptionError

        raise OptionError(f"unknown kernel mode {m!r}; choose from {', '.join(MODES)}")
    token = _MODE.set((m, None if size is None else int(size)))
    try:
        yield
    finally:
        _MODE.reset(token)


def is_compiled(dispatcher) -> bool:
    """True when the kernel has a compiled (or cache-loaded) overload in this process.
    Remembered once true (an overload is never dropped): numba's ``signatures`` rebuilds its
    list on every look, and hot loops ask this per call (``random_layered_n250``'s cost bound
    asks it hundreds of thousands of times)."""
    key = id(dispatcher)
    if _COMPILED.get(key) is dispatcher:
        return True
    if getattr(dispatcher, "signatures", None):
        _COMPILED[key] = dispatcher
        return True
    return False


def on_disk(dispatcher) -> bool:
    """True when numba's disk cache holds an overload of the kernel for this source (loading it
    is cheap; compiling is not). Checked once per process and kernel."""
    key = id(dispatcher)
    hit = _ON_DISK.get(key)
    if hit is not None:
        return hit
    ok = False
    try:
        ok = bool(dispatcher._cache._cache_file._load_index())
    except Exception:
        ok = False
    _ON_DISK[key] = ok
    return ok


def choose(dispatcher, size: int | None = None):
    """The implementation of ``dispatcher`` to call now: itself or its pure-Python twin.

    ``size`` is the instance size at the call site (nodes of the DAG, ops of the graph);
    without it, the size of the enclosing :func:`mode` block; without either, ``auto``
    compiles. In ``auto`` mode the pure twin is returned wrapped so that its CPU time is
    accounted to the kernel: once a kernel's pure-Python calls in this process have cost
    about what loading it from the disk cache (:data:`ESCALATE_SECONDS`) or compiling it
    (:data:`ESCALATE_COLD_SECONDS`) would, later calls get the compiled kernel (ski rental:
    a process that schedules many small graphs ends up compiled, a one-off call never waits).
    The switch compiles the kernel at once and counts the seconds in
    :func:`escalation_seconds`, which a scheduling session keeps off its clock.
    """
    m, block_size = current_mode()
    return _decide(dispatcher, size if size is not None else block_size, m)


def _decide(dispatcher, size, m):
    if _USES is not None:
        _USES.setdefault(_PHASE.get(), set()).add(dispatcher.py_func.__module__ + "." + dispatcher.__name__)
    if m == "pure":
        return pure(dispatcher)
    if m == "compiled" or size is None or is_compiled(dispatcher):
        _maybe_note(dispatcher)
        return dispatcher
    hit = _LIMIT.get(id(dispatcher))
    limit = hit[1] if hit is not None and hit[0] is dispatcher else PURE_MAX
    if size <= limit or (size <= COLD_FACTOR * limit and not on_disk(dispatcher)):
        acc = _account(dispatcher)
        if acc[1] <= (ESCALATE_SECONDS if on_disk(dispatcher) else ESCALATE_COLD_SECONDS):
            return acc[2]
        _escalate(dispatcher)
    _maybe_note(dispatcher)
    return dispatcher


_ESCALATED = [0.0]  # wall seconds spent compiling kernels at the ski-rental switch


def _missing_signatures(name: str, dispatcher, table: dict) -> list:
    """The signatures ``table`` lists for kernel ``name`` that ``dispatcher`` has not compiled
    yet, each once (stale entries skipped)."""
    sigs = []
    for text in table.get(name, ()):
        try:
            sig = _table_signature(dispatcher, text)
        except _Stale:
            continue
        if sig not in dispatcher.overloads and sig not in sigs:
            sigs.append(sig)
    return sigs


def _escalate(dispatcher) -> None:
    """The ski-rental switch: compile (or load) the kernel now, for the signatures of the table,
    and account the seconds (:func:`escalation_seconds`), so that the caller can keep them out
    of its clock. A kernel the table does not list compiles on its first call instead."""
    from memopt._jit_signatures import SIGNATURES

    name = dispatcher.py_func.__module__ + "." + dispatcher.__name__
    todo = _missing_signatures(name, dispatcher, SIGNATURES)
    if todo:
        t0 = time.perf_counter()
        _compile([(name, dispatcher, todo)])
        _ESCALATED[0] += time.perf_counter() - t0


def escalation_seconds() -> float:
    """Wall seconds this process has spent compiling kernels at the ski-rental switch of
    :func:`choose` (mid-solve). :class:`memopt.schedule.portfolio.Session` gives them back to
    its deadline and reports them in ``compile_seconds``."""
    return _ESCALATED[0]


def _account(dispatcher) -> list:
    """``[dispatcher, CPU seconds spent in its pure twin via auto mode, timed twin]``."""
    acc = _SPENT.get(id(dispatcher))
    if acc is not None and acc[0] is dispatcher:
        return acc
    twin = pure(dispatcher)
    acc = [dispatcher, 0.0, None]

    def timed(*args, **kwargs):
        t0 = time.process_time()
        try:
            return twin(*args, **kwargs)
        finally:
            acc[1] += time.process_time() - t0

    timed.__wrapped__ = twin
    acc[2] = timed
    _SPENT[id(dispatcher)] = acc
    return acc


def readonly(a):
    """``a`` itself when it is read-only, else a read-only view of it. numba compiles a kernel
    anew for each combination of writable and read-only arrays; call sites that pass the same
    argument with either flag pass it read-only, so that the kernel compiles once."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.setflags(write=False)
    return v


def pure_seconds(dispatcher) -> float:
    """CPU seconds this process has spent in the kernel's pure twin through ``auto`` mode."""
    acc = _SPENT.get(id(dispatcher))
    return acc[1] if acc is not None and acc[0] is dispatcher else 0.0


class Adaptive:
    """A resumable kernel called many times (a search that pauses and resumes from arrays):
    re-decided per call with the mode and size in effect when it was created, so that an
    ``auto`` search switches from pure Python to the compiled kernel mid-way once its pure
    calls have cost about what the compiled kernel would (see :func:`choose`). Results do
    not change: the twin and the kernel compute the same thing from the same arrays. Not for
    kernels that draw random numbers (numba's generator and the twin's are separate streams).
    """

    def __init__(self, dispatcher, size: int | None = None):
        self.dispatcher = dispatcher
        m, block_size = current_mode()
        self.mode = m
        self.size = size if size is not None else block_size
        self.fn = _decide(dispatcher, self.size, m)

    def __call__(self, *args):
        if self.fn is not self.dispatcher and self.mode == "auto":
            self.fn = _decide(self.dispatcher, self.size, self.mode)
        return self.fn(*args)


# ---------------------------------------------------------------------------- compile note

def note_compiling(enabled: bool = True) -> None:
    """Say on stderr, once per process, when a call is about to compile a kernel that numba's
    disk cache does not hold ("compiling kernels (first run only, cached afterwards)").
    The CLI turns this on when progress output is on."""
    _NOTE["enabled"] = bool(enabled)


def set_compile_hook(hook: Callable[[str], None] | None) -> None:
    """Call ``hook(kernel name)`` (instead of printing) the first time a kernel that is not in
    numba's disk cache is about to compile in this process; ``None`` restores the default."""
    _NOTE["hook"] = hook


def _maybe_note(dispatcher) -> None:
    if _NOTE["done"] or is_compiled(dispatcher) or not (_NOTE["enabled"] or _NOTE["hook"]):
        return
    if on_disk(dispatcher):
        return
    _NOTE["done"] = True
    hook = _NOTE["hook"]
    if hook is not None:
        hook(getattr(dispatcher, "__name__", "kernel"))
        return
    print("memopt: compiling kernels (first run only, cached afterwards)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def compile_notes(enabled: bool) -> Iterator[None]:
    """Within the block, :func:`note_compiling` is ``enabled`` (then restored): a scheduling
    call with a progress bar on a terminal says so when it is about to compile."""
    before = _NOTE["enabled"]
    _NOTE["enabled"] = bool(enabled) or before
    try:
        yield
    finally:
        _NOTE["enabled"] = before


# ---------------------------------------------------------------------------- ahead of the clock

@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark the block as phase ``name`` of a call (``"schedule:local-search"``): while
    :func:`record_uses` is on, the kernels chosen in it are recorded under that name, which is
    how ``benchmarks/jit_table.py`` learns what :func:`warm` compiles for each phase."""
    token = _PHASE.set(name)
    try:
        yield
    finally:
        _PHASE.reset(token)


def record_uses(on: bool = True) -> dict:
    """Start (or stop) recording which kernels each :func:`phase` chooses; returns
    ``{phase: sorted kernel names}`` recorded so far (``None``: outside any phase)."""
    global _USES
    out = {k: sorted(v) for k, v in (_USES or {}).items()}
    _USES = {} if on else None
    return out


def kernels_of(kind: str) -> tuple:
    """The kernels (``module.name``) a call of ``kind`` (``"schedule"``, ``"remat"``) may run,
    or one phase of such a call (``"schedule:greedy"``; a phase the table does not list runs
    no kernel): the table :mod:`memopt._jit_signatures` (generated by ``benchmarks/jit_table.py``)."""
    from memopt._jit_signatures import INCLUDES, KINDS, PHASES

    if ":" in kind and kind.partition(":")[0] in KINDS:
        return tuple(PHASES.get(kind, ()))
    if kind not in KINDS:
        from memopt.errors import InternalError

        raise InternalError("jit-kind", f"no kernel table for calls of kind {kind!r}")
    return tuple(n for k in INCLUDES.get(kind, ()) for n in kernels_of(k)) + tuple(KINDS[kind])


def _dispatcher(name: str):
    import importlib

    module, _, attr = name.rpartition(".")
    d = getattr(importlib.import_module(module), attr, None)
    if not _is_dispatcher(d):
        from memopt.errors import InternalError

        raise InternalError("jit-table", f"{name} is not a kernel: regenerate src/memopt/_jit_signatures.py "
                                         "(python benchmarks/jit_table.py)")
    return d


def _would_compile(dispatcher, size: int | None, m: str) -> bool:
    """Whether a call of this size runs the compiled kernel once the kernel is in numba's disk
    cache (no accounting side effect). Unlike :func:`choose`, the cold-cache allowance
    (:data:`COLD_FACTOR`) is left out: :func:`warm` compiles before the clock starts, so a first
    call runs the same code as every later one instead of pure Python in between."""
    if m == "compiled" or size is None or is_compiled(dispatcher):
        return True
    hit = _LIMIT.get(id(dispatcher))
    limit = hit[1] if hit is not None and hit[0] is dispatcher else PURE_MAX
    if size <= limit:
        return pure_seconds(dispatcher) > (ESCALATE_SECONDS if on_disk(dispatcher) else ESCALATE_COLD_SECONDS)
    return True


_TYPES_NS: dict = {}


class _LiteralOf:
    """``Literal[int](0)`` (the repr of a numba literal type) -> ``types.literal(0)``."""

    def __getitem__(self, kind):
        from numba.core import types

        return types.literal


_PARSED: dict = {}


def _signature(text: str) -> tuple:
    """The numba signature (tuple of types) whose repr is ``text`` (parsed once per process)."""
    hit = _PARSED.get(text)
    if hit is not None:
        return hit
    if not _TYPES_NS:
        from numba.core import types

        _TYPES_NS.update(vars(types))
        _TYPES_NS["omitted"] = lambda default: types.Omitted(default)  # an argument left at its default
        _TYPES_NS["Literal"] = _LiteralOf()  # Literal[int](0): a constant argument
        for name, t in (("int", int), ("float", float)):
            _TYPES_NS.setdefault(name, t)
    sig = eval(text, {"__builtins__": {}}, _TYPES_NS)  # noqa: S307 - reprs of numba types from our own table
    _PARSED[text] = sig
    return sig


class _Stale(LookupError):
    """A table entry that no longer names a kernel or matches its arguments (the table predates
    a change to the kernels): :func:`warm` skips it, the kernel compiles on first use."""


def _table_dispatcher(name: str):
    """The kernel ``module.name`` of the table, or :class:`_Stale` when the module or the
    kernel is gone (an import error inside an existing module is raised as it is)."""
    import importlib

    module, _, attr = name.rpartition(".")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.startswith(exc.name):
            raise _Stale(name) from None
        raise
    d = getattr(mod, attr, None)
    if not _is_dispatcher(d):
        raise _Stale(name)
    return d


def _table_signature(dispatcher, text: str) -> tuple:
    """The signature ``text`` of the table, or :class:`_Stale` when it does not parse (a
    type this numba does not know) or has another number of arguments than the kernel."""
    import inspect

    try:
        sig = _signature(text)
    except (NameError, SyntaxError, TypeError, AttributeError):
        raise _Stale(text) from None
    if not isinstance(sig, tuple) or len(sig) != len(inspect.signature(dispatcher.py_func).parameters):
        raise _Stale(text)
    return sig


def _todo(kind: str, size: int | None, m: str) -> list:
    """``[(name, dispatcher, [signatures not compiled in this process])]`` for the kernels of
    ``kind`` the mode runs compiled at ``size``."""
    from memopt._jit_signatures import SIGNATURES

    out = []
    for name in kernels_of(kind):
        try:
            d = _table_dispatcher(name)
        except _Stale:
            continue
        if not _would_compile(d, size, m):
            continue
        sigs = _missing_signatures(name, d, SIGNATURES)
        if sigs:
            out.append((name, d, sigs))
    return out


#: compile in parallel only when the kernels missing from the disk cache would take at least
#: this many seconds in one process (a worker process costs about a second to start)
PARALLEL_MIN_SECONDS = 4.0


def workers() -> int:
    """Processes :func:`warm` compiles in: the CPUs this process may use, at most 2 (the
    kernels fall into two halves of similar cost; more would mostly compile shared callees
    twice). 1 where the disk cache cannot be shared safely (no ``fcntl``)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return 1
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(2, n))


def _cost(name: str) -> float:
    from memopt._jit_signatures import SECONDS

    return float(SECONDS.get(name, 1.0))


def _callees(dispatcher, seen: set | None = None) -> set:
    """The kernels ``dispatcher`` calls, transitively (by the global names its code uses)."""
    seen = set() if seen is None else seen
    f = dispatcher.py_func
    for name in f.__code__.co_names:
        v = f.__globals__.get(name)
        if _is_dispatcher(v) and id(v) not in seen:
            seen.add(id(v))
            _callees(v, seen)
    return seen


def _split(todo: list) -> tuple[list, list]:
    """Share ``todo`` between this process and a child: a kernel goes with the kernels of
    ``todo`` it calls (compiling a caller compiles its callees; apart, both processes would),
    then the groups, longest first, onto the lighter side (the child starts about a second
    late, this process loads the child's kernels afterwards)."""
    index = {id(t[1]): i for i, t in enumerate(todo)}
    parent = list(range(len(todo)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (_name, d, _sigs) in enumerate(todo):
        for c in _callees(d):
            if c in index:
                parent[find(index[c])] = find(i)
    groups: dict = {}
    for i in range(len(todo)):
        groups.setdefault(find(i), []).append(i)
    sides: tuple = ([], [])
    load = [0.0, 1.0]
    for members in sorted(groups.values(), key=lambda g: (-sum(_cost(todo[i][0]) for i in g), g[0])):
        k = 0 if load[0] <= load[1] else 1
        sides[k].extend(members)
        load[k] += sum(_cost(todo[i][0]) for i in members)
    return [todo[i] for i in sorted(sides[0])], [todo[i] for i in sorted(sides[1])]


def _compile(todo: list) -> None:
    for _name, d, sigs in todo:
        for sig in sigs:
            if sig not in d.overloads:
                _maybe_note(d)
                d.compile(sig)


def _cacheable(d) -> bool:
    return bool(getattr(getattr(getattr(d, "_cache", None), "_cache_file", None), "memopt_locked", False))


def _start_worker(todo: list):
    """A child process compiling ``todo`` into numba's disk cache (``None`` if it cannot start)."""
    import json
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop(_ENV, None)
    payload = json.dumps([[name, [repr(tuple(sig)) for sig in sigs]] for name, _d, sigs in todo])
    try:
        proc = subprocess.Popen([sys.executable, "-c", "from memopt._jit import _worker_main; _worker_main()"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
        proc.stdin.write(payload.encode())
        proc.stdin.close()
    except OSError:
        return None
    return proc


def _worker_main() -> None:
    """Entry point of :func:`warm`'s child: compile the kernels read from stdin (JSON)."""
    import json

    todo = []
    for name, texts in json.load(sys.stdin):
        d = _table_dispatcher(name)
        todo.append((name, d, [_signature(t) for t in texts]))
    _compile(todo)


def compile_kernels(todo: list, processes: int | None = None) -> None:
    """Compile (or load) ``[(name, dispatcher, [signatures])]`` in this process. When kernels
    are missing from numba's disk cache and ``processes`` (default :func:`workers`) is 2,
    about half of their estimated cost (``SECONDS`` of :mod:`memopt._jit_signatures`)
    compiles in a child process into the disk cache while this one compiles the rest; this
    process then loads the child's kernels from the cache (it compiles them itself if the
    child failed). The result is the same kernels as a serial compile."""
    processes = workers() if processes is None else processes
    cold = [t for t in todo if not on_disk(t[1]) and _cacheable(t[1])]
    if processes >= 2 and sum(_cost(t[0]) for t in cold) >= PARALLEL_MIN_SECONDS:
        mine, theirs = _split(cold)
        proc = _start_worker(theirs) if theirs else None
        if proc is not None:
            try:
                _compile(mine)
            finally:
                proc.wait()
    _compile(todo)


def warm(kind: str, size: int | None = None, *, processes: int | None = None) -> float:
    """Compile (or load from numba's disk cache) every kernel a call of ``kind`` would run
    compiled on an instance of ``size`` (in the mode in effect, as :func:`choose` decides), for
    the signatures of :mod:`memopt._jit_signatures`. ``memopt.schedule`` and ``memopt.remat``
    call it before their clock starts (``kind`` a call, or one phase of it such as
    ``"schedule:local-search"``), so that compiling never eats a solve's time limit; they
    report the returned wall seconds as ``stats["compile_seconds"]`` (importing numba and the
    kernel modules included, ~0.3 s, even when nothing needs compiling). Kernels the mode runs as
    pure Python are left alone (a small instance never compiles). Kernels missing from the disk
    cache compile in ``processes`` processes (:func:`compile_kernels`). Table entries that no
    longer name a kernel or match its arguments are skipped (they compile on first use);
    any other error, a kernel that does not compile, is raised. Also checks ``$MEMOPT_JIT``.
    """
    m, block_size = current_mode()
    if m == "pure":
        return 0.0
    size = size if size is not None else block_size
    t0 = time.perf_counter()
    compile_kernels(_todo(kind, size, m), processes)
    return time.perf_counter() - t0


def recorded_signatures() -> dict:
    """``{module.name: [repr of each signature]}`` for every memopt kernel compiled (or loaded)
    in this process so far (for ``benchmarks/jit_table.py``)."""
    _load_numba()
    out = {}
    for modname, module in sorted(sys.modules.items()):
        if not modname.startswith("memopt.") or module is None:
            continue
        for attr, d in sorted(vars(module).items()):
            if _is_dispatcher(d) and d.py_func.__module__ == modname and d.signatures:
                text = sorted(repr(tuple(s)) for s in d.signatures)
                if {_signature(t) for t in text} != {tuple(s) for s in d.signatures}:
                    raise ValueError(f"{modname}.{attr}: a signature does not round-trip through repr")
                out[f"{modname}.{attr}"] = text
    return out
