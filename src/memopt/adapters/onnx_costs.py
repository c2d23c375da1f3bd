"""Compute costs of ONNX nodes from their static shapes: multiply-accumulates for the
contractions, element counts for everything else.

The model (the cost :func:`memopt.adapters.onnx.load` gives each op; ``docs/formats.md``):

* ``Conv`` — ``numel(Y) * prod(W.shape[1:])``: every output element is a dot product of
  ``C_in/groups * prod(kernel)`` terms (bias additions are not counted);
* ``ConvTranspose`` — ``numel(X) * prod(W.shape[1:])``: every input element is scattered into
  ``C_out/groups * prod(kernel)`` outputs;
* ``MatMul`` — ``numel(Y) * K`` with ``K`` the last dimension of ``A`` (NumPy broadcasting);
* ``Gemm`` — ``M * N * K`` (``K`` read from ``A`` with ``transA``); the ``C`` term is not counted;
* every other node — the number of elements it writes (the sum over its outputs), the cost
  of one pass over its result.

Costs are Python integers, exact; a cost of ``2**53`` or more (not exact once stored as the
graph's float64 costs) is a :class:`~memopt.errors.FormatError` naming the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from memopt.errors import FormatError, InternalError

__all__ = ["node_cost", "node_costs"]

#: Costs must stay exact in the tensor graph's float64 cost array.
MAX_EXACT_COST = 2 ** 53


def node_cost(op_type: str, inputs: Sequence[tuple | None], outputs: Sequence[tuple], trans_a: bool = False) -> int:
    """The cost of one node from its input and output shapes (``None`` for an omitted or
    unknown input shape; output shapes are required). See the module docstring."""
    out_elems = sum(prod(s) for s in outputs)
    a = inputs[0] if inputs else None
    w = inputs[1] if len(inputs) > 1 else None
    if op_type == "Conv" and w is not None and outputs:
        return prod(outputs[0]) * prod(w[1:])
    if op_type == "ConvTranspose" and a is not None and w is not None:
        return prod(a) * prod(w[1:])
    if op_type == "MatMul" and a is not None and len(a) >= 1 and outputs:
        return prod(outputs[0]) * a[-1]
    if op_type == "Gemm" and a is not None and len(a) == 2 and outputs:
        k = a[0] if trans_a else a[1]
        return prod(outputs[0]) * k
    return out_elems


def node_costs(model, node_names: Sequence[str], path: str) -> list[int]:
    """The cost of every node of an ONNX ``model`` whose shapes are inferred (static), in file
    order; ``node_names`` name the nodes in errors."""
    g = model.graph
    shapes: dict = {i.name: tuple(int(d) for d in i.dims) for i in g.initializer}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes.setdefault(vi.name, tuple(int(d.dim_value) for d in tt.shape.dim))
    costs = []
    for i, n in enumerate(g.node):
        outs = []
        for o in n.output:
            if not o:
                continue
            if o not in shapes:
                raise InternalError("onnx-cost-shape", f"{path}: node {node_names[i]!r} output {o!r} has no "
                                                       "static shape after the importer sized it")
            outs.append(shapes[o])
        ins = [shapes.get(x) if x else None for x in n.input]
        trans_a = any(att.name == "transA" and att.i for att in n.attribute)
        c = node_cost(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}", ins, outs, trans_a)
        if c >= MAX_EXACT_COST:
            raise FormatError(f"{path}: node {node_names[i]!r} ({n.op_type}) costs {c} multiply-accumulates, "
                              "2**53 or more: not exact as a graph cost")
        costs.append(int(c))
    return costs

