"""Minimum-weight closures of a signed DAG by minimum cuts: the one max-flow of memopt.

Every trap bound (:mod:`memopt.bounds.trap`) and the per-state trap of the exact search
(:mod:`memopt.schedule.ideal_search`) asks the same question: the cheapest ideal ``J`` with
some nodes forced in (``pin``) and some forced out (``pout``), i.e. a minimum-weight closure
of the free nodes, which is one minimum s-t cut of Picard's network (J.-C. Picard, "Maximal
closure of a graph and applications to combinatorial problems", Management Science 22, 1976):

* a source arc ``s -> x`` of capacity ``-w(x)`` for every free node with ``w(x) < 0``
  (leaving a release out of ``J`` forgoes its saving),
* a sink arc ``x -> t`` of capacity ``w(x)`` for every free node with ``w(x) > 0``
  (taking an allocation into ``J`` costs its bytes),
* an infinite arc ``x -> p`` for every edge ``(p, x)`` between free nodes (``x`` in ``J``
  forces its predecessor ``p`` in).

Then ``min w(J) = w(pin) + (sum of negative free weights) + maxflow``, and the source side of
a minimum cut is a cheapest ``J`` (free part). This module holds the network (in canonical
arc order, which the certificate checker rebuilds independently) and the one max-flow
implementation, Dinic's algorithm (E. A. Dinitz, "Algorithm for solution of a problem of
maximum flow in networks with power estimation", Soviet Math. Doklady 11, 1970) on an
adjacency-list residual network, as numba kernels that the exact search also calls from
inside its own compiled loop. Capacities are int64; the infinite capacity is a value above
any finite cut (the sum of ``|w|`` plus one), so no sum overflows for graphs within the
limits of :mod:`memopt.io` (every byte total at most 2**62).

>>> import numpy as np
>>> # x0 -> x1 (x1 needs x0); w = [+5, -8]: taking both saves 3
>>> tails, heads, caps = np.array([2, 0, 1]), np.array([1, 3, 0]), np.array([8, 5, 14])
>>> value, flows, side = max_flow(4, 2, 3, tails, heads, caps)
>>> int(value), flows.tolist(), side.tolist()
(5, [5, 5, 5], [True, True, True, False])
"""

from __future__ import annotations

import numpy as np

from memopt._jit import kernel

__all__ = ["max_flow", "max_flow_value", "residual_network", "dinic", "picard_network"]


@kernel
def residual_network(num_nodes, tails, heads, caps, first, arc_to, arc_cap, arc_next):
    """Fill the adjacency-list residual network of arcs ``tails[k] -> heads[k]``: arc ``2k``
    is arc ``k`` (capacity ``caps[k]``), arc ``2k + 1`` its reverse (capacity 0).
    ``first`` has ``num_nodes`` entries, the arc arrays ``2 * len(tails)``."""
    for x in range(num_nodes):
        first[x] = -1
    for k in range(tails.shape[0]):
        a = 2 * k
        u = tails[k]
        v = heads[k]
        arc_to[a] = v
        arc_cap[a] = caps[k]
        arc_next[a] = first[u]
        first[u] = a
        arc_to[a + 1] = u
        arc_cap[a + 1] = 0
        arc_next[a + 1] = first[v]
        first[v] = a + 1


@kernel
def dinic(num_nodes, s, t, first, arc_to, arc_cap, arc_next, level, it, queue, path):
    """Maximum s-t flow on a residual network (arcs paired ``a``, ``a ^ 1``), in place.

    Returns the flow value; ``arc_cap`` is left as the residual capacities and ``level`` as
    the BFS levels of the last (failed) search, so ``level[x] >= 0`` marks the source side of
    a minimum cut. ``level``, ``it``, ``queue``, ``path`` are work arrays of ``num_nodes``.
    """
    big = np.int64(1) << np.int64(62)
    flow = np.int64(0)
    while True:
        # BFS levels on the residual network
        for x in range(num_nodes):
            level[x] = -1
        level[s] = 0
        qh = 0
        qt = 0
        queue[qt] = s
        qt += 1
        while qh < qt:
            u = queue[qh]
            qh += 1
            a = first[u]
            while a != -1:
                if arc_cap[a] > 0 and level[arc_to[a]] < 0:
                    level[arc_to[a]] = level[u] + 1
                    queue[qt] = arc_to[a]
                    qt += 1
                a = arc_next[a]
        if level[t] < 0:
            break
        for x in range(num_nodes):
            it[x] = first[x]
        # blocking flow by repeated augmenting paths along the level graph
        while True:
            depth = 0
            u = s
            found = False
            while True:
                if u == t:
                    found = True
                    break
                a = it[u]
                while a != -1 and not (arc_cap[a] > 0 and level[arc_to[a]] == level[u] + 1):
                    a = arc_next[a]
                it[u] = a
                if a == -1:
                    if depth == 0:
                        break
                    level[u] = -1  # dead end
                    depth -= 1
                    u = arc_to[path[depth] ^ 1]
                    it[u] = arc_next[it[u]]
                    continue
                path[depth] = a
                depth += 1
                u = arc_to[a]
            if not found:
                break
            f = big
            for k in range(depth):
                if arc_cap[path[k]] < f:
                    f = arc_cap[path[k]]
            for k in range(depth):
                arc_cap[path[k]] -= f
                arc_cap[path[k] ^ 1] += f
            flow += f
    return flow


@kernel
def _solve_arcs(num_nodes, s, t, tails, heads, caps):
    """Dinic on the arcs' residual network: ``(value, residual capacities, BFS levels)``."""
    m = tails.shape[0]
    first = np.empty(num_nodes, np.int64)
    arc_to = np.empty(2 * m, np.int64)
    arc_cap = np.empty(2 * m, np.int64)
    arc_next = np.empty(2 * m, np.int64)
    residual_network(num_nodes, tails, heads, caps, first, arc_to, arc_cap, arc_next)
    level = np.empty(num_nodes, np.int64)
    it = np.empty(num_nodes, np.int64)
    queue = np.empty(num_nodes, np.int64)
    path = np.empty(num_nodes, np.int64)
    value = dinic(num_nodes, s, t, first, arc_to, arc_cap, arc_next, level, it, queue, path)
    return value, arc_cap, level


@kernel
def max_flow_value(num_nodes, s, t, tails, heads, caps):
    """The maximum ``s``-``t`` flow value of the arcs ``tails[k] -> heads[k]`` (a kernel, for
    compiled callers that need only the cut's value)."""
    return _solve_arcs(num_nodes, s, t, tails, heads, caps)[0]


@kernel
def _max_flow_kernel(num_nodes, s, t, tails, heads, caps):
    m = tails.shape[0]
    value, arc_cap, level = _solve_arcs(num_nodes, s, t, tails, heads, caps)
    flows = np.empty(m, np.int64)
    for k in range(m):
        flows[k] = caps[k] - arc_cap[2 * k]
    side = np.empty(num_nodes, np.bool_)
    for x in range(num_nodes):
        side[x] = level[x] >= 0
    return value, flows, side


def max_flow(num_nodes: int, s: int, t: int, tails, heads, caps):
    """Maximum ``s``-``t`` flow of the network ``tails[k] -> heads[k]`` (capacity ``caps[k]``).

    Returns ``(value, flows, source_side)``: the flow value, the flow on every arc (in the
    given order) and the source side of a minimum cut (a boolean mask over the nodes).
    """
    from memopt import _jit

    tails = np.ascontiguousarray(tails, np.int64)
    heads = np.ascontiguousarray(heads, np.int64)
    caps = np.ascontiguousarray(caps, np.int64)
    fn = _jit.choose(_max_flow_kernel, num_nodes + tails.shape[0])
    value, flows, side = fn(np.int64(num_nodes), np.int64(s), np.int64(t), tails, heads, caps)
    return int(value), flows, side


@kernel
def picard_network(pin, pout, w, edges, ea, eb, inf):
    """Arcs of one closure network in canonical order, in one pass.

    Canonical order: source arcs of the free negative nodes by increasing id, sink arcs of
    the free positive nodes by increasing id, then one infinite arc ``x -> p`` per edge
    ``(p, x)`` of ``edges`` (sorted lexicographically) inside the free set; node ``n`` is the
    source, ``n + 1`` the sink. The edge ``ea -> eb`` (if ``ea >= 0``) joins the edges at its
    lexicographic place (a hypothesised precedence).

    Returns ``(tails, heads, caps, w(pin), sum of negative free weights, free mask, clash)``;
    ``clash`` means a node is forced both in and out (the forcing is impossible).
    """
    n = w.shape[0]
    m = edges.shape[0]
    free = np.empty(n, np.bool_)
    clash = False
    w_pin = 0
    neg_free = 0
    count = 0
    for x in range(n):
        if pin[x] and pout[x]:
            clash = True
        free[x] = not (pin[x] or pout[x])
        if pin[x]:
            w_pin += w[x]
        if free[x] and w[x] != 0:
            count += 1
            if w[x] < 0:
                neg_free += w[x]
    size = count + m + 1
    tails = np.empty(size, np.int64)
    heads = np.empty(size, np.int64)
    caps = np.empty(size, np.int64)
    k = 0
    for x in range(n):
        if free[x] and w[x] < 0:
            tails[k] = n
            heads[k] = x
            caps[k] = -w[x]
            k += 1
    for x in range(n):
        if free[x] and w[x] > 0:
            tails[k] = x
            heads[k] = n + 1
            caps[k] = w[x]
            k += 1
    use_extra = ea >= 0 and free[ea] and free[eb]
    for i in range(m):
        p = edges[i, 0]
        x = edges[i, 1]
        if use_extra and (ea < p or (ea == p and eb <= x)):
            if not (ea == p and eb == x):
                tails[k] = eb
                heads[k] = ea
                caps[k] = inf
                k += 1
            use_extra = False
        if free[p] and free[x]:
            tails[k] = x
            heads[k] = p
            caps[k] = inf
            k += 1
    if use_extra:
        tails[k] = eb
        heads[k] = ea
        caps[k] = inf
        k += 1
    return tails[:k], heads[:k], caps[:k], w_pin, neg_free, free, clash
