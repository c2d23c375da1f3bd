"""Peaks of the named baselines and of memopt's heuristics on the published graphs.

    python benchmarks/heuristics_table.py [--time-limit S] [--seed K] [FILES...]

Columns: ops; peak of the file order; Inductor's lpmf, bfs, dfs and "best of baseline +
three" (selected by Inductor's own estimate, evaluated exactly); memopt's greedy (best
rule, seeded with the file order) and local search (from the best of all of these; stops
at the trap lower bound or the time limit); the trap lower bound; the seconds of the
greedy and of the local search. A '*' marks a local-search peak equal to the bound.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np

from memopt.core import graph_to_dag, peak
from memopt.io.checkmate import load_checkmate
from memopt.schedule.greedy import greedy_order
from memopt.schedule.inductor import bfs_order, dfs_order, inductor_best_order, lpmf_order
from memopt.schedule.local_search import local_search_order

DEFAULT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "checkmate-graphs", "*.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-bound", action="store_true", help="skip the trap bound (local search runs to the limit)")
    args = ap.parse_args(argv)
    files = args.files or sorted(glob.glob(DEFAULT))
    head = ["graph", "ops", "file", "lpmf", "bfs", "dfs", "inductor", "greedy", "local", "bound", "t_greedy",
            "t_local"]
    print(" | ".join(head))
    for f in files:
        inst = load_checkmate(f)
        g = inst.graph
        base = np.asarray(inst.input_order, dtype=np.int64)
        orders = {"file": base, "lpmf": lpmf_order(g, base), "bfs": bfs_order(g, base), "dfs": dfs_order(g, base),
                  "inductor": inductor_best_order(g, base)}
        t0 = time.perf_counter()
        orders["greedy"] = greedy_order(g, reference=base)
        t_greedy = time.perf_counter() - t0
        peaks = {k: peak(g, o) for k, o in orders.items()}
        lb = None
        if not args.no_bound:
            from memopt.bounds.trap import best_bound

            lb = int(best_bound(graph_to_dag(g).dag, time_limit=10.0).value)
        start = min(orders, key=lambda k: peaks[k])
        t0 = time.perf_counter()
        _, pk = local_search_order(g, orders[start], time_limit=args.time_limit, seed=args.seed, lower_bound=lb)
        t_local = time.perf_counter() - t0
        name = os.path.basename(f).replace("_nx.json", "").replace(".json", "")[:36]
        cells = [name, str(g.num_ops)] + [str(peaks[k]) for k in ("file", "lpmf", "bfs", "dfs", "inductor", "greedy")]
        cells += [f"{pk}{'*' if lb is not None and pk == lb else ''}", str(lb) if lb is not None else "-",
                  f"{t_greedy:.3f}", f"{t_local:.2f}"]
        print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
