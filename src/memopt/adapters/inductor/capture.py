"""Capture: compile with Inductor, record the wrapper, its inputs and Inductor's estimate, and
build the statement program (:mod:`memopt.adapters.inductor.profiling`)."""

from __future__ import annotations

import contextlib
import functools
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memopt.adapters.inductor.estimate import InductorBuffer, InductorTimeline
from memopt.adapters.inductor.profiling import _build_program, compiled_module, measure_peak
from memopt.adapters.inductor.wrapper import InductorCaptureError, _split, _torch
from memopt.core.program import Program
from memopt.errors import OptionError


@dataclass
class Capture:
    """An Inductor wrapper captured as a memopt statement program.

    ``program`` is the :class:`~memopt.core.program.Program` (statement ``i`` is body
    statement ``i`` of ``call``; its ``payload`` is the source text); ``source`` the wrapper
    as Inductor generated it; ``args`` the graph inputs ``call`` receives (caller-owned, not
    counted); ``inductor_estimate`` Inductor's own ``estimate_peak_memory`` for the order it
    emitted (``None`` if unreachable, e.g. an FX-graph cache hit) and ``inductor_timeline`` the
    buffer lifetimes behind it (see :func:`attribute_estimate`); ``mismatches`` statements
    whose measured net allocation disagreed with the model (empty when the model is exact).
    ``transients_measured``: ``False`` for a capture with ``measure=False`` (every transient
    is 0 because it is unknown, and net allocations were not checked); ``seconds`` the time
    of each phase of the capture (``compile``: compilation and the first call, which also
    warms the library caches; then ``load wrapper``, ``profiled run`` or ``run``, ``model``).
    """

    program: Program
    source: str
    args: list
    inductor_estimate: int | None
    mismatches: list = field(default_factory=list)
    inductor_timeline: InductorTimeline | None = None
    _src: Any = None
    transients_measured: bool = True
    seconds: dict = field(default_factory=dict)
    # the profiled run of the captured order (measure=True): (measured peak, outputs); taken by
    # the first optimize_capture, whose stock measurement it is (not held after)
    _stock_run: Any = field(default=None, repr=False)

    def source_for(self, order: Sequence[int] | None = None) -> str:
        """The wrapper source with ``call``'s body statements in ``order`` (statement ids)."""
        if order is None:
            order = range(len(self._src.texts))
        order = [int(i) for i in order]
        if sorted(order) != list(range(len(self._src.texts))):
            raise OptionError("an order must list every statement of the program exactly once")
        if order != list(range(len(order))):
            self.program.reorder(order)  # raises ScheduleError unless every dependency is kept
        body = "".join(textwrap.indent(self._src.texts[i], self._src.indent) + "\n" for i in order)
        return self._src.head + body + self._src.tail

    def load(self, order: Sequence[int] | None = None) -> Callable[[list], Any]:
        """Load the (permuted) wrapper with ``PyCodeCache.load`` and return its ``call`` (the
        captured order: the module Inductor loaded, :func:`compiled_module`)."""
        from torch._inductor.codecache import PyCodeCache

        if order is None or [int(i) for i in order] == list(range(len(self._src.texts))):
            return compiled_module(self.source).call
        return PyCodeCache.load(self.source_for(order)).call

    def take_stock_run(self) -> tuple[int, Any] | None:
        """``(measured peak, outputs)`` of the capture's profiled run of the captured order, once
        (``None`` after the first call, or for a ``measure=False`` capture)."""
        run, self._stock_run = self._stock_run, None
        return run

    def fresh_args(self) -> list:
        """A copy of the captured inputs (storages cloned, aliasing between inputs kept):
        a program may write into its inputs (a backward reuses donated buffers), so every
        run starts from its own copy."""
        return _clone_args(self.args)

    def run(self, order: Sequence[int] | None = None, call: Callable | None = None):
        """Run the (permuted) program on a fresh copy of the captured inputs; returns its outputs."""
        torch = _torch()
        call = call or self.load(order)
        with torch.no_grad():
            return call(self.fresh_args())

    def measure(self, order: Sequence[int] | None = None, call: Callable | None = None,
                warm_up: bool = True) -> tuple[int, Any]:
        """``(measured peak bytes, outputs)`` of one run of the (permuted) program on a fresh
        copy of the inputs, which the caller (this method) holds during the run. ``warm_up``: one
        unmeasured run first, so that library caches (primitive caches, lazy inits) settle; a caller
        that has already run these kernels on these shapes in this process may skip it."""
        torch = _torch()
        call = call or self.load(order)
        with torch.no_grad():
            if warm_up:
                call(self.fresh_args())
            held = self.fresh_args()
            return measure_peak(lambda: call(list(held)))


def _clone_args(args: list) -> list:
    """Copies of ``args`` with cloned storages (aliasing between them kept)."""
    torch = _torch()
    clones: dict = {}
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            st = a.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            if key not in clones or not st.nbytes():
                clones[key] = st.clone()
            t = torch.empty(0, dtype=a.dtype, device=a.device)
            t.set_(clones[key], a.storage_offset(), a.size(), a.stride())
            out.append(t)
        else:
            out.append(a)
    return out


@contextlib.contextmanager
def _record_inductor_estimate(box: list):
    """Wrap Inductor's peak-memory reordering pass to record, for the order it returns (the
    stock order), ``estimate_peak_memory`` and the buffer timeline behind it
    (``compute_memory_timeline``) as an :class:`InductorTimeline`."""
    import torch._inductor.memory as mem

    orig = mem.reorder_for_peak_memory

    @functools.wraps(orig)  # the scheduler pass calls the function itself (inspect.unwrap), unrecorded
    def wrapped(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs, *a, **k):
        out = orig(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs, *a, **k)
        try:
            freeable = mem.get_freeable_input_buf(out, graph_inputs)
            estimate = int(mem.estimate_peak_memory(out, freeable, graph_outputs)[0])
            infos, _, _ = mem.compute_memory_timeline(out, freeable, graph_outputs)
            buffers = tuple(InductorBuffer(bi.buffer.get_name(), int(bi.size_alloc), int(bi.size_free),
                                           int(bi.start_step), int(bi.end_step), isinstance(bi.buffer, mem.FreeableInputBuffer))
                            for bi in infos)
            box.append((estimate, InductorTimeline(len(out), buffers)))
        except Exception:  # the estimate is informative only
            box.append((None, None))
        return out

    mem.reorder_for_peak_memory = wrapped
    try:
        yield
    finally:
        mem.reorder_for_peak_memory = orig


@contextlib.contextmanager
def _record_call_args(box: list):
    from torch._inductor.output_code import CompiledFxGraph

    orig = CompiledFxGraph.__call__

    def wrapped(self, inputs):
        box.append(list(inputs))
        return orig(self, inputs)

    CompiledFxGraph.__call__ = wrapped
    try:
        yield
    finally:
        CompiledFxGraph.__call__ = orig


def capture(fn: Callable, *example_inputs, measure: bool = True, **compile_options) -> Capture:
    """Compile ``fn`` with Inductor on CPU and capture the generated wrapper as a memopt
    statement program.

    ``torch.compile(fn, backend="inductor", options=compile_options)`` runs once, no grad;
    dynamo is reset first (``run_and_get_code`` does) and the FX-graph cache is bypassed so
    that Inductor's own peak estimate is computed. The wrapper is then run once statement by
    statement on a copy of the inputs to learn the storage each name binds.

    Parameters
    ----------
    fn : callable
        A module or function; one graph, no graph breaks.
    *example_inputs
        Its inputs (tensors).
    measure : bool
        ``True``: the statement-by-statement run is under the CPU memory profiler, which
        measures every statement's transient and checks the model's net allocation per
        statement (the compile's first call has warmed the library caches: no separate warm-up
        run). ``False``: no profiler, every transient is 0
        (unknown; ``Capture.transients_measured`` is ``False``): the program is the model of
        the buffers alone, for a caller that only orders by it.
    **compile_options
        Inductor options (e.g. :func:`compile_path_options`).

    Returns
    -------
    Capture
        With ``seconds`` per phase.

    Raises
    ------
    InductorCaptureError
        If the function compiles to more than one graph (graph breaks) or the wrapper is not
        a straight-line Python ``call``.

    Examples
    --------
    >>> cap = capture(model, x, measure=False)        # doctest: +SKIP
    >>> cap.transients_measured, sorted(cap.seconds)  # doctest: +SKIP
    (False, ['compile', 'load wrapper', 'model', 'run'])
    """
    import time

    torch = _torch()
    from torch._inductor.utils import run_and_get_code

    options = {"fx_graph_cache": False}
    options.update(compile_options)
    estimate: list = []
    args_box: list = []
    t0 = time.perf_counter()
    compiled = torch.compile(fn, backend="inductor", options=options)
    with torch.no_grad(), _record_inductor_estimate(estimate), _record_call_args(args_box):
        _, codes = run_and_get_code(compiled, *example_inputs)
    seconds = {"compile": time.perf_counter() - t0}
    codes = [c for c in codes if "def call(" in c]
    if len(codes) != 1:
        raise InductorCaptureError(f"{getattr(fn, '__name__', type(fn).__name__)} compiled to {len(codes)} "
                                   "wrapper programs (graph breaks?); memopt captures exactly one")
    source = codes[0]
    if len(args_box) != 1:
        raise InductorCaptureError(f"expected one call of the compiled graph, saw {len(args_box)}")
    args = args_box[0]
    # no warm-up run: the compile's first call has just run this program on these inputs
    observed: dict = {}
    program, mismatches = _build_program(source, _clone_args(args), name=getattr(fn, "__name__", type(fn).__name__),
                                         measure=measure, seconds=seconds, warm_up=False, observed=observed)
    est, timeline = estimate[-1] if estimate else (None, None)
    return Capture(program=program, source=source, args=args, inductor_estimate=est, mismatches=mismatches,
                   inductor_timeline=timeline, _src=_split(source), transients_measured=measure, seconds=seconds,
                   _stock_run=_observed_run(observed))


def _observed_run(observed: dict) -> tuple[int, Any] | None:
    return (observed["peak"], observed["outputs"]) if "peak" in observed else None


def _aot_kind(code: str) -> str:
    head = code.split("\n", 1)[0]
    return "backward" if "_backward" in head else "forward" if "_forward" in head else "inference"


def capture_training(fn: Callable, *example_inputs, loss: Callable | None = None,
                     **compile_options) -> dict[str, Capture]:
    """Compile a training step (``loss(fn(*example_inputs)).backward()``, default loss: the
    sum of the outputs) with Inductor on CPU and capture AOTAutograd's forward and backward
    wrappers as two programs: ``{"forward": Capture, "backward": Capture}``.

    Each program's inputs are caller-owned, as in :func:`capture`: the backward's saved
    activations are held by the capture (in a real step autograd hands them over and the
    backward's ``del`` frees them; that donation is not modelled). Each capture's ``seconds``
    holds the step's compile (shared by both, ``compile``) and its own program's phases."""
    import time

    torch = _torch()
    from torch._inductor.utils import run_and_get_code

    options = {"fx_graph_cache": False}
    options.update(compile_options)
    compiled = torch.compile(fn, backend="inductor", options=options)

    def default_loss(out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return sum(o.float().sum() for o in outs)

    loss = loss or default_loss

    def step():
        loss(compiled(*example_inputs)).backward()

    estimate: list = []
    calls: list = []
    t0 = time.perf_counter()
    # the compiling step's own calls give the programs' inputs (a second step only to record them
    # cost a whole forward and backward)
    with torch.enable_grad(), _record_inductor_estimate(estimate), _record_call_args(calls):
        _, codes = run_and_get_code(step)
    compile_seconds = time.perf_counter() - t0
    by_kind = {}
    for c in codes:
        if "def call(" in c:
            by_kind.setdefault(_aot_kind(c), []).append(c)
    if len(by_kind.get("forward", [])) != 1 or len(by_kind.get("backward", [])) != 1:
        raise InductorCaptureError(f"a training step compiled to {sum(map(len, by_kind.values()))} wrapper "
                                   "programs; memopt captures exactly one forward and one backward")
    if len(calls) != 2:
        raise InductorCaptureError(f"expected a forward and a backward call, saw {len(calls)}")
    out = {}
    for kind, args, (est, timeline) in zip(("forward", "backward"), calls, (estimate + [(None, None)] * 2)[:2]):
        source = by_kind[kind][0]
        seconds = {"compile": compile_seconds}
        observed: dict = {}
        program, mismatches = _build_program(source, _clone_args(args), name=f"{getattr(fn, '__name__', type(fn).__name__)}-{kind}",
                                             seconds=seconds, warm_up=False,  # the compiling step ran it
                                             observed=observed)
        out[kind] = Capture(program=program, source=source, args=args, inductor_estimate=est,
                            mismatches=mismatches, inductor_timeline=timeline, _src=_split(source), seconds=seconds,
                            _stock_run=_observed_run(observed))
    return out

