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
from memopt.errors import FormatError, GraphError, ScheduleError
from memopt.io._json import bool_field, cost_field, exact_json, int_field, read_json, require, show_number
from memopt.io.checkmate import instance_from_node_link, is_node_link
from memopt.io.instance import Instance

GRAPH_FORMAT, PROGRAM_FORMAT, PLAN_FORMAT = "memopt-graph", "memopt-program", "memopt-plan"
VERSION = 1


def _check_header(doc: dict, fmt: str, where: str) -> None:
    version = doc.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise FormatError(f"{where}: {fmt} version {show_number(version)} is not supported "
                          f"(this memopt reads version {VERSION})")


def _str_list(obj: dict, key: str, where: str) -> tuple[str, ...]:
    val = obj.get(key, [])
    if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
        raise FormatError(f"{where}: field {key!r} must be a list of names")
    return tuple(val)


def _object(doc, where: str) -> dict:
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _with_where(exc: Exception, where: str) -> str:
    msg = str(exc)
    return msg if msg.startswith(where) else f"{where}: {msg}"


def graph_from_doc(doc: dict, where: str = "<graph>") -> TensorGraph:
    _check_header(_object(doc, where), GRAPH_FORMAT, where)
    tensors = []
    for k, t in enumerate(require(doc, "tensors", where, list)):
        name = require(t, "name", f"{where}: tensor #{k}", str)
        twhere = f"{where}: tensor {name!r}"
        tensors.append(Tensor(name, int_field(t, "size", twhere), output=bool_field(t, "output", twhere),
                              resident=bool_field(t, "resident", twhere)))
    ops = []
    for k, o in enumerate(require(doc, "ops", where, list)):
        name = require(o, "name", f"{where}: op #{k}", str)
        owhere = f"{where}: op {name!r}"
        ops.append(Op(name, _str_list(o, "inputs", owhere), _str_list(o, "outputs", owhere),
                      workspace=int_field(o, "workspace", owhere, default=0),
                      cost=cost_field(o, "cost", owhere, default=0)))
    try:
        return TensorGraph.build(tensors, ops, name=_name(doc, where))
    except GraphError as exc:
        raise GraphError(_with_where(exc, where)) from None


def _name(doc: dict, where: str) -> str:
    name = doc.get("name", "")
    if not isinstance(name, (str, int)) or isinstance(name, bool):
        raise FormatError(f"{where}: field 'name' must be a string")
    return str(name)


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
        c = graph.op_cost_exact[v]
        if c:
            rec["cost"] = exact_json(c)
        ops.append(rec)
    return {"format": GRAPH_FORMAT, "version": VERSION, "name": graph.name, "tensors": tensors, "ops": ops}


def program_from_doc(doc: dict, where: str = "<program>") -> Program:
    _check_header(_object(doc, where), PROGRAM_FORMAT, where)
    inputs = doc.get("inputs", {})
    if not isinstance(inputs, dict):
        raise FormatError(f"{where}: field 'inputs' must be an object mapping buffer -> bytes")
    inputs = {b: int_field(inputs, b, f"{where}: inputs") for b in inputs}
    stmts = []
    for k, s in enumerate(require(doc, "statements", where, list)):
        name = require(s, "name", f"{where}: statement #{k}", str)
        swhere = f"{where}: statement {name!r}"
        alloc_list = s.get("alloc", [])
        if not isinstance(alloc_list, list):
            raise FormatError(f"{swhere}: field 'alloc' must be a list of [buffer, bytes] pairs, "
                              f"got {show_number(alloc_list)}")
        allocs = []
        for a in alloc_list:
            if not (isinstance(a, list) and len(a) == 2 and isinstance(a[0], str)):
                raise FormatError(f"{swhere}: each alloc must be [buffer, bytes], got {show_number(a)}")
            allocs.append((a[0], int_field({"bytes": a[1]}, "bytes", f"{swhere}: alloc {a[0]!r}")))
        stmts.append(Statement(name, allocs=tuple(allocs), frees=_str_list(s, "free", swhere),
                               reads=_str_list(s, "reads", swhere), writes=_str_list(s, "writes", swhere),
                               transient=int_field(s, "transient", swhere, default=0)))
    try:
        return Program(stmts, inputs=inputs, name=_name(doc, where))
    except GraphError as exc:
        raise GraphError(_with_where(exc, where)) from None


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
                      + (f" (format {show_number(fmt)})" if fmt else ""))


def load_instance(path: str | os.PathLike) -> Instance:
    """Load any supported instance file: memopt-graph, memopt-program or node-link JSON.

    Parameters
    ----------
    path : str or os.PathLike
        The file (``docs/formats.md``; node-link files in the Checkmate or random-layered
        schema, :mod:`memopt.io.checkmate`).

    Returns
    -------
    Instance
        ``graph`` (a :class:`~memopt.core.TensorGraph`) or ``program``, the file's op
        ``labels`` and its ``input_order`` (the ``input`` baseline).

    Raises
    ------
    FormatError
        Missing, malformed or truncated file, unknown schema or version, a number beyond exact
        int64 arithmetic; the message names the file and the item.
    GraphError
        A well-formed file describing an invalid graph (cycle, unknown name, negative size).

    Examples
    --------
    >>> import os, tempfile
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> from memopt.io import save_graph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> path = os.path.join(tempfile.mkdtemp(), "g.json")
    >>> save_graph(g, path)
    >>> inst = load_instance(path)
    >>> inst.graph.op_names, inst.input_order.tolist()
    (('f',), [0])
    """
    return instance_from_doc(read_json(path), where=str(path))


def load_graph(path: str | os.PathLike) -> TensorGraph:
    """Load a tensor graph from a memopt-graph or node-link JSON file.

    Parameters
    ----------
    path : str or os.PathLike
        The file (see :func:`load_instance`).

    Returns
    -------
    TensorGraph

    Raises
    ------
    FormatError
        As :func:`load_instance`, and when the file holds a statement program.
    GraphError
        A well-formed file describing an invalid graph.

    Examples
    --------
    >>> import os, tempfile
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> from memopt.io import save_graph
    >>> path = os.path.join(tempfile.mkdtemp(), "g.json")
    >>> save_graph(TensorGraph.build([Tensor("y", 2, output=True)], [Op("f", (), ("y",))]), path)
    >>> load_graph(path).num_ops
    1
    """
    inst = load_instance(path)
    if inst.graph is None:
        raise FormatError(f"{path}: holds a statement program, not a tensor graph")
    return inst.graph


def save_graph(graph: TensorGraph, path: str | os.PathLike) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(graph_to_doc(graph), fh, indent=1)
        fh.write("\n")


def plan_to_doc(instance: Instance, order, *, peak: int, lower_bound: int | None = None,
                status: str | None = None, method: str | None = None, extra: dict | None = None,
                certificate: dict | None = None) -> dict:
    """A memopt-plan document; ``memopt verify`` (:mod:`memopt.bounds.verify`) checks every claim in it.

    With ``certificate`` (``ScheduleResult.certificate``) the plan carries its bound's witness
    (field ``bound``: the certificate's ``{"name", "value", "witness"}``) and states only what
    that witness proves: ``lower_bound`` is capped at the witnessed value and a status it cannot
    back (``optimal`` from an exact search) is written as ``feasible``. Without one, a claimed
    bound or status verifies only if the checker re-derives it (base, end memory, node
    relaxation). ``extra`` fields are refused by verify unless the plan format defines them.
    """
    doc = {"format": PLAN_FORMAT, "version": VERSION, "instance": instance.name,
           "order": [instance.labels[int(i)] for i in order], "peak": int(peak)}
    if lower_bound is not None:
        doc["lower_bound"] = int(lower_bound)
    if status is not None:
        doc["status"] = status
    if method is not None:
        doc["method"] = method
    if certificate is not None:
        b = certificate["bound"]
        proven = int(b["value"])
        doc["bound"] = {"name": b.get("name", ""), "value": proven, "witness": b["witness"]}
        if lower_bound is not None and int(lower_bound) > proven:
            doc["lower_bound"] = proven
        if status in ("certified", "optimal") and proven < int(peak):
            doc["status"] = "feasible"
    if extra:
        doc.update(extra)
    return doc


def plan_order(instance: Instance, doc, where: str = "<plan>") -> tuple[np.ndarray, dict]:
    """Op ids of a plan document's order for ``instance`` (order validity is checked by the caller).

    The claims a plan may carry are type-checked here: ``peak`` and ``lower_bound`` are byte
    counts in ``[0, 2**62)``, ``status`` and ``method`` strings."""
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise FormatError(f"{where}: not a memopt-plan file")
    _check_header(doc, PLAN_FORMAT, where)
    order = require(doc, "order", where, list)
    for key in ("peak", "lower_bound"):
        if key in doc and doc[key] is not None:
            int_field(doc, key, where)
    for key in ("status", "method", "instance"):
        if key in doc and doc[key] is not None and not isinstance(doc[key], str):
            raise FormatError(f"{where}: field {key!r} must be a string, got {show_number(doc[key])}")
    for k, lab in enumerate(order):
        if isinstance(lab, bool) or not isinstance(lab, (int, str)):
            raise FormatError(f"{where}: order entry #{k} must be an op label (a string or an integer), "
                              f"got {show_number(lab)}")
    try:
        return instance.index_of_labels(order), doc
    except ScheduleError as exc:
        raise ScheduleError(_with_where(exc, where)) from None


def load_plan(instance: Instance, path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    return plan_order(instance, read_json(path), where=str(path))
