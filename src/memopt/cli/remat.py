"""``memopt remat`` (capped selective recomputation) and ``memopt reduce`` (hardness instances).

``memopt verify GRAPH PLAN`` checks the plans ``memopt remat -o`` writes (the dispatch is in
:mod:`memopt.cli.schedule`; the checks in :mod:`memopt.remat.verify`). The parser imports
no solver; the recomputation API is imported when a command runs.
"""

from __future__ import annotations

import argparse

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, fmt_seconds, print_table, write_json
from memopt.errors import OptionError

_QUESTION_HELP = "exactly one of --memory-limit, --memory-ratio, --cost-budget, --pareto"


def _method_names() -> list[str]:
    from memopt.remat.registry import method_names

    return ["auto", *method_names()]


def _methods_epilog() -> str:
    from memopt.remat.registry import methods

    lines = ["methods (--method):", "  auto       the no-recomputation optimum, the heuristic, then CP-SAT (default)"]
    lines += [f"  {m.name:<9}  {m.summary}" for m in methods()]
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("remat", help="capped selective recomputation: least extra compute or least peak",
                       description="Recompute values instead of keeping them: the least extra compute under a "
                                   "memory limit, the least peak under a compute budget, or the frontier. "
                                   "Each op runs at most 1 + K times.",
                       epilog=_methods_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="graph file: memopt-graph JSON or a published node-link graph")
    q = p.add_mutually_exclusive_group(required=True)
    q.add_argument("--memory-limit", metavar="BYTES", help="least extra cost with peak <= BYTES")
    q.add_argument("--memory-ratio", metavar="R",
                   help="least extra cost with peak <= R x the optimal no-recomputation peak")
    q.add_argument("--cost-budget", metavar="C", help="least peak with extra cost <= C")
    q.add_argument("--pareto", action="store_true", help="the frontier between extra cost and peak")
    p.add_argument("--cap", type=int, default=1, metavar="K", help="recomputations per op (default 1)")
    p.add_argument("--method", default="auto", choices=_method_names(), metavar="METHOD",
                   help="auto (default), heuristic, cpsat or mip; see below")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                   help=f"time limit in seconds, 0 to {opt.MAX_SECONDS:.0e} (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the solvers' searches (default 0)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="processes auto may run at once: 2 runs the cost bound beside the heuristic "
                        "(default: 2 where two cores are free to this process, else 1)")
    p.add_argument("-o", "--output", metavar="PLAN", help="write the plan (memopt-remat-plan JSON) here")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(func=cmd_remat)

    r = sub.add_parser("reduce", help="write a hardness instance of capped recomputation",
                       description="Construct a capped-recomputation instance from a knapsack or 3-PARTITION "
                                   "instance (memopt.reductions) and write it as memopt-graph JSON.")
    rsub = r.add_subparsers(dest="reduce_command", metavar="SOURCE", parser_class=type(r))
    rsub.required = True
    k = rsub.add_parser("knapsack", help="0/1 knapsack -> recomputation on a series-parallel graph",
                        description="Minimum extra cost under the printed memory limit = sum of values - "
                                    "the knapsack optimum (proofs/remat_knapsack.md).")
    k.add_argument("--weights", required=True, metavar="W1,W2,...", help="item weights (integers >= 0)")
    k.add_argument("--values", required=True, metavar="P1,P2,...", help="item values (integers >= 0)")
    k.add_argument("--capacity", required=True, metavar="W", help="knapsack capacity (integer >= 0)")
    k.add_argument("-o", "--output", required=True, metavar="GRAPH", help="write the memopt-graph JSON here")
    k.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    k.set_defaults(func=cmd_reduce_knapsack)
    t = rsub.add_parser("3partition", help="3-PARTITION -> the decision version, any fixed cap K >= 1",
                        description="A plan with peak <= the printed limit and extra cost <= the printed "
                                    "budget exists iff the numbers split into triples of equal sum "
                                    "(proofs/remat_np_hardness.md).")
    t.add_argument("--numbers", required=True, metavar="A1,A2,...", help="3m positive integers")
    t.add_argument("--cap", type=int, default=1, metavar="K", help="recomputation cap k >= 1 (default 1)")
    t.add_argument("--clocks", choices=("inputs", "source"), default="inputs",
                   help="clocks as graph inputs (a forest, default) or written by one op 'start' "
                        "(no graph inputs, treewidth 2)")
    t.add_argument("-o", "--output", required=True, metavar="GRAPH", help="write the memopt-graph JSON here")
    t.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    t.set_defaults(func=cmd_reduce_3partition)


def _bytes_option(text: str, option: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise OptionError(f"{option} must be a whole number of bytes, got {text!r}") from None
    return opt.integer(value, option, low=0, high=2**62 - 1)


def _budget_option(text: str, option: str):
    from memopt.io._json import exact_from_text

    value = exact_from_text(text, option, OptionError)   # exact: 0.1 is 1/10; 1e-999999999 refused
    if value < 0 or value >= 2**62:
        raise OptionError(f"{option} must be a number in [0, 2**62), got {text!r}")
    return int(value) if value.denominator == 1 else value


def _int_list(text: str, option: str) -> list[int]:
    try:
        out = [int(x) for x in str(text).replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise OptionError(f"{option} must be comma-separated integers, got {text!r}") from None
    if not out:
        raise OptionError(f"{option} is empty")
    return out


def cmd_remat(args) -> int:
    time_limit = opt.seconds(args.time_limit, "--time-limit")
    from memopt.remat.model_common import MAX_CAP

    opt.integer(args.cap, "--cap", low=0, high=MAX_CAP)
    opt.integer(args.seed, "--seed", low=0, high=2**63 - 1)
    if args.jobs is not None:
        opt.integer(args.jobs, "--jobs", low=1, high=opt.MAX_JOBS)
    if args.pareto and args.output:
        raise OptionError("-o/--output writes one plan; it cannot be combined with --pareto "
                          "(use --json for every point)")
    opt.not_an_input({"-o/--output": args.output}, [args.file])
    kw = {}
    if args.memory_limit is not None:
        kw["memory_limit"] = _bytes_option(args.memory_limit, "--memory-limit")
    elif args.memory_ratio is not None:
        kw["memory_ratio"] = opt.ratio(args.memory_ratio, "--memory-ratio")
    elif args.cost_budget is not None:
        kw["cost_budget"] = _budget_option(args.cost_budget, "--cost-budget")
    else:
        kw["pareto"] = True
    from memopt.io import load_instance
    from memopt.remat.api import remat

    inst = load_instance(args.file)
    if inst.graph is None:
        raise OptionError(f"{args.file}: recomputation needs a tensor graph, not a statement program")
    res = remat(inst.graph, cap=args.cap, method=args.method, time_limit=time_limit, seed=args.seed,
                jobs=args.jobs, **kw)
    head = {"instance": inst.name, "file": str(args.file), "ops": inst.num_ops}
    if args.output:
        if res.plan is None:
            import sys

            print(f"memopt: note: no plan written to {args.output}: the status is {res.status}", file=sys.stderr)
        else:
            from memopt.remat.verify import remat_plan_doc

            _write_json_file(args.output, remat_plan_doc(inst, res))
    if args.json:
        write_json({**head, **res.to_dict(inst.graph, inst.labels)})
        return 0
    if kw.get("pareto"):
        print_table([("instance", f"{inst.name} ({inst.num_ops} ops)"), ("cap", args.cap),
                     ("frontier", "complete" if res.complete else "partial (time limit)"),
                     ("status", res.status), ("seconds", fmt_seconds(res))])
        print()
        print_table([(_cost_text(p.extra_cost), int(p.peak), p.status)
                     for p in res.points], header=("extra cost", "peak (bytes)", "status"), align="rrl", indent=2)
        return 0
    rows = [("instance", f"{inst.name} ({inst.num_ops} ops)"), ("question", res.question), ("cap", args.cap)]
    if res.question == "min_cost":
        rows.append(("memory limit", fmt_bytes(res.memory_limit)))
    else:
        rows.append(("cost budget", _cost_text(res.cost_budget)))
    rows += [("status", res.status), ("method", res.method)]
    if res.status == "unknown" and res.stats.get("reason"):
        rows.append(("reason", res.stats["reason"]))
    if res.plan is not None:
        rows += [("peak", fmt_bytes(res.peak)), ("extra cost", _cost_text(res.extra_cost))]
    rows.append(("lower bound (peak)", fmt_bytes(res.lower_bound)))
    if res.question == "min_cost" and res.cost_lower_bound is not None:
        rows.append(("lower bound (cost)", _cost_text(res.cost_lower_bound)))
    if res.plan is not None:
        rows.append(("runs", f"{int((res.plan.kind == 0).sum())} ({int((res.plan.kind == 0).sum()) - inst.num_ops} "
                              "recomputations)"))
    rows.append(("seconds", fmt_seconds(res)))
    print_table(rows)
    if args.output and res.plan is not None:
        print(f"plan written to {args.output}")
    return 0


def _cost_text(x) -> str:
    """An exact cost as text, exactly as the JSON output writes it (``0.1``, ``1/3``, ``7``)."""
    from memopt.io._json import exact_json

    return str(exact_json(x))


def _write_json_file(path: str, doc) -> None:
    import json

    from memopt.cli._output import jsonable

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(jsonable(doc), fh, allow_nan=False)
        fh.write("\n")


def cmd_reduce_knapsack(args) -> int:
    from memopt.reductions.knapsack import KnapsackInstance, knapsack_to_remat

    weights = _int_list(args.weights, "--weights")
    values = _int_list(args.values, "--values")
    if len(weights) != len(values):
        raise OptionError(f"--weights has {len(weights)} items but --values has {len(values)}")
    capacity = _bytes_option(args.capacity, "--capacity")
    opt.not_an_input({"-o/--output": args.output}, [])
    red = knapsack_to_remat(KnapsackInstance(tuple(weights), tuple(values), capacity))
    return _write_reduction(args, red.graph, {"source": "knapsack", "memory_limit": red.memory_limit,
                                              "cost_offset": red.offset, "cap": 1,
                                              "meaning": "min extra cost under memory_limit = cost_offset - "
                                                         "knapsack optimum (any cap >= 1)"})


def cmd_reduce_3partition(args) -> int:
    from memopt.reductions.three_partition import ThreePartitionInstance, three_partition_to_remat

    numbers = _int_list(args.numbers, "--numbers")
    opt.integer(args.cap, "--cap", low=1, high=64)
    opt.not_an_input({"-o/--output": args.output}, [])
    red = three_partition_to_remat(ThreePartitionInstance(tuple(numbers)), cap=args.cap, clocks=args.clocks)
    return _write_reduction(args, red.graph, {"source": "3partition", "memory_limit": red.memory_limit,
                                              "cost_budget": red.cost_budget, "cap": red.cap,
                                              "clocks": args.clocks,
                                              "meaning": "a plan with peak <= memory_limit and extra cost <= "
                                                         "cost_budget exists iff the numbers 3-partition"})


def _write_reduction(args, graph, info: dict) -> int:
    from memopt.io import save_graph

    save_graph(graph, args.output)
    out = {"output": str(args.output), "ops": graph.num_ops, "tensors": graph.num_tensors, **info}
    if args.json:
        write_json(out)
        return 0
    print_table([(k.replace("_", " "), v) for k, v in out.items()])
    return 0
