"""``memopt dtr replay|sweep|explain``: DTR training traces under a memory budget.

Budgets are given as ratios of the trace's baseline peak (``int(ratio * peak)``, as simrd
computes them). Nothing of :mod:`memopt.dtr` is imported until a ``dtr`` command runs, so
that building the parser does not load the simulator or its kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from memopt.cli import _options as opt
from memopt.cli._output import fmt_bytes, fmt_count, print_table, write_json

_HEURISTICS = "dtr, dtr-eqclass, dtr-local, msps, lru, largest (or simrd's class names)"


def register(sub) -> None:
    parser = sub.add_parser("dtr", help="replay DTR training traces under a budget",
                            description="Replay dynamic tensor rematerialization (DTR) training traces "
                                        "under a memory budget, at parity with simrd.")
    dsub = parser.add_subparsers(dest="dtr_command", metavar="DTR_COMMAND", parser_class=type(parser))
    dsub.required = True

    rp = dsub.add_parser("replay", help="replay a trace at one budget ratio")
    _add_common(rp)
    rp.add_argument("--ratio", required=True, metavar="R", help="budget = int(R * baseline peak)")
    rp.set_defaults(func=cmd_replay)

    sw = dsub.add_parser("sweep", help="replay a trace over a grid of budget ratios; report holes")
    _add_common(sw)
    sw.add_argument("--grid", required=True, metavar="START:STOP:STEP", help="ratios, e.g. 0.1:1.0:0.01")
    sw.add_argument("--repeats", type=int, default=1, metavar="N",
                    help="run every budget N times (determinism check; default 1)")
    sw.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="worker processes (default: number of CPUs; 1 = in-process)")
    sw.add_argument("--executor", default="local", metavar="SPEC",
                    help="where budgets run: local (--jobs worker processes, default), threads, or "
                         "dask://HOST:PORT (a Dask scheduler; needs memopt[dask] and the trace at the "
                         "same path on the workers)")
    sw.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="stop any budget whose replay runs longer; it is reported as 'timeout' "
                         "(undecided) instead of pass/fail (default: no limit)")
    sw.add_argument("--plot", metavar="FILE", help="write a ratio/overhead plot (needs matplotlib)")
    sw.add_argument("--failing-only", action="store_true", help="list only failing budgets (text output)")
    sw.set_defaults(func=cmd_sweep)

    ex = dsub.add_parser("explain", help="diagnose a failing budget against a passing one")
    _add_common(ex)
    ex.add_argument("--fail", dest="fail_ratio", required=True, metavar="R1", help="a failing ratio")
    ex.add_argument("--pass", dest="pass_ratio", required=True, metavar="R2", help="a passing ratio")
    ex.add_argument("--singles", type=int, default=40, metavar="N",
                    help="also replay the failing budget keeping each implicated tensor alone resident, "
                         "for at most N of them (an evenly spaced sample beyond; 0 = none; default 40)")
    ex.set_defaults(func=cmd_explain)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a DTR training log (JSON lines)")
    parser.add_argument("--heuristic", default="dtr", help=f"eviction heuristic: {_HEURISTICS} (default: dtr)")
    parser.add_argument("--overhead-limit", type=float, default=None, metavar="X",
                        help="stop as 'thrash' once remat compute exceeds baseline_compute * (X - 1) "
                             "(simrd's remat limit; default: none)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def _trace(path: str):
    """The parsed trace and its baseline (cached per process, so library calls reuse them)."""
    from memopt.dtr.sweep import cached_trace, check_trace_path

    return cached_trace(check_trace_path(path))


def cmd_replay(args) -> int:
    ratio = opt.ratio(args.ratio, "--ratio")
    limit = opt.overhead_limit(args.overhead_limit)
    from memopt.dtr import replay
    from memopt.dtr.sweep import check_heuristic, ratio_budget

    check_heuristic(args.heuristic)
    trace, base = _trace(args.trace)
    opt.budget_fits(ratio, base.peak, "--ratio")
    budget = ratio_budget(ratio, base.peak)
    t0 = time.perf_counter()
    result = replay(trace, budget, args.heuristic, overhead_limit=limit, ratio=float(ratio))
    seconds = time.perf_counter() - t0
    # the simulator names the heuristic canonically; report it as it was asked for
    result = dataclasses.replace(result, heuristic=args.heuristic)
    if args.json:
        write_json({"trace": os.path.basename(args.trace), **result.to_dict(), "seconds": round(seconds, 6)})
        return 0
    overhead = ((result.baseline_compute + result.remat_compute) / result.baseline_compute
                if result.baseline_compute else None)
    remat = fmt_count(result.remat_compute)
    if result.status == "pass" and overhead is not None:
        remat += f"  (overhead {overhead:.4f}x)"
    print_table([
        ("trace", os.path.basename(args.trace)),
        ("heuristic", args.heuristic + (f"  (overhead limit {limit})" if limit else "")),
        ("ratio", str(ratio)),
        ("budget", fmt_bytes(result.budget)),
        ("baseline peak", fmt_bytes(result.baseline_peak)),
        ("baseline compute", fmt_count(result.baseline_compute)),
        ("status", result.status),
        ("clock", fmt_count(result.clock)),
        ("remat compute", remat),
        ("max memory", fmt_bytes(result.max_memory)),
        ("heuristic evals", fmt_count(result.heuristic_evals)),
        ("seconds", f"{seconds:.3f}"),
    ])
    return 0


def cmd_sweep(args) -> int:
    limit = opt.overhead_limit(args.overhead_limit)
    timeout = opt.seconds(args.timeout, "--timeout", zero_ok=False)
    opt.integer(args.jobs, "--jobs", low=1, high=opt.MAX_JOBS)
    opt.integer(args.repeats, "--repeats", low=1, high=10_000)
    opt.not_an_input({"--plot": args.plot}, [args.trace])
    from memopt.dtr.sweep import check_heuristic, parse_grid, plot_sweep, run_sweep
    from memopt.sweep import parse_executor_spec

    executor = parse_executor_spec(args.executor)
    if timeout is not None and executor.kind != "local":
        raise opt.OptionError(f"--timeout needs --executor local (memopt's own worker processes), "
                              f"not {args.executor}")

    ratios = parse_grid(args.grid)  # fail on a bad grid before anything is loaded
    if ratios and ratios[-1] > opt.MAX_RATIO:
        raise opt.OptionError(f"bad grid {args.grid!r}: ratios above 1e6 are not supported")
    check_heuristic(args.heuristic)
    _, base = _trace(args.trace)
    if ratios:
        opt.budget_fits(ratios[-1], base.peak, "--grid STOP")
    result = run_sweep(args.trace, args.grid, args.heuristic, overhead_limit=limit, repeats=args.repeats,
                       jobs=args.jobs, executor=executor, timeout=timeout, progress=not args.json)
    if args.plot:  # before any output: a plot that cannot be written fails the command
        plot_sweep(result, args.plot)
    if args.json:
        write_json(result.to_dict())
    if not args.json:
        _print_sweep(result, all_points=not args.failing_only, plot=args.plot)
    if result.lost:
        lost_text = "; ".join(f"{p.ratio} ({p.reason})" for p in result.lost[:5])
        print(f"memopt: error: {len(result.lost)} budget(s) lost with their worker: {lost_text}"
              + (" ..." if len(result.lost) > 5 else ""), file=sys.stderr)
    if result.nondeterministic:
        ratios_text = ", ".join(str(p.ratio) for p in result.nondeterministic)
        print(f"memopt: error: replays are not deterministic at ratios {ratios_text}", file=sys.stderr)
    if result.lost or result.nondeterministic:
        return 1
    return 0


def _print_sweep(result, *, all_points: bool, plot: str | None) -> None:
    keys = ("trace", "heuristic", "baseline", "grid", "failing", "holes", "timeouts", "lost", "plot")
    width = (max(len(k) for k in keys),)
    print_table([
        ("trace", result.trace),
        ("heuristic", result.heuristic + (f"   overhead limit {result.overhead_limit}"
                                          if result.overhead_limit else "")),
        ("baseline", f"peak {fmt_bytes(result.baseline_peak)}, compute {fmt_count(result.baseline_compute)}"),
        ("grid", f"{result.grid}  ({len(result.points)} budgets x {result.repeats} run(s), "
                 f"{result.seconds:.1f}s)"),
    ], min_widths=width)
    shown = result.points if all_points else result.failing
    if shown:
        print()
        print_table([(str(p.ratio), p.budget, p.status,
                      f"{p.overhead(result.baseline_compute):.4f}" if p.passed else "-", p.max_memory,
                      "NONDETERMINISTIC" if not p.deterministic else "")
                     for p in shown],
                    header=("ratio", "budget", "status", "overhead", "max_memory", ""), align="rrrrrl")
    print()
    min_pass = result.min_passing_ratio
    rows = [("failing", f"{len(result.failing)} of {len(result.points)} budgets; smallest passing ratio "
                        f"{min_pass if min_pass is not None else 'none'}"),
            ("holes", f"{len(result.holes)}: " + ", ".join(f"[{lo}, {hi}]" for lo, hi in result.holes)
             if result.holes else "none")]
    if result.timeouts:
        stopped = ", ".join(str(p.ratio) for p in result.timeouts[:20]) + (" ..." if len(result.timeouts) > 20 else "")
        rows.append(("timeouts", f"{len(result.timeouts)} budget(s) stopped after {result.timeout}s "
                                 f"(undecided; not counted as failures): {stopped}"))
    if result.lost:
        rows.append(("lost", f"{len(result.lost)} budget(s) whose worker died (undecided): "
                             + "; ".join(f"{p.ratio} ({p.reason})" for p in result.lost[:5])
                             + (" ..." if len(result.lost) > 5 else "")))
    if plot:
        rows.append(("plot", plot))
    print_table(rows, min_widths=width)
    if result.nondeterministic:
        print("NONDETERMINISTIC at ratios " + ", ".join(str(p.ratio) for p in result.nondeterministic))


def cmd_explain(args) -> int:
    fail = opt.ratio(args.fail_ratio, "--fail")
    ok = opt.ratio(args.pass_ratio, "--pass")
    limit = opt.overhead_limit(args.overhead_limit)
    opt.integer(args.singles, "--singles", low=0, high=opt.INT64_MAX)
    from memopt.dtr.explain import explain
    from memopt.dtr.sweep import check_heuristic

    check_heuristic(args.heuristic)
    _, base = _trace(args.trace)  # cached: explain() reuses it
    opt.budget_fits(fail, base.peak, "--fail")
    opt.budget_fits(ok, base.peak, "--pass")
    result = explain(args.trace, fail, ok, args.heuristic, overhead_limit=limit, singles=args.singles)
    if args.json:
        write_json(result.to_dict())
    else:
        print(result.to_text())
    return 0
