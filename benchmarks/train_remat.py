"""Recomputation in a real training step: memopt against PyTorch's activation-memory budget and
block-wise activation checkpointing.

For each model (CPU, train mode, cross-entropy against seeded random labels; see :data:`MODELS`):

* **PyTorch**: ``torch.compile`` of the whole step (model + loss) with AOTAutograd's min-cut
  partitioner and eager execution of its forward and backward graphs (``aot_autograd`` with
  ``boxed_nop`` compilers: what ``aot_eager`` runs, with ``min_cut_rematerialization_partition``),
  at ``torch._functorch.config.activation_memory_budget`` in {1.0, 0.8, 0.6, 0.4, 0.2} with each
  ``activation_memory_budget_solver`` (dp, greedy, ilp); ``loss.backward()`` accumulates into
  ``.grad``. At budget 1.0 the partitioner returns its min-cut before it reads the solver, so
  that point is run once and stands for the three solvers (``same_as``). All PyTorch points of
  a model run in one child process (a fresh ``torch._dynamo.reset()`` per point);
* **block checkpoint**: the eager step with ``torch.utils.checkpoint.checkpoint(...,
  use_reentrant=False)`` around each natural block of the model (ResNet residual blocks,
  DenseNet dense blocks, MobileNet inverted residuals, ViT encoder layers, GPT-2 blocks,
  U-Net levels);
* **memopt**: :func:`memopt.adapters.training.plan` with ``memory_limit`` = each distinct
  measured peak of the two baselines, and at its own points (``--ratios`` of its modelled
  no-recomputation peak); one capture per model.

Every point: measured peak (CPU allocator bytes above the step's start, after a warm-up
step; parameters, buffers, inputs and existing ``.grad`` excluded), extra FLOPs counted over
one step minus the plain step's count (every ATen call with a ``torch.utils.flop_counter``
formula, plus the CPU attention kernels and grouped convolution backward as
:func:`memopt.adapters.training.op_flops` counts them: on the compiled and planned steps from
their FX graphs, on eager steps by a dispatch mode around the step), CPU seconds of one step.
memopt's points also give its modelled peak (= measured?), its own count of the plan's extra
FLOPs (``TrainingPlan.extra_flops``, = the counted one?), its re-runs of ops without a FLOP
formula (``reruns_without_flops``, its second objective), its lower bound on the extra FLOPs
of any plan at the limit (``TrainingPlan.lower_bound``; "within 10 %" is read on it against
the counted extra FLOPs), the solver's seconds and the whole ``plan()`` call's, and a bitwise
check of the loss and every gradient against the plain eager step on a copy of the model.
The capture's transients are measured once, with the capture (its seconds count there), and
every point's ``plan()`` (time limit ``--time-limit``) reuses them.

    python benchmarks/train_remat.py --models resnet18 --batch 8 --size 64 --out-dir DIR [--plot DIR]
    python benchmarks/train_remat.py --table DIR/resnet18.json [--plot DIR]   # table / plot of a run
    python benchmarks/train_remat.py --models gpt2 --baselines-from OLD --out-dir DIR   # memopt again, same baselines

One JSON per model (``DIR/<model>.json``), rewritten after every row, so that a run cut short
keeps its finished models.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.2)
SOLVERS = ("dp", "greedy", "ilp")
#: memopt's own points: fractions of its modelled no-recomputation peak
RATIOS = (0.8, 0.6)
HERE = os.path.dirname(os.path.abspath(__file__))
#: the rows ``--baselines-from`` takes from an earlier run
BASELINES = ("eager", "block checkpoint", "pytorch")


# ----------------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelSpec:
    """How the benchmark builds one model's step: ``build(batch, size)`` -> ``(model, inputs,
    targets)`` (random weights from the caller's seed); ``blocks(model)`` -> the modules whose
    forward the block-checkpoint baseline wraps; the default ``batch`` and ``size`` (image side,
    or sequence length for ``gpt2``)."""

    build: Callable
    blocks: Callable
    batch: int
    size: int


def _tv():
    from memopt.zoo import real

    return real.torchvision()


def _classifier(factory_name: str, **kwargs):
    def build(batch, size):
        import torch

        model = getattr(_tv().models, factory_name)(weights=None, **kwargs)
        x = torch.randn(batch, 3, size, size)
        return model, (x,), (torch.randint(0, 1000, (batch,)),)

    return build


def _resnet_blocks(model):
    return [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]


def _densenet_blocks(model):
    return [m for name, m in model.features.named_children() if name.startswith("denseblock")]


def _mobilenet_blocks(model):
    from torchvision.models.mobilenetv3 import InvertedResidual

    return [m for m in model.features if isinstance(m, InvertedResidual)]


def _vit(batch, size):
    """A small ViT (torchvision's ``VisionTransformer``: patch 8, 6 layers, 4 heads, width 256,
    MLP 1024) on ``size`` x ``size`` images: ViT-B/16's layout at a size two shared cores run."""
    import torch

    model = _tv().models.VisionTransformer(image_size=size, patch_size=8, num_layers=6, num_heads=4,
                                           hidden_dim=256, mlp_dim=1024)
    return model, (torch.randn(batch, 3, size, size),), (torch.randint(0, 1000, (batch,)),)


def _unet(batch, size):
    """The real zoo's U-Net (4 levels, 16..256 channels), two classes per pixel."""
    import torch

    from memopt.zoo import real

    model = real._modules()[0]()
    x = torch.randn(batch, 3, size, size)
    return model, (x,), (torch.randint(0, 2, (batch, size, size)),)


def _unet_blocks(model):
    return [*model.down, model.bottom, *model.dec]


def _gpt2(batch, seq):
    """The training corpus's decoder-only transformer (GPT-2 layout, 4 layers, width 256,
    vocabulary 8192, dropout off; ``benchmarks/real_corpus.py``) at sequence length ``seq``."""
    sys.path.insert(0, HERE)
    from real_corpus import _gpt2 as build

    model, inputs, labels = build(batch, seq)
    return model, inputs, (labels,)


MODELS = {
    "resnet18": ModelSpec(_classifier("resnet18"), _resnet_blocks, 8, 64),
    "resnet50": ModelSpec(_classifier("resnet50"), _resnet_blocks, 8, 64),
    "mobilenet_v3_large": ModelSpec(_classifier("mobilenet_v3_large"), _mobilenet_blocks, 8, 64),
    "gpt2": ModelSpec(_gpt2, lambda m: list(m.lm.transformer.h), 4, 256),
    "vit": ModelSpec(_vit, lambda m: list(m.encoder.layers), 8, 64),
    "unet": ModelSpec(_unet, _unet_blocks, 4, 64),
    "densenet121": ModelSpec(_classifier("densenet121"), _densenet_blocks, 8, 64),
}


def loss_fn(out, labels):
    """Cross-entropy of logits ``(B, C, ...)``, or ``(B, T, V)`` against ``(B, T)``."""
    import torch

    if out.dim() == 3 and labels.dim() == 2:
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), labels.flatten())
    return torch.nn.functional.cross_entropy(out, labels)


def _fresh(name: str, args):
    """``(model, inputs, targets)`` of ``name``: weights and data from ``args.seed``; batch
    norms without running statistics (batch statistics only, no buffer updated in place:
    AOTAutograd's eager runtime refuses a backward that recomputes a batch norm from a buffer
    the forward's epilogue updated in place)."""
    import torch

    spec = MODELS[name]
    torch.manual_seed(args.seed)
    model, inputs, targets = spec.build(args.batch or spec.batch, args.size or spec.size)
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.track_running_stats = False
            m.running_mean = m.running_var = m.num_batches_tracked = None
    return model, inputs, targets


# ----------------------------------------------------------------------------- counting
def graph_flops(*gms) -> tuple[int, int]:
    """``(FLOPs, cost)`` of the ATen calls of FX graphs, from their traced shapes: FLOPs by
    :func:`memopt.adapters.training.op_flops`, cost as memopt's model (the formula, else the
    elements an op outputs). Counted on the graphs the step runs: a dispatch mode around a
    compiled step would make Dynamo recompile."""
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


def eager_flops(run) -> int:
    """FLOPs of the ATen calls ``run()`` dispatches (forward and backward, recomputations
    included), each by :func:`memopt.adapters.training.op_flops` on its real arguments."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from memopt.adapters.training import op_flops

    total = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            total[0] += op_flops(func, args, kwargs or {}, out) or 0
            return out

    with Count():
        run()
    return total[0]


def _cpu_seconds(run) -> float:
    t = time.process_time()
    run()
    return time.process_time() - t


# ----------------------------------------------------------------------------- points
def compiled_step(name: str, args, backend, patches) -> tuple[dict, Callable, tuple]:
    """``torch.compile`` of ``name``'s whole step (model + loss; fullgraph, static shapes) with
    ``backend``, under the config ``patches`` (context managers): compiled by a first step, then
    measured (peak after ``.grad`` set to ``None``, CPU seconds of one step). Returns
    ``(measures, step, (model, inputs, targets))``."""
    import contextlib

    import torch

    from memopt.adapters.inductor import measure_peak

    model, inputs, targets = _fresh(name, args)

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            return loss_fn(self.model(*xs[:len(inputs)]), *xs[len(inputs):])

    torch._dynamo.reset()
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        step = torch.compile(Step(), backend=backend, fullgraph=True, dynamic=False)

        def run():
            loss = step(*inputs, *targets)
            loss.backward()
            return loss

        t0 = time.perf_counter()
        run()
        compile_s = time.perf_counter() - t0
        model.zero_grad(set_to_none=True)
        peak, _ = measure_peak(run)
        cpu = _cpu_seconds(run)
    return dict(peak=int(peak), cpu_s=cpu, compile_s=compile_s), step, (model, inputs, targets)


def torch_point(name: str, args, budget: float, solver: str) -> dict:
    import torch._functorch.config as fconfig
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return boxed_nop(gm, example_inputs)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, partition_fn=min_cut_rematerialization_partition)
    measures, _, _ = compiled_step(name, args, backend, [fconfig.patch(activation_memory_budget=budget,
                                                                         activation_memory_budget_solver=solver)])
    flops, cost = graph_flops(*graphs)
    return dict(who="pytorch", budget=budget, solver=solver, **measures, flops=flops, cost=cost, graphs=len(graphs))


def eager_point(name: str, args, checkpointed: bool = False) -> dict:
    """The plain eager step, or with each natural block under ``torch.utils.checkpoint``."""
    from torch.utils.checkpoint import checkpoint

    from memopt.adapters.inductor import measure_peak

    model, inputs, targets = _fresh(name, args)
    blocks = MODELS[name].blocks(model) if checkpointed else []
    for b in blocks:
        b.forward = (lambda f: lambda *a, **k: checkpoint(f, *a, use_reentrant=False, **k))(b.forward)

    def run():
        loss = loss_fn(model(*inputs), *targets)
        loss.backward()
        return loss

    run()
    model.zero_grad(set_to_none=True)
    peak, _ = measure_peak(run)
    cpu = _cpu_seconds(run)
    model.zero_grad(set_to_none=True)
    flops = eager_flops(run)
    return dict(who="block checkpoint" if checkpointed else "eager", blocks=len(blocks), peak=int(peak),
                eager_flops=flops, cpu_s=cpu)


def bitwise_check(rep, model, inputs, targets, seed: int) -> dict:
    """One step of the plan against one plain eager step (``loss.backward()``) on a copy of
    ``model`` in the same state, the random generator seeded alike before each: loss and
    gradients compared with ``torch.equal``."""
    import torch

    ref = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = rep.step(*inputs, *targets)
    torch.manual_seed(seed)
    ref_loss = loss_fn(ref(*inputs), *targets)
    ref_loss.backward()
    pairs = [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()) if q.grad is not None]
    equal = sum(1 for g, h in pairs if g is not None and torch.equal(g, h))
    return dict(loss_equal=bool(torch.equal(loss.detach(), ref_loss.detach())), grads_equal=equal,
                grads=len(pairs))


def memopt_point(model, tg, inputs, targets, args, joint_flops: int, **question) -> dict:
    from memopt.adapters import training

    # plan() alone is timed (its time limit covers it); the step is measured after it
    t0 = time.perf_counter()
    rep = training.plan(model, inputs, loss_fn, targets=targets, time_limit=args.time_limit, captured=tg,
                        measure_step=False, **question)
    plan_s = time.perf_counter() - t0
    if rep.modelled_peak is not None:
        rep = dataclasses.replace(rep, peak=rep.measure())
    point = dict(who="memopt", **question, limit=rep.memory_limit, status=rep.status, peak=rep.peak,
                 modelled_peak=rep.modelled_peak, plan_flops=rep.extra_flops, reruns=rep.reruns_without_flops,
                 flop_lower_bound=_num(rep.lower_bound), solve_s=rep.remat.seconds, plan_s=plan_s,
                 method=rep.remat.method, recomputed=len(rep.recomputed), saved=len(rep.saved),
                 parts=rep.remat.stats.get("parts"))
    if rep.modelled_peak is not None:
        flops, cost = graph_flops(rep._programs.forward, rep._programs.backward)
        point.update(flops=flops, extra_flops=flops - joint_flops, cost=cost, cpu_s=_cpu_seconds(rep.step))
        point.update(bitwise_check(rep, model, inputs, targets, args.seed))
    return point


def _num(x):
    from fractions import Fraction

    return f"{x.numerator}/{x.denominator}" if isinstance(x, Fraction) and x.denominator != 1 else (
        None if x is None else int(x))


# ----------------------------------------------------------------------------- driver
def _torch_rows(name: str, args) -> list[dict]:
    """Every PyTorch point of ``name`` in one fresh process (budget 1.0 once: the partitioner
    does not call the solver there)."""
    import subprocess

    points = [(b, s) for b in args.budgets for s in (args.solvers if b < 1.0 else args.solvers[:1])]
    cmd = [sys.executable, __file__, "--models", name, "--seed", str(args.seed), "--torch-points",
           *[f"{b}:{s}" for b, s in points]]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    if args.size:
        cmd += ["--size", str(args.size)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    rows = [json.loads(ln[4:]) for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
    got = {(r["budget"], r["solver"]) for r in rows}
    for b, s in points:
        if (b, s) not in got:
            rows.append(dict(who="pytorch", budget=b, solver=s, error=f"child exit {done.returncode}: "
                             + (done.stderr.strip().splitlines() or ["?"])[-1][:200]))
    for r in list(rows):
        if r["budget"] >= 1.0:
            rows += [dict(r, solver=s, same_as=r["solver"]) for s in args.solvers if s != r["solver"]]
    return rows


def _child(args) -> int:
    name = args.models[0]
    for point in args.torch_points:
        budget, solver = point.split(":")
        try:
            row = torch_point(name, args, float(budget), solver)
        except Exception as exc:  # noqa: BLE001 - a failing configuration is a row, not the end
            row = dict(who="pytorch", budget=float(budget), solver=solver,
                       error=f"{type(exc).__name__}: {(str(exc).strip().splitlines() or ['?'])[0][:200]}")
        print("ROW " + json.dumps(row), flush=True)
    return 0


def start_rows(name: str, args, save) -> tuple[list, Callable]:
    """One model's rows, the first its setup (model, sizes, seed, versions, UTC time, load), and
    the function that adds a row (printed as JSON and saved with ``save(rows)``)."""
    import torch

    spec = MODELS[name]
    setup = dict(model=name, batch=args.batch or spec.batch, size=args.size or spec.size, seed=args.seed,
                 time_limit=args.time_limit, torch=torch.__version__, start_utc=_utc(), load=_load())
    rows = [dict(who="setup", **setup)]

    def add(row):
        rows.append(dict(model=name, **row))
        print(json.dumps(rows[-1]), flush=True)
        save(rows)

    return rows, add


def run_model(name: str, args, save) -> list[dict]:
    from memopt.adapters import training, training_plan

    rows, add = start_rows(name, args, save)
    setup = rows[0]

    if args.baselines_from:
        # the eager, block-checkpoint and PyTorch rows of an earlier run of the same model and
        # settings (deterministic byte counts), so that a run re-measures memopt alone
        with open(os.path.join(args.baselines_from, f"{name}.json")) as f:
            old = json.load(f)
        same = ("model", "batch", "size", "seed", "torch")
        if any(old[0].get(k) != setup[k] for k in same):
            raise SystemExit(f"--baselines-from: {name}.json was run with other settings "
                             f"({', '.join(f'{k}={old[0].get(k)}' for k in same)})")
        rows[0]["baselines_from"] = dict(path=os.path.join(args.baselines_from, f"{name}.json"),
                                         start_utc=old[0].get("start_utc"))
        for row in old:
            if row.get("who") in BASELINES:
                add({k: v for k, v in row.items() if k != "model"})
    else:
        add(eager_point(name, args))
        add(eager_point(name, args, checkpointed=True))
        for row in _torch_rows(name, args):
            add(row)
    # memopt: one model and one capture for every limit (the step's graph does not depend on it)
    model, inputs, targets = _fresh(name, args)
    t = time.perf_counter()
    tg = training.capture(model, inputs, loss_fn, targets=targets)
    training_plan.measured(tg)  # the transients, once: every point's plan() reuses them
    joint_flops, cost = graph_flops(tg.module)
    add(dict(who="joint graph", flops=joint_flops, cost=cost, capture_s=time.perf_counter() - t,
             modelled_peak=tg.modelled_peak(), ops=tg.graph.num_ops))
    limits = sorted({r["peak"] for r in rows if r.get("who") in ("pytorch", "block checkpoint") and "peak" in r},
                    reverse=True)
    for limit in limits:
        add(memopt_point(model, tg, inputs, targets, args, joint_flops, memory_limit=limit))
    for ratio in args.ratios:
        add(memopt_point(model, tg, inputs, targets, args, joint_flops, memory_ratio=ratio))
    rows[0].update(end_utc=_utc(), end_load=_load())
    save(rows)
    return rows


def _utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------- report
def _mb(b) -> str:
    return f"{b:,}" if isinstance(b, int) else "-"


def table(rows: list[dict]) -> str:
    """The model's markdown tables: the baselines, then memopt at each limit, then the
    comparison at each PyTorch point (memopt's plan at that point's measured peak)."""
    joint = next(r for r in rows if r["who"] == "joint graph")
    eager = next(r for r in rows if r["who"] == "eager")
    base = eager["eager_flops"]
    lines = [f"Joint graph: {joint['ops']} ops, {joint['flops']:,} FLOPs (eager step counted: {base:,}), "
             f"modelled peak {joint['modelled_peak']:,} B, capture {joint['capture_s']:.1f} s. "
             f"Eager step: peak {eager['peak']:,} B, {eager['cpu_s']:.2f} CPU s.", "",
             "| baseline | budget | solver | peak (B) | extra FLOPs | step CPU s |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        if r["who"] == "block checkpoint":
            lines.append(f"| block checkpoint ({r['blocks']} blocks) | | | {r['peak']:,} | "
                         f"{r['eager_flops'] - base:,} | {r['cpu_s']:.2f} |")
        elif r["who"] == "pytorch":
            if "error" in r:
                lines.append(f"| PyTorch | {r['budget']} | {r['solver']} | error: {r['error']} | | |")
            else:
                same = f" (= {r['same_as']})" if "same_as" in r else ""
                lines.append(f"| PyTorch | {r['budget']} | {r['solver']}{same} | {r['peak']:,} | "
                             f"{r['flops'] - joint['flops']:,} | {r['cpu_s']:.2f} |")
    lines += ["", "| memopt limit (B) | status | peak measured = modelled (B) | extra FLOPs | FLOP lower bound | "
              "FLOP bound/plan | re-runs without FLOPs | step CPU s | solve s | plan() s | loss, grads bitwise |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["who"] != "memopt":
            continue
        q = f"{r['limit']:,}" + (f" (ratio {r['memory_ratio']})" if "memory_ratio" in r else "")
        if r.get("modelled_peak") is None:
            lines.append(f"| {q} | {r['status']} | - | - | {_bound(r, 'flop_lower_bound')} | - | - | - | "
                         f"{r['solve_s']:.1f} | {r['plan_s']:.1f} | - |")
            continue
        eq = "=" if r["peak"] == r["modelled_peak"] else f"≠ {r['modelled_peak']:,}"
        counted = "" if r["plan_flops"] == r["extra_flops"] else f" (plan says {r['plan_flops']:,})"
        lines.append(f"| {q} | {r['status']} | {_mb(r['peak'])} {eq} | {r['extra_flops']:,}{counted} | "
                     f"{_bound(r, 'flop_lower_bound')} | {_ratio(r, *FLOP_BOUND)} | {r['reruns']:,} | "
                     f"{r['cpu_s']:.2f} | {r['solve_s']:.1f} | {r['plan_s']:.1f} | "
                     f"{'yes' if r['loss_equal'] else 'NO'}, {r['grads_equal']}/{r['grads']} |")
    lines += ["", "| baseline point | its peak | its extra FLOPs (extra element-count cost) | memopt peak (− the "
              "baseline's) | memopt extra FLOPs (re-runs without FLOPs) | peak <= and FLOPs <= | strictly better | "
              "memopt's lowest peak at <= its FLOPs (− the baseline's) |",
              "|---|---:|---:|---:|---:|---|---|---:|"]
    met = strict = clear = clear_any = n = 0
    measured = [x for x in rows if x["who"] == "memopt" and x.get("peak") is not None]
    for r in rows:
        if r["who"] not in ("pytorch", "block checkpoint") or "error" in r:
            continue
        m = next((x for x in rows if x["who"] == "memopt" and "memory_ratio" not in x and x["limit"] == r["peak"]),
                 None)
        if r["who"] == "pytorch":
            point, pf, pc = f"{r['budget']} {r['solver']}", r["flops"] - joint["flops"], r["cost"] - joint["cost"]
            n += 1
        else:  # the eager count has no element-count cost of its own
            point, pf, pc = "block checkpoint", r["eager_flops"] - base, "-"
        # every memopt plan of the model (any limit, measured) at most as many extra FLOPs: the
        # lowest peak among them (a limit question's answer need not go below its limit)
        low = min((x for x in measured if x["extra_flops"] <= pf), key=lambda x: (x["peak"], x["extra_flops"]),
                  default=None)
        if r["who"] == "pytorch" and low is not None:
            clear_any += low["peak"] < r["peak"] - 4 or (low["peak"] <= r["peak"] and low["extra_flops"] < pf)
        lowest = "-" if low is None else f"{low['peak']:,} ({low['peak'] - r['peak']:,})"
        if m is None or m.get("peak") is None:
            lines.append(f"| {point} | {r['peak']:,} | {pf:,} | no plan | | no | no | {lowest} |")
            continue
        ok = m["peak"] <= r["peak"] and m["extra_flops"] <= pf
        better = ok and (m["peak"] < r["peak"] or m["extra_flops"] < pf)
        if r["who"] == "pytorch":
            met += ok
            strict += better
            # the compiled step holds one 4-byte scalar the plan's step does not: a margin of
            # 4 bytes alone is no real gain
            clear += ok and (m["peak"] < r["peak"] - 4 or m["extra_flops"] < pf)
        lines.append(f"| {point} | {r['peak']:,} | {pf:,} ({_mb(pc)}) | "
                     f"{m['peak']:,} ({m['peak'] - r['peak']:,}) | {m['extra_flops']:,} ({m['reruns']:,}) | "
                     f"{'yes' if ok else 'no'} | {'yes' if better else 'no'} | {lowest} |")
    mem = [r for r in rows if r["who"] == "memopt" and r.get("modelled_peak") is not None]
    close = sum(1 for r in mem if _within(r, 0.10, *FLOP_BOUND))
    solve = [r["solve_s"] for r in rows if r["who"] == "memopt"]
    plan_s = [r["plan_s"] for r in rows if r["who"] == "memopt"]
    lines += ["", f"Targets: memopt <= PyTorch on {met}/{n} PyTorch points, strictly better on {strict}/{n} "
              f"(by more than 4 B or in FLOPs on {clear}/{n}; by some memopt plan of the model: {clear_any}/{n}); "
              f"measured = modelled on {sum(r['peak'] == r['modelled_peak'] for r in mem)}/{len(mem)} memopt "
              f"points; FLOP bound within 10 % of the plan's extra FLOPs on {close}/{len(mem)}; plan's FLOPs = "
              f"counted on {sum(r['plan_flops'] == r['extra_flops'] for r in mem)}/{len(mem)}; loss and gradients "
              f"bitwise on "
              f"{sum(r['loss_equal'] and r['grads_equal'] == r['grads'] for r in mem)}/{len(mem)}; "
              f"solver seconds <= limit on {sum(s <= rows[0]['time_limit'] for s in solve)}/{len(solve)} "
              f"(max {max(solve, default=0):.1f} s); plan() at most {max(plan_s, default=0):.1f} s."]
    return "\n".join(lines)


#: (bound, plan) keys of a memopt row: memopt's lower bound on the extra FLOPs against the step's
#: counted extra FLOPs
FLOP_BOUND = ("flop_lower_bound", "extra_flops")


def _bound(r, key: str) -> str:
    b = r.get(key)
    return "-" if b is None else (f"{b:,}" if isinstance(b, int) else str(b))


def _frac(x):
    from fractions import Fraction

    return Fraction(x) if x is not None else None


def _within(r, tol, bound: str, plan: str) -> bool:
    """The plan's figure ``r[plan]`` is at most ``1 + tol`` times its lower bound ``r[bound]``
    (a bound is known)."""
    b, c = _frac(r.get(bound)), _frac(r.get(plan))
    return b is not None and c is not None and c <= b * (1 + tol)


def _ratio(r, bound: str, plan: str) -> str:
    b, c = _frac(r.get(bound)), _frac(r.get(plan))
    if b is None or c is None:
        return "-"
    return "1.00" if c == 0 and b == 0 else ("∞" if b == 0 else f"{float(c / b):.2f}")


def plot(rows: list[dict], path: str) -> None:
    """Measured peak against extra FLOPs: memopt (its Pareto front as a step line), PyTorch per
    solver, block checkpoint, the eager step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    joint = next(r for r in rows if r["who"] == "joint graph")
    eager = next(r for r in rows if r["who"] == "eager")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    mem = sorted((r["peak"] / 1e6, r["extra_flops"] / 1e9) for r in rows
                 if r["who"] == "memopt" and r.get("peak") is not None)
    front, best = [], float("inf")
    for p, f in mem:
        if f < best:
            front.append((p, f))
            best = f
    if front:
        xs, ys = zip(*front)
        ax.step(xs, ys, where="post", color="tab:blue", alpha=0.5)
        ax.scatter(*zip(*mem), color="tab:blue", marker="o", label="memopt", zorder=3)
    for solver, marker in zip(SOLVERS, ("s", "^", "v")):
        pts = [(r["peak"] / 1e6, (r["flops"] - joint["flops"]) / 1e9) for r in rows
               if r["who"] == "pytorch" and r["solver"] == solver and "peak" in r]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, facecolors="none", edgecolors="tab:red", s=60,
                       label=f"PyTorch budget ({solver})")
    ck = [r for r in rows if r["who"] == "block checkpoint"]
    for r in ck:
        ax.scatter([r["peak"] / 1e6], [(r["eager_flops"] - eager["eager_flops"]) / 1e9], marker="D",
                   color="tab:green", label=f"block checkpoint ({r['blocks']} blocks)")
    ax.scatter([eager["peak"] / 1e6], [0], marker="x", color="black", label="eager step")
    setup = rows[0]
    ax.set_title(f"{setup['model']} training step (batch {setup['batch']}, size {setup['size']})")
    ax.set_xlabel("measured peak above parameters and inputs (MB)")
    ax.set_ylabel("extra FLOPs (GFLOP, counted)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def model_arguments(p, *, default_model: str, time_limit: float, budgets, ratios) -> None:
    """The options every training-step benchmark takes: models, sizes, time limit, budgets,
    ratios, seed, output folder, and ``--table`` of finished runs."""
    p.add_argument("--models", nargs="+", default=[default_model], choices=sorted(MODELS))
    p.add_argument("--batch", type=int, help="default: the model's (train_remat.MODELS)")
    p.add_argument("--size", type=int, help="image side or sequence length; default: the model's")
    p.add_argument("--time-limit", type=float, default=time_limit)
    p.add_argument("--budgets", type=float, nargs="+", default=list(budgets))
    p.add_argument("--ratios", type=float, nargs="*", default=list(ratios))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=".", help="one JSON per model: DIR/<model>.json")
    p.add_argument("--table", nargs="+", metavar="JSON", help="print the tables of finished runs")


def each_table(paths, table, then=None) -> None:
    """Print ``table(rows)`` of each finished run's JSON; ``then(name, rows)`` after each."""
    for path in paths:
        with open(path) as f:
            rows = json.load(f)
        print(f"### {rows[0]['model']}\n\n{table(rows)}\n")
        if then is not None:
            then(rows[0]["model"], rows)


def each_model(args, run_model, table, then=None) -> None:
    """``run_model(name, args, save)`` for each of ``args.models``, its rows saved to
    ``args.out_dir/<name>.json`` after every row, its table printed; ``then(name, rows)`` after."""
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models:
        path = os.path.join(args.out_dir, f"{name}.json")

        def save(rows, path=path):
            with open(path, "w") as f:
                json.dump(rows, f, indent=1)

        rows = run_model(name, args, save)
        print(table(rows), flush=True)
        if then is not None:
            then(name, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_arguments(p, default_model="resnet18", time_limit=60.0, budgets=BUDGETS, ratios=RATIOS)
    p.add_argument("--solvers", nargs="+", default=list(SOLVERS))
    p.add_argument("--baselines-from", metavar="DIR", help="take the eager, block-checkpoint and PyTorch rows "
                   "from DIR/<model>.json of an earlier run with the same settings; measure memopt only")
    p.add_argument("--plot", metavar="DIR", help="a Pareto plot per model: DIR/train_remat_<model>.png (with "
                   "--table too)")
    p.add_argument("--torch-points", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    def plot_to_dir(name, rows):
        if args.plot:
            os.makedirs(args.plot, exist_ok=True)
            plot(rows, os.path.join(args.plot, f"train_remat_{name}.png"))

    if args.table:
        each_table(args.table, table, plot_to_dir)
        return 0
    import torch

    torch.set_num_threads(1)
    if args.torch_points:
        return _child(args)
    each_model(args, run_model, table, plot_to_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
