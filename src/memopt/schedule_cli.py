"""``memopt schedule``, ``memopt bound`` and ``memopt verify``."""

from __future__ import annotations

import json
import sys
import time


def register(sub) -> None:
    from memopt.schedule.api import METHODS

    p = sub.add_parser("schedule", help="find a minimum-peak operator order",
                       description="Find an operator order with the lowest peak memory, a lower bound, "
                                   "and whether optimality is certified.")
    p.add_argument("file", help="graph file: memopt-graph / memopt-program JSON or node-link JSON")
    p.add_argument("--method", default="auto", choices=sorted(METHODS),
                   help="scheduler (default: auto = best of all, then bounds and exact search)")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="time limit in seconds (default 10)")
    p.add_argument("-o", "--output", metavar="PLAN", help="write the plan (memopt-plan JSON) here")
    p.add_argument("--certificate", metavar="FILE", help="write a self-contained certificate JSON here")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomized searches (default 0)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(func=cmd_schedule)

    b = sub.add_parser("bound", help="lower bounds on the peak of any order")
    b.add_argument("file")
    b.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bound)

    v = sub.add_parser("verify", help="independently check a plan (and its certificate) against a graph")
    v.add_argument("file", help="the graph file the plan is for")
    v.add_argument("plan", help="a memopt-plan JSON (from `memopt schedule -o`) or a certificate JSON")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)


def _fmt_bytes(n: int) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    x, k = float(n), 0
    while abs(x) >= 1024 and k < len(units) - 1:
        x /= 1024
        k += 1
    return f"{n} B" if k == 0 else f"{n} B ({x:.2f} {units[k]})"


def cmd_schedule(args) -> int:
    from memopt.io import load_instance, plan_to_doc
    from memopt.schedule.api import schedule_instance

    start = time.perf_counter()
    inst = load_instance(args.file)
    res = schedule_instance(inst, method=args.method, time_limit=args.time_limit, seed=args.seed,
                            progress=not args.json)
    seconds = time.perf_counter() - start
    order_labels = [inst.labels[int(i)] for i in res.order]
    plan = plan_to_doc(inst, res.order, peak=res.peak, lower_bound=res.lower_bound, status=res.status,
                       method=res.method)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            json.dump(plan, fh)
            fh.write("\n")
    if args.certificate:
        with open(args.certificate, "w", encoding="utf-8") as fh:
            json.dump(res.certificate, fh)
            fh.write("\n")
    if args.json:
        out = {"instance": inst.name, "file": str(args.file), "ops": inst.num_ops, "order": order_labels,
               "peak": res.peak, "lower_bound": res.lower_bound, "gap": res.peak - res.lower_bound,
               "status": res.status, "method": res.method, "seconds": round(seconds, 4),
               "baselines": res.baselines, "bounds": res.bounds, "verified": res.verified}
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    rows = [("instance", f"{inst.name} ({inst.num_ops} ops)"), ("method", res.method),
            ("peak", _fmt_bytes(res.peak)), ("lower bound", _fmt_bytes(res.lower_bound)),
            ("gap", _fmt_bytes(res.peak - res.lower_bound)), ("status", res.status),
            ("verified", "yes (independent checker)" if res.verified else "NO"),
            ("seconds", f"{seconds:.3f}")]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    print()
    print("baselines (peak bytes):")
    for name, val in sorted(res.baselines.items(), key=lambda kv: kv[1]):
        print(f"  {name:<14} {val:>20}  {'+' if val > res.peak else ' '}{(val - res.peak) / max(res.peak, 1):7.2%}")
    print("lower bounds (bytes):")
    for name, val in sorted(res.bounds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<14} {val:>20}")
    shown = order_labels if len(order_labels) <= 40 else order_labels[:40] + ["..."]
    print("order:", " ".join(str(x) for x in shown))
    if args.output:
        print(f"plan written to {args.output}")
    return 0


def cmd_bound(args) -> int:
    from memopt.io import load_instance
    from memopt.schedule.api import compute_bounds

    start = time.perf_counter()
    inst = load_instance(args.file)
    bounds = compute_bounds(inst, time_limit=args.time_limit)
    seconds = time.perf_counter() - start
    best = max(bounds.values())
    if args.json:
        json.dump({"instance": inst.name, "lower_bound": best, "bounds": bounds, "seconds": round(seconds, 4)},
                  sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"instance     {inst.name} ({inst.num_ops} ops)")
    print(f"lower bound  {_fmt_bytes(best)}")
    for name, val in sorted(bounds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<14} {val:>20}")
    print(f"seconds      {seconds:.3f}")
    return 0


def cmd_verify(args) -> int:
    from memopt.io import load_instance
    from memopt.io._json import read_json
    from memopt.schedule.api import verify_plan_document

    inst = load_instance(args.file)
    doc = read_json(args.plan)
    report = verify_plan_document(inst, doc, where=str(args.plan))
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        for k, v in report.items():
            print(f"{k:<12} {v}")
    return 0 if report["ok"] else 1
