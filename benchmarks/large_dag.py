"""Time peak evaluation and scheduling on a random DAG of 1,000,000 ops and 3,000,000 edges.

Every op produces one tensor (size 1..1000 bytes, seeded); each of the 3,000,000 edges reads
the tensor of a random earlier op, 90 % of them from the previous 1,000 ops (locality, like
layers) and 10 % from anywhere before. Ops nobody reads are graph outputs.

    python benchmarks/large_dag.py [--ops N] [--edges M] [--seed S]

Prints one table: step, seconds, peak. (Under load on a shared 2-core machine the times
grow several-fold; compare the rows with each other.) The first call of each compiled kernel is timed
separately (numba's on-disk cache makes later runs skip compilation).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memopt.core import TensorGraph, graph_to_dag, peak
from memopt.schedule.greedy import greedy_dag_order
from memopt.core.signed_dag import op_order_from_dag_order


def random_dag(n_ops: int, n_edges: int, seed: int = 0) -> TensorGraph:
    rng = np.random.default_rng(seed)
    dst = rng.integers(1, n_ops, size=n_edges)
    local = rng.random(n_edges) < 0.9
    back = np.where(local, rng.integers(1, 1001, size=n_edges), 0)
    src_local = np.maximum(dst - back, 0)
    src_far = (rng.random(n_edges) * dst).astype(np.int64)
    src = np.where(local, src_local, src_far)
    # one edge per (consumer, tensor); sort + compare instead of np.unique, whose hash-based
    # path in numpy 2.x is an order of magnitude slower on millions of int64 keys
    key = np.sort(dst * n_ops + src)
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    dst, src = key // n_ops, key % n_ops
    sizes = rng.integers(1, 1001, size=n_ops)
    has_consumer = np.zeros(n_ops, bool)
    has_consumer[src] = True
    return TensorGraph.from_arrays(tensor_size=sizes, tensor_producer=np.arange(n_ops),
                                   op_inputs=(dst, src), num_ops=n_ops, tensor_output=~has_consumer,
                                   name=f"random_dag_{n_ops}_{n_edges}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = []

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        rows.append((name, time.perf_counter() - t0))
        return out

    # warm the compiled kernels on a small graph so the table shows steady-state times
    small = random_dag(1000, 3000, 1)
    greedy_dag_order(graph_to_dag(small).dag)
    peak(small, small.topological_order())

    g = timed("build graph (from_arrays, validation)", lambda: random_dag(args.ops, args.edges, args.seed))
    kahn = timed("Kahn's order", lambda: np.array(g.topological_order()))
    pk_kahn = timed("evaluate peak (Kahn's order)", lambda: peak(g, kahn))
    gd = timed("compile to signed DAG", lambda: graph_to_dag(g))
    order = timed("greedy (3 rules + reference, best kept)", lambda: op_order_from_dag_order(gd, greedy_dag_order(gd.dag)))
    net = timed("greedy rule 'net' only", lambda: op_order_from_dag_order(gd, greedy_dag_order(gd.dag, ("net",))))
    pk_greedy = timed("evaluate peak (greedy order)", lambda: peak(g, order))
    pk_net = peak(g, net)
    print(f"random DAG: {g.num_ops} ops, {int(g.cons_ptr[-1])} edges (seed {args.seed})")
    print(f"{'step':<42}{'seconds':>10}")
    for name, sec in rows:
        print(f"{name:<42}{sec:>10.2f}")
    print(f"{'peak, Kahn order':<42}{pk_kahn:>14,d}")
    print(f"{'peak, greedy (best rule)':<42}{pk_greedy:>14,d}")
    print(f"{'peak, greedy (net rule)':<42}{pk_net:>14,d}")


if __name__ == "__main__":
    main()
