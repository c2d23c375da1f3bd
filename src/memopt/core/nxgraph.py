"""A ``networkx.DiGraph`` of ops as a :class:`~memopt.core.tensor_graph.TensorGraph`.

Model
-----
Every node of the DiGraph is an op; an edge ``u -> v`` means that ``v`` reads output of
``u``. Attribute names (those :meth:`TensorGraph.to_networkx` writes):

Node attributes (one op each)
    ``output_bytes``
        Bytes of the op's one output tensor (an ``int >= 0``), named like the node. Required
        unless ``outputs`` is given.
    ``outputs``
        Optional ``{tensor name: bytes}``: the op's output tensors, when it has several (or
        none); ``output_bytes``, if present too, must equal their sum.
    ``reads``
        Optional list of graph-input tensors (declared in the graph attribute ``inputs``)
        that the op reads.
    ``workspace``
        Bytes held only while the op runs (default 0).
    ``cost``
        Compute cost of one run, a number ``>= 0`` (default 0; used by recomputation).
Edge attribute
    ``tensors``
        Optional list of the output tensors of ``u`` that ``v`` reads (default: all of them).
Graph attributes
    ``inputs``
        Optional ``{tensor name: bytes}``: graph inputs (no producer), live from the start
        until their last reader has run.
    ``graph_outputs``
        Optional list of the tensors live at the end. Without it, the outputs of every node
        without successors are graph outputs (as in the published node-link graphs,
        :mod:`memopt.io.checkmate`).
    ``resident``
        Optional list of graph inputs live for the whole run (weights).
    ``name``
        The graph's name.

Ops are numbered in the DiGraph's node order, so an order that :func:`memopt.schedule`
returns (op ids) reads back as ``[list(G)[i] for i in result.order]``. Op names are the
nodes as text (``str(node)``); two nodes with the same text are refused.
"""

from __future__ import annotations

import sys
from numbers import Integral, Real

from memopt.core.tensor_graph import Op, Tensor, TensorGraph, show_value
from memopt.errors import GraphError

__all__ = ["from_networkx", "is_networkx_graph"]


def is_networkx_graph(obj) -> bool:
    """True for any networkx graph object (without importing networkx when nothing did)."""
    nx = sys.modules.get("networkx")
    return nx is not None and isinstance(obj, nx.Graph)


def _bytes(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise GraphError(f"{where} must be a whole number of bytes (an int), got {show_value(value)}")
    if value < 0:
        raise GraphError(f"{where} is negative: {show_value(value)}")
    return int(value)


def _names(value, where: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise GraphError(f"{where} must be a list of tensor names, got {show_value(value)}")
    return [str(x) for x in value]


def _sized(value, where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise GraphError(f"{where} must be a mapping {{tensor name: bytes}}, got {show_value(value)}")
    return {str(k): _bytes(v, f"{where}[{k!r}]") for k, v in value.items()}


def from_networkx(G, *, name: str | None = None) -> TensorGraph:
    """The :class:`~memopt.core.tensor_graph.TensorGraph` of a ``networkx.DiGraph`` of ops.

    The attribute names are those of the module docstring (:mod:`memopt.core.nxgraph`), the
    ones :meth:`TensorGraph.to_networkx` writes, so ``from_networkx(g.to_networkx())`` is
    ``g`` again (same ops, tensors, sizes and flags: the same peak for every order).

    Parameters
    ----------
    G : networkx.DiGraph
        Nodes are ops (``output_bytes``, ``workspace``, ``cost``, optionally ``outputs`` and
        ``reads``); an edge ``u -> v`` means ``v`` reads output of ``u``.
    name : str, optional
        Name of the graph (default: ``G.graph["name"]``, else ``""``).

    Returns
    -------
    TensorGraph
        Op ``i`` is the ``i``-th node of ``G``.

    Raises
    ------
    GraphError
        ``G`` is not a ``networkx.DiGraph``, has a cycle, or a node lacks ``output_bytes``,
        has a negative or fractional size, or names an unknown tensor; the message names
        the node or edge.

    Examples
    --------
    >>> import networkx as nx
    >>> G = nx.DiGraph()
    >>> G.add_node("load", output_bytes=4)
    >>> G.add_node("matmul", output_bytes=8, workspace=2)
    >>> G.add_node("relu", output_bytes=8)
    >>> G.add_edges_from([("load", "matmul"), ("matmul", "relu")])
    >>> g = from_networkx(G)
    >>> g.num_ops, g.num_tensors
    (3, 3)
    >>> from memopt.core import peak
    >>> peak(g, [0, 1, 2])          # relu's 8 bytes beside matmul's 8 (matmul held 4 + 8 + 2)
    16
    """
    if not is_networkx_graph(G):
        raise GraphError(f"from_networkx needs a networkx.DiGraph, got {type(G).__name__}")
    if not G.is_directed() or G.is_multigraph():
        raise GraphError(f"from_networkx needs a networkx.DiGraph (directed, one edge per pair), "
                         f"got {type(G).__name__}")
    gattr = G.graph
    nodes = list(G.nodes)
    op_names = [n if isinstance(n, str) else str(n) for n in nodes]
    seen: dict[str, object] = {}
    for node, text in zip(nodes, op_names):
        if text in seen:
            raise GraphError(f"nodes {seen[text]!r} and {node!r} have the same name {text!r} as text")
        seen[text] = node

    inputs = _sized(gattr.get("inputs", {}), "graph attribute 'inputs'")
    tensors = [Tensor(t, s) for t, s in inputs.items()]
    outputs_of: dict = {}
    for node, text in zip(nodes, op_names):
        attr = G.nodes[node]
        where = f"node {node!r}"
        if "outputs" in attr:
            outs = _sized(attr["outputs"], f"{where}: attribute 'outputs'")
            if "output_bytes" in attr and _bytes(attr["output_bytes"], f"{where}: attribute 'output_bytes'") \
                    != sum(outs.values()):
                raise GraphError(f"{where}: attribute 'output_bytes' ({attr['output_bytes']}) is not the sum of "
                                 f"its 'outputs' ({sum(outs.values())})")
        elif "output_bytes" in attr:
            outs = {text: _bytes(attr["output_bytes"], f"{where}: attribute 'output_bytes'")}
        else:
            raise GraphError(f"{where} has no attribute 'output_bytes' (the bytes of its output) "
                             f"nor 'outputs' ({{tensor name: bytes}})")
        outputs_of[node] = outs
        tensors += [Tensor(t, s) for t, s in outs.items()]

    if "graph_outputs" in gattr:
        live_at_end = set(_names(gattr["graph_outputs"], "graph attribute 'graph_outputs'"))
    else:
        live_at_end = {t for node in nodes if G.out_degree(node) == 0 for t in outputs_of[node]}
    resident = set(_names(gattr.get("resident", ()), "graph attribute 'resident'"))
    known = {t.name for t in tensors}
    for what, names in (("graph_outputs", live_at_end), ("resident", resident)):
        unknown = sorted(names - known)
        if unknown:
            raise GraphError(f"graph attribute {what!r} names unknown tensor {unknown[0]!r}")
    tensors = [Tensor(t.name, t.size, output=t.name in live_at_end, resident=t.name in resident) for t in tensors]

    ops = []
    for node, text in zip(nodes, op_names):
        attr = G.nodes[node]
        where = f"node {node!r}"
        reads = _names(attr.get("reads", ()), f"{where}: attribute 'reads'")
        for t in reads:
            if t not in inputs:
                raise GraphError(f"{where} reads {t!r}, which is not in the graph attribute 'inputs'")
        for u in G.predecessors(node):
            carried = G.edges[u, node].get("tensors")
            if carried is None:
                reads += list(outputs_of[u])
                continue
            carried = _names(carried, f"edge {u!r} -> {node!r}: attribute 'tensors'")
            if not carried:
                # the order constraint would be lost: a pure dependency is a tensor of 0 bytes
                raise GraphError(f"edge {u!r} -> {node!r} carries no tensor (attribute 'tensors' is empty)")
            for t in carried:
                if t not in outputs_of[u]:
                    raise GraphError(f"edge {u!r} -> {node!r} carries {t!r}, which is not an output of {u!r}")
                reads.append(t)
        cost = attr.get("cost", 0)
        if isinstance(cost, bool) or not isinstance(cost, Real):
            raise GraphError(f"{where}: attribute 'cost' must be a number, got {show_value(cost)}")
        ops.append(Op(text, tuple(reads), tuple(outputs_of[node]),
                      workspace=_bytes(attr.get("workspace", 0), f"{where}: attribute 'workspace'"), cost=cost))
    if name is None:
        name = gattr.get("name", "")
    return TensorGraph.build(tensors, ops, name=str(name))
