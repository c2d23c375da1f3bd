"""memopt.reductions: hardness and equivalence constructions for capped recomputation.

* :mod:`memopt.reductions.knapsack` — 0/1 knapsack <-> capped recomputation on a
  series-parallel graph, value-preserving both ways (``proofs/remat_knapsack.md``);
* :mod:`memopt.reductions.three_partition` — 3-PARTITION -> the decision version for every
  fixed global cap ``k >= 1``, on graphs that are forests (treewidth 1 <= 2); strong
  NP-hardness, with the back-map plan -> 3-partition (``proofs/remat_np_hardness.md``).

Each comes with a small exact solver of its source problem; the tests solve the
recomputation side with :mod:`memopt.remat.brute_force` (and CP-SAT where brute force is too
slow). Nothing here is in a public solver list.

:func:`treewidth_at_most_two` decides exactly whether the undirected graph underlying a
tensor graph's op dependencies (one edge per producer-consumer pair) has treewidth <= 2.
"""

from __future__ import annotations

from memopt.core.tensor_graph import TensorGraph


def op_adjacency(graph: TensorGraph) -> dict[int, set[int]]:
    """Undirected simple graph on the ops: ``u -- v`` when one reads a tensor the other produces."""
    adj: dict[int, set[int]] = {v: set() for v in range(graph.num_ops)}
    src, dst = graph.op_edges()
    for a, b in zip(src.tolist(), dst.tolist()):
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    return adj


def treewidth_at_most_two(adj: dict[int, set[int]]) -> bool:
    """Exact test of treewidth <= 2 by series-parallel reduction.

    Repeatedly delete a vertex of degree <= 1, or replace a vertex of degree 2 by an edge
    between its two neighbours (merging a parallel edge). The graph has treewidth <= 2 iff
    this empties it: each rule preserves "treewidth <= 2" in both directions (for
    treewidth >= 2 graphs; a forest reduces to empty too), and a nonempty graph of minimum
    degree >= 3 contains a K4 minor (Dirac 1952), so has treewidth >= 3 (K4-minor-free
    graphs are exactly the graphs of treewidth <= 2).
    """
    g = {v: set(ns) for v, ns in adj.items()}
    stack = [v for v in g if len(g[v]) <= 2]
    while stack:
        v = stack.pop()
        if v not in g or len(g[v]) > 2:
            continue
        ns = list(g.pop(v))
        for u in ns:
            g[u].discard(v)
        if len(ns) == 2:
            a, b = ns
            g[a].add(b)
            g[b].add(a)
        stack.extend(u for u in ns if len(g[u]) <= 2)
    return not g
