"""``memopt train-remat``: plan and run recomputation in a PyTorch training step
(:func:`memopt.adapters.training.plan`).

The model comes from a factory ``module:function`` called without arguments (the current
directory is on the import path, as for ``python -m``); the inputs are seeded random tensors of
the given shapes; the loss is the sum of the outputs or a cross-entropy against seeded random
labels over the output's last dimension. torch is imported when the command runs.
"""

from __future__ import annotations

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, fmt_count, print_table, write_json
from memopt.errors import OptionError

_LOSSES = ("sum", "cross-entropy")
_REALIZE = ("fx", "sac")
_COMPILE = {"none": False, "eager": True, "inductor": "inductor"}


def register(sub) -> None:
    t = sub.add_parser("train-remat", help="recomputation in a PyTorch training step, measured to the byte",
                       description="Capture one training step of a PyTorch model (AOTAutograd's joint graph), "
                                   "let memopt choose what the forward saves and the backward recomputes, run "
                                   "the step with that plan and measure its peak (docs/adapters.md). Needs "
                                   "torch (pip install 'memopt[torch]').")
    t.add_argument("factory", metavar="MODULE:FACTORY",
                   help="a function returning the torch.nn.Module, e.g. torchvision.models:resnet18")
    t.add_argument("--input-shape", action="append", required=True, metavar="N,C,...",
                   help="shape of one float32 input (repeat for several inputs)")
    t.add_argument("--loss", choices=_LOSSES, default="sum",
                   help="sum of the outputs (default) or cross-entropy against seeded random labels")
    g = t.add_mutually_exclusive_group(required=True)
    g.add_argument("--memory-ratio", metavar="R",
                   help="memory limit as a fraction (0, 1] of the step's peak without recomputation")
    g.add_argument("--memory-limit", metavar="BYTES", help="bytes above the parameters, buffers and inputs")
    g.add_argument("--cost-budget", metavar="FLOPS", help="extra FLOPs allowed: minimum peak")
    t.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help=f"recomputation solver time limit in seconds, 0 to {opt.MAX_SECONDS:.0e} (default 60)")
    t.add_argument("--seed", type=int, default=0, help="seed of the model's initialisation and the inputs")
    t.add_argument("--realize", choices=_REALIZE, default="fx",
                   help="how the step runs the plan: fx (two FX programs, default) or sac (selective activation "
                        "checkpointing of the model's blocks, its code unchanged)")
    t.add_argument("--blocks", metavar="NAME,NAME", default=None,
                   help="--realize sac: the submodules to checkpoint (default: the model's children, containers "
                        "opened)")
    t.add_argument("--compile", choices=_COMPILE, default="none",
                   help="also run the plan under torch.compile and measure that step: eager (the two programs "
                        "run eagerly, as aot_eager) or inductor (captured with Inductor's decompositions, both "
                        "programs compiled by Inductor and ordered by memopt's scheduler pass); --realize fx only")
    t.add_argument("--no-measure", action="store_true", help="do not run and measure the planned step")
    t.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    t.set_defaults(func=cmd_train_remat)


def _shape(text: str) -> tuple[int, ...]:
    parts = [p for p in str(text).replace("x", ",").split(",") if p.strip()]
    if not parts:
        raise OptionError(f"--input-shape {opt.show(text)} is not a shape (e.g. 8,3,64,64)")
    return tuple(opt.whole(p.strip(), "--input-shape", low=1, high=1 << 31) for p in parts)


def load_factory(spec: str):
    """The model ``module:function()`` names; one-line :class:`OptionError` for every failure
    to find or call it."""
    import importlib
    import os
    import sys

    module, sep, name = str(spec).partition(":")
    if not sep or not module or not name:
        raise OptionError(f"model {opt.show(spec)}: expected MODULE:FACTORY (e.g. torchvision.models:resnet18)")
    if module.split(".")[0] in ("torchvision", "transformers"):
        from memopt._torchvision import allow_import

        allow_import()
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise OptionError(f"model {spec}: cannot import module {module!r} ({exc})") from None
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise OptionError(f"model {spec}: module {module!r} has no function {name!r}")
    return factory()


def cmd_train_remat(args) -> int:
    from memopt.adapters import training
    from memopt.adapters.training import _torch

    tl = opt.seconds(args.time_limit, "--time-limit")
    shapes = [_shape(s) for s in args.input_shape]
    kw = {}
    if args.memory_ratio is not None:
        kw["memory_ratio"] = opt.decimal(args.memory_ratio, "--memory-ratio", low=0, low_open=True, high=1)
    elif args.memory_limit is not None:
        kw["memory_limit"] = opt.whole(args.memory_limit, "--memory-limit")
    else:
        kw["cost_budget"] = opt.whole(args.cost_budget, "--cost-budget")
    torch = _torch()
    torch.manual_seed(args.seed)
    model = load_factory(args.factory)
    if not isinstance(model, torch.nn.Module):
        raise OptionError(f"model {args.factory}: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    model.train()
    inputs = tuple(torch.randn(s) for s in shapes)
    targets, loss_fn = (), None
    if args.loss == "cross-entropy":
        with torch.no_grad():
            out = model(*inputs)
        if not isinstance(out, torch.Tensor) or out.dim() < 1:
            raise OptionError(f"--loss cross-entropy needs a model returning one tensor of class scores, "
                              f"{args.factory} returns {type(out).__name__}")
        targets = (torch.randint(0, out.shape[-1], out.shape[:-1]),)
        loss_fn = torch.nn.functional.cross_entropy
    blocks = None
    if args.blocks is not None:
        if args.realize != "sac":
            raise OptionError("--blocks is for --realize sac")
        blocks = [b.strip() for b in str(args.blocks).split(",") if b.strip()]
        if not blocks:
            raise OptionError(f"--blocks {opt.show(args.blocks)} names no submodule")
    compiled = _COMPILE[args.compile]
    if compiled and args.realize != "fx":
        raise OptionError(f"--compile {args.compile} runs the plan's two programs: --realize fx")
    rep = training.plan(model, inputs, loss_fn, targets=targets, time_limit=tl, measure_step=not args.no_measure,
                        seed=args.seed, realize=args.realize, blocks=blocks, compiled=compiled, **kw)
    d = rep.to_dict()
    d["model"] = args.factory
    cp = None
    if compiled and not args.no_measure and rep.modelled_peak is not None:
        cp = rep.measure_compiled(rep.compile(), *inputs, *targets)
        d["compiled"] = dict(cp.to_dict(), backend=args.compile)
    if args.json:
        write_json(d)
        return 0
    print(f"{args.factory}: {d['ops']} ops, parameters, buffers and inputs {fmt_bytes(d['resident_bytes'])}")
    realized = ("two FX programs" if rep.realize == "fx" else
                f"checkpointed blocks: {len(d.get('blocks', []))}, left out: {len(d.get('blocks_left_out', []))}")
    rows = [["status", rep.status, f"memopt.remat method {d['method']}, {rep.seconds:.1f} s in all"],
            ["realize", rep.realize, realized],
            ["baseline_peak", fmt_bytes(rep.baseline_peak), "captured order, no recomputation (modelled)"],
            ["memory_limit", fmt_bytes(rep.memory_limit), "above parameters, buffers, inputs"],
            ["modelled_peak", fmt_bytes(rep.modelled_peak), "the realized step (programs or checkpoints)"],
            ["peak", fmt_bytes(rep.peak), "measured: CPU allocator, one step after a warm-up step"],
            ["extra_flops", _count(rep.extra_flops), "counted FLOPs of the recomputations"],
            ["reruns_without_flops", _count(rep.reruns_without_flops), "re-runs of ops without a FLOP formula"],
            ["lower_bound", fmt_bytes(rep.lower_bound) if rep.cost_budget is not None else _count(rep.lower_bound),
             "on extra FLOPs at this limit" if rep.cost_budget is None else "on the peak at this budget"],
            ["differences", ", ".join(f"{x['cause']} {x['bytes']:+d} B" for x in d.get("differences", [])) or "-",
             "measured - modelled, itemised"],
            ["saved", str(len(rep.saved)), "forward values kept for the backward"],
            ["recomputed", str(len(rep.recomputed)), ", ".join(rep.recomputed[:8])
             + (" ..." if len(rep.recomputed) > 8 else "")]]
    if cp is not None:
        rows.append(["compiled peak", fmt_bytes(cp.peak), f"measured under torch.compile ({args.compile}): "
                     + ", ".join(f"{c} {b:+d} B" for c, b in cp.differences)])
    print_table(rows, align="lrl")
    return 0


def _count(x) -> str:
    """An exact count (int or Fraction) as text."""
    return fmt_count(x) if x is None or int(x) == x else str(x)
