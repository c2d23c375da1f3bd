"""Recomputation in a training step compiled by Inductor: memopt's plan, compiled and ordered
by memopt's Inductor adapter, against the stock ``torch.compile`` step.

For each model of ``train_remat.py`` (same builders, loss and seed):

* **stock Inductor**: ``torch.compile(step, backend="inductor", fullgraph=True, dynamic=False)``
  (AOTAutograd with Inductor's decompositions, joint-graph passes and min-cut partitioner, each
  program compiled by Inductor) at ``torch._functorch.config.activation_memory_budget`` in
  ``--budgets`` (default solver), with Inductor's defaults and again with
  ``layout_optimization=False`` (as memopt's programs are compiled,
  ``training_plan.INDUCTOR_OPTIONS``); the forward and backward graphs handed to Inductor are kept
  (``compile_fx(..., inner_compile=...)``) and their FLOPs counted;
* **memopt**: one capture with Inductor's decompositions
  (``training.capture(..., decompositions="inductor")``), then for each question (``--ratios`` of
  its modelled no-recomputation peak, and the stock points' measured peaks as memory limits)
  ``training.plan(..., compiled="inductor")``; the step ``rep.compile()`` runs the plan's two
  programs compiled by Inductor with memopt's scheduler pass (``compile_path_options``).

Every point: measured peak of one step after a warm-up step (CPU allocator bytes above the
step's start; ``.grad`` set to ``None`` first), extra FLOPs counted on the programs' FX graphs
minus the captured joint graph's, CPU seconds of one step, compile seconds (the warm-up step).
memopt's points add the modelled peak, the measured peak itemised by program
(``TrainingPlan.measure_compiled``: forward program, held between the programs, backward
program, unattributed), whether memopt's scheduler pass adopted its order in each program, the
FLOP lower bound, and the loss and gradients against the stock step at budget 1.0 compiled as
memopt's programs are (``layout_optimization=False``; one step each from the same weights, the
generator seeded alike): bitwise or the largest difference (absolute, and relative to the
largest gradient element of the same parameter).

    python benchmarks/train_inductor.py --models vit --out-dir DIR
    python benchmarks/train_inductor.py --table DIR/vit.json

One JSON per model (``DIR/<model>.json``), rewritten after every row.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from train_remat import _cpu_seconds, _fresh, _load, _num, _utc, compiled_step, each_model, each_table, graph_flops, \
    loss_fn, model_arguments, start_rows  # noqa: E402

BUDGETS = (1.0, 0.5)
RATIOS = (0.9, 0.7)


def _seeded_step(step, model, inputs, targets, seed: int):
    import torch

    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = step(*inputs, *targets)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def _compare(loss, grads, ref) -> dict:
    import torch

    ref_loss, ref_grads = ref
    pairs = [(g, h) for g, h in zip(grads, ref_grads) if h is not None]
    diff = max([float((g - h).abs().max()) for g, h in pairs if g is not None] + [0.0])
    rel = max([float((g - h).abs().max() / h.abs().max()) for g, h in pairs if g is not None and h.abs().max() > 0]
              + [0.0])
    return dict(loss_equal=bool(torch.equal(loss, ref_loss)), loss_diff=float((loss - ref_loss).abs()),
                grads_equal=sum(1 for g, h in pairs if g is not None and torch.equal(g, h)), grads=len(pairs),
                max_grad_diff=diff, max_rel_grad_diff=rel)


def stock_point(name: str, args, budget: float, ref=None, layout: bool = True) -> tuple[dict, tuple]:
    import torch
    import torch._functorch.config as fconfig
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    graphs = []

    def keep(gm, example_inputs, **kwargs):
        graphs.append(copy.deepcopy(gm))
        return compile_fx_inner(gm, example_inputs, **kwargs)

    def backend(gm, example_inputs):
        return compile_fx(gm, example_inputs, inner_compile=keep)

    # no compile caches: a program served from one is never handed to ``keep`` (no FLOPs counted)
    patches = [fconfig.patch(activation_memory_budget=budget, enable_autograd_cache=False),
               torch._inductor.config.patch(layout_optimization=layout, fx_graph_cache=False)]
    measures, step, (model, inputs, targets) = compiled_step(name, args, backend, patches)
    with patches[0], patches[1]:
        got = _seeded_step(step, model, inputs, targets, args.seed)
    if len(graphs) != 2:
        raise RuntimeError(f"Inductor compiled {len(graphs)} programs, expected a forward and a backward")
    flops, _ = graph_flops(*graphs)
    row = dict(who="inductor", budget=budget, layout_optimization=layout, **measures, flops=flops, graphs=len(graphs))
    if ref is not None:
        row.update(_compare(*got, ref))
    return row, got


def memopt_point(name: str, tg, args, joint_flops: int, ref, **question) -> dict:
    import torch

    from memopt.adapters import training

    model, inputs, targets = _fresh(name, args)
    torch._dynamo.reset()
    t0 = time.perf_counter()
    rep = training.plan(model, inputs, loss_fn, targets=targets, time_limit=args.time_limit, captured=tg,
                        measure_step=False, compiled="inductor", **question)
    plan_s = time.perf_counter() - t0
    point = dict(who="memopt", **question, limit=rep.memory_limit, status=rep.status,
                 modelled_peak=rep.modelled_peak, plan_flops=rep.extra_flops, flop_lower_bound=_num(rep.lower_bound),
                 plan_s=plan_s, recomputed=len(rep.recomputed), saved=len(rep.saved))
    if rep.modelled_peak is None:
        return point
    step = rep.compile()
    t0 = time.perf_counter()
    with torch._inductor.config.patch(fx_graph_cache=False):   # so that the scheduler pass runs
        cp = rep.measure_compiled(step, *inputs, *targets)   # its warm-up step compiles
    point["compile_and_two_steps_s"] = time.perf_counter() - t0
    flops, _ = graph_flops(rep._programs.forward, rep._programs.backward)

    def run():
        step(*inputs, *targets).backward()

    point.update(peak=cp.peak, phases=list(cp.phases), modelled_phases=list(cp.modelled_phases),
                 differences={c: b for c, b in cp.differences}, flops=flops, extra_flops=flops - joint_flops,
                 adopted={k: (None if d is None else bool(d.adopted)) for k, d in cp.pass_decisions},
                 cpu_s=_cpu_seconds(run))
    point.update(_compare(*_seeded_step(step, model, inputs, targets, args.seed), ref))
    return point


def run_model(name: str, args, save) -> list[dict]:
    from memopt.adapters import training

    rows, add = start_rows(name, args, save)

    ref = None   # the stock step compiled as memopt's programs are (no layout optimization), at budget 1.0
    for layout in (False, True):
        for budget in sorted(args.budgets, reverse=True):
            try:
                row, got = stock_point(name, args, budget, ref, layout)
            except Exception as exc:  # noqa: BLE001 - a failing configuration is a row, not the end
                row, got = dict(who="inductor", budget=budget, layout_optimization=layout,
                                error=f"{type(exc).__name__}: {str(exc)[:200]}"), None
            ref = ref or got
            add(row)
    model, inputs, targets = _fresh(name, args)
    t = time.perf_counter()
    tg = training.capture(model, inputs, loss_fn, targets=targets, decompositions="inductor")
    joint_flops, _ = graph_flops(tg.module)
    add(dict(who="joint graph", flops=joint_flops, capture_s=time.perf_counter() - t,
             modelled_peak=tg.modelled_peak(), ops=tg.graph.num_ops))
    questions = [dict(memory_ratio=r) for r in args.ratios]
    questions += [dict(memory_limit=peak) for peak in sorted({r["peak"] for r in rows
                                                              if r.get("who") == "inductor" and "peak" in r},
                                                             reverse=True)]
    for q in questions:
        try:
            add(memopt_point(name, tg, args, joint_flops, ref, **q))
        except Exception as exc:  # noqa: BLE001 - reported as the row's error
            add(dict(who="memopt", **q, error=f"{type(exc).__name__}: {str(exc)[:300]}"))
    rows[0].update(end_utc=_utc(), end_load=_load())
    save(rows)
    return rows


def _cells(r: dict, joint: dict, reference: float) -> list[str]:
    if r["who"] == "inductor":
        q = f"budget {r['budget']}" + ("" if r.get("layout_optimization", True) else ", no layout opt.")
    else:
        q = f"ratio {r['memory_ratio']}" if "memory_ratio" in r else f"limit {r['memory_limit']:,}"
    if "error" in r:
        return [r["who"], q, "error: " + r["error"][:80]] + [""] * 8
    modelled = f"{r['modelled_peak']:,}" if r.get("modelled_peak") is not None else "-"
    if "peak" not in r:
        return [r["who"], q, r.get("status", "-"), modelled] + ["-"] * 7
    extra = f"{(r['flops'] - joint['flops']) / 1e9:.3f}" if joint else "-"
    if r.get("flop_lower_bound") is not None:
        extra += f" ({int(r['flop_lower_bound']) / 1e9:.3f})"
    items = " / ".join(f"{v:+,}" for v in r["differences"].values()) if r.get("differences") else "-"
    adopted = "/".join({None: "cached", True: "yes", False: "no"}[v] for v in r["adopted"].values()) \
        if r.get("adopted") else "-"
    if "loss_equal" in r:
        num = "bitwise" if r["loss_equal"] and r["grads_equal"] == r["grads"] else \
            f"loss {r['loss_diff']:.1e}, grads {r['max_grad_diff']:.1e} ({r.get('max_rel_grad_diff', 0):.1e} rel.)"
    else:
        num = "(reference)" if r["who"] == "inductor" and r["budget"] == reference and \
            not r.get("layout_optimization", True) else "-"
    compile_s = r.get("compile_s", r.get("compile_and_two_steps_s", 0.0))
    return [r["who"], q, r.get("status", "-"), modelled, f"{r['peak']:,}", items, extra, adopted, num,
            f"{r['cpu_s']:.2f}", f"{compile_s:.1f}"]


def table(rows: list[dict]) -> str:
    """Markdown table of one model's rows."""
    joint = next((r for r in rows if r["who"] == "joint graph"), {})
    reference = next((r["budget"] for r in rows if r["who"] == "inductor" and "loss_equal" not in r), None)
    out = ["| who | question | status | modelled | measured peak | fw / between / bw / other | extra GFLOP "
           "(bound) | pass adopted fw/bw | loss, grads vs stock | step CPU s | compile s |",
           "|---|---|---|---:|---:|---|---:|---|---|---:|---:|"]
    out += ["| " + " | ".join(_cells(r, joint, reference)) + " |" for r in rows if r["who"] in ("inductor", "memopt")]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_arguments(p, default_model="vit", time_limit=30.0, budgets=BUDGETS, ratios=RATIOS)
    args = p.parse_args(argv)
    if args.table:
        each_table(args.table, table)
        return 0
    import torch

    torch.set_num_threads(1)
    each_model(args, run_model, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
