"""Check memopt's DTR replay against every row of simrd's reference outcomes.

Usage::

    python benchmarks/dtr_parity.py [--reference ../shared/data/dtr-reference/reference.jsonl]
                                    [--traces ../shared/data/dtr-traces] [--filter TEXT]

For each row (one simrd replay: trace, heuristic, overhead limit, ratio) memopt replays
the same budget and compares ``status``, ``clock``, ``remat_compute``, ``max_memory``
exactly (and ``budget``, ``baseline_peak``, ``baseline_compute``, ``model_compute``,
``heuristic_evals``). Prints every mismatch, a per-heuristic summary, and exits with
status 1 if anything differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from memopt.dtr import baseline, load_trace, replay

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
EXACT = ("status", "clock", "remat_compute", "max_memory")
ALSO = ("budget", "baseline_peak", "baseline_compute", "model_compute", "heuristic_evals")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path,
                    default=DEFAULT_DATA / "dtr-reference" / "reference.jsonl")
    ap.add_argument("--traces", type=Path, default=DEFAULT_DATA / "dtr-traces")
    ap.add_argument("--filter", default="", help="only rows whose trace name contains this")
    args = ap.parse_args(argv)

    rows = [json.loads(line) for line in args.reference.read_text().splitlines() if line]
    rows = [r for r in rows if args.filter in r["trace"]]
    traces = {}
    per_heur = defaultdict(lambda: [0, 0])
    mismatches = 0
    evals_diff = 0
    t0 = time.perf_counter()
    for row in rows:
        name = row["trace"]
        if name not in traces:
            traces[name] = load_trace(args.traces / name)
        trace = traces[name]
        base = baseline(trace)
        budget = int(row["ratio"] * base.peak)
        res = replay(trace, budget, row["heuristic"], overhead_limit=row["overhead_limit"],
                     ratio=row["ratio"]).to_dict()
        bad = [k for k in EXACT + ALSO[:-1] if res[k] != row[k]]
        if res["heuristic_evals"] != row["heuristic_evals"]:
            evals_diff += 1
        key = (row["heuristic"], row["overhead_limit"])
        per_heur[key][1] += 1
        if bad:
            mismatches += 1
            diffs = ", ".join(f"{k}: memopt {res[k]} simrd {row[k]}" for k in bad)
            print(f"MISMATCH {name} {row['heuristic']} ratio={row['ratio']} "
                  f"limit={row['overhead_limit']}: {diffs}")
        else:
            per_heur[key][0] += 1
    elapsed = time.perf_counter() - t0
    print(f"{'heuristic':<16} {'limit':>6} {'matched':>8}")
    for (h, lim), (ok, tot) in sorted(per_heur.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"{h:<16} {str(lim):>6} {ok:>4}/{tot:<4}")
    print(f"rows matched: {len(rows) - mismatches}/{len(rows)} "
          f"(status, clock, remat_compute, max_memory, budget, baselines, model_compute); "
          f"heuristic_evals equal on {len(rows) - evals_diff}/{len(rows)}; "
          f"{elapsed:.1f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
