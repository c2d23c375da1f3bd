"""``memopt dtr ...`` sub-commands: replay one budget, sweep a grid of budgets, explain a hole.

Budgets are given as ratios of the trace's baseline peak (``int(ratio * peak)``, as simrd
computes them). The simulator is imported only when a ``dtr`` command runs, so that the
rest of the ``memopt`` command does not pay for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from decimal import Decimal, InvalidOperation

from memopt.errors import MemoptError


def _ratio(text: str, option: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise MemoptError(f"{option} {text!r} is not a number") from None
    if not value.is_finite() or value <= 0:
        raise MemoptError(f"{option} must be a positive budget ratio, got {text!r}")
    if value > 10**6:
        # budgets are exact int64 byte counts; far above 1 every budget behaves alike anyway
        raise MemoptError(f"{option} {text!r} is too large: budget ratios above 1e6 are not supported")
    return value


def _overhead_limit(value: float | None) -> float | None:
    if value is not None and not (1.0 <= value < float("inf")):
        raise MemoptError(f"--overhead-limit must be a finite slowdown factor >= 1, got {value}")
    return value


def _print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=False, allow_nan=False) + "\n")


def _cmd_replay(args: argparse.Namespace) -> int:
    from memopt.dtr.sweep import cached_trace, check_heuristic, check_trace_path, ratio_budget
    from memopt.dtr import replay

    ratio = _ratio(args.ratio, "--ratio")
    limit = _overhead_limit(args.overhead_limit)
    path = check_trace_path(args.trace)
    check_heuristic(args.heuristic)
    trace, base = cached_trace(path)
    budget = ratio_budget(ratio, base.peak)
    t0 = time.perf_counter()
    result = replay(trace, budget, args.heuristic, overhead_limit=limit)
    seconds = time.perf_counter() - t0
    out = {"trace": os.path.basename(path), **result.to_dict()}
    out.pop("log", None)
    # The simulator names the heuristic canonically; the ratio is the one asked for.
    out.update(heuristic=args.heuristic, ratio=float(ratio), overhead_limit=limit,
               seconds=round(seconds, 6))
    if args.json:
        _print_json(out)
        return 0
    overhead = (
        (result.baseline_compute + result.remat_compute) / result.baseline_compute
        if result.baseline_compute
        else float("nan")
    )
    rows = [
        ("trace", out["trace"]),
        ("heuristic", args.heuristic + (f"  (overhead limit {limit})" if limit else "")),
        ("ratio", f"{ratio}"),
        ("budget", f"{result.budget:,} B"),
        ("baseline peak", f"{result.baseline_peak:,} B"),
        ("baseline compute", f"{result.baseline_compute:,}"),
        ("status", result.status),
        ("clock", f"{result.clock:,}"),
        ("remat compute", f"{result.remat_compute:,}" + (f"  (overhead {overhead:.4f}x)" if result.status == "pass" else "")),
        ("max memory", f"{result.max_memory:,} B"),
        ("heuristic evals", f"{result.heuristic_evals:,}"),
        ("seconds", f"{seconds:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from memopt.dtr.sweep import format_sweep, parse_grid, plot_sweep, run_sweep

    limit = _overhead_limit(args.overhead_limit)
    parse_grid(args.grid)  # fail on a bad grid before anything is loaded
    if args.plot:
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise MemoptError(f"--plot {args.plot!r}: folder {folder!r} does not exist or is not writable")
    result = run_sweep(
        args.trace,
        args.grid,
        args.heuristic,
        overhead_limit=limit,
        repeats=args.repeats,
        jobs=args.jobs,
        timeout=args.timeout,
        progress=not args.json,
    )
    if args.json:
        _print_json(result.to_dict())
    if args.plot:
        plot_sweep(result, args.plot)
    if not args.json:
        print(format_sweep(result, all_points=not args.failing_only))
        if args.plot:
            print(f"plot       {args.plot}")
    if result.nondeterministic:
        ratios = ", ".join(str(p.ratio) for p in result.nondeterministic)
        print(f"memopt: error: replays are not deterministic at ratios {ratios}", file=sys.stderr)
        return 1
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from memopt.dtr.explain import explain

    fail = _ratio(args.fail_ratio, "--fail")
    ok = _ratio(args.pass_ratio, "--pass")
    limit = _overhead_limit(args.overhead_limit)
    if args.singles < 0:
        raise MemoptError(f"--singles must be >= 0, got {args.singles}")
    result = explain(args.trace, fail, ok, args.heuristic, overhead_limit=limit, singles=args.singles)
    if args.json:
        _print_json(result.to_dict())
    else:
        print(result.to_text())
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a DTR training log (JSON lines)")
    parser.add_argument(
        "--heuristic",
        default="dtr",
        help="eviction heuristic: dtr, dtr-eqclass, dtr-local, msps, lru, largest "
        "(or simrd's class names) (default: dtr)",
    )
    parser.add_argument(
        "--overhead-limit",
        type=float,
        default=None,
        metavar="X",
        help="stop as 'thrash' once remat compute exceeds baseline_compute * (X - 1) "
        "(simrd's remat limit; default: none)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def register(subparsers) -> None:
    parser = subparsers.add_parser("dtr", help="replay DTR training traces under a budget")
    dsub = parser.add_subparsers(dest="dtr_command", metavar="DTR_COMMAND")
    dsub.required = True

    rp = dsub.add_parser("replay", help="replay a trace at one budget ratio")
    _add_common(rp)
    rp.add_argument("--ratio", required=True, metavar="R", help="budget = int(R * baseline peak)")
    rp.set_defaults(func=_cmd_replay)

    sw = dsub.add_parser("sweep", help="replay a trace over a grid of budget ratios; report holes")
    _add_common(sw)
    sw.add_argument("--grid", required=True, metavar="START:STOP:STEP", help="ratios, e.g. 0.1:1.0:0.01")
    sw.add_argument("--repeats", type=int, default=1, metavar="N", help="run every budget N times (determinism check)")
    sw.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes (default: number of CPUs; 1 = in-process)",
    )
    sw.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop any budget whose replay runs longer; it is reported as 'timeout' "
        "(undecided) instead of pass/fail (default: no limit)",
    )
    sw.add_argument("--plot", metavar="FILE", help="write a ratio/overhead plot (needs matplotlib)")
    sw.add_argument("--failing-only", action="store_true", help="list only failing budgets (text output)")
    sw.set_defaults(func=_cmd_sweep)

    ex = dsub.add_parser("explain", help="diagnose a failing budget against a passing one")
    _add_common(ex)
    ex.add_argument("--fail", dest="fail_ratio", required=True, metavar="R1", help="a failing ratio")
    ex.add_argument("--pass", dest="pass_ratio", required=True, metavar="R2", help="a passing ratio")
    ex.add_argument(
        "--singles",
        type=int,
        default=40,
        metavar="N",
        help="also replay the failing budget keeping each implicated tensor alone resident, "
        "for at most N of them (an evenly spaced sample beyond; 0 = none; default 40)",
    )
    ex.set_defaults(func=_cmd_explain)
