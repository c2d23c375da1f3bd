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
import time
import weakref
from bisect import bisect_right
from typing import Sequence

import numpy as np

from memopt.core.evaluate import order_indices, validate_order
from memopt.core.tensor_graph import TensorGraph

__all__ = ["lpmf_order", "bfs_order", "dfs_order", "inductor_estimate", "inductor_best_order",
           "inductor_orders", "OutOfTime"]


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
        self.size = size.tolist()
        self.is_output = graph.tensor_output.astype(bool).tolist()
        self.producer = prod.tolist()
        # plain lists of the CSR rows: the heuristics below are pure Python over them
        self.consumers = [sorted(set(row)) for row in _rows(graph.cons_ptr, graph.cons_idx)]
        self.node_size = graph.op_output_bytes.tolist()
        self.outputs = _rows(graph.op_out_ptr, graph.op_out_idx)
        tracked = self.tracked.tolist()
        self.pred_buffers = [[t for t in dict.fromkeys(row) if tracked[t]]
                             for row in _rows(graph.op_in_ptr, graph.op_in_idx)]
        producer = self.producer
        self.pred_nodes = [sorted({producer[t] for t in row if producer[t] >= 0}) for row in self.pred_buffers]
        consumers = self.consumers
        self.succ_nodes = [sorted({c for t in row for c in consumers[t]}) for row in self.outputs]
        self.orders: dict = {}   # filled by _order
        self.freeable_inputs = [t for t in range(graph.num_tensors) if prod[t] < 0 and self.tracked[t]]


_last_view: list = []   # [(weak reference to the graph, input order key, view)]: one entry


def _view(graph: TensorGraph, input_order) -> _InductorView:
    """The view of ``graph`` with ``input_order``, reused while the same graph and order
    come back (a scheduling call runs lpmf, bfs, dfs and their best-of in turn), with the
    orders already computed on it (``view.orders``)."""
    key = None if input_order is None else np.asarray(input_order, dtype=np.int64).tobytes()
    if _last_view:
        ref, k, view = _last_view[0]
        if ref() is graph and k == key:
            return view
    view = _InductorView(graph, input_order)
    _last_view[:] = [(weakref.ref(graph), key, view)]
    return view


def _order(view: _InductorView, name: str, deadline: float | None) -> list[int]:
    """``_lpmf``, ``_bfs`` or ``_dfs`` of ``view``, computed once per view."""
    if name not in view.orders:
        view.orders[name] = _HEURISTICS[name](view, deadline)
    return view.orders[name]


def _rows(ptr: np.ndarray, idx: np.ndarray) -> list:
    """The rows of a CSR structure as lists of ints."""
    p, x = ptr.tolist(), idx.tolist()
    return [x[p[i]:p[i + 1]] for i in range(len(p) - 1)]


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
    view = _view(graph, None)
    idx = order_indices(graph, order)
    validate_order(graph, idx)
    return _estimate(view, idx)


class OutOfTime(Exception):
    """A heuristic of this module reached its deadline before finishing its order."""


#: the heuristics look at the clock once per this many scheduled ops
CLOCK_EVERY = 256


def _check_clock(deadline: float | None, done: int) -> None:
    """Raise :class:`OutOfTime` past ``deadline``, looking at the clock every
    :data:`CLOCK_EVERY` calls (``done`` counts them; not at 0: a graph of fewer ops than that
    always gets its order, it costs about a millisecond)."""
    if deadline is not None and done and done % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
        raise OutOfTime(f"stopped after {done} ops at the deadline")


class _MinTree:
    """Minimum over a prefix of slots, with point updates: an iterative segment tree of
    ``(key, tie)`` pairs, :data:`_EMPTY` where a slot holds nothing."""

    def __init__(self, slots: int):
        self.size = 1
        while self.size < max(1, slots):
            self.size *= 2
        self.tree = [_EMPTY] * (2 * self.size)

    def set(self, slot: int, value) -> None:
        i = slot + self.size
        self.tree[i] = value
        i //= 2
        while i:
            a, b = self.tree[2 * i], self.tree[2 * i + 1]
            self.tree[i] = a if a <= b else b
            i //= 2

    def prefix_min(self, end: int):
        """The least value of slots ``0 .. end-1``."""
        best = _EMPTY
        lo, hi = self.size, end + self.size
        while lo < hi:
            if lo & 1:
                if self.tree[lo] < best:
                    best = self.tree[lo]
                lo += 1
            if hi & 1:
                hi -= 1
                if self.tree[hi] < best:
                    best = self.tree[hi]
            lo //= 2
            hi //= 2
        return best


_EMPTY = (float("inf"), 0, -1)


def _lpmf(view: _InductorView, deadline: float | None = None) -> list[int]:
    """Inductor's selection rule, ``min over ready of (max(live + size, max so far), size -
    to_free, index)``, in O(log n) per op instead of a scan of the ready set (which made
    ``lpmf`` quadratic: 5 s on 10,000 ops). The first component ties at ``max so far`` for
    every op of size ``<= max so far - live`` and grows with the size above it, so the rule
    picks the least ``(size - to_free, index)`` among the ready ops of size at most
    ``T``, where ``T`` is ``max so far - live`` if some ready op is that small, else the
    least size of a ready op. Ops sit in a :class:`_MinTree` sorted by size (a prefix is
    "size at most T"); a heap of ready sizes gives the least one."""
    n = view.n
    indegree = [len(view.pred_nodes[v]) for v in range(n)]
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
    node_size = view.node_size
    by_size = sorted(range(n), key=lambda v: node_size[v])
    slot = [0] * n
    for k, v in enumerate(by_size):
        slot[v] = k
    sizes_sorted = [node_size[v] for v in by_size]
    tree = _MinTree(n)
    ready_sizes: list = []   # heap of (size, op); an op leaves it lazily once scheduled
    is_ready = [False] * n

    def make_ready(v):
        is_ready[v] = True
        tree.set(slot[v], (node_size[v] - to_free[v], view.index[v], v))
        heapq.heappush(ready_sizes, (node_size[v], v))

    for v in range(n):
        if indegree[v] == 0:
            make_ready(v)
    schedule: list[int] = []
    while ready_sizes:
        while ready_sizes and not is_ready[ready_sizes[0][1]]:
            heapq.heappop(ready_sizes)
        if not ready_sizes:
            break
        _check_clock(deadline, len(schedule))
        least = ready_sizes[0][0]
        limit = max(max_memory - live, least)
        sel = tree.prefix_min(bisect_right(sizes_sorted, limit))[2]
        is_ready[sel] = False
        tree.set(slot[sel], _EMPTY)
        schedule.append(sel)
        live += node_size[sel]
        max_memory = max(max_memory, live)
        live -= to_free[sel]
        for s in view.succ_nodes[sel]:
            indegree[s] -= 1
            if indegree[s] == 0:
                make_ready(s)
        for t in view.pred_buffers[sel]:
            outdegree[t] -= 1
            if outdegree[t] == 1:
                # the one use left now frees the buffer (Inductor credits every consumer;
                # those already scheduled are never looked at again)
                for c in view.consumers[t]:
                    to_free[c] += view.size[t]
                    if is_ready[c]:
                        tree.set(slot[c], (node_size[c] - to_free[c], view.index[c], c))
    return schedule


def _bfs(view: _InductorView, deadline: float | None = None) -> list[int]:
    n = view.n
    indegree = [len(view.pred_nodes[v]) for v in range(n)]
    when = [-1] * n
    heap: list = []
    for v in view.nodes:  # Inductor pushes in its node-list order; the key decides anyway
        if indegree[v] == 0:
            heapq.heappush(heap, ((), view.index[v], v))
    schedule: list[int] = []
    while heap:
        _check_clock(deadline, len(schedule))
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


def _dfs(view: _InductorView, deadline: float | None = None) -> list[int]:
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
                _check_clock(deadline, len(result))
    return result


_HEURISTICS = {"lpmf": _lpmf, "bfs": _bfs, "dfs": _dfs}


def lpmf_order(graph: TensorGraph, input_order: Sequence[int] | None = None, *,
               deadline: float | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_lpmf`` ("least peak memory first").

    Keeps the live memory and the maximum so far; among ready ops it picks the smallest
    ``(max(live + output bytes, max so far), output bytes - bytes it frees, index)``.
    ``input_order`` gives the indices used to break ties (default: op ids). ``deadline``
    (a :func:`time.perf_counter` value; also for :func:`bfs_order`, :func:`dfs_order` and
    :func:`inductor_orders`): :class:`OutOfTime` once it has passed.
    """
    return np.asarray(_order(_view(graph, input_order), "lpmf", deadline), dtype=np.int64)


def bfs_order(graph: TensorGraph, input_order: Sequence[int] | None = None, *,
               deadline: float | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_bfs``: FIFO by the sorted steps of an op's predecessors."""
    return np.asarray(_order(_view(graph, input_order), "bfs", deadline), dtype=np.int64)


def dfs_order(graph: TensorGraph, input_order: Sequence[int] | None = None, *,
               deadline: float | None = None) -> np.ndarray:
    """Inductor's ``topological_sort_dfs``: post-order DFS visiting ops by ascending
    ``output bytes + bytes read`` (then index), dependencies in the same order."""
    return np.asarray(_order(_view(graph, input_order), "dfs", deadline), dtype=np.int64)


def inductor_orders(graph: TensorGraph, baseline_order: Sequence[int] | None = None, *,
                    deadline: float | None = None) -> dict:
    """``{name: (order, inductor estimate)}`` for baseline, lpmf, bfs and dfs, in that order.

    As in ``reorder_for_peak_memory``, the heuristics see the ops in ``baseline_order``
    (default: the op ids), so their ties break by position in it.
    """
    view = _view(graph, baseline_order)
    out = {"baseline": np.asarray(view.nodes, dtype=np.int64)}
    for name in ("lpmf", "bfs", "dfs"):
        out[name] = np.asarray(_order(view, name, deadline), dtype=np.int64)
    return {k: (v, _estimate(view, v)) for k, v in out.items()}


def inductor_best_order(graph: TensorGraph, baseline_order: Sequence[int] | None = None, *,
                        deadline: float | None = None) -> np.ndarray:
    """Inductor's ``reorder_for_peak_memory``: the order with the lowest *Inductor* estimate
    among the baseline and lpmf, bfs, dfs (ties go to the earlier one, as Python's ``min``).

    Evaluate the result with :func:`memopt.core.evaluate.peak` to compare with memopt.
    """
    res = inductor_orders(graph, baseline_order, deadline=deadline)
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

        deadline = time.perf_counter() + max(0.0, float(time_limit))
        try:
            order = fn(_graph_of(problem, name), problem.baseline_order(), deadline=deadline)
        except OutOfTime as exc:
            return order_result(problem, None, timed_out=True, reason=str(exc))
        return order_result(problem, order)

    method.__name__ = f"{name}_method"
    method.__doc__ = (f"Registry method ``{name}``: :func:`{fn.__name__}` on the input order, within "
                      "``time_limit`` (no order once it is out).")
    return method


lpmf_method = _inductor_method("lpmf", lpmf_order)
bfs_method = _inductor_method("bfs", bfs_order)
dfs_method = _inductor_method("dfs", dfs_order)
inductor_method = _inductor_method("inductor", inductor_best_order)
