"""Importer for the published graphs in networkx node-link JSON.

Two schemas occur in the published data (Checkmate's training graphs and Moccasin's random layered graphs):

* **Checkmate** (Jain et al., MLSys 2020): ``nodes`` with ``id``, ``cost_ram``, ``cost_cpu``
  (and ``name``, ``backward``); ``links`` with ``source``/``target``.
* **Random layered graphs** of "Neural Topological Ordering for Computation Graphs"
  (Gagrani et al., NeurIPS 2022), as redistributed with Moccasin: ``nodes`` with
  ``name`` (the id), ``out_cost``, ``duration``, ``param_cost``; ``links`` as
  ``{"0": source, "1": target}``; ``graph.order`` holds a valid order (the node list is not
  topological).

Semantics, exactly: every node is an op with one output tensor of ``cost_ram`` (resp.
``out_cost``) bytes and compute cost ``cost_cpu`` (resp. ``duration``); every link is a data
dependency; workspace 0; nodes without predecessors are ordinary ops (their output is
allocated when they run); a node without successors is a graph output, live to the end.
The input-order baseline is the file's node order, or ``graph.order`` where present.
"""

from __future__ import annotations

import os

import numpy as np

from memopt.core import TensorGraph
from memopt.errors import FormatError, GraphError
from memopt.io._json import cost_field, int_field, is_id, read_json, require, show_number
from memopt.io.instance import Instance


def _graph_name(gattr: dict, path: str | None, where: str) -> str:
    name = gattr.get("name")
    if name is not None and (isinstance(name, bool) or not isinstance(name, (str, int, float))):
        raise FormatError(f"{where}: graph.name must be a string, got {show_number(name)}")
    return str(name or (os.path.basename(path) if path else ""))


def is_node_link(doc) -> bool:
    return isinstance(doc, dict) and "nodes" in doc and ("links" in doc or "edges" in doc)


def load_checkmate(path: str | os.PathLike) -> Instance:
    """Load a node-link JSON graph file (either schema) as an :class:`Instance`."""
    return instance_from_node_link(read_json(path), path=str(path))


def instance_from_node_link(doc: dict, path: str | None = None) -> Instance:
    """The :class:`Instance` of a node-link document; every error names ``path`` and the item
    (:class:`FormatError` for a malformed document, :class:`GraphError` for a well-formed one
    describing an invalid graph: negative size, unknown node, cycle)."""
    where = path or "<node-link>"
    try:
        return _instance_from_node_link(doc, path, where)
    except GraphError as exc:
        msg = str(exc)
        raise GraphError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def _instance_from_node_link(doc: dict, path: str | None, where: str) -> Instance:
    nodes = require(doc, "nodes", where, list)
    links = doc.get("links", doc.get("edges"))
    if not isinstance(links, list):
        raise FormatError(f"{where}: field 'links' must be a list")
    if not nodes:
        raise FormatError(f"{where}: the graph has no nodes")
    gattr = doc.get("graph") or {}
    if not isinstance(gattr, dict):
        raise FormatError(f"{where}: field 'graph' must be an object")
    first = nodes[0] if isinstance(nodes[0], dict) else {}
    if "cost_ram" in first:
        schema, id_key, size_key, cost_key = "checkmate", "id", "cost_ram", "cost_cpu"
    elif "out_cost" in first:
        schema, id_key, size_key, cost_key = "random-layered", "name", "out_cost", "duration"
    else:
        raise FormatError(f"{where}: node 0 has neither 'cost_ram' (Checkmate) nor 'out_cost' "
                          "(random layered graphs); unknown node-link schema")
    labels = []
    index: dict = {}
    sizes = np.empty(len(nodes), np.int64)
    costs = [0] * len(nodes)   # exact (int or Fraction): TensorGraph keeps them
    for k, node in enumerate(nodes):
        nwhere = f"{where}: node #{k}"
        ident = require(node, id_key, nwhere)
        if not is_id(ident):
            raise FormatError(f"{nwhere}: field {id_key!r} must be a number or a string, "
                              f"got {show_number(ident)}")
        nwhere = f"{where}: node {ident!r}"
        if ident in index:
            raise FormatError(f"{nwhere}: node id appears twice")
        index[ident] = k
        labels.append(ident)
        sizes[k] = int_field(node, size_key, nwhere)   # negative: GraphError; else FormatError
        costs[k] = cost_field(node, cost_key, nwhere)
    src = np.empty(len(links), np.int64)
    dst = np.empty(len(links), np.int64)
    for k, link in enumerate(links):
        lwhere = f"{where}: link #{k}"
        if not isinstance(link, dict):
            raise FormatError(f"{lwhere}: expected an object")
        if "source" in link:
            a, b = link.get("source"), link.get("target")
        else:
            a, b = link.get("0"), link.get("1")
        for end in (a, b):
            if end is None:
                raise FormatError(f"{lwhere}: missing source or target")
            if not is_id(end):
                raise FormatError(f"{lwhere}: endpoint {show_number(end)} is not a node id (a number or a string)")
            if end not in index:
                raise GraphError(f"{lwhere}: names unknown node {show_number(end)}")
        if a == b:
            raise GraphError(f"cycle: {lwhere} is a self-loop on node {a!r}")
        src[k], dst[k] = index[a], index[b]
    n = len(nodes)
    has_succ = np.zeros(n, bool)
    has_succ[src] = True
    names = [str(x) for x in labels]
    if len(set(names)) != n:
        raise FormatError(f"{where}: node ids collide once written as text")
    graph = TensorGraph.from_arrays(
        tensor_size=sizes, tensor_producer=np.arange(n), op_inputs=(dst, src),
        tensor_output=~has_succ, op_cost=costs, op_names=names, tensor_names=names,
        name=_graph_name(gattr, path, where),
    )
    if "order" in gattr:
        order_labels = gattr["order"]
        if not isinstance(order_labels, list):
            raise FormatError(f"{where}: graph.order must be a list")
        order = np.empty(len(order_labels), np.int64)
        for k, lab in enumerate(order_labels):
            if not is_id(lab) or lab not in index:
                raise GraphError(f"{where}: graph.order names unknown node {show_number(lab)}")
            order[k] = index[lab]
        from memopt.core import validate_order
        from memopt.errors import ScheduleError

        try:
            validate_order(graph, order)
        except ScheduleError as exc:
            raise FormatError(f"{where}: graph.order is not a valid order: {exc}") from None
        order_source = "graph.order"
    else:
        order = np.arange(n, dtype=np.int64)
        order_source = "node list"
        from memopt.core import validate_order
        from memopt.errors import ScheduleError

        try:
            validate_order(graph, order)
        except ScheduleError:
            # the node list is no order to run: the input-order baseline becomes Kahn's order
            order = graph.topological_order()
            order_source = "Kahn's order (the node list is not topological)"
    meta = {"graph": {k: v for k, v in gattr.items() if k != "pos"}, "input_order": order_source}
    return Instance(name=graph.name, schema=schema, labels=tuple(labels), input_order=order,
                    graph=graph, path=path, meta=meta)
