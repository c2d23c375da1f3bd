"""Benchmark of the exact recomputation DP (memopt.remat.treedp) on random series-parallel graphs.

    python benchmarks/remat_treedp.py [--ops 14 20 60] [--cap 2] [--graphs 6] [--ratios 0.9 0.8]
                                      [--time-limit 10] [--warm] [--cpsat] [--dijkstra] [--brute-force]

For each random two-terminal series-parallel graph (``memopt.schedule.brute_force.random_sp_edges``:
edge subdivisions and parallel paths, one tensor per edge, sizes 0..11, costs 1..9, seeds
``--seed .. --seed + graphs - 1``) and each ratio r, the memory limit is ``floor(r * P0)`` where
``P0`` is the least no-recomputation peak, proved by the scheduling core
(``memopt.schedule(g, method="exact")``). Below the lower bound of ``memopt.remat.lower_bounds``
the DP answers ``infeasible`` at once. Prints one line per instance: ops, width (largest
antichain), P0, limit, peak lower bound, then the DP (A* order, the default): status, extra
cost, peak, states expanded, seconds; with ``--dijkstra`` the same search without the A*
bound (``use_astar=False``), with ``--warm`` the registry method ``treedp`` (the same DP
warm-started, within the same time limit, by the cost lower bound of
``memopt.remat.lower_bounds.cost_lower_bound`` and the ``heuristic`` method's plan: status,
extra cost, cost lower bound CLB, states (the DP's plus those of the feasibility search of
``memopt.remat.feasibility`` when no plan was known), seconds), with ``--cpsat`` the CP-SAT model through the recomputation
registry (same limit, same time limit, its status and extra cost), with ``--brute-force``
the exhaustive search (small graphs only). Every plan is re-checked by ``check_plan``.
Timings are wall-clock on this machine; they belong here, not in the tests.
"""

from __future__ import annotations

import argparse
import time

import networkx as nx
import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.remat.brute_force import random_sp_graph as random_sp
from memopt.remat.lower_bounds import peak_lower_bound
from memopt.remat.treedp import min_extra_cost


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


def _dp_cell(g, M, cap, time_limit, use_astar):
    t0, c0 = time.perf_counter(), time.process_time()
    r = min_extra_cost(g, M, cap, time_limit=time_limit, use_astar=use_astar)
    cpu = time.process_time() - c0
    dt, extra = _checked(g, cap, r, t0)
    peak = "-" if r.peak is None else str(r.peak)
    return f"{r.status:>11} {extra:>6} {peak:>5} {r.states:>8} {dt:>7.2f} {cpu:>6.2f}"


def _checked(g, cap, r, t0):
    """Seconds since ``t0`` and the extra cost as text, after checking ``r``'s plan (if any)
    with the independent checker against the peak and cost it claims."""
    dt = time.perf_counter() - t0
    if r.plan is not None:
        check_plan(g, r.plan, cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    return dt, "-" if r.extra_cost is None else str(r.extra_cost)


def _warm_cell(g, M, cap, time_limit):
    """The registry method ``treedp`` (the DP warm-started with the cost lower bound and the
    heuristic's plan, all within ``time_limit``): status, extra cost, cost lower bound, seconds."""
    from memopt.remat.registry import get_method
    t0, c0 = time.perf_counter(), time.process_time()
    r = get_method("treedp").load()(g, question="min_cost", memory_limit=M, cap=cap, time_limit=time_limit)
    cpu = time.process_time() - c0
    dt, extra = _checked(g, cap, r, t0)
    clb = "-" if r.cost_lower_bound is None else str(r.cost_lower_bound)
    # states: the DP's, plus the feasibility search's when it ran (no plan known after the warm start)
    states = r.stats.get("states", 0) + r.stats.get("feasibility", {}).get("states", 0)
    return f"{r.status:>11} {extra:>6} {clb:>4} {states:>8} {dt:>7.2f} {cpu:>6.2f}"


def _cpsat_cell(g, M, cap, time_limit):
    from memopt.remat.registry import get_method
    t0 = time.perf_counter()
    r = get_method("cpsat").load()(g, question="min_cost", memory_limit=M, cap=cap, time_limit=time_limit)
    dt = time.perf_counter() - t0
    extra = "-" if r.extra_cost is None else str(r.extra_cost)
    return f"{r.status:>11} {extra:>6} {dt:>7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, nargs="+", default=[60])
    ap.add_argument("--cap", type=int, default=2)
    ap.add_argument("--graphs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.9, 0.8])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--max-size", type=int, default=12)
    ap.add_argument("--dijkstra", action="store_true", help="also run the search without the A* bound")
    ap.add_argument("--warm", action="store_true",
                    help="also run the registry method treedp (warm start: cost lower bound + heuristic incumbent)")
    ap.add_argument("--cpsat", action="store_true", help="also run CP-SAT (memopt.remat.cpsat) on the same instances")
    ap.add_argument("--brute-force", action="store_true",
                    help="also run the exhaustive search (memopt.remat.brute_force) for comparison; small graphs only")
    a = ap.parse_args()
    from memopt.schedule import schedule
    head = f"{'ops':>4} {'graph':>5} {'width':>5} {'P0':>4} {'ratio':>5} {'limit':>5} {'LB':>4} | " \
           f"{'A* status':>11} {'extra':>6} {'peak':>5} {'states':>8} {'seconds':>7} {'cpu s':>6}"
    if a.dijkstra:
        head += f" | {'Dijkstra':>11} {'extra':>6} {'peak':>5} {'states':>8} {'seconds':>7} {'cpu s':>6}"
    if a.warm:
        head += f" | {'DP warm':>11} {'extra':>6} {'CLB':>4} {'states':>8} {'seconds':>7} {'cpu s':>6}"
    if a.cpsat:
        head += f" | {'CP-SAT':>11} {'extra':>6} {'seconds':>7}"
    print(head)
    for n_ops in a.ops:
        for i in range(a.graphs):
            rng = np.random.default_rng(a.seed + i)
            g = random_sp(rng, n_ops, a.max_size)
            W = width(g)
            # P0: the least no-recomputation peak, from the scheduling core's exact portfolio
            res = schedule(g, method="exact", time_limit=60)
            if res.status not in ("optimal", "certified"):
                print(f"{g.num_ops:>4} {a.seed + i:>5} {W:>5}  P0 not proved (status {res.status})")
                continue
            P0 = int(res.peak)
            for ratio in a.ratios:
                M = int(ratio * P0)
                lb = peak_lower_bound(g, a.cap)
                line = f"{g.num_ops:>4} {a.seed + i:>5} {W:>5} {P0:>4} {ratio:>5} {M:>5} {lb:>4} | " \
                       + _dp_cell(g, M, a.cap, a.time_limit, True)
                if a.dijkstra:
                    line += " | " + _dp_cell(g, M, a.cap, a.time_limit, False)
                if a.warm:
                    line += " | " + _warm_cell(g, M, a.cap, a.time_limit)
                if a.cpsat:
                    line += " | " + _cpsat_cell(g, M, a.cap, a.time_limit)
                print(line, flush=True)
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
