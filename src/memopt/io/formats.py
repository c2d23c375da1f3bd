"""memopt's own versioned JSON formats (see ``docs/formats.md``).

* ``memopt-graph`` v1: a tensor graph (tensors with sizes and flags, ops with inputs,
  outputs, workspace, cost).
* ``memopt-program`` v1: a statement program (allocs, frees, reads, writes, transient).
* ``memopt-plan`` v1: an order with its peak, lower bound and status.

:func:`load_instance` reads any supported file: the two formats above and the published
node-link graphs (:mod:`memopt.io.checkmate`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from memopt.core import Op, Program, Statement, Tensor, TensorGraph
from memopt.errors import FormatError
from memopt.io._json import bool_field, int_field, read_json, require
from memopt.io.checkmate import instance_from_node_link, is_node_link
from memopt.io.instance import Instance

GRAPH_FORMAT, PROGRAM_FORMAT, PLAN_FORMAT = "memopt-graph", "memopt-program", "memopt-plan"
VERSION = 1


def _check_header(doc: dict, fmt: str, where: str) -> None:
    version = doc.get("version")
    if version != VERSION:
        raise FormatError(f"{where}: {fmt} version {version!r} is not supported (this memopt reads version {VERSION})")


def _str_list(obj: dict, key: str, where: str) -> tuple[str, ...]:
    val = obj.get(key, [])
    if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
        raise FormatError(f"{where}: field {key!r} must be a list of names")
    return tuple(val)


def graph_from_doc(doc: dict, where: str = "<graph>") -> TensorGraph:
    _check_header(doc, GRAPH_FORMAT, where)
    tensors = []
    for k, t in enumerate(require(doc, "tensors", where, list)):
        name = require(t, "name", f"{where}: tensor #{k}", str)
        twhere = f"{where}: tensor {name!r}"
        size = t.get("size")
        if isinstance(size, (int, float)) and not isinstance(size, bool) and size < 0:
            from memopt.errors import GraphError

            raise GraphError(f"tensor {name!r} has a negative size: {size}")
        tensors.append(Tensor(name, int_field(t, "size", twhere), output=bool_field(t, "output", twhere),
                              resident=bool_field(t, "resident", twhere)))
    ops = []
    for k, o in enumerate(require(doc, "ops", where, list)):
        name = require(o, "name", f"{where}: op #{k}", str)
        owhere = f"{where}: op {name!r}"
        ws = o.get("workspace", 0)
        if isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws < 0:
            from memopt.errors import GraphError

            raise GraphError(f"op {name!r} has a negative workspace: {ws}")
        cost = o.get("cost", 0)
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
            raise FormatError(f"{owhere}: field 'cost' must be a non-negative number, got {cost!r}")
        ops.append(Op(name, _str_list(o, "inputs", owhere), _str_list(o, "outputs", owhere),
                      workspace=int_field(o, "workspace", owhere, default=0), cost=cost))
    return TensorGraph.build(tensors, ops, name=str(doc.get("name", "")))


def graph_to_doc(graph: TensorGraph) -> dict:
    tensors = []
    for t in range(graph.num_tensors):
        rec: dict[str, Any] = {"name": graph.tensor_names[t], "size": int(graph.tensor_size[t])}
        if graph.tensor_output[t]:
            rec["output"] = True
        if graph.tensor_resident[t]:
            rec["resident"] = True
        tensors.append(rec)
    ops = []
    for v in range(graph.num_ops):
        rec = {"name": graph.op_names[v],
               "inputs": [graph.tensor_names[t] for t in graph.inputs_of(v)],
               "outputs": [graph.tensor_names[t] for t in graph.outputs_of(v)]}
        if graph.op_workspace[v]:
            rec["workspace"] = int(graph.op_workspace[v])
        c = float(graph.op_cost[v])
        if c:
            rec["cost"] = int(c) if c.is_integer() else c
        ops.append(rec)
    return {"format": GRAPH_FORMAT, "version": VERSION, "name": graph.name, "tensors": tensors, "ops": ops}


def program_from_doc(doc: dict, where: str = "<program>") -> Program:
    _check_header(doc, PROGRAM_FORMAT, where)
    inputs = doc.get("inputs", {})
    if not isinstance(inputs, dict):
        raise FormatError(f"{where}: field 'inputs' must be an object mapping buffer -> bytes")
    inputs = {b: int_field(inputs, b, f"{where}: inputs") for b in inputs}
    stmts = []
    for k, s in enumerate(require(doc, "statements", where, list)):
        name = require(s, "name", f"{where}: statement #{k}", str)
        swhere = f"{where}: statement {name!r}"
        allocs = []
        for a in s.get("alloc", []):
            if not (isinstance(a, list) and len(a) == 2 and isinstance(a[0], str)):
                raise FormatError(f"{swhere}: each alloc must be [buffer, bytes]")
            allocs.append((a[0], int_field({"bytes": a[1]}, "bytes", f"{swhere}: alloc {a[0]!r}")))
        stmts.append(Statement(name, allocs=tuple(allocs), frees=_str_list(s, "free", swhere),
                               reads=_str_list(s, "reads", swhere), writes=_str_list(s, "writes", swhere),
                               transient=int_field(s, "transient", swhere, default=0)))
    return Program(stmts, inputs=inputs, name=str(doc.get("name", "")))


def program_to_doc(program: Program) -> dict:
    stmts = []
    for s in program.statements:
        rec: dict[str, Any] = {"name": s.name}
        if s.allocs:
            rec["alloc"] = [[b, int(z)] for b, z in s.allocs]
        for key, val in (("free", s.frees), ("reads", s.reads), ("writes", s.writes)):
            if val:
                rec[key] = list(val)
        if s.transient:
            rec["transient"] = int(s.transient)
        stmts.append(rec)
    return {"format": PROGRAM_FORMAT, "version": VERSION, "name": program.name,
            "inputs": dict(program.inputs), "statements": stmts}


def instance_from_doc(doc, where: str = "<instance>") -> Instance:
    if isinstance(doc, dict) and doc.get("format") == GRAPH_FORMAT:
        g = graph_from_doc(doc, where)
        return Instance(name=g.name, schema=GRAPH_FORMAT, labels=tuple(g.op_names),
                        input_order=np.arange(g.num_ops, dtype=np.int64), graph=g, path=where)
    if isinstance(doc, dict) and doc.get("format") == PROGRAM_FORMAT:
        p = program_from_doc(doc, where)
        return Instance(name=p.name, schema=PROGRAM_FORMAT, labels=tuple(s.name for s in p.statements),
                        input_order=np.arange(len(p.statements), dtype=np.int64), program=p, path=where)
    if is_node_link(doc):
        return instance_from_node_link(doc, path=where)
    fmt = doc.get("format") if isinstance(doc, dict) else None
    raise FormatError(f"{where}: not a memopt graph, program or node-link graph"
                      + (f" (format {fmt!r})" if fmt else ""))


def load_instance(path: str | os.PathLike) -> Instance:
    """Load any supported instance file (memopt-graph, memopt-program, node-link JSON)."""
    return instance_from_doc(read_json(path), where=str(path))


def load_graph(path: str | os.PathLike) -> TensorGraph:
    """Load a tensor graph (memopt-graph or node-link JSON)."""
    inst = load_instance(path)
    if inst.graph is None:
        raise FormatError(f"{path}: holds a statement program, not a tensor graph")
    return inst.graph


def save_graph(graph: TensorGraph, path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(graph_to_doc(graph), fh, indent=1)
        fh.write("\n")


def plan_to_doc(instance: Instance, order, *, peak: int, lower_bound: int | None = None,
                status: str | None = None, method: str | None = None, extra: dict | None = None) -> dict:
    doc = {"format": PLAN_FORMAT, "version": VERSION, "instance": instance.name,
           "order": [instance.labels[int(i)] for i in order], "peak": int(peak)}
    if lower_bound is not None:
        doc["lower_bound"] = int(lower_bound)
    if status is not None:
        doc["status"] = status
    if method is not None:
        doc["method"] = method
    if extra:
        doc.update(extra)
    return doc


def plan_order(instance: Instance, doc, where: str = "<plan>") -> tuple[np.ndarray, dict]:
    """Op ids of a plan document's order for ``instance`` (order validity is checked by the caller)."""
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise FormatError(f"{where}: not a memopt-plan file")
    _check_header(doc, PLAN_FORMAT, where)
    order = require(doc, "order", where, list)
    return instance.index_of_labels(order), doc


def load_plan(instance: Instance, path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    return plan_order(instance, read_json(path), where=str(path))
