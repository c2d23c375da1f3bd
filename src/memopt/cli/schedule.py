"""``memopt schedule``, ``memopt bound`` and ``memopt verify``.

The parser is built from the method registry (:mod:`memopt.schedule.registry`), which
imports no solver; the scheduling API is imported when a command runs.
"""

from __future__ import annotations

import argparse
import time

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, fmt_seconds, print_table, verdict_on_failure, write_json, write_json_file
from memopt.errors import CertificateError, OptionError

#: method kinds in the order ``memopt schedule --help`` lists them
_KIND_TITLES = (("portfolio", "portfolios"), ("baseline", "baselines"), ("class", "optimal on a graph class"),
                ("heuristic", "heuristics"), ("anytime", "anytime searches"), ("exact", "exact solvers"))


def _methods_epilog() -> str:
    from memopt.schedule.registry import methods

    lines = ["methods (--method):"]
    width = max((len(m.name) for m in methods()), default=0)
    for kind, title in _KIND_TITLES:
        group = methods(kind)
        if group:
            lines.append(f"  {title}:")
            lines.extend(f"    {m.name:<{width}}  {m.summary}" for m in group)
    return "\n".join(lines)


def register(sub) -> None:
    from memopt.schedule.registry import method_names

    p = sub.add_parser("schedule", help="find a minimum-peak operator order",
                       description="Find an operator order with the lowest peak memory, a lower bound, "
                                   "and whether optimality is certified.",
                       epilog=_methods_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="graph file: memopt-graph / memopt-program JSON or node-link JSON")
    p.add_argument("--method", default="auto", choices=method_names(), metavar="METHOD",
                   help="scheduling method (default: auto); see the list below")
    _time_limit(p)
    p.add_argument("-o", "--output", metavar="PLAN", help="write the plan (memopt-plan JSON) here")
    p.add_argument("--certificate", metavar="FILE", help="write a self-contained certificate JSON here")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomized searches (default 0)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.set_defaults(func=cmd_schedule)

    b = sub.add_parser("bound", help="lower bounds on the peak of any order",
                       description="Lower bounds on the peak memory of every order of a graph.")
    b.add_argument("file", help="graph file: memopt-graph / memopt-program JSON or node-link JSON")
    _time_limit(b)
    b.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    b.set_defaults(func=cmd_bound)

    v = sub.add_parser("verify", help="independently check a plan or certificate against a graph",
                       description="Check every claim of a plan or certificate with the independent "
                                   "checker: exit 0 only if all of them hold, else one line and exit 2.")
    v.add_argument("file", help="the graph file the plan is for")
    v.add_argument("plan", help="a memopt-plan JSON (from `memopt schedule -o`) or a certificate JSON")
    v.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    v.set_defaults(func=cmd_verify)


def _time_limit(parser) -> None:
    parser.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                        help=f"time limit in seconds, 0 to {opt.MAX_SECONDS:.0e} (default 10)")


def _load(path: str):
    from memopt.io import load_instance

    return load_instance(path)


def _plan_doc(inst, res) -> dict:
    from memopt.io import plan_to_doc

    # the certificate goes in so that `memopt verify` can check every claim of the plan
    return plan_to_doc(inst, res.order, peak=res.peak, lower_bound=res.lower_bound, status=res.status,
                       method=res.method, certificate=res.certificate)


def cmd_schedule(args) -> int:
    time_limit = opt.seconds(args.time_limit, "--time-limit")
    opt.integer(args.seed, "--seed", low=0, high=2**63 - 1)
    opt.not_an_input({"-o/--output": args.output, "--certificate": args.certificate}, [args.file])
    from memopt.schedule.api import schedule_instance

    inst = _load(args.file)
    res = schedule_instance(inst, method=args.method, time_limit=time_limit, seed=args.seed,
                            progress=not args.json)
    if args.certificate and res.certificate is None:
        raise OptionError(f"--certificate {args.certificate}: no certificate was checked within the time limit "
                          f"({res.stats.get('verification', 'not verified')}); give a larger --time-limit")
    if args.output:
        write_json_file(args.output, _plan_doc(inst, res), "-o")
    if args.certificate:
        write_json_file(args.certificate, res.certificate, "--certificate")
    if args.json:
        write_json({"instance": inst.name, "file": str(args.file), "ops": inst.num_ops,
                    **res.to_dict(labels=inst.labels)})
        return 0
    print_table([
        ("instance", f"{inst.name} ({inst.num_ops} ops)"), ("method", res.method),
        ("peak", fmt_bytes(res.peak)), ("lower bound", fmt_bytes(res.lower_bound)),
        ("gap", fmt_bytes(res.peak - res.lower_bound)), ("status", res.status),
        ("verified", "yes (independent checker)" if res.verified
         else "NO (" + res.stats.get("verification", "not checked") + ")"),
        ("seconds", fmt_seconds(res)),
    ])
    print()
    peak = max(int(res.peak), 1)
    print_table([(name, int(val), f"{'+' if val > res.peak else ' '}{(val - res.peak) / peak:.2%}")
                 for name, val in sorted(res.baselines.items(), key=lambda kv: kv[1])],
                header=("baseline", "peak (bytes)", "vs plan"), align="lrr", indent=2)
    print()
    _print_bounds(res.bounds)
    labels = [str(inst.labels[int(i)]) for i in res.order]
    shown = labels if len(labels) <= 40 else labels[:40] + ["..."]
    print("order:", " ".join(shown))
    if args.output:
        print(f"plan written to {args.output}")
    if args.certificate:
        print(f"certificate written to {args.certificate}")
    return 0


def _print_bounds(bounds: dict) -> None:
    print_table([(name, int(val)) for name, val in sorted(bounds.items(), key=lambda kv: -kv[1])],
                header=("lower bound", "bytes"), align="lr", indent=2)


def _bound_values(bounds) -> dict:
    """``{name: bytes}`` from compute_bounds' answer (a dict of ints, or of/over Bound objects)."""
    if isinstance(bounds, dict):
        return {str(k): int(getattr(v, "value", v)) for k, v in bounds.items()}
    return {b.name: int(b.value) for b in bounds}


def cmd_bound(args) -> int:
    time_limit = opt.seconds(args.time_limit, "--time-limit")
    from memopt.schedule.api import compute_bounds

    start = time.perf_counter()
    inst = _load(args.file)
    bounds = _bound_values(compute_bounds(inst, time_limit=time_limit))
    seconds = time.perf_counter() - start
    best = max(bounds.values(), default=0)
    if args.json:
        write_json({"instance": inst.name, "file": str(args.file), "ops": inst.num_ops, "lower_bound": best,
                    "bounds": bounds, "seconds": round(seconds, 6)})
        return 0
    print_table([("instance", f"{inst.name} ({inst.num_ops} ops)"), ("lower bound", fmt_bytes(best)),
                 ("seconds", f"{seconds:.3f}")])
    print()
    _print_bounds(bounds)
    return 0


def cmd_verify(args) -> int:
    with verdict_on_failure(args.json, {"file": str(args.file), "plan": str(args.plan)}):
        report = _verify_report(args)
    if args.json:
        write_json({"ok": True, **report})
        return 0
    print_table([(k, _cell(k, v)) for k, v in report.items()])
    return 0


def _verify_report(args) -> dict:
    from memopt.bounds.verify import verify_document
    from memopt.io._json import read_json

    inst = _load(args.file)
    doc = read_json(args.plan)
    if isinstance(doc, dict) and doc.get("format") == "memopt-remat-plan":
        from memopt.remat.verify import verify_remat_document

        report = verify_remat_document(inst, doc, where=str(args.plan))
    else:
        report = verify_document(inst, doc, where=str(args.plan))
    if hasattr(report, "to_dict"):
        report = report.to_dict()
    report = dict(report)
    if not report.get("ok", True):  # every rejection: one line, exit 2
        reason = report.get("reason") or report.get("error") or "; ".join(map(str, report.get("errors", ()))) \
            or "rejected"
        raise CertificateError(f"{args.plan}: {reason}")
    return report


def _cell(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, int) and key in ("peak", "lower_bound", "claimed_peak"):
        return fmt_bytes(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)
