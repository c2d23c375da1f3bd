"""Optimize and measure: schedule a captured program, load the permuted wrapper, run both
orders, compare outputs bitwise and peaks to the byte."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from memopt.adapters.inductor.capture import Capture, capture
from memopt.adapters.inductor.estimate import attribute_estimate
from memopt.adapters.inductor.wrapper import _torch
from memopt.core.program import Program
from memopt.errors import InternalError


@dataclass
class OptimizeReport:
    """What :func:`optimize` found (bytes; ``measured_*`` from the allocator, see
    :func:`measure_peak`)."""

    inductor_estimate: int | None
    modelled_peak_stock: int
    modelled_peak: int
    lower_bound: int
    status: str
    measured_peak_stock: int
    measured_peak: int
    bitwise_equal: bool
    order: list
    seconds: float  # the scheduling call's own seconds (:attr:`ScheduleResult.seconds`: kernel compilation excluded)
    capture: Capture
    stock_peak_without_transients: int = 0  # the stock program's modelled peak with every transient set to 0
    estimate_differences: list = field(default_factory=list)  # attribute_estimate(capture): estimate -> stock peak
    call: Callable = None  # runs the optimized program: call(args list) -> outputs
    source: str = ""
    transients_measured: bool = True  # False: a measure=False capture, ordered by the model without transients
    compile_seconds: float = 0.0  # first use in the process: kernels compiled or loaded, modules imported (apart)
    call_seconds: float = 0.0  # wall seconds of the whole memopt.schedule call (compilation and imports included)

    def __call__(self, *inputs):
        """Run the optimized program on ``inputs`` in the captured argument order (default:
        the captured inputs)."""
        return self.call(list(inputs) if inputs else list(self.capture.args))

    def row(self) -> dict:
        keys = ("inductor_estimate", "stock_peak_without_transients", "modelled_peak_stock", "modelled_peak", "lower_bound", "status",
                "measured_peak_stock", "measured_peak", "bitwise_equal", "seconds", "compile_seconds", "call_seconds",
                "transients_measured")
        return {k: getattr(self, k) for k in keys}


def _bitwise_equal(a, b, torch) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype or a.stride() != b.stride():
            return False
        def raw(t):
            return t.detach().contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(raw(a), raw(b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_bitwise_equal(x, y, torch) for x, y in zip(a, b))
    return a == b


def optimize(fn: Callable, *example_inputs, time_limit: float = 10.0, method: str = "auto",
             capture_result: Capture | None = None, **compile_options) -> OptimizeReport:
    """Capture ``fn``'s Inductor program, reorder its statements with :func:`memopt.schedule`,
    load and run the permuted wrapper; compare outputs bitwise and peaks (modelled and
    measured) with the stock order. The returned order is never modelled above stock, and is
    the stock order itself when memopt's is not lower (then the stock program's one
    measurement is memopt's too: no second load and run of the same program). The stock
    order's measurement is the capture's profiled run (its allocator events over the whole run,
    its outputs) when the capture has one not yet used, else one run of the stock wrapper."""
    cap = capture_result or capture(fn, *example_inputs, **compile_options)
    return optimize_capture(cap, time_limit=time_limit, method=method)


def optimize_capture(cap: Capture, *, time_limit: float = 10.0, method: str = "auto") -> OptimizeReport:
    """:func:`optimize` on an existing :class:`Capture` (e.g. one graph of
    :func:`capture_training`)."""
    import time

    import memopt

    torch = _torch()
    program = cap.program
    stock = program.peak()
    t0 = time.perf_counter()
    res = memopt.schedule(program, method=method, time_limit=time_limit)
    call_seconds = time.perf_counter() - t0
    order = [int(i) for i in res.order]
    peak = int(res.peak)
    identity = list(range(len(program.statements)))
    if peak >= stock:  # never worse than what Inductor emitted, and no reordering without a gain
        order, peak = identity, stock
    if program.peak(order) != peak:
        raise InternalError("program-peak", f"schedule claimed {peak}, the program evaluates to {program.peak(order)}")
    stock_call = cap.load()
    # no warm-up runs: the capture has run every statement's kernel on these shapes in this process
    with torch.no_grad():
        # the capture's profiled run measured the stock order at the allocator already (its
        # peak over all its allocation events, its outputs): running it again would repeat it
        stock_run = cap.take_stock_run()
        measured_stock, out_stock = stock_run or cap.measure(call=stock_call, warm_up=False)
        if order == identity:  # the same program: measuring it again would tell nothing new
            opt_call, measured, out = stock_call, measured_stock, out_stock
        else:
            opt_call = cap.load(order)
            measured, out = cap.measure(call=opt_call, warm_up=False)
    return OptimizeReport(
        inductor_estimate=cap.inductor_estimate, modelled_peak_stock=int(stock), modelled_peak=int(peak),
        lower_bound=int(min(res.lower_bound, peak)), status=res.status if peak == res.peak else "feasible",
        measured_peak_stock=int(measured_stock), measured_peak=int(measured),
        bitwise_equal=_bitwise_equal(out_stock, out, torch), order=order, seconds=float(res.seconds), capture=cap,
        call=_inference(opt_call), source=cap.source_for(order),
        stock_peak_without_transients=without_transients(program).peak(),
        estimate_differences=attribute_estimate(cap), transients_measured=cap.transients_measured,
        compile_seconds=res.first_use_seconds, call_seconds=call_seconds)


def _inference(call: Callable) -> Callable:
    """``call`` run under ``torch.no_grad()`` (the captured program is an inference graph)."""
    torch = _torch()

    def run(args: list):
        with torch.no_grad():
            return call(args)

    return run


def without_transients(program: Program) -> Program:
    """The same program with every statement's transient set to 0 (what a model that
    ignores library workspaces, like Inductor's estimate, sees)."""
    return Program([dataclasses.replace(s, transient=0) for s in program.statements], program.inputs, program.name)

