"""PyTorch Inductor's peak-memory reordering heuristics, re-implemented over a TensorGraph.

Source: ``torch/_inductor/memory.py`` of PyTorch (read at commit
``a900a4db24854f738b70071b577ff81020f59600``): ``topological_sort_lpmf``,
``topological_sort_bfs``, ``topological_sort_dfs``, ``estimate_peak_memory`` and
``reorder_for_peak_memory`` ("best of baseline + the three"). This module re-implements
their logic over memopt's integer arrays; it is not a copy of that code.

Mapping onto the tensor graph (``docs/design.md``, tensor graph)
----------------------------------------------------------------
* Inductor's *scheduler nodes* are our ops; its ``mpi_node.index`` (the tie-breaker of all
  three heuristics) is the op's position in the order the heuristics are given — the
  baseline order of ``reorder_for_peak_memory``; :func:`lpmf_order` & co. take it as
  ``input_order`` (default: op ids ``0..n-1``).
* Its *scheduler buffers* are our produced tensors (``size_alloc = size_free = s(t)``;
  an op with several outputs is a ``MultiOutputLayout`` whose bytes are all charged when
  the op runs, which is what Inductor's size split amounts to).
* Its *freeable input buffers* are our non-resident graph inputs that some op reads.
  Resident tensors play the role of Inductor's non-freeable inputs (``primals_*``,
  ``arg*``): Inductor ignores them; they are a constant offset in memopt anyway.
* Graph outputs are our ``tensor_output`` tensors. Inductor has no workspace: its
  estimate ignores ``w(v)`` (memopt's :func:`~memopt.core.evaluate.peak` does not).
* ``pred_nodes(v)`` are the distinct producers of ``v``'s inputs and ``succ_nodes(u)`` the
  distinct consumers of ``u``'s outputs, i.e. our op-level DAG.

Inductor's own estimate (:func:`inductor_estimate`) differs from memopt's exact ``peak``
only in what Inductor cannot see: workspace, resident tensors and graph inputs that no op
reads. :func:`inductor_best_order` selects with Inductor's estimate, as Inductor does; the
caller evaluates the chosen order with memopt's exact :func:`~memopt.core.evaluate.peak`.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph, peak
>>> g = TensorGraph.build(
...     tensors=[Tensor("a", 10), Tensor("b", 1), Tensor("c", 5, output=True),
...              Tensor("d", 1, output=True)],
...     ops=[Op("A", (), ("a",)), Op("B", (), ("b",)), Op("C", ("a",), ("c",)),
...          Op("D", ("b",), ("d",))])
>>> lpmf_order(g).tolist(), peak(g, lpmf_order(g))
([1, 3, 0, 2], 16)
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from memopt.core.evaluate import order_indices, validate_order
from memopt.core.tensor_graph import TensorGraph

__all__ = ["lpmf_order", "bfs_order", "dfs_order", "inductor_estimate", "inductor_best_order",
           "inductor_orders"]


class _InductorView:
    """The per-node / per-buffer planning info Inductor computes, as Python lists of ints."""

    def __init__(self, graph: TensorGraph, input_order: Sequence[int] | None):
        n = graph.num_ops
        self.n = n
        if input_order is None:
            self.nodes = list(range(n))
        else:
            idx = order_indices(graph, input_order)
            validate_order(graph, idx)
            self.nodes = [int(v) for v in idx]
        self.index = [0] * n
        for k, v in enumerate(self.nodes):
            self.index[v] = k
        size = graph.tensor_size
        prod = graph.tensor_producer
        resident = graph.tensor_resident
        ncons = np.diff(graph.cons_ptr)
        # buffers Inductor tracks: produced tensors and freeable (non-resident, read) inputs
        self.tracked = (prod >= 0) | (~resident & (ncons > 0))
        self.size = [int(s) for s in size]
        self.is_output = [bool(x) for x in graph.tensor_output]
        self.producer = [int(p) for p in prod]
        self.consumers = [sorted(set(int(c) for c in graph.consumers_of(t))) for t in range(graph.num_tensors)]
        self.node_size = [int(x) for x in graph.op_output_bytes]
        self.outputs = [[int(t) for t in graph.outputs_of(v)] for v in range(n)]
        self.pred_buffers = []
        for v in range(n):
            seen = []
            for t in graph.inputs_of(v):
                t = int(t)
                if self.tracked[t] and t not in seen:
                    seen.append(t)
            self.pred_buffers.append(seen)
        self.pred_nodes = [sorted({self.producer[t] for t in self.pred_buffers[v] if self.producer[t] >= 0})
                           for v in range(n)]
        self.succ_nodes = [sorted({c for t in self.outputs[v] for c in self.consumers[t]}) for v in range(n)]
        self.freeable_inputs = [t for t in range(graph.num_tensors) if prod[t] < 0 and self.tracked[t]]


def _estimate(view: _InductorView, order: Sequence[int]) -> int:
    """``estimate_peak_memory``: buffers live from their creation step to their last use."""
    n = view.n
    step = [0] * n
    for k, v in enumerate(order):
        step[int(v)] = k
    memory = [0] * (n + 1)
    for t in view.freeable_inputs:
        end = n - 1 if view.is_output[t] else max(step[c] for c in view.consumers[t])
        memory[0] += view.size[t]
        memory[end + 1] -= view.size[t]
    for k, v in enumerate(order):
        for t in view.outputs[int(v)]:
            if view.is_output[t]:
                end = n - 1
            else:
                end = max((step[c] for c in view.consumers[t]), default=k)
            memory[k] += view.size[t]
            memory[end + 1] -= view.size[t]
    best = cur = 0
    for x in memory:
        cur += x
        best = max(best, cur)
    return best


def inductor_estimate(graph: TensorGraph, order: Sequence[int]) -> int:
    """Inductor's ``estimate_peak_memory`` of an op order (no workspace, no resident tensors)."""
    view = _InductorView(graph, None)
    idx = order_indices(graph, order)
    validate_order(graph, idx)
    return _estimate(view, idx)


def _lpmf(view: _InductorView) -> list[int]:
    n = view.n
    indegree = [len(view.pred_nodes[v]) for v in range(n)]
    ready = {v for v in range(n) if indegree[v] == 0}
    outdegree = {}
    for t in range(len(view.size)):
        if view.tracked[t]:
            outdegree[t] = len(view.consumers[t]) + (1 if view.is_output[t] else 0)
    live = sum(view.size[t] for t in view.freeable_inputs)
    output_memory = sum(view.size[t] for t in range(len(view.size)) if view.is_output[t] and view.tracked[t])
    max_memory = max(live, output_memory)
    to_free = [0] * n
    for v in range(n):
        for t in view.pred_buffers[v]:
            if outdegree[t] == 1:
                to_free[v] += view.size[t]
        for t in view.outputs[v]:
            if outdegree[t] == 0:
                to_free[v] += view.size[t]
    schedule: list[int] = []
    while ready:
        # Inductor: min over ready of (max(live + size, max so far), size - to_free, index)
        sel = min(ready, key=lambda v: (max(live + view.node_size[v], max_memory),
                                        view.node_size[v] - to_free[v], view.index[v]))
        ready.remove(sel)
        schedule.append(sel)
        live += view.node_size[sel]
        max_memory = max(max_memory, live)
        live -= to_free[sel]
        for s in view.succ_nodes[sel]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.add(s)
        for t in view.pred_buffers[sel]:
            outdegree[t] -= 1
            if outdegree[t] == 1:
                # the one use left now frees the buffer (Inductor credits every consumer;
                # those already scheduled are never looked at again)
                for c in view.consumers[t]:
                    to_free[c] += view.size[t]
    return schedule


def _bfs(view: _InductorView) -> list[int]:
    n = view.n
    indegree = [len(view.pred_nodes[v]) for v in range(n)]
    when = [-1] * n
    heap: list = []
    for v in view.nodes:  # Inductor pushes in its node-list order; the key decides anyway
        if indegree[v] == 0:
            heapq.heappush(heap, ((), view.index[v], v))
    schedule: list[int] = []
    while heap:
        _, _, v = heapq.heappop(heap)
        when[v] = len(schedule)
        schedule.append(v)
        for s in view.succ_nodes[v]:
            indegree[s] -= 1
            if indegree[s] == 0:
                # priority: sorted execution steps of the predecessors (lexicographic), then index
                prio = tuple(sorted(when[p] for p in view.pred_nodes[s]))
                heapq.heappush(heap, (prio, view.index[s], s))
    return schedule


def _dfs(view: _InductorView) -> list[int]:
    n = view.n
    size_with_reads = [view.node_size[v] + sum(view.size[t] for t in view.pred_buffers[v]) for v in range(n)]

    def key(v):
        return (size_with_reads[v], view.index[v])

    # Inductor's dfs follows `unmet_dependencies`: every produced tensor a node reads
    deps = [sorted({view.producer[t] for t in view.pred_buffers[v] if view.producer[t] >= 0}, key=key)
            for v in range(n)]
    seen = [False] * n
    result: list[int] = []
    for root in sorted(range(n), key=key):
        if seen[root]:
            continue
        # iterative post-order DFS (same visiting order as Inductor's recursion)
        seen[root] = True
        stack = [(root, 0)]
        while stack:
            v, i = stack[-1]
            if i < len(deps[v]):
                stack[-1] = (v, i + 1)
                u = deps[v][i]
                if not seen[u]:
                    seen[u] = True
                    stack.append((u, 0))
            else:
                stack.pop()
                result.append(v)
    return result


def lpmf_order(graph: TensorGraph, input_order: Sequence[int] | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_lpmf`` ("least peak memory first").

    Keeps the live memory and the maximum so far; among ready ops it picks the smallest
    ``(max(live + output bytes, max so far), output bytes - bytes it frees, index)``.
    ``input_order`` gives the indices used to break ties (default: op ids).
    """
    return np.asarray(_lpmf(_InductorView(graph, input_order)), dtype=np.int64)


def bfs_order(graph: TensorGraph, input_order: Sequence[int] | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_bfs``: FIFO by the sorted steps of an op's predecessors."""
    return np.asarray(_bfs(_InductorView(graph, input_order)), dtype=np.int64)


def dfs_order(graph: TensorGraph, input_order: Sequence[int] | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_dfs``: post-order DFS visiting ops by ascending
    ``output bytes + bytes read`` (then index), dependencies in the same order."""
    return np.asarray(_dfs(_InductorView(graph, input_order)), dtype=np.int64)


def inductor_orders(graph: TensorGraph, baseline_order: Sequence[int] | None = None) -> dict:
    """``{name: (order, inductor estimate)}`` for baseline, lpmf, bfs and dfs, in that order.

    As in ``reorder_for_peak_memory``, the heuristics see the ops in ``baseline_order``
    (default: the op ids), so their ties break by position in it.
    """
    view = _InductorView(graph, baseline_order)
    base = np.asarray(view.nodes, dtype=np.int64)
    out = {"baseline": base}
    out["lpmf"] = np.asarray(_lpmf(view), dtype=np.int64)
    out["bfs"] = np.asarray(_bfs(view), dtype=np.int64)
    out["dfs"] = np.asarray(_dfs(view), dtype=np.int64)
    return {k: (v, _estimate(view, v)) for k, v in out.items()}


def inductor_best_order(graph: TensorGraph, baseline_order: Sequence[int] | None = None) -> np.ndarray:
    """Inductor's ``reorder_for_peak_memory``: the order with the lowest *Inductor* estimate
    among the baseline and lpmf, bfs, dfs (ties go to the earlier one, as Python's ``min``).

    Evaluate the result with :func:`memopt.core.evaluate.peak` to compare with memopt.
    """
    res = inductor_orders(graph, baseline_order)
    best = min(res.values(), key=lambda r: r[1])  # first minimum, like Inductor
    return best[0]


# ---------------------------------------------------------------------------- registry methods
def _graph_of(problem, name: str) -> TensorGraph:
    from memopt.schedule.registry import NotApplicable

    if problem.graph is None:
        raise NotApplicable(f"method {name!r} schedules tensor graphs (Inductor's scheduler nodes and buffers), "
                            f"not statement programs or bare DAGs")
    return problem.graph


def _inductor_method(name: str, fn):
    def method(problem, *, time_limit: float = 0.0, incumbent=None, lower_bound=None, seed: int = 0):
        from memopt.schedule.result import order_result

        return order_result(problem, fn(_graph_of(problem, name), problem.baseline_order()))

    method.__name__ = f"{name}_method"
    method.__doc__ = f"Registry method ``{name}``: :func:`{fn.__name__}` on the input order."
    return method


lpmf_method = _inductor_method("lpmf", lpmf_order)
bfs_method = _inductor_method("bfs", bfs_order)
dfs_method = _inductor_method("dfs", dfs_order)
inductor_method = _inductor_method("inductor", inductor_best_order)
