"""Where the Inductor adapter's time goes, on one model, against stock ``torch.compile``;
and what ``capture(measure=False)`` saves.

Each phase is timed in wall and CPU seconds (this process and Inductor's compile workers,
``adapters_inductor._Phase``); each compile starts from a fresh Inductor cache directory after
``torch._dynamo.reset()`` (``adapters_inductor._started_cold``), so that none reuses another's
kernels:

1. stock: ``torch.compile(model)`` and its first call, FX-graph cache off;
2. ``capture(model, x)`` by phase (compile and first call, profiled run, model), then
   ``optimize_capture`` (schedule, then load and measure the orders): the measured guarantee;
3. ``measure=False`` on the same wrapper and inputs (``capture(measure=False)`` compiles exactly
   as 2 does, so its compile is not repeated): the plain statement-by-statement run and the
   model, then ``memopt.schedule`` on that model alone, no run (modelled peak only). For
   information, not a cost: that order measured, against its model (the gap is the library
   transients the model leaves out);
4. with ``--compile-path``: ``torch.compile`` with :func:`compile_path_options` and the FX-graph
   cache on, twice: seconds and the cache's hit/miss/bypass counters of each compile.

    python benchmarks/inductor_capture_cost.py [--size 64] [--time-limit 10] [--compile-path] [MODEL]

``MODEL`` is a :mod:`memopt.zoo.real` name, ``resnet18`` (torchvision), or a :mod:`memopt.zoo`
mini (default ``resnet18``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adapters_inductor import _Phase, _started_cold  # noqa: E402  (the real-zoo benchmark's timing helpers)


def build(name: str, size: int):
    import torch

    from memopt import zoo
    from memopt.zoo import real

    if name in real.names():
        return real.build(name, size=size)
    if name == "resnet18":
        torch.manual_seed(0)
        return real.torchvision().models.resnet18(weights=None).eval(), (torch.randn(1, 3, size, size),)
    return zoo.build(name)


def _cache_counts(before: dict) -> dict:
    from torch._dynamo.utils import counters

    keys = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    return {k[8:]: counters["inductor"][k] - before.get(k, 0) for k in keys}


def _timed(out: dict, label: str, phase: _Phase) -> None:
    out[f"{label} s"], out[f"{label} cpu s"] = phase.wall, phase.cpu


def costs(name: str, size: int = 64, time_limit: float = 10.0, compile_path: bool = False) -> dict:
    """Wall and CPU seconds per phase (see the module docstring) for one model."""
    import torch
    from torch._dynamo.utils import counters

    import memopt
    from memopt.adapters import inductor
    from memopt.adapters.inductor.capture import _clone_args
    from memopt.adapters.inductor.profiling import _build_program

    model, inputs = build(name, size)
    out: dict = {"model": name, "size": size}
    with tempfile.TemporaryDirectory(prefix="memopt-capture-cost-") as tmp:
        _started_cold(tmp, "stock")
        with _Phase() as ph, torch.no_grad():
            torch.compile(model, backend="inductor", options={"fx_graph_cache": False})(*inputs)
        _timed(out, "stock compile", ph)

        _started_cold(tmp, "capture")
        with _Phase() as ph:
            cap = inductor.capture(model, *inputs)
        _timed(out, "capture", ph)
        out["capture phases"] = dict(cap.seconds)
        out["stmts"] = len(cap.program.statements)
        with _Phase() as ph:
            rep = inductor.optimize_capture(cap, time_limit=time_limit)
        _timed(out, "optimize", ph)
        out["schedule s"], out["first use s"] = rep.seconds, rep.compile_seconds
        out["stock measured"], out["memopt measured"], out["memopt model"] = (rep.measured_peak_stock, rep.measured_peak,
                                                                             rep.modelled_peak)
        out["status"], out["bitwise"] = rep.status, rep.bitwise_equal
        out["exact"] = rep.modelled_peak == rep.measured_peak and rep.modelled_peak_stock == rep.measured_peak_stock
        if out["stock compile cpu s"]:
            out["(capture + optimize) / stock, cpu"] = ((out["capture cpu s"] + out["optimize cpu s"])
                                                        / out["stock compile cpu s"])

        # measure=False: the same compile (not repeated), then its own phases and the model-only
        # schedule; the capture's post-compile phases are timed again beside them, so that the
        # capture's compile CPU is its CPU less theirs
        for label, measure in (("measure=True", True), ("measure=False", False)):
            phases: dict = {}
            with _Phase() as ph:
                program, _ = _build_program(cap.source, _clone_args(cap.args), name=name, measure=measure,
                                            seconds=phases, warm_up=False)
            _timed(out, f"{label} run + model", ph)
            out[f"{label} phases"] = phases
        with _Phase() as ph:
            res = memopt.schedule(program, time_limit=time_limit)
        _timed(out, "measure=False schedule", ph)
        out["measure=False stock modelled"] = program.peak()
        out["measure=False modelled"], out["measure=False status"] = int(res.peak), res.status
        if out["stock compile cpu s"]:
            compile_cpu = out["capture cpu s"] - out["measure=True run + model cpu s"]
            out["measure=False path / stock, cpu"] = ((compile_cpu + out["measure=False run + model cpu s"]
                                                       + out["measure=False schedule cpu s"]) / out["stock compile cpu s"])
        # the guarantee is the modelled peak only: this order's measured peak may exceed it by the
        # transients the model leaves out (a check, not a cost)
        out["measure=False order measured (check)"], _ = cap.measure([int(i) for i in res.order])

    if compile_path:
        options = dict(inductor.compile_path_options(min(time_limit, 1.0)), fx_graph_cache=True)
        for run in ("first", "second"):
            torch._dynamo.reset()
            before = dict(counters["inductor"])
            t0 = time.perf_counter()
            with torch.no_grad():
                torch.compile(model, backend="inductor", options=options)(*inputs)
            out[f"compile path {run} s"] = time.perf_counter() - t0
            out[f"compile path {run} cache"] = _cache_counts(before)
    return out


def _rounded(v):
    if isinstance(v, float):
        return round(v, 2)
    return {k: _rounded(x) for k, x in v.items()} if isinstance(v, dict) else v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="resnet18")
    ap.add_argument("--size", type=int, default=64, help="input resolution (real models)")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--compile-path", action="store_true", help="also compile twice with the scheduler pass")
    args = ap.parse_args(argv)
    from memopt._torchvision import allow_import

    allow_import()
    out = costs(args.model, args.size, args.time_limit, args.compile_path)
    print(json.dumps(_rounded(out), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
