"""Brute force over every topological order: the ground truth of the property tests.

Deliberately independent of :mod:`memopt.core.evaluate`: it simulates the tensor-graph
tensor-graph model of ``docs/design.md`` step by step (allocate outputs and workspace, run, free dead tensors)
while enumerating all linear extensions depth first. Exponential: for graphs of about a
dozen ops at most.
"""

from __future__ import annotations

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import GraphError

MAX_BRUTE_FORCE_OPS = 12


def naive_peak(graph: TensorGraph, order) -> int:
    """Peak of ``order`` by literal simulation of the tensor-graph model (no interval tricks)."""
    return _simulate(graph, [int(v) for v in order])


def _simulate(graph: TensorGraph, order: list[int]) -> int:
    size = [int(s) for s in graph.tensor_size]
    resident = sum(size[t] for t in range(graph.num_tensors) if graph.tensor_resident[t])
    remaining = [len(graph.consumers_of(t)) for t in range(graph.num_tensors)]
    live = {t for t in range(graph.num_tensors)
            if graph.tensor_producer[t] < 0 and not graph.tensor_resident[t]}
    mem = sum(size[t] for t in live)
    peak = mem + resident
    # inputs nobody reads and nobody keeps die at the start, after the start was measured
    for t in list(live):
        if remaining[t] == 0 and not graph.tensor_output[t]:
            live.discard(t)
            mem -= size[t]
    for v in order:
        outs = [int(t) for t in graph.outputs_of(v)]
        for t in outs:
            live.add(t)
            mem += size[t]
        peak = max(peak, mem + int(graph.op_workspace[v]) + resident)
        for t in graph.inputs_of(v):
            t = int(t)
            remaining[t] -= 1
        for t in set(int(t) for t in graph.inputs_of(v)) | set(outs):
            if t in live and remaining[t] == 0 and not graph.tensor_output[t] and not graph.tensor_resident[t]:
                live.discard(t)
                mem -= size[t]
    return peak


def all_topological_orders(graph: TensorGraph):
    """Yield every topological order of the ops (as lists of op ids)."""
    n = graph.num_ops
    preds = [set() for _ in range(n)]
    for a, b in zip(*graph.op_edges()):
        preds[int(b)].add(int(a))
    indeg = [len(p) for p in preds]
    succ = [[] for _ in range(n)]
    for b in range(n):
        for a in preds[b]:
            succ[a].append(b)
    order: list[int] = []

    def rec():
        if len(order) == n:
            yield list(order)
            return
        for v in range(n):
            if indeg[v] == 0 and v not in placed:
                placed.add(v)
                order.append(v)
                for u in succ[v]:
                    indeg[u] -= 1
                yield from rec()
                for u in succ[v]:
                    indeg[u] += 1
                order.pop()
                placed.discard(v)

    placed: set[int] = set()
    yield from rec()


def brute_force_schedule(graph: TensorGraph) -> tuple[list[int], int]:
    """An optimal order and its peak, by trying every topological order."""
    if graph.num_ops > MAX_BRUTE_FORCE_OPS:
        raise GraphError(f"brute force is limited to {MAX_BRUTE_FORCE_OPS} ops; the graph has {graph.num_ops}")
    best_order, best = None, None
    for order in all_topological_orders(graph):
        p = _simulate(graph, order)
        if best is None or p < best:
            best, best_order = p, order
    if best_order is None:  # no ops
        return [], _simulate(graph, [])
    return best_order, best


def brute_force_dag_optimum(dag) -> int:
    """Minimum peak over every linear extension of a small signed DAG (all nodes enumerated)."""
    n = dag.n
    if n > 14:
        raise GraphError(f"brute force over a signed DAG is limited to 14 nodes; it has {n}")
    preds = [set(int(u) for u in dag.pred(v)) for v in range(n)]
    best = [None]
    delta = [int(x) for x in dag.delta]
    trans = [int(x) for x in dag.transient]

    def rec(done: frozenset, mem: int, peak: int):
        if best[0] is not None and peak >= best[0]:
            return
        if len(done) == n:
            best[0] = peak
            return
        for v in range(n):
            if v not in done and preds[v] <= done:
                m = mem + delta[v]
                rec(done | {v}, m, max(peak, m + trans[v]))

    rec(frozenset(), dag.base, dag.base)
    return int(best[0])


def random_tensor_graph(rng: np.random.Generator, n_ops: int, *, max_size: int = 20, edge_prob: float = 0.35,
                        multi_output: bool = True, with_inputs: bool = True, with_workspace: bool = True) -> TensorGraph:
    """A random small tensor graph for property tests (a DAG by construction: edges go forward)."""
    from memopt.core.tensor_graph import Op, Tensor

    tensors, ops = [], []
    produced: list[str] = []
    inputs: list[str] = []
    if with_inputs:
        for k in range(int(rng.integers(0, 3))):
            name = f"in{k}"
            tensors.append(Tensor(name, int(rng.integers(0, max_size)), resident=bool(rng.random() < 0.2)))
            inputs.append(name)
    for v in range(n_ops):
        reads = [t for t in produced + inputs if rng.random() < edge_prob]
        outs = []
        for k in range(1 + (int(rng.integers(0, 2)) if multi_output else 0)):
            name = f"t{v}_{k}"
            tensors.append(Tensor(name, int(rng.integers(0, max_size)), output=bool(rng.random() < 0.15)))
            outs.append(name)
        ws = int(rng.integers(0, max_size)) if with_workspace and rng.random() < 0.3 else 0
        ops.append(Op(f"op{v}", tuple(reads), tuple(outs), workspace=ws, cost=float(rng.integers(1, 10))))
        produced.extend(outs)
    return TensorGraph.build(tensors, ops, name="random")


def random_sp_edges(rng: np.random.Generator, n_ops: int) -> tuple[list[tuple[int, int]], int]:
    """Edges of a random two-terminal series-parallel op DAG on ``max(2, n_ops)`` nodes, grown
    from one edge ``0 -> 1`` by subdivisions (series) and parallel paths; returns ``(edges, n)``.
    Property tests decorate it with tensors (one per edge) as they need."""
    edges, n = [(0, 1)], 2
    while n < n_ops:
        k = int(rng.integers(len(edges)))
        u, w = edges[k]
        if rng.random() < 0.5:
            edges[k] = (u, n)
            edges.append((n, w))
        else:
            edges.append((u, n))
            edges.append((n, w))
        n += 1
    return edges, n
