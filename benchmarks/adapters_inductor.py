"""memopt on PyTorch Inductor's generated programs (CPU), per zoo model: one table.

For every model of :mod:`memopt.zoo`: statements in the wrapper, Inductor's own
``estimate_peak_memory`` for its order, the stock order's modelled and measured peak, memopt's
modelled and measured peak, the lower bound, the status, scheduling seconds, bitwise equality
of the outputs, the stock program's modelled peak with every library transient set to 0,
whether the model matched the measurement to the byte (stock and memopt, and every
statement's net allocation), and the itemised difference between Inductor's estimate and the
stock program's peak (:func:`memopt.adapters.inductor.attribute_estimate`).

    python benchmarks/adapters_inductor.py [--time-limit 1] [--json out.json] [--compile-path] [--training] [MODEL...]

:func:`inductor_rows` is what ``benchmarks/adapters_table.py`` imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

COLUMNS = ["model", "family", "stmts", "inductor est.", "stock w/o transients", "stock model", "stock measured",
           "memopt model", "memopt measured", "lower bound", "status", "sched s", "bitwise", "exact", "capture s"]
PASS_COLUMNS = ["pass model (Inductor's)", "pass program model", "pass program measured", "pass bitwise"]


def _captures(name: str, training: bool):
    """``[(label, model, inputs, capture, capture seconds)]`` of one zoo model: its inference
    program, or the forward and backward programs of one training step."""
    from memopt import zoo
    from memopt.adapters import inductor

    model, inputs = zoo.build(name)
    t0 = time.perf_counter()
    if training:
        model.train()
        caps = inductor.capture_training(model, *inputs)
        seconds = time.perf_counter() - t0
        return [(f"{name} ({kind})", model, inputs, cap, seconds) for kind, cap in caps.items()]
    cap = inductor.capture(model, *inputs)
    return [(name, model, inputs, cap, time.perf_counter() - t0)]


def inductor_rows(names, *, time_limit: float = 1.0, training: bool = False, compile_path: bool = False,
                  progress=None) -> list[dict]:
    """One row per captured program (``COLUMNS``, plus ``PASS_COLUMNS`` with ``compile_path``
    and ``estimate_differences``: the :class:`EstimateDifference` items). ``progress(row)`` is
    called as each row is done."""
    import torch

    from memopt import zoo
    from memopt.adapters import inductor

    rows = []
    for name in names:
        for label, model, inputs, cap, t_cap in _captures(name, training):
            r = inductor.optimize_capture(cap, time_limit=time_limit)
            exact = (r.modelled_peak_stock == r.measured_peak_stock and r.modelled_peak == r.measured_peak)
            row = {"model": label, "family": zoo.family(name), "stmts": len(cap.program.statements),
                   "inductor est.": r.inductor_estimate,
                   "stock w/o transients": r.stock_peak_without_transients, "stock model": r.modelled_peak_stock,
                   "stock measured": r.measured_peak_stock, "memopt model": r.modelled_peak,
                   "memopt measured": r.measured_peak, "lower bound": r.lower_bound, "status": r.status,
                   "sched s": round(r.seconds, 3), "bitwise": r.bitwise_equal, "exact": exact and not cap.mismatches,
                   "capture s": round(t_cap, 1), "estimate_differences": r.estimate_differences}
            if compile_path and not training:
                opts = inductor.compile_path_options(time_limit)
                pcap = inductor.capture(model, *inputs, **opts)
                measured, out = pcap.measure()
                last = opts["_post_fusion_custom_pass"].last
                row.update({"pass model (Inductor's)": last[1] if last else None,
                            "pass program model": pcap.program.peak(), "pass program measured": measured,
                            "pass bitwise": inductor._bitwise_equal(out, cap.run(), torch)})
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def markdown(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in cols) + " |" for row in rows]
    return "\n".join(lines)


def attribution_lines(rows: list[dict]) -> list[str]:
    """``model: estimate E -> stock S: cause +x, cause -y (= S)`` per row with an estimate."""
    out = []
    for row in rows:
        diffs = row.get("estimate_differences") or []
        if row["inductor est."] is None or not diffs:
            out.append(f"{row['model']}: no Inductor estimate recorded")
            continue
        items = ", ".join(str(d) for d in diffs if d.bytes or d.cause == "unattributed")
        total = row["inductor est."] + sum(d.bytes for d in diffs)
        out.append(f"{row['model']}: estimate {row['inductor est.']} -> stock {row['stock model']}: {items} "
                   f"(= {total})")
    return out


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

    from memopt import zoo

    cols = COLUMNS + (PASS_COLUMNS if args.compile_path and not args.training else [])
    rows = inductor_rows(args.models or zoo.names(), time_limit=args.time_limit, training=args.training,
                         compile_path=args.compile_path,
                         progress=lambda row: print(" | ".join(str(row[c]) for c in cols), file=sys.stderr, flush=True))
    print(markdown(rows, cols))
    print()
    for line in attribution_lines(rows):
        print("-", line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: (v if k != "estimate_differences" else [vars(d) for d in v]) for k, v in row.items()}
                       for row in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
