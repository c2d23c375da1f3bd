"""Least-peak orders of series-parallel op graphs (Kayaaslan, Lambert, Marchal and Uçar).

Paper: E. Kayaaslan, T. Lambert, L. Marchal and B. Uçar, "Scheduling series-parallel task
graphs to minimize peak memory", Theoretical Computer Science 707 (2018) 1-23. Their model:
a two-terminal series-parallel (TTSP) task graph whose *edges* carry data sizes; while a
task runs, memory holds its input and output edges and every other live edge (produced,
not yet consumed). Their algorithm follows the decomposition tree: a series composition
runs its parts one after the other; a parallel composition runs its source, then
interleaves the interiors of its branches by Liu's hill-valley merge of each branch's
optimal schedule, then its sink; they prove the result optimal.

Mapping to our model (``docs/design.md``, tensor graph)
-------------------------------------------------------
Their edge ``(u, v)`` of size ``s`` is our tensor produced by ``u`` and read by ``v`` only:
allocated when ``u`` runs, live while ``v`` runs, freed after ``v`` — exactly our rule. So
the two models coincide on *attributable* graphs (every tensor is released by one fixed
op; :func:`memopt.schedule.trees.attributable_effects`): each op then has a fixed ``rise``
(outputs + workspace, held while it runs) and ``net`` (change of level it leaves), graph
inputs read by one op are edges from the source, graph outputs edges to the sink, a
workspace or an unread output is a task's own temporary memory. On such graphs this module
is exact; the merge of :func:`memopt.schedule.trees.merge_chains` also orders segments that
*lower* memory (which occur here: a branch starts by freeing what its source produced). We
check optimality against brute force on random SP graphs of this class
(``tests/test_heuristics.py``). Other graphs (a tensor read by two ops) are rejected with
:class:`~memopt.schedule.trees.NotApplicable`; so is a graph whose op DAG, completed by a
virtual source before every op without predecessors and a virtual sink after every op
without successors, is not TTSP.

Recognition is by series and parallel reductions (Valdes, Tarjan and Lawler, "The
recognition of series parallel digraphs", SIAM J. Comput. 11(2), 1982): a node with one
incoming and one outgoing edge is contracted (series), parallel edges are merged; the
graph is TTSP iff one edge from the source to the sink remains. Every contraction builds
the schedule of the interior it removes.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph, peak
>>> g = TensorGraph.build(
...     tensors=[Tensor("x1", 4), Tensor("x2", 4), Tensor("y1", 6), Tensor("y2", 1),
...              Tensor("z", 1, output=True)],
...     ops=[Op("S", (), ("x1", "x2")), Op("A", ("x1",), ("y1",)), Op("B", ("x2",), ("y2",)),
...          Op("T", ("y1", "y2"), ("z",))])
>>> order = series_parallel_order(g)
>>> [g.op_names[v] for v in order], peak(g, order)
(['S', 'B', 'A', 'T'], 11)
"""

from __future__ import annotations

from collections import deque

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.schedule.registry import NotApplicable, TimeLimitReached, deadline_checker
from memopt.schedule.trees import attributable_effects, merge_chains

__all__ = ["series_parallel_order", "is_series_parallel", "sp_chain", "NotApplicable", "series_parallel_method"]


class _Par:
    """A parallel composition not yet merged: the interiors of its branches."""

    __slots__ = ("branches",)

    def __init__(self, branches):
        self.branches = branches


class _Cat:
    """A series composition not yet flattened (concatenating lists at every reduction would
    make a long chain quadratic)."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = parts


def _interior(tree, rise, net) -> list[int]:
    """The schedule of an edge's interior: a list, a pending series concatenation or a
    pending parallel merge (series parts are flattened without recursion)."""
    out: list[int] = []
    stack = [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, _Cat):
            stack.extend(reversed(t.parts))
        elif isinstance(t, _Par):
            chains = [_interior(b, rise, net) for b in t.branches]
            chains = [c for c in chains if c]
            if chains:
                out.extend(merge_chains(rise, net, chains))
        else:
            out.extend(t)
    return out


def sp_chain(succ: list[set[int]], rise, net, source: int, sink: int, *,
             deadline: float | None = None) -> list[int] | None:
    """Least-peak order of the nodes strictly between ``source`` and ``sink`` of a TTSP
    digraph (``succ`` adjacency sets, modified), or ``None`` when it is not TTSP.
    Raises :class:`TimeLimitReached` past ``deadline`` (a ``time.perf_counter()`` value)."""
    check = deadline_checker(deadline)
    n = len(succ)
    pred: list[set[int]] = [set() for _ in range(n)]
    for u in range(n):
        for w in succ[u]:
            pred[w].add(u)
    edge: dict[tuple[int, int], object] = {(u, w): [] for u in range(n) for w in succ[u]}
    queue = deque(v for v in range(n) if v not in (source, sink) and len(pred[v]) == 1 and len(succ[v]) == 1)
    alive = n
    while queue:
        check()
        x = queue.popleft()
        if len(pred[x]) != 1 or len(succ[x]) != 1 or x in (source, sink):
            continue
        u = next(iter(pred[x]))
        w = next(iter(succ[x]))
        series = _Cat([edge.pop((u, x)), [x], edge.pop((x, w))])
        succ[u].discard(x)
        pred[w].discard(x)
        pred[x].clear()
        succ[x].clear()
        alive -= 1
        if (u, w) in edge:  # parallel reduction
            old = edge[(u, w)]
            branches = (old.branches if isinstance(old, _Par) else [old]) + [series]
            edge[(u, w)] = _Par(branches)
        else:
            edge[(u, w)] = series
            succ[u].add(w)
            pred[w].add(u)
        for y in (u, w):
            if y not in (source, sink) and len(pred[y]) == 1 and len(succ[y]) == 1:
                queue.append(y)
    if alive != 2 or set(edge) != {(source, sink)}:
        return None
    return _interior(edge[(source, sink)], rise, net)


def _augmented(graph: TensorGraph):
    n = graph.num_ops
    s, d = graph.op_edges()
    succ: list[set[int]] = [set() for _ in range(n + 2)]
    for a, b in zip(s.tolist(), d.tolist()):
        succ[a].add(b)
    src, snk = n, n + 1
    indeg = np.bincount(d, minlength=n)
    outdeg = np.bincount(s, minlength=n)
    for v in range(n):
        if indeg[v] == 0:
            succ[src].add(v)
        if outdeg[v] == 0:
            succ[v].add(snk)
    return succ, src, snk


def is_series_parallel(graph: TensorGraph) -> bool:
    """True when the op DAG plus a virtual source and sink is two-terminal series-parallel
    (the memory model's attributability is not checked here)."""
    if graph.num_ops == 0:
        return True
    succ, src, snk = _augmented(graph)
    zeros = np.zeros(graph.num_ops + 2, np.int64)
    return sp_chain(succ, zeros, zeros, src, snk) is not None


def series_parallel_order(graph: TensorGraph, *, deadline: float | None = None) -> np.ndarray:
    """Least-peak op order of an attributable series-parallel tensor graph (module docstring).

    Raises :class:`~memopt.schedule.trees.NotApplicable` outside that class.
    """
    eff = attributable_effects(graph)
    if eff is None:
        raise NotApplicable("the series-parallel algorithm needs every tensor freed by one fixed op "
                            "(a tensor or graph input read by two ops is not)")
    n = graph.num_ops
    if n == 0:
        return np.zeros(0, np.int64)
    rise = np.concatenate([eff[0], [0, 0]])
    net = np.concatenate([eff[1], [0, 0]])
    succ, src, snk = _augmented(graph)
    chain = sp_chain(succ, rise, net, src, snk, deadline=deadline)
    if chain is None:
        raise NotApplicable("the op graph (with a virtual source and sink) is not two-terminal series-parallel")
    return np.asarray(chain, dtype=np.int64)


def series_parallel_method(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0):
    """Registry method ``series-parallel``: :func:`series_parallel_order` within the time limit."""
    import time

    from memopt.schedule.result import MethodResult, order_result

    if problem.graph is None:
        raise NotApplicable("the series-parallel algorithm schedules tensor graphs")
    try:
        order = series_parallel_order(problem.graph, deadline=time.perf_counter() + max(0.0, float(time_limit)))
    except TimeLimitReached:
        return MethodResult(order=None, peak=None, stats={"timed_out": True})
    return order_result(problem, order, exact_on_class=True)
