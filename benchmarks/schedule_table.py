"""memopt vs. named baselines on the published graphs: one table, one run.

For every graph in ``../shared/data/checkmate-graphs/`` (or the files given): nodes, the
peak of the file order, of each Inductor heuristic (lpmf, bfs, dfs) and Inductor's best-of,
memopt's peak, its lower bound, the status, and memopt's wall time (whole ``schedule`` call:
baselines, bounds, search and independent verification).

    python benchmarks/schedule_table.py [--time-limit 10] [--json out.json] [FILES...]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "shared", "data", "checkmate-graphs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    files = args.files or sorted(glob.glob(os.path.join(DEFAULT_DIR, "*.json")))
    if not files:
        print(f"no graphs found (looked in {os.path.normpath(DEFAULT_DIR)})", file=sys.stderr)
        return 2

    from memopt.io import load_instance
    from memopt.schedule import schedule_instance

    # load (or compile) the numba kernels once, outside the timings: this table measures the
    # search, not process start-up (that is benchmarks/latency.py)
    from memopt import _jit

    with _jit.mode("compiled"):
        schedule_instance(load_instance(os.path.join(HERE, "..", "instances", "mlp_train.json")), time_limit=1.0)

    cols = ["graph", "nodes", "file order", "lpmf", "bfs", "dfs", "inductor", "memopt", "lower bound",
            "status", "seconds"]
    rows = []
    for path in files:
        inst = load_instance(path)
        t0 = time.perf_counter()
        res = schedule_instance(inst, time_limit=args.time_limit)
        secs = time.perf_counter() - t0
        b = res.baselines
        rows.append({"graph": os.path.basename(path).replace("_nx.json", "").replace(".json", ""),
                     "nodes": inst.num_ops, "file order": b["input"], "lpmf": b["lpmf"], "bfs": b["bfs"],
                     "dfs": b["dfs"], "inductor": b["inductor"], "memopt": res.peak,
                     "lower bound": res.lower_bound, "status": res.status, "seconds": round(secs, 2),
                     "method": res.method, "gap": res.peak - res.lower_bound})
        assert res.peak <= min(b.values()), "memopt worse than a baseline"
        print(f"  {rows[-1]['graph']}: {res.peak} ({res.status}, {secs:.2f}s)", file=sys.stderr)
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    line = " | ".join(c.ljust(w) for c, w in zip(cols, widths))
    print(line)
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(r[c]).rjust(w) if isinstance(r[c], (int, float)) else str(r[c]).ljust(w)
                         for c, w in zip(cols, widths)))
    closed = sum(r["status"] in ("certified", "optimal") for r in rows)
    within = sum(r["status"] in ("certified", "optimal") and r["seconds"] <= 10 for r in rows)
    print(f"\nproved optimal: {closed}/{len(rows)} ({within} within 10 s); "
          f"memopt <= every baseline on {sum(r['memopt'] <= min(r['file order'], r['lpmf'], r['bfs'], r['dfs'], r['inductor']) for r in rows)}/{len(rows)}")
    open_rows = [r for r in rows if r["gap"] > 0]
    for r in open_rows:
        print(f"open: {r['graph']}: peak {r['memopt']} - bound {r['lower bound']} = gap {r['gap']} "
              f"({r['gap'] / r['memopt']:.3%})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
