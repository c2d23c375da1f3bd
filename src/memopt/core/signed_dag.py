"""The common core (``docs/design.md``, signed DAG): a DAG of nodes carrying signed integer memory deltas.

Both the tensor graph and the statement program compile to a :class:`SignedDAG`. A node
``v`` has ``delta[v]`` (allocation > 0, release < 0) and ``transient[v] >= 0`` (bytes held
only while it runs); edges are order constraints. Starting from ``base`` live bytes, the
memory while the k-th node of an order runs is ``base + sum(delta[first k+1 nodes]) +
transient[k-th]``, and the peak is the maximum of that and ``base``.

A *release* is a node with ``delta + transient <= 0``: running it as soon as it is ready
never raises the peak (it does not raise memory while it runs, and lowers or keeps every
later level), so a schedule is determined by the order of the other, *allocating*, nodes.
:func:`complete_order` inserts the releases greedily; every scheduler works on allocating
nodes only and every bound may assume releases run early.

Example
-------
>>> d = SignedDAG.build(["a", "b", "free_a"], [4, 2, -4], edges=[(0, 1), (1, 2)])
>>> dag_peak(d, [0, 1, 2])
6
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from memopt.core.tensor_graph import MAX_TOTAL_BYTES, TensorGraph, _check_int_array, _csr, exact_total, unique_sorted
from memopt.errors import GraphError, ScheduleError


@dataclass(frozen=True, eq=False)
class SignedDAG:
    """The common core (``docs/design.md``, signed DAG): nodes with signed byte deltas, order constraints as edges.

    Build with :meth:`build`. The live memory after a down-set is ``base`` plus the sum of
    its deltas; a node also holds ``transient`` bytes while it runs.

    Attributes
    ----------
    names : tuple of str
    delta, transient : numpy.ndarray
        int64 per node.
    base : int
        Bytes live before any node runs.
    name : str

    Examples
    --------
    >>> from memopt.core import dag_peak
    >>> d = SignedDAG.build(["alloc", "free"], [4, -4], [(0, 1)])
    >>> dag_peak(d, [0, 1])
    4
    """

    names: tuple[str, ...]
    delta: np.ndarray        # int64 [n]
    transient: np.ndarray    # int64 [n] >= 0
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    base: int = 0            # bytes live before any node runs (inputs, resident tensors)
    name: str = ""
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, names: Sequence[str], delta, edges: Iterable[tuple[int, int]] | np.ndarray = (),
              transient=None, base: int = 0, name: str = "", *, distinct_edges: bool = False) -> "SignedDAG":
        """Validated DAG; ``distinct_edges=True`` skips de-duplication when the caller guarantees it."""
        if not isinstance(names, tuple):
            names = tuple(names)
        n = len(names)
        raw = np.asarray(delta).reshape(-1)
        if raw.shape[0] != n:
            raise GraphError("one delta per node is needed")
        # deltas may be negative: check |delta| as byte counts, then restore the signs
        if raw.dtype.kind in "fOu":
            _check_int_array([abs(x) for x in raw.tolist()], "delta", names)
        delta = raw.astype(np.int64)
        _check_int_array(np.abs(delta), "delta", names)
        transient = np.zeros(n, np.int64) if transient is None else _check_int_array(transient, "transient bytes", names)
        if isinstance(base, bool) or int(base) != base or base < 0 or base >= MAX_TOTAL_BYTES:
            raise GraphError(f"base memory must be a whole number of bytes in [0, 2**62), got {base!r}")
        if exact_total(np.abs(delta)) + int(base) + int(transient.max(initial=0)) >= MAX_TOTAL_BYTES:
            raise GraphError("total bytes exceed 2**62; memopt's exact int64 arithmetic cannot hold them")
        e = np.asarray(list(edges) if not isinstance(edges, np.ndarray) else edges, dtype=np.int64).reshape(-1, 2)
        if e.size and (e.min() < 0 or e.max() >= n):
            raise GraphError("an edge names a node id out of range")
        loops = np.flatnonzero(e[:, 0] == e[:, 1])
        if loops.size:
            raise GraphError(f"cycle: node {names[int(e[loops[0], 0])]!r} depends on itself")
        if e.size and not distinct_edges:
            key = unique_sorted(e[:, 0] * n + e[:, 1])
            e = np.stack([key // n, key % n], axis=1)
        sp, si = _csr(e[:, 0], e[:, 1], n)
        pp, pi = _csr(e[:, 1], e[:, 0], n)
        d = cls(names, delta, transient, sp, si, pp, pi, int(base), name)
        for arr in (delta, transient, sp, si, pp, pi):
            arr.setflags(write=False)
        d.topological_order()
        return d

    @property
    def n(self) -> int:
        return len(self.delta)

    def succ(self, v: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[v]:self.succ_ptr[v + 1]]

    def pred(self, v: int) -> np.ndarray:
        return self.pred_idx[self.pred_ptr[v]:self.pred_ptr[v + 1]]

    def edges(self) -> np.ndarray:
        """All edges as an ``(m, 2)`` array (source, target)."""
        src = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.succ_ptr))
        return np.stack([src, self.succ_idx], axis=1)

    @property
    def is_release(self) -> np.ndarray:
        """Nodes that never raise the peak when run as soon as they are ready."""
        return self.delta + self.transient <= 0

    def topological_order(self) -> np.ndarray:
        if "topo" not in self._cache:
            from memopt import _jit
            from memopt.core._kernels import kahn_order
            from memopt.core.tensor_graph import _find_cycle

            indeg = np.diff(self.pred_ptr).astype(np.int64)
            order = _jit.choose(kahn_order, self.n)(_jit.readonly(self.succ_ptr), _jit.readonly(self.succ_idx), indeg)
            if order.shape[0] < self.n:
                cyc = _find_cycle(self.pred_ptr, self.pred_idx, order, self.n)
                raise GraphError("cycle among nodes: " + " <- ".join(repr(self.names[i]) for i in cyc))
            order.setflags(write=False)
            self._cache["topo"] = order
        return self._cache["topo"]

    def to_networkx(self):
        import networkx as nx

        G = nx.DiGraph(name=self.name, base=self.base)
        for i, nm in enumerate(self.names):
            G.add_node(i, name=nm, delta=int(self.delta[i]), transient=int(self.transient[i]))
        G.add_edges_from(map(tuple, self.edges().tolist()))
        return G


def validate_node_order(dag: SignedDAG, order: Sequence[int]) -> np.ndarray:
    """Check that ``order`` is a linear extension of ``dag``; return node positions."""
    idx = np.asarray(order, dtype=np.int64).reshape(-1)
    n = dag.n
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ScheduleError(f"order names a node id out of range (the DAG has {n} nodes)")
    counts = np.bincount(idx, minlength=n)
    if np.any(counts != 1):
        v = int(np.flatnonzero(counts != 1)[0])
        what = "misses" if counts[v] == 0 else f"repeats ({int(counts[v])} times)"
        raise ScheduleError(f"order {what} node {dag.names[v]!r}")
    pos = np.empty(n, np.int64)
    pos[idx] = np.arange(n, dtype=np.int64)
    e = dag.edges()
    late = np.flatnonzero(pos[e[:, 0]] >= pos[e[:, 1]])
    if late.size:
        a, b = e[int(late[0])]
        raise ScheduleError(f"order is not topological: node {dag.names[int(b)]!r} runs before its predecessor {dag.names[int(a)]!r}")
    return pos


def dag_profile(dag: SignedDAG, order: Sequence[int], *, validate: bool = True) -> np.ndarray:
    """Memory while each node of ``order`` runs (int64 array)."""
    idx = np.asarray(order, dtype=np.int64).reshape(-1)
    if validate:
        validate_node_order(dag, idx)
    return dag.base + np.cumsum(dag.delta[idx]) + dag.transient[idx]


def dag_peak(dag: SignedDAG, order: Sequence[int], *, validate: bool = True) -> int:
    """Peak of a full node order: ``max(base, memory while each node runs)``."""
    prof = dag_profile(dag, order, validate=validate)
    return int(max(dag.base, int(prof.max()) if prof.size else dag.base))


def complete_order(dag: SignedDAG, alloc_order: Sequence[int]) -> np.ndarray:
    """Full node order from an order of the allocating nodes, releases run as soon as ready.

    ``alloc_order`` lists the non-release nodes (releases inside it are accepted and kept in
    place). Raises :class:`ScheduleError` when it is not consistent with the edges.
    """
    from memopt import _jit
    from memopt.core._kernels import complete_with_releases

    idx = np.asarray(alloc_order, dtype=np.int64).reshape(-1)
    out = _jit.choose(complete_with_releases, dag.n)(dag.succ_ptr, dag.succ_idx, np.diff(dag.pred_ptr).astype(np.int64),
                                 dag.is_release, idx)
    if out.size and out[0] == -1:
        v = int(out[1])
        raise ScheduleError(f"node {dag.names[v]!r} is not ready at its place in the order (a predecessor runs later)" if v >= 0
                            else "the order does not cover every allocating node")
    return out


@dataclass(frozen=True)
class GraphDAG:
    """A tensor graph compiled to a signed DAG: op ``i`` is node ``i``; release nodes follow."""

    dag: SignedDAG
    release_tensor: np.ndarray   # tensor id of each release node (node n_ops + k)
    num_ops: int


def graph_to_dag(graph: TensorGraph) -> GraphDAG:
    """Compile a tensor graph to its signed DAG (``docs/design.md``, signed DAG).

    Op ``v`` becomes node ``v`` with ``delta = sum of its (non-resident) outputs`` and
    ``transient = w(v)``. Every tensor that is eventually freed (not an output, not resident,
    size > 0) gets a release node ``-s(t)`` after its producer and all its consumers. The
    base is the non-resident graph inputs plus resident tensors. Data dependencies are edges.
    """
    cached = graph._cache.get("graph_dag")
    if cached is not None:
        return cached
    n = graph.num_ops
    prod = graph.tensor_producer
    freed = np.flatnonzero(~graph.tensor_output & ~graph.tensor_resident & (graph.tensor_size > 0))
    r = freed.shape[0]
    rel_node = n + np.arange(r, dtype=np.int64)
    # producer -> release, consumers -> release
    m = prod[freed] >= 0
    cnt = np.diff(graph.cons_ptr)[freed]
    starts = graph.cons_ptr[freed]
    offs = np.arange(cnt.sum(), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    s, d = graph.op_edges()
    # op -> op data edges, producer -> release, consumers -> release: each list is duplicate
    # free (op edges are de-duplicated, consumers are distinct per tensor) and they are
    # disjoint (different targets), so the DAG needs no second de-duplication pass
    k0, k1 = s.shape[0], int(m.sum())
    edges = np.empty((k0 + k1 + offs.shape[0], 2), np.int64)
    edges[:k0, 0], edges[:k0, 1] = s, d
    edges[k0:k0 + k1, 0], edges[k0:k0 + k1, 1] = prod[freed][m], rel_node[m]
    edges[k0 + k1:, 0] = graph.cons_idx[np.repeat(starts, cnt) + offs]
    edges[k0 + k1:, 1] = np.repeat(rel_node, cnt)
    delta = np.concatenate([graph.op_output_bytes, -graph.tensor_size[freed]])
    transient = np.concatenate([graph.op_workspace, np.zeros(r, np.int64)])
    inputs = prod < 0
    base = int(graph.tensor_size[inputs & ~graph.tensor_resident].sum()) + graph.resident_bytes
    names = _ReleaseNames(graph.op_names, graph.tensor_names, freed)
    dag = SignedDAG.build(names, delta, edges, transient=transient, base=base, name=graph.name,
                          distinct_edges=True)
    out = GraphDAG(dag=dag, release_tensor=freed, num_ops=n)
    graph._cache["graph_dag"] = out
    return out


def op_order_from_dag_order(gd: GraphDAG, node_order: Sequence[int]) -> np.ndarray:
    """The op order inside a full node order of ``graph_to_dag(graph).dag``."""
    idx = np.asarray(node_order, dtype=np.int64)
    return idx[idx < gd.num_ops]


def dag_order_from_op_order(gd: GraphDAG, op_order: Sequence[int]) -> np.ndarray:
    """Full node order for an op order: each release right after the last op it waits for."""
    dag = gd.dag
    ops = np.asarray(op_order, dtype=np.int64)
    n = gd.num_ops
    pos = np.empty(n, np.int64)
    pos[ops] = np.arange(n, dtype=np.int64)
    rel = np.arange(n, dag.n, dtype=np.int64)
    cnt = np.diff(dag.pred_ptr)[rel]
    from memopt import _jit
    from memopt.core._kernels import segment_max

    sub_ptr = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64)
    preds = dag.pred_idx[np.concatenate([np.arange(dag.pred_ptr[v], dag.pred_ptr[v + 1]) for v in rel])] if rel.size else np.zeros(0, np.int64)
    when = _jit.choose(segment_max, dag.n)(pos[preds], _jit.readonly(sub_ptr), np.int64(-1))
    # sort key: ops at 2*pos+1, releases at 2*when+2 (after their last op), ready-at-start at 0
    key = np.concatenate([2 * pos[np.arange(n)] + 1, 2 * when + 2])
    return np.argsort(key, kind="stable").astype(np.int64)


class _ReleaseNames(tuple):
    """Node names of a compiled tensor graph, made on demand: op names, then ``free(tensor)``.

    A million-op graph would otherwise spend seconds formatting names nobody reads.
    """

    def __new__(cls, op_names, tensor_names, freed):
        obj = super().__new__(cls)
        obj._ops, obj._tensors, obj._freed = op_names, tensor_names, freed
        obj._n = len(op_names) + len(freed)
        return obj

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(self._n)))
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        n_ops = len(self._ops)
        return self._ops[i] if i < n_ops else f"free({self._tensors[int(self._freed[i - n_ops])]})"

    def __iter__(self):
        return (self[k] for k in range(self._n))

    def __eq__(self, other):
        return isinstance(other, (tuple, list)) and len(other) == self._n and all(a == b for a, b in zip(self, other))

    def __hash__(self):
        return hash(tuple(self))
