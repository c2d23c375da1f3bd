"""Benchmark of the exact recomputation DP (memopt.remat.treedp) on random series-parallel graphs.

    python benchmarks/remat_treedp.py [--ops 60] [--cap 2] [--graphs 5] [--ratios 0.9 0.8] [--time-limit 60]

For each random two-terminal series-parallel graph (the generator of tests/test_heuristics.py:
edge subdivisions and parallel paths, one tensor per edge, sizes 0..11, costs 1..9) and each
ratio r, the memory limit is ``floor(r * P0)`` where ``P0`` is the least no-recomputation
peak, proved by the scheduling core (``memopt.schedule(g, method="exact")``). Below the
lower bound of ``memopt.remat.lower_bounds`` the DP answers ``infeasible`` at once. Prints one line per instance:
ops, width (largest antichain), limit, status, extra cost, peak, states expanded, seconds.
Timings are wall-clock on this machine; they belong here, not in the tests.
"""

from __future__ import annotations

import argparse
import time

import networkx as nx
import numpy as np

from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.schedule.brute_force import random_sp_edges
from memopt.remat.lower_bounds import peak_lower_bound
from memopt.remat.treedp import min_extra_cost


def random_sp(rng: np.random.Generator, n_ops: int, max_size: int = 12) -> TensorGraph:
    edges, n = random_sp_edges(rng, n_ops)
    tensors, ins, outs = [], [[] for _ in range(n)], [[] for _ in range(n)]
    for i, (u, w) in enumerate(edges):
        tensors.append(Tensor(f"e{i}", int(rng.integers(0, max_size))))
        outs[u].append(f"e{i}")
        ins[w].append(f"e{i}")
    for v in range(n):
        if not outs[v]:
            tensors.append(Tensor(f"o{v}", int(rng.integers(0, max_size)), output=True))
            outs[v].append(f"o{v}")
    ops = [Op(f"op{v}", tuple(ins[v]), tuple(outs[v]), cost=float(rng.integers(1, 10))) for v in range(n)]
    return TensorGraph.build(tensors, ops)


def width(graph: TensorGraph) -> int:
    """Largest antichain of the op DAG (Dilworth / König: n - maximum matching of the
    comparability bipartite graph)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(graph.num_ops))
    g.add_edges_from((int(a), int(b)) for a, b in zip(*graph.op_edges()))
    tc = nx.transitive_closure_dag(g)
    b = nx.Graph()
    left = [("L", v) for v in tc.nodes]
    b.add_nodes_from(left)
    b.add_nodes_from(("R", v) for v in tc.nodes)
    b.add_edges_from((("L", a), ("R", c)) for a, c in tc.edges)
    m = nx.bipartite.hopcroft_karp_matching(b, top_nodes=left)
    return graph.num_ops - len(m) // 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--cap", type=int, default=2)
    ap.add_argument("--graphs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.9, 0.8])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--brute-force", action="store_true",
                    help="also run the exhaustive search (memopt.remat.brute_force) for comparison; small graphs only")
    a = ap.parse_args()
    print(f"{'graph':>5} {'ops':>4} {'width':>5} {'P0':>5} {'ratio':>5} {'limit':>6} {'LB':>5} {'status':>11} "
          f"{'extra':>6} {'peak':>5} {'states':>9} {'seconds':>8}")
    for i in range(a.graphs):
        rng = np.random.default_rng(a.seed + i)
        g = random_sp(rng, a.ops, a.max_size)
        W = width(g)
        t0 = time.perf_counter()
        # P0: the least no-recomputation peak, from the scheduling core's exact portfolio
        from memopt.schedule import schedule
        res = schedule(g, method="exact", time_limit=a.time_limit)
        p0_seconds = time.perf_counter() - t0
        if res.status not in ("optimal", "certified"):
            print(f"{i:>5} {g.num_ops:>4} {W:>5}  P0 not proved within the time limit ({p0_seconds:.1f} s, "
                  f"status {res.status})")
            continue
        hi = int(res.peak)
        P0 = hi
        print(f"{i:>5} {g.num_ops:>4} {W:>5} {P0:>5}   no-recomputation optimum (memopt.schedule exact): {p0_seconds:.2f} s")
        for ratio in a.ratios:
            M = int(ratio * P0)
            lb = peak_lower_bound(g, a.cap)
            t0 = time.perf_counter()
            r = min_extra_cost(g, M, a.cap, time_limit=a.time_limit)
            dt = time.perf_counter() - t0
            if r.plan is not None:
                check_plan(g, r.plan, a.cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
            extra = "-" if r.extra_cost is None else str(r.extra_cost)
            peak = "-" if r.peak is None else str(r.peak)
            print(f"{i:>5} {g.num_ops:>4} {W:>5} {P0:>5} {ratio:>5} {M:>6} {lb:>5} {r.status:>11} {extra:>6} "
                  f"{peak:>5} {r.states:>9} {dt:>8.2f}", flush=True)
            if a.brute_force:
                from memopt.remat.brute_force import min_extra_cost as bf_min_extra_cost
                t0 = time.perf_counter()
                try:
                    c, _ = bf_min_extra_cost(g, M, a.cap)
                    verdict = "infeasible" if c is None else f"extra {c}"
                except OptionError as exc:  # the exhaustive search gives up past its state limit
                    verdict = f"gave up ({exc})"
                print(f"{'':>5} brute force: {verdict}, {time.perf_counter() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
