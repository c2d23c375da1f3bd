"""Optimal orders for trees: Liu's generalized tree pebbling (hill-valley merging).

Paper: J. W. H. Liu, "An application of generalized tree pebbling to sparse matrix
factorization", SIAM J. Algebraic Discrete Methods 8(3), 1987. Liu's algorithm finds an
order of an in-tree (every node feeds only its parent) with the least peak among *all*
topological orders, not only the post-orders: each subtree's optimal schedule is cut into
*hill-valley segments* and the children's segments are interleaved by decreasing
``hill - valley``. Liu's levels never go below the start (every node only adds its
output); ours can (an op frees a graph input), so a chain is first split at its lowest
level: the descending part is cut by Liu's rule on the time-reversed part and its segments
(which end lower than they start) run first, by increasing hill — the mirror image of
Liu's rule — then the ascending segments by decreasing ``hill - valley``
(:func:`merge_chains`). Both orders are the classical exchange-argument orders for
"up-down" jobs (a job raising memory by ``H`` and leaving it changed by ``R``).

When it applies in our model (``docs/design.md``, tensor graph)
---------------------------------------------------------------
Liu's model gives every node a fixed effect on memory: ``rise`` (what is held while it
runs, on top of the current level) and ``net`` (the change of level it leaves behind).
A tensor graph has such *attributable* effects exactly when every tensor's allocation and
release belong to fixed ops, i.e. when every non-resident tensor of positive size that is
neither a graph output nor a graph input kept to the end

* is read by at most one op (then it is allocated by its producer and freed by its
  consumer, or freed right after its producer when nobody reads it), and
* if it is a graph input, it is read by at most one op (freed by that op).

Then ``rise(v) = sum(s(out(v))) + w(v)`` and ``net(v) = (outputs that stay) - (inputs it
frees)``; workspace, several outputs per op, graph outputs anywhere, freeable graph inputs
and size-0 tensors are all allowed (:func:`attributable_effects`). Resident tensors and
graph inputs nobody reads only shift the constant level or the start, which no order
changes.

* **In-forests** (every op has at most one successor op): Liu's algorithm directly.
* **Out-forests** (every op has at most one predecessor op): the reversed problem is an
  in-forest. Reading an order backwards, the level before op ``v`` is the forward level
  after it, the level while it runs is unchanged, so ``rise' = rise - net`` and
  ``net' = -net``; the peak (the max over the running levels) is the same. Attributability
  matters here: an out-tree that *broadcasts* one tensor to several children is not in
  the class (the release happens at whichever child runs last), so it is rejected.

Outside the class, :func:`liu_tree_order` raises :class:`NotApplicable` (a
:class:`~memopt.errors.ScheduleError`). Optimality in this exact model is property-tested
against brute force (``tests/test_heuristics.py``).

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph, peak
>>> g = TensorGraph.build(
...     tensors=[Tensor("a", 8), Tensor("a2", 1), Tensor("b", 2), Tensor("b2", 6),
...              Tensor("r", 1, output=True)],
...     ops=[Op("A", (), ("a",)), Op("A2", ("a",), ("a2",)), Op("B", (), ("b",)),
...          Op("B2", ("b",), ("b2",)), Op("R", ("a2", "b2"), ("r",))])
>>> order = liu_tree_order(g)
>>> [g.op_names[v] for v in order], peak(g, order)
(['A', 'A2', 'B', 'B2', 'R'], 9)
"""

from __future__ import annotations

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.schedule.registry import NotApplicable, TimeLimitReached, deadline_checker

__all__ = ["NotApplicable", "attributable_effects", "is_in_tree", "is_out_tree", "liu_tree_order",
           "liu_forest_order", "hill_valley_segments", "merge_chains", "liu_method"]


def attributable_effects(graph: TensorGraph) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-op ``(rise, net)`` when every release belongs to one op; ``None`` otherwise.

    ``rise[v]`` is what ``v`` adds on top of the current level while it runs,
    ``net[v]`` the change of level it leaves. The level before the first op is a constant
    (every order starts from it), so the peak of an order is
    ``max(start, level0 + max_k(prefix of net before k + rise[k]))``.
    """
    n = graph.num_ops
    rise = graph.op_output_bytes.astype(np.int64) + graph.op_workspace
    net = np.zeros(n, np.int64)
    # each (tensor, consumer) pair appears once in the CSR (inputs are de-duplicated per op)
    ncons = np.diff(graph.cons_ptr)
    size = graph.tensor_size.astype(np.int64)
    prod = graph.tensor_producer
    live = (size > 0) & ~graph.tensor_resident
    out = graph.tensor_output
    produced = live & (prod >= 0)
    inputs = live & (prod < 0) & ~out
    if np.any((produced & ~out & (ncons >= 2)) | (inputs & (ncons >= 2))):
        return None  # a tensor freed by whichever of two readers runs last
    first = graph.cons_idx[np.minimum(graph.cons_ptr[:-1], max(graph.cons_idx.shape[0] - 1, 0))] \
        if graph.cons_idx.shape[0] else np.zeros(size.shape[0], np.int64)
    gain = produced & (out | (ncons == 1))          # held after its producer ran
    np.add.at(net, prod[gain], size[gain])
    freed = (produced & ~out & (ncons == 1)) | (inputs & (ncons == 1))   # freed by its one reader
    np.add.at(net, first[freed], -size[freed])
    # a produced tensor with no consumer is held only while its producer runs (in rise)
    return rise, net


def _op_degrees(graph: TensorGraph) -> tuple[np.ndarray, np.ndarray]:
    s, d = graph.op_edges()
    n = graph.num_ops
    return np.bincount(s, minlength=n), np.bincount(d, minlength=n)


def is_in_tree(graph: TensorGraph) -> bool:
    """True when the op graph is an in-forest with attributable memory effects (see module)."""
    out_deg, _ = _op_degrees(graph)
    return bool(np.all(out_deg <= 1)) and attributable_effects(graph) is not None


def is_out_tree(graph: TensorGraph) -> bool:
    """True when the op graph is an out-forest with attributable memory effects (see module)."""
    _, in_deg = _op_degrees(graph)
    return bool(np.all(in_deg <= 1)) and attributable_effects(graph) is not None


# ---------------------------------------------------------------------------- chains
def _canonical(during: np.ndarray, after: np.ndarray, start: int) -> list[tuple[int, int, int]]:
    """Liu's hill-valley cut of a chain with absolute running levels ``during`` and levels
    ``after`` each step, starting at ``start``: the first hill is the highest running level
    (last occurrence), the first valley the lowest level after it (last occurrence), then
    the same on the rest. Returns ``(end, H, R)`` per segment (``end`` exclusive, ``H`` and
    ``R`` relative to the segment's starting level)."""
    m = during.shape[0]
    segs = []
    s = 0
    lvl = start
    while s < m:
        d = during[s:]
        h = int(d.max())
        hpos = s + int(np.flatnonzero(d == h)[-1])
        a = after[hpos:]
        val = int(a.min())
        vpos = hpos + int(np.flatnonzero(a == val)[-1])
        segs.append((vpos + 1, h - lvl, val - lvl))
        lvl = val
        s = vpos + 1
    return segs


def hill_valley_segments(rise, net, chain) -> list[tuple[int, int, int]]:
    """Cut a chain into segments that can be interleaved independently (Liu 1987).

    Levels are relative to the chain's start. The part up to the (first) lowest level is
    the *descending* part: it is cut by Liu's rule applied to the time-reversed part, so its
    segments end lower than they start (``R < 0``) with non-decreasing hills; the rest is
    cut by Liu's rule and its segments have ``R >= 0`` with non-increasing ``H - R``.
    Returns ``(end, H, R)`` per segment, ``end`` exclusive in chain positions.
    """
    m = len(chain)
    if m == 0:
        return []
    idx = np.asarray(chain, dtype=np.int64)
    r = np.asarray(rise, dtype=np.int64)[idx]
    nt = np.asarray(net, dtype=np.int64)[idx]
    after = np.cumsum(nt)
    before = after - nt
    during = before + r
    segs: list[tuple[int, int, int]] = []
    gmin = int(after.min())
    q = int(np.flatnonzero(after == gmin)[0]) if gmin < 0 else -1
    if q >= 0:
        # reversed descending part: steps q..0, running levels unchanged, "after" = before
        rsegs = _canonical(during[q::-1], before[q::-1], gmin)
        fwd = []
        s_r = 0
        for end_r, H_r, R_r in rsegs:
            # reversed positions [s_r, end_r) are forward positions [q-end_r+1, q-s_r]
            fwd.append((q - s_r + 1, H_r - R_r, -R_r))
            s_r = end_r
        segs.extend(reversed(fwd))
    for end, H, R in _canonical(during[q + 1:], after[q + 1:], gmin if q >= 0 else 0):
        segs.append((q + 1 + end, H, R))
    return segs


def merge_chains(rise, net, chains: list[list[int]]) -> list[int]:
    """Interleave independent chains with the least peak: cut each into segments
    (:func:`hill_valley_segments`) and run first the segments that lower memory (``R < 0``)
    by increasing hill, then the others by decreasing ``hill - residual`` (Liu 1987 for
    the latter; the former is the same rule on the reversed problem). Ties keep chain order."""
    if len(chains) == 1:
        return list(chains[0])
    pieces = []
    for ci, ch in enumerate(chains):
        s = 0
        for k, (end, H, R) in enumerate(hill_valley_segments(rise, net, ch)):
            key = (0, H) if R < 0 else (1, -(H - R))
            pieces.append((key, ci, k, s, end))
            s = end
    pieces.sort(key=lambda p: (p[0], p[1], p[2]))
    out: list[int] = []
    for _, ci, _, s, end in pieces:
        out.extend(chains[ci][s:end])
    return out


def liu_forest_order(children: list[list[int]], rise, net, *, deadline: float | None = None) -> list[int]:
    """Liu's algorithm on an in-forest given as ``children[v]`` (each node has at most one
    parent): every node after its children, least peak of ``prefix(net) + rise``.
    Raises :class:`TimeLimitReached` past ``deadline`` (a ``time.perf_counter()`` value)."""
    check = deadline_checker(deadline)
    n = len(children)
    parent = np.full(n, -1, np.int64)
    for v, cs in enumerate(children):
        for c in cs:
            parent[c] = v
    chains: list[list[int] | None] = [None] * n
    # post-order without recursion
    pending = [len(cs) for cs in children]
    stack = [v for v in range(n) if pending[v] == 0]
    roots = []
    while stack:
        check()
        v = stack.pop()
        subs = [chains[c] for c in children[v]]
        for c in children[v]:
            chains[c] = None
        # a single child's chain is taken over, not copied: a long chain stays linear
        merged = subs[0] if len(subs) == 1 else merge_chains(rise, net, subs) if subs else []
        merged.append(v)
        chains[v] = merged
        p = int(parent[v])
        if p < 0:
            roots.append(v)
        else:
            pending[p] -= 1
            if pending[p] == 0:
                stack.append(p)
    roots.sort()
    return merge_chains(rise, net, [chains[r] for r in roots]) if roots else []


def liu_tree_order(graph: TensorGraph, *, deadline: float | None = None) -> np.ndarray:
    """Optimal op order of an in-forest or out-forest tensor graph (see the module docstring).

    Raises :class:`NotApplicable` when the graph is in neither class, and
    :class:`TimeLimitReached` past ``deadline`` (a ``time.perf_counter()`` value).
    """
    eff = attributable_effects(graph)
    if eff is None:
        raise NotApplicable("Liu's algorithm needs every tensor freed by one fixed op "
                            "(a tensor or graph input read by two ops is not)")
    rise, net = eff
    n = graph.num_ops
    out_deg, in_deg = _op_degrees(graph)
    s, d = graph.op_edges()
    if np.all(out_deg <= 1):
        children: list[list[int]] = [[] for _ in range(n)]
        for a, b in zip(s.tolist(), d.tolist()):
            children[b].append(a)
        return np.asarray(liu_forest_order(children, rise, net, deadline=deadline), dtype=np.int64)
    if np.all(in_deg <= 1):
        children = [[] for _ in range(n)]
        for a, b in zip(s.tolist(), d.tolist()):
            children[a].append(b)
        order = liu_forest_order(children, rise - net, -net, deadline=deadline)
        return np.asarray(order[::-1], dtype=np.int64)
    raise NotApplicable("the op graph is neither an in-forest (one successor per op) "
                        "nor an out-forest (one predecessor per op)")


def liu_method(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0):
    """Registry method ``liu``: :func:`liu_tree_order` (optimal when it applies, Liu 1987; the
    portfolio still proves the result with a checkable bound rather than trusting the class)."""
    import time

    from memopt.schedule.result import MethodResult, order_result

    if problem.graph is None:
        raise NotApplicable("Liu's algorithm schedules tensor graphs")
    try:
        order = liu_tree_order(problem.graph, deadline=time.perf_counter() + max(0.0, float(time_limit)))
    except TimeLimitReached:
        return MethodResult(order=None, peak=None, stats={"timed_out": True})
    return order_result(problem, order, exact_on_class=True)
