"""Where the Inductor adapter's time goes, on one model, against stock ``torch.compile``.

Compiles the model (one compile at a time, each after ``torch._dynamo.reset()``):

1. stock: ``torch.compile(model)`` and its first call, FX-graph cache off;
2. ``capture(model, x)`` by phase (compile and first call, warm-up run, profiled run, model),
   then ``optimize_capture`` (schedule, then load and measure both orders);
3. ``capture(model, x, measure=False)`` by phase;
4. with ``--compile-path``: ``torch.compile`` with :func:`compile_path_options` and the FX-graph
   cache on, twice: seconds and the cache's hit/miss/bypass counters of each compile.

    python benchmarks/inductor_capture_cost.py [--size 64] [--time-limit 10] [--compile-path] [MODEL]

``MODEL`` is a :mod:`memopt.zoo.real` name, ``resnet18`` (torchvision), or a :mod:`memopt.zoo`
mini (default ``resnet18``). Timings are wall-clock on whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import time


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


def costs(name: str, size: int = 64, time_limit: float = 10.0, compile_path: bool = False) -> dict:
    """Seconds per phase (see the module docstring) for one model."""
    import torch
    from torch._dynamo.utils import counters

    from memopt.adapters import inductor

    model, inputs = build(name, size)
    out: dict = {"model": name, "size": size}
    torch._dynamo.reset()
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.compile(model, backend="inductor", options={"fx_graph_cache": False})(*inputs)
    out["stock compile s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    cap = inductor.capture(model, *inputs)
    out["capture s"] = time.perf_counter() - t0
    out["capture unaccounted s"] = out["capture s"] - sum(cap.seconds.values())
    out["capture phases"] = dict(cap.seconds)
    out["stmts"] = len(cap.program.statements)
    t0 = time.perf_counter()
    rep = inductor.optimize_capture(cap, time_limit=time_limit)
    out["optimize s"] = time.perf_counter() - t0
    out["schedule s"] = rep.seconds
    out["stock measured"], out["memopt measured"], out["memopt model"] = (rep.measured_peak_stock, rep.measured_peak,
                                                                         rep.modelled_peak)
    out["status"], out["bitwise"] = rep.status, rep.bitwise_equal
    out["(capture + optimize) / stock"] = (out["capture s"] + out["optimize s"]) / out["stock compile s"]

    t0 = time.perf_counter()
    cap0 = inductor.capture(model, *inputs, measure=False)
    out["capture measure=False s"] = time.perf_counter() - t0
    out["capture measure=False phases"] = dict(cap0.seconds)

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
