"""memopt on PyTorch Inductor's generated programs (CPU, inference), per zoo model: one table.

For every model of :mod:`memopt.zoo`: statements in the wrapper, Inductor's own
``estimate_peak_memory`` for its order, the stock order's modelled and measured peak, memopt's
modelled and measured peak, the lower bound, the status, scheduling seconds, bitwise equality
of the outputs, the stock program's modelled peak with every library transient set to 0
(the part of the difference between Inductor's estimate and the measurement that workspaces
explain), and whether the model matched the measurement to the byte (stock and memopt).

    python benchmarks/adapters_inductor.py [--time-limit 1] [--json out.json] [--compile-path] [--training] [MODEL...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--compile-path", action="store_true",
                    help="also compile with memopt's CustomSchedulerPass (reorder_for_peak_memory=False) "
                         "and measure that program (one more compile per model)")
    ap.add_argument("--training", action="store_true",
                    help="capture a training step instead (forward and backward programs, one row each)")
    args = ap.parse_args(argv)

    import torch

    from memopt import zoo
    from memopt.adapters import inductor

    cols = ["model", "family", "stmts", "inductor est.", "stock w/o transients", "stock model", "stock measured", "memopt model",
            "memopt measured", "lower bound", "status", "sched s", "bitwise", "exact", "capture s"]
    if args.compile_path and not args.training:
        cols += ["pass model (Inductor's)", "pass program model", "pass program measured", "pass bitwise"]
    rows = []
    work = []
    for name in args.models or zoo.names():
        model, inputs = zoo.build(name)
        t0 = time.perf_counter()
        if args.training:
            model.train()
            caps = inductor.capture_training(model, *inputs)
            t_cap = time.perf_counter() - t0
            work += [(f"{name} ({kind})", name, model, inputs, cap, t_cap) for kind, cap in caps.items()]
        else:
            cap = inductor.capture(model, *inputs)
            work.append((name, name, model, inputs, cap, time.perf_counter() - t0))
    for label, name, model, inputs, cap, t_cap in work:
        r = inductor.optimize_capture(cap, time_limit=args.time_limit)
        exact = (r.modelled_peak_stock == r.measured_peak_stock and r.modelled_peak == r.measured_peak)
        row = {"model": label, "family": zoo.family(name), "stmts": len(cap.program.statements),
               "inductor est.": r.inductor_estimate,
               "stock w/o transients": r.stock_peak_without_transients, "stock model": r.modelled_peak_stock,
               "stock measured": r.measured_peak_stock, "memopt model": r.modelled_peak,
               "memopt measured": r.measured_peak, "lower bound": r.lower_bound, "status": r.status,
               "sched s": round(r.seconds, 3), "bitwise": r.bitwise_equal, "exact": exact and not cap.mismatches,
               "capture s": round(t_cap, 1)}
        if args.compile_path and not args.training:
            opts = inductor.compile_path_options(args.time_limit)
            pcap = inductor.capture(model, *inputs, **opts)
            measured, out = pcap.measure()
            last = opts["_post_fusion_custom_pass"].last
            row.update({"pass model (Inductor's)": last[1] if last else None,
                        "pass program model": pcap.program.peak(), "pass program measured": measured,
                        "pass bitwise": inductor._bitwise_equal(out, cap.run(), torch)})
        rows.append(row)
        print(" | ".join(str(row[c]) for c in cols), file=sys.stderr, flush=True)
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
