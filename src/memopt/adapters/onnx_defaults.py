"""The peak a user gets from onnxruntime under its default session options.

:func:`memopt.adapters.onnx.measure` runs in *exact mode* (memory patterns and reuse of dead
buffers off, no graph optimization): every tensor gets its own buffer, so the bytes after
each kernel are memopt's model to the byte. Users run with the defaults instead: the CPU
arena on, memory patterns on (from the second run, one block holds every planned tensor at
an offset the planner chose), reuse of dead buffers on, graph optimizations
``ORT_ENABLE_ALL``, onnxruntime's default execution order. :func:`measure_defaults` measures
that run:

* a fresh session with those options (and the :class:`RuntimeSettings` given: provider,
  optimization level, intra-op threads) runs the model ``runs`` times (default 2: the first
  run records the memory pattern, the second uses it);
* ``peak`` = the arena's high-water mark of bytes in use (``mem_in_use_peak`` of the last
  kernel of the last run, in the arena's chunk bytes: requests rounded up to 256 bytes; it
  covers session creation and every run, kernel scratch included) minus the bytes in use
  when the first run started (the initializers the session put in the arena);
* ``held`` = the bytes the arena reserved (``mem_arena_held``, what the process holds from
  the system) at the end, minus what it held when the first run started.

Both exclude the graph's inputs (the caller's buffers) and the initializers, which are the
same for every node order. Both come from onnxruntime's profiler (the per-kernel arena
statistics, onnxruntime >= 1.20). :func:`memopt.adapters.onnx.reorder` keeps memopt's order
only if neither is higher than the original model's.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass

from memopt.errors import FormatError, InternalError, OptionError

__all__ = ["OPTIMIZATION_LEVELS", "DefaultMeasurement", "RuntimeSettings", "measure_defaults"]

#: ``--optimization-level`` name -> onnxruntime's ``GraphOptimizationLevel`` member
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_MAX_THREADS = 1024


@dataclass(frozen=True)
class RuntimeSettings:
    """The onnxruntime settings a default-mode measurement runs under (everything else is
    onnxruntime's default).

    Parameters
    ----------
    provider : str
        An execution provider onnxruntime has (``onnxruntime.get_available_providers()``).
    optimization_level : str
        A key of :data:`OPTIMIZATION_LEVELS` (onnxruntime's default: ``"all"``).
    threads : int
        Intra-op threads; 0 is onnxruntime's default (one per physical core).

    Examples
    --------
    >>> RuntimeSettings(threads=1).describe()
    'CPUExecutionProvider, graph optimization all, intra-op threads 1, arena on, memory pattern on, memory reuse on, default execution order'
    """

    provider: str = "CPUExecutionProvider"
    optimization_level: str = "all"
    threads: int = 0

    def validate(self) -> "RuntimeSettings":
        """``self`` if every value is valid, else an :class:`OptionError` naming the option."""
        import onnxruntime as ort

        if self.optimization_level not in OPTIMIZATION_LEVELS:
            raise OptionError(f"--optimization-level must be one of {', '.join(OPTIMIZATION_LEVELS)}, "
                              f"got {self.optimization_level!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 0 <= self.threads <= _MAX_THREADS:
            raise OptionError(f"--threads must be a whole number from 0 to {_MAX_THREADS}, got {self.threads!r}")
        available = ort.get_available_providers()
        if self.provider not in available:
            raise OptionError(f"--provider {self.provider!r} is not available in this onnxruntime "
                              f"(available: {', '.join(available)})")
        return self

    def describe(self) -> str:
        threads = "default" if self.threads == 0 else str(self.threads)
        return (f"{self.provider}, graph optimization {self.optimization_level}, intra-op threads {threads}, "
                "arena on, memory pattern on, memory reuse on, default execution order")

    def session_options(self, profile_prefix: str):
        """onnxruntime's default ``SessionOptions`` with these settings and profiling on."""
        import onnxruntime as ort

        from memopt.adapters.onnx import ORT_LOG_FATAL

        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[self.optimization_level])
        so.intra_op_num_threads = self.threads
        so.enable_profiling = True  # records the arena's statistics; allocates nothing in the arena
        so.profile_file_prefix = profile_prefix
        so.log_severity_level = ORT_LOG_FATAL
        return so


@dataclass(frozen=True)
class DefaultMeasurement:
    """One default-mode measurement (bytes; see the module docstring for what is measured)."""

    peak: int          # arena in-use high-water mark above the bytes in use when the first run started
    held: int          # arena reservation at the end above the reservation when the first run started
    runs: int
    settings: str      # RuntimeSettings.describe()
    outputs: tuple = ()

    def not_above(self, other: "DefaultMeasurement") -> bool:
        return self.peak <= other.peak and self.held <= other.held


def measure_defaults(model, settings: RuntimeSettings | None = None, *, feeds: dict | None = None, runs: int = 2,
                     where: str = "model") -> DefaultMeasurement:
    """Run ``model`` (a ``ModelProto``) ``runs`` times in a fresh onnxruntime session with
    default options and ``settings``; measure the arena's peak and reservation.

    Parameters
    ----------
    model : onnx.ModelProto
    settings : RuntimeSettings, optional
    feeds : dict, optional
        Input arrays (default: :func:`memopt.adapters.onnx.example_feeds`).
    runs : int
        Runs in the session (at least 2, so that the memory pattern is used).
    where : str
        Names the model in error messages.

    Returns
    -------
    DefaultMeasurement

    Examples
    --------
    >>> m = measure_defaults(onnx.load("model.onnx"), RuntimeSettings(threads=1))  # doctest: +SKIP
    >>> m.peak, m.held                                                             # doctest: +SKIP
    (1187840, 2097152)
    """
    import onnxruntime as ort

    from memopt.adapters.onnx import example_feeds

    settings = (settings or RuntimeSettings()).validate()
    if runs < 2:
        raise OptionError("a default-mode measurement needs at least 2 runs (the memory pattern is used from the 2nd)")
    feeds = example_feeds(model) if feeds is None else feeds
    with tempfile.TemporaryDirectory(prefix="memopt-ort-") as tmp:
        so = settings.session_options(os.path.join(tmp, "profile"))
        try:
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=[settings.provider])
            for _ in range(runs):
                outs = None  # the previous run's outputs are released before the next run starts
                outs = sess.run(None, feeds)
        except Exception as exc:  # onnxruntime's own refusal
            raise FormatError(f"{where}: onnxruntime cannot run this model: {' '.join(str(exc).split())[:240]}") from None
        with open(sess.end_profiling(), encoding="utf-8") as fh:
            events = json.load(fh)
    kernels = [e["args"] for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    if not kernels or len(kernels) % runs:
        raise InternalError("ort-profile", f"onnxruntime's profile has {len(kernels)} kernel events for {runs} runs")
    keys = ("mem_bytes_in_use", "mem_in_use_delta", "mem_in_use_peak", "mem_arena_held", "mem_arena_held_delta")
    if any(k not in kernels[0] for k in keys):
        raise OptionError(f"this onnxruntime ({ort.__version__}) does not record the arena's statistics in its "
                          "profile (needs onnxruntime >= 1.20 and the CPU arena)")
    first, last = kernels[0], kernels[-1]
    in_use_at_start = int(first["mem_bytes_in_use"]) - int(first["mem_in_use_delta"])
    held_at_start = int(first["mem_arena_held"]) - int(first["mem_arena_held_delta"])
    return DefaultMeasurement(peak=int(last["mem_in_use_peak"]) - in_use_at_start,
                              held=int(last["mem_arena_held"]) - held_at_start, runs=runs,
                              settings=settings.describe(), outputs=tuple(outs))
