"""PyTorch Inductor adapter: reorder the program Inductor actually generated.

:func:`capture` compiles a function with Inductor on CPU, takes the generated Python
wrapper (its ``call(args)`` body) and turns it into a memopt statement
:class:`~memopt.core.program.Program` (``docs/design.md``, statement program):

* every top-level statement of ``call`` (after the ``args`` unpacking prologue, before the
  final ``return``) is one memopt statement, carrying its source text;
* *storages* are the memory: a statement that creates a tensor whose storage did not exist
  before (``empty_strided_cpu``, an extern kernel's result, a tuple of results) allocates
  that storage, with its exact ``nbytes``; a statement that binds a name to an existing
  storage (``buf4 = buf1  # reuse``, ``reinterpret_tensor``, ``buf3[0]``) creates an alias
  that reads the storage (size 0, keeps it alive); a ``del`` frees the storage iff it drops
  the last name referring to it (in the captured order; the dependency edges keep that
  ``del`` last among the storage's users in every reordering), otherwise it reads it;
* *names* are separate buffers of size 0 (``n:buf3``), so that every permuted program is
  valid Python (a name is used only between its binding and its ``del``);
* a kernel call reads the storages of its arguments and writes the ones its signature says
  it writes: non-``const`` pointers of an Inductor C++ kernel (``out_ptr``, ``in_out_ptr``),
  the ``out=`` argument of an ``extern_kernels`` call, the mutable (``Tensor(a!)``)
  arguments of an ATen operator's schema; an unknown callee writes everything it touches
  (conservative), and any argument whose version counter moved while the statement ran is a
  write as well;
* graph inputs (parameters, user inputs) are owned by the caller: their storages are
  external, never freed and not counted; returned buffers are never freed;
* a statement's *transient* is measured: the statement is run alone under PyTorch's CPU
  memory profiler, and ``transient = (highest bytes allocated during it) - (its net
  allocation)`` (zero for statements that only free).

:func:`optimize` schedules that program with :func:`memopt.schedule`, emits the permuted
wrapper source, loads it with ``PyCodeCache.load``, runs it and compares outputs bitwise and
peaks to the byte (:func:`measure_peak`: allocation events of the CPU allocator, independent
of the model). See ``docs/adapters.md`` (Inductor).

:func:`attribute_estimate` itemises the difference between Inductor's own
``estimate_peak_memory`` (``torch/_inductor/memory.py``, whose buffer timeline the capture
records) and the stock program's peak by cause — graph inputs the caller holds, buffers the
C++ backend keeps inside a kernel, kernel groups, views into a concatenation, in-place and
cross-step buffer reuse (pytorch#192578, #145883), library transients — so that
``estimate + sum(differences) == measured stock peak``. Example::

    cap = capture(model, x)
    for d in attribute_estimate(cap):
        print(d)            # "in-place reuse: -16384 (buf3=buf2, ...)", ..., "unattributed: +0"

The package, by job: :mod:`~memopt.adapters.inductor.wrapper` (parsing the wrapper),
:mod:`~memopt.adapters.inductor.profiling` (allocator measurement, building the program),
:mod:`~memopt.adapters.inductor.capture`, :mod:`~memopt.adapters.inductor.estimate`
(Inductor's model and :func:`attribute_estimate`), :mod:`~memopt.adapters.inductor.optimize`
and :mod:`~memopt.adapters.inductor.compile_pass` (the ``torch.compile`` path).

torch is imported lazily (the compile-pass names load their module, which imports torch, on
first use); install the extra ``memopt[torch]``.
"""

from __future__ import annotations

# private names re-exported for the tests and benchmarks that build programs by hand
from memopt.adapters.inductor.capture import Capture, _clone_args, capture, capture_training  # noqa: F401
from memopt.adapters.inductor.estimate import (ESTIMATE_CAUSES, EstimateDifference, InductorBuffer, InductorTimeline,
                                               attribute_estimate)
from memopt.adapters.inductor.optimize import OptimizeReport, _bitwise_equal, optimize, optimize_capture, without_transients  # noqa: F401
from memopt.adapters.inductor.profiling import _build_program, measure_peak  # noqa: F401
from memopt.adapters.inductor.wrapper import InductorCaptureError, _split  # noqa: F401

__all__ = ["capture", "capture_training", "optimize", "optimize_capture", "measure_peak", "attribute_estimate",
           "Capture", "InductorTimeline", "InductorBuffer", "EstimateDifference", "ESTIMATE_CAUSES",
           "OptimizeReport", "MemoptSchedulerPass", "PassDecision", "compile_path_options", "scheduler_program",
           "InductorCaptureError", "without_transients"]

_COMPILE_PASS = ("MemoptSchedulerPass", "PassDecision", "compile_path_options", "scheduler_program")


def __getattr__(name: str):
    # the compile pass subclasses torch's CustomSchedulerPass: import torch only when asked
    if name in _COMPILE_PASS:
        from memopt.adapters.inductor import compile_pass

        return getattr(compile_pass, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
