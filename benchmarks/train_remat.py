"""Recomputation in a real training step: PyTorch's activation-memory budget against memopt.

For each model (CPU, train mode, cross-entropy against seeded random labels):

* **PyTorch**: ``torch.compile`` of the whole step (model + loss) with AOTAutograd's min-cut
  partitioner and eager execution of its forward and backward graphs (``aot_autograd`` with
  ``boxed_nop`` compilers: what ``aot_eager`` runs, with ``min_cut_rematerialization_partition``),
  at ``torch._functorch.config.activation_memory_budget`` in {1.0, 0.8, 0.6, 0.4, 0.2} with each
  ``activation_memory_budget_solver`` (dp, greedy, ilp); ``loss.backward()`` accumulates into
  ``.grad``;
* **memopt**: :func:`memopt.adapters.training.plan` with ``memory_limit`` = each distinct
  measured PyTorch peak.

Every point: measured peak (CPU allocator bytes above the step's start, after a warm-up
step; parameters, buffers, inputs and existing ``.grad`` excluded), extra FLOPs counted by
``torch.utils.flop_counter.FlopCounterMode`` over one step minus the plain eager step's count
(only operators with a FLOP formula count there), CPU seconds of one step. memopt's points
also give its modelled peak, its own extra cost (FLOPs where a formula exists, element counts
otherwise) and its lower bound on that cost at the limit.

    python benchmarks/train_remat.py --models resnet18 --batch 8 --size 64 -o results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.2)
SOLVERS = ("dp", "greedy", "ilp")


def _models():
    from memopt._torchvision import allow_import

    allow_import()
    import torchvision

    return {"resnet18": torchvision.models.resnet18, "resnet50": torchvision.models.resnet50,
            "mobilenet_v3_large": torchvision.models.mobilenet_v3_large}


def graph_flops(*gms) -> tuple[int, int]:
    """``(FLOPs, cost)`` of the ATen calls of FX graphs, from their traced shapes: FLOPs by
    ``torch.utils.flop_counter``'s formulas (the operators FlopCounterMode counts), cost as
    memopt's model (the formula, else the elements an op outputs). Counted on the graphs the
    step runs: a FlopCounterMode around a compiled step would make Dynamo recompile."""
    import torch

    from memopt.adapters.training import _meta_args, op_flops

    flops = cost = 0
    for gm in gms:
        for n in gm.graph.nodes:
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                continue
            val = n.meta.get("val")
            f = op_flops(n.target, *_meta_args(n), val)
            leaves = [v for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
            flops += f or 0
            cost += f if f is not None else sum(int(v.numel()) for v in leaves)
    return flops, cost


def _cpu_seconds(run) -> float:
    t = time.process_time()
    run()
    return time.process_time() - t


def _fresh(factory, seed: int):
    """The model in train mode, its batch norms without running statistics (batch statistics
    only, no buffer updated in place: AOTAutograd's eager runtime refuses a backward that
    recomputes a batch norm from a buffer the forward's epilogue updated in place)."""
    import torch

    torch.manual_seed(seed)
    model = factory().train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.track_running_stats = False
            m.running_mean = m.running_var = m.num_batches_tracked = None
    return model


def torch_point(factory, x, y, budget: float, solver: str, seed: int) -> dict:
    import torch
    import torch._functorch.config as fconfig
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from memopt.adapters.inductor import measure_peak

    model = _fresh(factory, seed)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.model(x), y)

    torch._dynamo.reset()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return boxed_nop(gm, example_inputs)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, partition_fn=min_cut_rematerialization_partition)
    with fconfig.patch(activation_memory_budget=budget, activation_memory_budget_solver=solver):
        step = torch.compile(Step(), backend=backend, fullgraph=True)

        def run():
            loss = step(x, y)
            loss.backward()
            return loss

        t0 = time.perf_counter()
        run()
        compile_s = time.perf_counter() - t0
        model.zero_grad(set_to_none=True)
        peak, _ = measure_peak(run)
        cpu = _cpu_seconds(run)
    flops, cost = graph_flops(*graphs)
    return dict(who="pytorch", budget=budget, solver=solver, peak=int(peak), flops=flops, cost=cost, cpu_s=cpu,
                compile_s=compile_s, graphs=len(graphs))


def memopt_point(model, tg, x, y, limit: int, time_limit: float) -> dict:
    import torch

    from memopt.adapters import training

    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=y, memory_limit=limit,
                        time_limit=time_limit, captured=tg)
    point = dict(who="memopt", limit=limit, status=rep.status, peak=rep.peak, modelled_peak=rep.modelled_peak,
                 extra_cost=rep.extra_flops, cost_lower_bound=rep.lower_bound, plan_s=rep.remat.seconds,
                 recomputed=len(rep.recomputed), saved=len(rep.saved))
    if rep.modelled_peak is not None:
        flops, cost = graph_flops(rep._programs.forward, rep._programs.backward)
        point.update(flops=flops, cost=cost, cpu_s=_cpu_seconds(rep.step))
    return point


def eager_point(factory, x, y, seed: int) -> dict:
    import torch

    from memopt.adapters.inductor import measure_peak

    model = _fresh(factory, seed)

    def run():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    run()
    model.zero_grad(set_to_none=True)
    peak, _ = measure_peak(run)
    return dict(who="eager", peak=int(peak), cpu_s=_cpu_seconds(run))


def _data(args):
    import torch

    torch.manual_seed(args.seed)
    return torch.randn(args.batch, 3, args.size, args.size), torch.randint(0, 1000, (args.batch,))


def _in_child(args, name: str, budget: float, solver: str) -> dict:
    """One PyTorch point in a fresh process (a fresh torch.compile, no hooks left by the
    FLOP counter of another point)."""
    import subprocess

    cmd = [sys.executable, __file__, "--models", name, "--batch", str(args.batch), "--size", str(args.size),
           "--seed", str(args.seed), "--torch-point", str(budget), solver]
    done = subprocess.run(cmd, capture_output=True, text=True)
    rows = [ln[4:] for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
    if not rows:
        return dict(who="pytorch", budget=budget, solver=solver, error=f"child exit {done.returncode}: "
                    + (done.stderr.strip().splitlines() or ["?"])[-1][:200])
    return json.loads(rows[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["resnet18"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS))
    p.add_argument("--solvers", nargs="+", default=list(SOLVERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output")
    p.add_argument("--torch-point", nargs=2, metavar=("BUDGET", "SOLVER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    import torch

    from memopt.adapters import training

    torch.set_num_threads(1)
    zoo = _models()
    if args.torch_point:
        factory = zoo[args.models[0]]
        x, y = _data(args)
        try:
            row = torch_point(factory, x, y, float(args.torch_point[0]), args.torch_point[1], args.seed)
        except Exception as exc:  # noqa: BLE001 - a failing configuration is a row, not the end
            row = dict(who="pytorch", budget=float(args.torch_point[0]), solver=args.torch_point[1],
                       error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
        print("ROW " + json.dumps(row), flush=True)
        return 0
    out = []
    for name in args.models:
        factory = zoo[name]
        x, y = _data(args)
        rows = [dict(model=name, **eager_point(factory, x, y, args.seed))]
        print(json.dumps(rows[-1]), flush=True)
        for budget in args.budgets:
            for solver in args.solvers:
                rows.append(dict(model=name, **_in_child(args, name, budget, solver)))
                print(json.dumps(rows[-1]), flush=True)
        # memopt: one model and one capture for every limit (the step's graph does not depend on it)
        model = _fresh(factory, args.seed)
        t = time.perf_counter()
        tg = training.capture(model, x, torch.nn.functional.cross_entropy, targets=y)
        flops, cost = graph_flops(tg.module)
        rows.append(dict(model=name, who="joint graph (no recomputation)", flops=flops, cost=cost,
                         capture_s=time.perf_counter() - t, modelled_peak=tg.modelled_peak()))
        print(json.dumps(rows[-1]), flush=True)
        limits = sorted({r["peak"] for r in rows if r.get("who") == "pytorch" and "peak" in r}, reverse=True)
        for limit in limits:
            rows.append(dict(model=name, **memopt_point(model, tg, x, y, limit, args.time_limit)))
            print(json.dumps(rows[-1]), flush=True)
        out.extend(rows)
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
