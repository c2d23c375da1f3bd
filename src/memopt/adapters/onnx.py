"""ONNX models: import as a memopt tensor graph, reorder the nodes, run and measure in onnxruntime.

* :func:`load` — an ONNX file as a :class:`~memopt.core.TensorGraph` (exact byte sizes from
  ONNX shape inference; initializers, ``Constant`` outputs and graph inputs resident; graph
  outputs flagged; buffers onnxruntime shares between a node's input and output modelled as
  size-0 aliases that keep their base alive) and an :class:`OnnxMapping` back to the file.
* :func:`reorder` — schedules the graph with :func:`memopt.schedule`, writes a model whose node
  order is memopt's plan (it passes ``onnx.checker.check_model(full_check=True)``), and, unless
  ``measure=False``, runs the original (onnxruntime's default order) and the reordered model
  (``ExecutionOrder.PRIORITY_BASED``, which follows the file's node order) and reports
  modelled and measured peaks and whether the outputs are bitwise identical.
* :func:`measure` — one run of a model in onnxruntime with the settings below; the measured
  peak comes from the memory statistics onnxruntime's profiler records for every kernel.

onnx and onnxruntime are imported lazily, inside the functions that need them (the
``memopt[onnx]`` extra). How the measurement works, and what equality it gives, is written
down in ``docs/adapters.md``.

Buffer sharing in onnxruntime (CPU execution provider, memory reuse of dead buffers and
memory patterns off; measured with onnxruntime 1.32, table below, re-checked by the tests):

* ``ALIAS_OPS`` — the kernel's output always *is* its first input's buffer (a view), unless
  the output is a graph output (then a fresh buffer, copied into). Modelled as a size-0 alias.
* ``INPLACE_OPS`` — the kernel may write its output into its first input's buffer; the
  allocation planner does so iff the input's buffer is an intermediate (not a graph input,
  initializer or graph output), has the same byte size, and this node is the last reader of
  that buffer *in the execution order*. Where every other reader is an ancestor of the node,
  that holds in every order and the output is modelled as an alias; otherwise it depends on
  the order, the tensor graph keeps a fresh buffer (an upper bound: in-place only ever saves
  the output's bytes during that one node) and :meth:`OnnxMapping.ort_profile` evaluates the
  order exactly as onnxruntime plans it.
* every other kernel allocates a fresh buffer for each output.

Kernel scratch: onnxruntime's CPU ``Conv`` (MLAS) allocates a working buffer inside its call
(im2col segments, ``MLAS_CONV_WORKING_BUFFER_SIZE_PER_THREAD`` = 16384 floats per thread) and
frees it before returning. :func:`node_workspaces` measures it per node (the node alone in a
fresh session, same settings: the arena's high-water mark above the bytes in use after the
kernel) and :func:`load` gives it to the node's op as its workspace, so that the model holds the
run's peak inside kernels too. Example::

    ws = node_workspaces("model.onnx")            # {"/stem/Conv": 131072, ...}
    graph, mapping = load("model.onnx", workspaces=ws)
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memopt.errors import FormatError, InternalError, OptionError, ScheduleError

__all__ = [
    "ALIAS_OPS",
    "INPLACE_OPS",
    "Measurement",
    "OnnxMapping",
    "ReorderReport",
    "bitwise_equal",
    "example_feeds",
    "import_graph",
    "kernels_equal",
    "load",
    "measure",
    "node_workspaces",
    "reorder",
    "session_options",
    "write_order",
]

#: onnxruntime CPU kernels whose output 0 is always input 0's buffer (a view).
ALIAS_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
#: onnxruntime CPU kernels that may write output 0 into input 0's buffer (same byte size, last reader).
INPLACE_OPS = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
                         "Softplus", "Softsign", "ThresholdedRelu", "Softmax", "LogSoftmax", "Clip",
                         "Shrink", "Cast"})
#: onnxruntime CPU kernels that allocate scratch memory inside their call (measured by :func:`node_workspaces`)
SCRATCH_OPS = frozenset({"Conv", "ConvTranspose"})
_SUBGRAPH_OPS = ("If", "Loop", "Scan")
_PACKED_TYPES = frozenset({"INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"})


def _require_onnx():
    try:
        import onnx
    except ImportError:
        raise OptionError("reading ONNX models needs the onnx package: pip install 'memopt[onnx]'") from None
    return onnx


#: onnxruntime's log severity "fatal": its errors reach the user as memopt's one-line message instead
ORT_LOG_FATAL = 4


def _require_ort():
    try:
        import onnxruntime
    except ImportError:
        raise OptionError("running ONNX models needs onnxruntime: pip install 'memopt[onnx]'") from None
    # memopt reports onnxruntime's refusals itself, as one line; onnxruntime's own log (a
    # failed session still logs from its destructor) would precede it on stderr
    onnxruntime.set_default_logger_severity(ORT_LOG_FATAL)
    return onnxruntime


# ---------------------------------------------------------------------------------------- loading
@dataclass(frozen=True)
class _Node:
    name: str              # unique name (the file's, or OpType_index when blank/duplicate)
    op_type: str
    inputs: tuple          # value names in slot order, repeated where read twice ("" = an omitted optional input)
    outputs: tuple


@dataclass(frozen=True, eq=False)
class OnnxMapping:
    """How a :class:`TensorGraph` built by :func:`load` maps back to its ONNX file.

    ``node_names[i]`` is the (unique) name of the file's i-th node; ``op_node[v]`` the file
    index of memopt op ``v`` (``Constant`` nodes are not ops: onnxruntime turns them into
    initializers, so their outputs are resident); ``constant_nodes`` their file indices.
    ``sizes`` maps every value to its bytes; ``kind`` to ``input``, ``initializer``,
    ``constant`` or ``produced``; ``alias`` maps a produced value modelled as a view to its base
    buffer; ``inplace_nodes`` names the nodes whose kernel may write in place (``INPLACE_OPS``,
    equal sizes, shapes known to onnxruntime); ``conditional_inplace`` those among them whose
    in-place write depends on the order; ``workspace`` the scratch bytes of the nodes that hold
    any while they run (:func:`node_workspaces`).
    ``resident_bytes`` is the constant part of every peak (graph inputs, initializers,
    constants).
    """

    path: str
    node_names: tuple
    op_node: tuple
    constant_nodes: tuple
    sizes: dict
    kind: dict
    alias: dict
    graph_outputs: tuple
    conditional_inplace: tuple
    resident_bytes: int
    inplace_nodes: frozenset = frozenset()
    workspace: dict = field(default_factory=dict)   # node name -> scratch bytes held while it runs
    _nodes: tuple = field(repr=False, default=())

    def op_order_from_nodes(self, names: Sequence[str]) -> list[int]:
        """memopt op ids of a sequence of node names (``Constant`` nodes skipped)."""
        index = {self.node_names[f]: v for v, f in enumerate(self.op_node)}
        return [index[n] for n in names if n in index]

    def ort_profile(self, order: Sequence[int]) -> list[int]:
        """Bytes in use while each op of ``order`` (memopt op ids) runs, as onnxruntime's
        allocation planner lays the buffers out for that execution order (including in-place
        writes that depend on the order), resident bytes included."""
        return _ort_simulate(self, [self._nodes[self.op_node[v]] for v in order])

    def workspaces(self, order: Sequence[int]) -> list[int]:
        """Scratch bytes of each op of ``order`` (memopt op ids)."""
        return [int(self.workspace.get(self.node_names[self.op_node[v]], 0)) for v in order]

    def ort_peak(self, order: Sequence[int]) -> int:
        """The peak of ``order`` as onnxruntime plans it: the bytes in use while each op runs
        plus its scratch, resident bytes included."""
        prof = self.ort_profile(order)
        return max([self.resident_bytes] + [b + w for b, w in zip(prof, self.workspaces(order))])


def _dtype_size(elem_type: int, value: str) -> int:
    onnx = _require_onnx()
    from onnx import TensorProto

    if elem_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        raise FormatError(f"tensor {value!r} has element type "
                          f"{TensorProto.DataType.Name(elem_type)}: no fixed byte size")
    try:
        dt = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except Exception:
        raise FormatError(f"tensor {value!r} has unsupported element type {elem_type}") from None
    name = TensorProto.DataType.Name(elem_type)
    if name in _PACKED_TYPES:
        raise FormatError(f"tensor {value!r} has packed sub-byte element type {name}: not supported")
    return int(dt.itemsize)


def _static_bytes(type_proto, value: str, where: str) -> int:
    if not type_proto.HasField("tensor_type"):
        kind = type_proto.WhichOneof("value") or "unknown"
        raise FormatError(f"{where}: value {value!r} is a {kind}, not a tensor: only tensors are supported")
    tt = type_proto.tensor_type
    size = _dtype_size(tt.elem_type, value)
    if not tt.HasField("shape"):
        raise FormatError(f"{where}: tensor {value!r} has an unknown shape after shape inference "
                          "(static shapes are required)")
    for k, d in enumerate(tt.shape.dim):
        if not d.HasField("dim_value"):
            sym = f" ({d.dim_param!r})" if d.dim_param else ""
            raise FormatError(f"{where}: tensor {value!r} has an unknown dimension {k}{sym} after shape "
                              "inference (static shapes are required; fix the input shapes first)")
        if d.dim_value < 0:
            raise FormatError(f"{where}: tensor {value!r} has a negative dimension {d.dim_value}")
        size *= int(d.dim_value)
    return size


def _read_model(path):
    onnx = _require_onnx()
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FormatError(f"ONNX file not found: {path}")
    if os.path.isdir(path):
        raise FormatError(f"ONNX file is a directory: {path}")
    try:
        model = onnx.load(path)
    except Exception as exc:  # protobuf DecodeError, truncated files, external data missing
        raise FormatError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:120]})") from None
    if not model.HasField("graph"):
        raise FormatError(f"{path}: not an ONNX model (no graph)")
    return model


def _check_no_subgraphs(model, path: str) -> None:
    from onnx import AttributeProto

    for i, n in enumerate(model.graph.node):
        for a in n.attribute:
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) or n.op_type in _SUBGRAPH_OPS:
                raise FormatError(f"{path}: node {n.name or i!r} ({n.op_type}) has a subgraph (attribute "
                                  f"{a.name!r}): control flow (If/Loop/Scan) is not supported")
        if n.op_type in _SUBGRAPH_OPS:
            raise FormatError(f"{path}: node {n.name or i!r} is a {n.op_type}: control flow is not supported")


def _unique_names(model) -> tuple:
    seen: set = set()
    names = []
    for i, n in enumerate(model.graph.node):
        name = n.name if n.name and n.name not in seen else f"{n.op_type}_{i}"
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    return tuple(names)


def _infer(model, path: str):
    onnx = _require_onnx()
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        raise FormatError(f"{path}: ONNX shape inference failed: {' '.join(str(exc).split())[:300]}") from None


def load(path, *, name: str | None = None, workspaces: dict | None = None):
    """Read an ONNX model as ``(TensorGraph, OnnxMapping)``.

    ``workspaces`` (node name -> bytes, e.g. from :func:`node_workspaces`) become the ops'
    workspaces: bytes held only while the node runs. Sizes are exact bytes (element size of the data type times the static shape, after ONNX
    shape inference); an unknown shape, a non-tensor value, a string tensor or a subgraph
    (If/Loop/Scan) is a :class:`~memopt.errors.FormatError` naming the value or node.
    Op costs are multiply-accumulates for ``Conv``/``ConvTranspose``/``MatMul``/``Gemm`` and
    element counts for the rest (:mod:`memopt.adapters.onnx_costs`).
    """
    model = _read_model(path)
    path = os.fspath(path)
    _check_no_subgraphs(model, path)
    if len(model.functions):
        raise FormatError(f"{path}: model-local functions ({model.functions[0].name!r}, ...) are not supported")
    inferred, ort_static = _shape_inferred(model, path)
    return _build(inferred, path, name=name, ort_static=ort_static, workspaces=workspaces)


def _shape_inferred(model, path: str):
    """``(model with inferred shapes, values whose shape ONNX's own inference knows)``."""
    inferred = _infer(model, path)
    # onnxruntime plans in-place writes only where its own (ONNX) shape inference knows both shapes
    ort_static = _static_values(inferred)
    if _first_unknown(inferred) is not None:
        # ONNX's inference leaves some exporter patterns unsized (a Slice whose bounds come
        # from a Shape); onnxruntime's symbolic shape inference, when installed, often sizes them
        sym = _symbolic_infer(model)
        if sym is not None and _first_unknown(sym) is None:
            inferred = sym
    return inferred, ort_static


def _static_values(model) -> set:
    g = model.graph
    out = {i.name for i in g.initializer}
    out.update(vi.name for vi in list(g.input) + list(g.value_info) + list(g.output) if _static(vi.type))
    return out


def _static(type_proto) -> bool:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in type_proto.tensor_type.shape.dim)


def _first_unknown(model):
    """The first node output without a static tensor shape (``None`` when every one has one)."""
    g = model.graph
    known = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for n in g.node:
        for o in n.output:
            if o and (o not in known or not _static(known[o])):
                return o
    return None


def _symbolic_infer(model):
    """onnxruntime's symbolic shape inference, or ``None`` when it is not installed or fails."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except Exception:
        return None
    try:
        return SymbolicShapeInference.infer_shapes(model, auto_merge=False, guess_output_rank=False)
    except Exception:
        return None


def _build(model, path: str, *, name: str | None = None, ort_static: set | None = None,
           workspaces: dict | None = None):
    from memopt.adapters.onnx_costs import node_costs
    from memopt.core import Op, Tensor, TensorGraph

    g = model.graph
    node_names = _unique_names(model)
    types: dict = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        types.setdefault(vi.name, vi.type)
    sizes: dict = {}
    kind: dict = {}
    for init in g.initializer:
        dims = [int(d) for d in init.dims]
        sizes[init.name] = _dtype_size(init.data_type, init.name) * int(np.prod(dims, dtype=np.int64)) \
            if dims else _dtype_size(init.data_type, init.name)
        kind[init.name] = "initializer"
    for s in g.sparse_initializer:
        raise FormatError(f"{path}: sparse initializer {s.values.name!r} is not supported")
    for vi in g.input:
        if vi.name in kind:
            continue  # an initializer listed as an input: a default value, resident either way
        sizes[vi.name] = _static_bytes(vi.type, vi.name, path)
        kind[vi.name] = "input"
    nodes = []
    constant_nodes = []
    for i, n in enumerate(g.node):
        for o in n.output:
            if not o:
                continue
            if o in kind:
                raise FormatError(f"{path}: value {o!r} is produced twice (node {node_names[i]!r})")
            if o not in types:
                raise FormatError(f"{path}: tensor {o!r} (output of node {node_names[i]!r}) has no type or "
                                  "shape after shape inference (static shapes are required)")
            sizes[o] = _static_bytes(types[o], o, path)
            kind[o] = "constant" if n.op_type == "Constant" and n.domain in ("", "ai.onnx") else "produced"
        for x in n.input:
            if x and x not in kind:
                raise FormatError(f"{path}: node {node_names[i]!r} reads {x!r}, which no earlier node, input "
                                  "or initializer defines (the file's nodes must be in topological order)")
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            constant_nodes.append(i)
        nodes.append(_Node(node_names[i], n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}",
                           tuple(n.input), tuple(o for o in n.output if o)))
    outputs = tuple(o.name for o in g.output)
    for o in outputs:
        if o not in kind:
            raise FormatError(f"{path}: graph output {o!r} is not produced by any node")
    out_set = set(outputs)
    # nodes whose kernel may write in place: table, equal byte sizes, and both shapes known to
    # onnxruntime's own inference (its planner compares shapes, not our inferred sizes)
    inplace_nodes = frozenset(
        n.name for i, n in enumerate(nodes)
        if n.op_type in INPLACE_OPS and n.inputs and n.inputs[0] and n.outputs
        and sizes[n.inputs[0]] == sizes[n.outputs[0]]
        and (ort_static is None or (n.inputs[0] in ort_static and n.outputs[0] in ort_static)))

    # --- buffers: which produced values are views of another buffer (in every order)
    consumers: dict = {}
    for i, n in enumerate(nodes):
        for x in {x for x in n.inputs if x}:
            consumers.setdefault(x, []).append(i)
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs}
    ancestors: list[int] = []   # bit sets of node indices (Python ints)
    for n in nodes:
        anc = 0
        for x in n.inputs:
            if x in producer:
                p = producer[x]
                anc |= ancestors[p] | (1 << p)
        ancestors.append(anc)
    constant_set = set(constant_nodes)
    resident_view: set = set()   # produced views of a resident buffer (an input, initializer, constant)
    base: dict = {}          # produced value -> base produced value (itself unless a view)
    members: dict = {}       # base -> values sharing its buffer
    alias: dict = {}
    conditional = []

    def root(v):
        return base.get(v, v)

    for i, n in enumerate(nodes):
        if i in constant_set:
            continue
        for k, o in enumerate(n.outputs):
            base[o] = o
            members[o] = [o]
            if k != 0 or not n.inputs or not n.inputs[0] or o in out_set:
                continue
            src = n.inputs[0]
            if n.op_type in ALIAS_OPS:
                if kind[src] == "produced" and src not in resident_view:
                    b = root(src)
                    base[o] = b
                    members[b].append(o)
                    del members[o]
                    alias[o] = b
                else:  # a view of a resident buffer: nothing to allocate
                    alias[o] = alias.get(src, src)
                    resident_view.add(o)
                continue
            if n.name in inplace_nodes and kind[src] == "produced" and src not in resident_view:
                b = root(src)
                if b in out_set or any(x in out_set for x in members[b]):
                    continue
                if sum(1 for x in n.inputs if x and root(x) == b and kind.get(x) == "produced") != 1:
                    continue
                readers = set()
                for x in members[b]:
                    readers.update(consumers.get(x, ()))
                readers.discard(i)
                if all(ancestors[i] >> r & 1 for r in readers):
                    base[o] = b
                    members[b].append(o)
                    del members[o]
                    alias[o] = b
                else:
                    conditional.append(node_names[i])
    # --- the tensor graph
    # onnxruntime releases a buffer after the last node that reads it; a buffer nobody reads
    # has no release action and stays allocated until the run ends: held to the end, like an output
    read_buffers = {root(x) for x in consumers if kind.get(x) == "produced"}
    resident_kinds = ("input", "initializer", "constant")
    tensors = []
    for v, kd in kind.items():
        if kd in resident_kinds:
            tensors.append(Tensor(v, sizes[v], resident=True, output=v in out_set))
        else:
            unread = v not in alias and v not in read_buffers
            tensors.append(Tensor(v, 0 if v in alias else sizes[v], output=v in out_set or unread))
    unknown = sorted(set(workspaces or {}) - {n.name for n in nodes})
    if unknown:
        raise OptionError(f"{path}: workspace given for {unknown[0]!r}, which is not a node of the model")
    costs = node_costs(model, node_names, path)   # MACs / element counts (memopt.adapters.onnx_costs)
    ops = []
    op_node = []
    for i, n in enumerate(nodes):
        if i in constant_set:
            continue
        ins = []
        for x in n.inputs:
            if not x:
                continue
            ins.append(x)
            b = alias.get(x)
            if b is not None:
                ins.append(b)
        ops.append(Op(n.name, tuple(dict.fromkeys(ins)), n.outputs, workspace=int((workspaces or {}).get(n.name, 0)),
                      cost=costs[i]))
        op_node.append(i)
    gname = name if name is not None else (model.graph.name or os.path.splitext(os.path.basename(path))[0])
    graph = TensorGraph.build(tensors, ops, name=gname)
    resident = sum(sizes[v] for v, kd in kind.items() if kd in resident_kinds)
    mapping = OnnxMapping(path=path, node_names=node_names, op_node=tuple(op_node),
                          constant_nodes=tuple(constant_nodes), sizes=sizes, kind=kind, alias=alias,
                          graph_outputs=outputs, conditional_inplace=tuple(conditional), inplace_nodes=inplace_nodes,
                          resident_bytes=int(resident), workspace={k: int(v) for k, v in (workspaces or {}).items() if v},
                          _nodes=tuple(nodes))
    return graph, mapping


# ------------------------------------------------------------------- onnxruntime's planner, simulated
def _ort_simulate(m: OnnxMapping, nodes: Sequence[_Node]) -> list[int]:
    """Bytes in use while each node runs (resident included), following onnxruntime's allocation
    planner for a sequential execution order: use counts per buffer; a graph output always gets
    a fresh buffer; an alias kernel shares input 0's buffer; an in-place kernel shares it when the
    buffer's use count is 1 (this node is its last reader) and the sizes match; buffers are freed
    when their use count drops to zero; dead buffers are never reused (memory reuse off)."""
    outs = set(m.graph_outputs)
    read = {x for n in nodes for x in n.inputs if x}
    has_reader: dict = {}   # buffer -> some value in it is read by a node (else never released)
    use: dict = {}
    buf: dict = {}
    for v, kd in m.kind.items():
        if kd != "produced":
            buf[v] = None  # resident: never counted, never freed
    for n in nodes:
        for x in n.inputs:
            if x:
                use[x] = use.get(x, 0) + 1
        for o in n.outputs:
            use[o] = use.get(o, 0) + 1
    for o in outs:
        use[o] = use.get(o, 0) + 1
    live = 0
    prof = []
    for n in nodes:
        fresh = 0
        for k, o in enumerate(n.outputs):
            src = n.inputs[0] if n.inputs else ""
            shared = None
            if o not in outs and k == 0 and src:
                b = buf.get(src)
                if n.op_type in ALIAS_OPS:
                    shared = ("resident",) if b is None else b
                elif n.name in m.inplace_nodes and b is not None and use[b] == 1:
                    shared = b
            if shared is None:
                buf[o] = o
                fresh += m.sizes[o]
                has_reader[o] = o in read
            elif shared == ("resident",):
                buf[o] = None
            else:
                buf[o] = shared
                use[shared] += use.pop(o)
                has_reader[shared] = has_reader[shared] or o in read
        prof.append(m.resident_bytes + live + fresh)
        live += fresh
        for x in list(n.inputs) + list(n.outputs):
            if not x:
                continue
            b = buf.get(x)
            if b is None:
                continue
            use[b] -= 1
            if use[b] == 0 and has_reader[b]:
                live -= m.sizes[b]
    return prof


# --------------------------------------------------------------------------------- running in ORT
def session_options(order: str = "priority", *, profile: bool = True):
    """The onnxruntime settings every measurement uses (docs/adapters.md): CPU arena on, memory
    patterns off, reuse of dead buffers off, no graph optimization, profiling on;
    ``order="priority"`` follows the file's node order, ``"default"`` is onnxruntime's own."""
    ort = _require_ort()
    so = ort.SessionOptions()
    so.enable_profiling = profile
    so.enable_cpu_mem_arena = True
    so.enable_mem_pattern = False
    so.enable_mem_reuse = False
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_order = (ort.ExecutionOrder.PRIORITY_BASED if order == "priority"
                          else ort.ExecutionOrder.DEFAULT)
    so.log_severity_level = ORT_LOG_FATAL
    return so


@dataclass(frozen=True)
class Measurement:
    """One onnxruntime run: the executed node order, the bytes in use after each kernel, the
    measured peak (resident bytes + the highest requested bytes the arena held above what it
    held when the run started), the arena's own high-water mark (rounded by the arena), and
    the outputs."""

    order: tuple                 # node names in execution order
    after_kernel: tuple          # requested bytes in use after each kernel (before its inputs are freed)
    allocated: tuple             # requested bytes each kernel added while it ran (its fresh outputs)
    baseline: int                # requested bytes in use in the arena when the run started
    peak: int                    # resident_bytes + max(0, max(after_kernel) - baseline)
    arena_high_water: int        # the arena's peak (rounded bytes) since the session started
    sampled_high_water: int      # max over kernels of the arena's rounded bytes in use
    outputs: tuple = field(repr=False, default=())
    after_kernel_rounded: tuple = ()  # the arena's rounded (chunk) bytes in use after each kernel

    resident: int = 0                 # the model's resident bytes (counted in ``peak``)

    def peak_with(self, workspace: Sequence[int]) -> int:
        """The run's peak with each kernel's scratch (``workspace[k]`` bytes, in execution
        order) held on top of the bytes in use after it: the requested bytes sampled at the
        kernel boundaries plus what the kernel holds inside its call."""
        return self.resident + max(0, max(r - self.baseline + w for r, w in zip(self.after_kernel, workspace)))

    def scratch_matches(self, workspace: Sequence[int]) -> bool:
        """The arena's own high-water mark equals ``max_k(rounded bytes after kernel k +
        workspace[k])``: the scratch the run actually held inside its kernels is the measured
        per-node workspace, at the kernel that set the peak (chunk bytes, the arena's unit)."""
        return self.arena_high_water == max(r + w for r, w in zip(self.after_kernel_rounded, workspace))

    @property
    def scratch_free(self) -> bool:
        """True when no kernel held memory above the sampled points (the arena's high-water
        mark equals the largest sample): then :attr:`peak` is the run's exact peak."""
        return self.arena_high_water == self.sampled_high_water


def _named_copy(model, names: Sequence[str]):
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n, nm in zip(m.graph.node, names):
        n.name = nm
    return m


def example_feeds(model, seed: int = 0) -> dict:
    """Deterministic inputs for every graph input that is not an initializer (seeded)."""
    import onnx

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = [int(d.dim_value) for d in tt.shape.dim]
        if dt.kind == "f":
            arr = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            arr = rng.integers(0, 2, shape).astype(bool)
        else:
            arr = rng.integers(0, 4, shape).astype(dt)
        feeds[vi.name] = arr
    return feeds


def _profiled_run(model, so, feeds: dict, where: str) -> tuple[list, list]:
    """Run a ``ModelProto`` once in a fresh CPU session with options ``so`` (profiling on);
    return ``(outputs, kernel events of the profile, in execution order)``."""
    ort = _require_ort()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memopt-ort-") as tmp:
        so.profile_file_prefix = os.path.join(tmp, "profile")
        try:
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            outs = sess.run(None, feeds)
        except Exception as exc:  # onnxruntime's own refusal: a kernel it lacks, a bad attribute
            raise FormatError(f"{where}: onnxruntime cannot run this model: "
                              f"{' '.join(str(exc).split())[:240]}") from None
        prof_path = sess.end_profiling()
        with open(prof_path, encoding="utf-8") as fh:
            events = json.load(fh)
    kernels = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    if not kernels:
        raise InternalError("ort-profile", "onnxruntime's profile has no kernel events")
    for key in ("mem_bytes_requested_in_use", "mem_requested_in_use_delta", "mem_in_use_peak", "mem_bytes_in_use"):
        if key not in kernels[0].get("args", {}):
            raise OptionError(f"this onnxruntime ({ort.__version__}) does not record {key!r} in its profile; "
                              "memopt's measurement needs onnxruntime >= 1.20")
    return outs, kernels


def measure(model, mapping: OnnxMapping, *, order: str = "priority", feeds: dict | None = None,
            threads: int | None = None) -> Measurement:
    """Run ``model`` (a ``ModelProto`` or a path) once in a fresh onnxruntime session and read the
    arena statistics its profiler records after every kernel (``docs/adapters.md``)."""
    if not hasattr(model, "graph"):
        model = _read_model(model)
    named = _named_copy(model, _unique_names(model))
    so = session_options(order)
    if threads is not None:
        so.intra_op_num_threads = threads
    feeds = example_feeds(model) if feeds is None else feeds
    outs, kernels = _profiled_run(named, so, feeds, mapping.path)
    names = tuple(e["name"][: -len("_kernel_time")] for e in kernels)
    req = tuple(int(e["args"]["mem_bytes_requested_in_use"]) for e in kernels)
    base = req[0] - int(kernels[0]["args"]["mem_requested_in_use_delta"])
    rounded = [int(e["args"]["mem_bytes_in_use"]) for e in kernels]
    high = int(kernels[-1]["args"]["mem_in_use_peak"])
    peak = mapping.resident_bytes + max(0, max(req) - base)
    alloc = tuple(int(e["args"]["mem_requested_in_use_delta"]) for e in kernels)
    return Measurement(order=names, after_kernel=req, allocated=alloc, baseline=base, peak=int(peak), arena_high_water=high,
                       sampled_high_water=max(rounded), outputs=tuple(outs), after_kernel_rounded=tuple(rounded),
                       resident=mapping.resident_bytes)


def node_workspaces(model, *, ops=SCRATCH_OPS, threads: int | None = None) -> dict[str, int]:
    """Scratch bytes each node of type ``ops`` allocates and frees inside its kernel, measured:
    the node alone in a fresh session with :func:`session_options` (its tensor inputs fed with
    seeded data, its initializers kept), and its scratch = the arena's high-water mark minus
    the bytes in use after the kernel (the kernel's outputs). Keyed by unique node name (as
    :func:`load` names nodes); nodes with no scratch are left out. Nodes with the same type,
    attributes and input shapes are measured once.

    The arena counts in chunks (requests rounded up to 256 bytes); MLAS requests its
    convolution working buffer in whole blocks of 16384 floats per thread, so for ``Conv``
    the chunk bytes are the requested bytes (docs/adapters.md)."""
    onnx = _require_onnx()
    from onnx import helper

    path = os.fspath(model) if not hasattr(model, "graph") else "model"
    if not hasattr(model, "graph"):
        model = _read_model(model)
    inferred, _ = _shape_inferred(model, path)
    g = inferred.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    inits = {i.name: i for i in g.initializer}
    names = _unique_names(model)
    consts = {o: n for n in g.node if n.op_type == "Constant" for o in n.output}
    seen: dict = {}
    out: dict[str, int] = {}
    for node, name in zip(g.node, names):
        if node.op_type not in ops:
            continue
        inputs, feeds, keep, extra_nodes = [], {}, [], []
        rng = np.random.default_rng(0)
        for x in node.input:
            if not x or x in feeds:
                continue
            if x in inits:
                keep.append(inits[x])
            elif x in consts:
                extra_nodes.append(consts[x])
            else:
                if x not in types or not _static(types[x]):
                    raise FormatError(f"{path}: input {x!r} of node {name!r} has no static shape")
                tt = types[x].tensor_type
                inputs.append(helper.make_value_info(x, types[x]))
                dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
                feeds[x] = rng.standard_normal([d.dim_value for d in tt.shape.dim]).astype(dt)
        # the scratch depends on the kernel, its attributes and its input shapes, not on the values
        key = (node.op_type, tuple(a.SerializeToString(deterministic=True) for a in node.attribute),
               tuple((f.dtype.str, f.shape) for f in feeds.values()), tuple((i.data_type, tuple(i.dims)) for i in keep),
               tuple(n.SerializeToString(deterministic=True) for n in extra_nodes))
        if key not in seen:
            outputs = [helper.make_value_info(o, types[o]) for o in node.output if o]
            single = helper.make_model(helper.make_graph(extra_nodes + [node], "memopt-workspace", inputs, outputs, keep),
                                       opset_imports=model.opset_import, ir_version=model.ir_version)
            so = session_options("priority")
            if threads is not None:
                so.intra_op_num_threads = threads
            _, kernels = _profiled_run(single, so, feeds, f"{path}: node {name!r}")
            args = kernels[-1]["args"]
            seen[key] = max(0, int(args["mem_in_use_peak"]) - int(args["mem_bytes_in_use"]))
        if seen[key]:
            out[name] = seen[key]
    return out


def bitwise_equal(a: Sequence, b: Sequence) -> bool:
    """Same number of outputs, and each pair has the same dtype, shape and raw bytes."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


# ------------------------------------------------------------------------------------ reordering
@dataclass(frozen=True)
class ReorderReport:
    """What :func:`reorder` did. Peaks are bytes; ``peak_*`` are memopt's tensor-graph model
    (``lower_bound`` and ``status`` refer to it), ``modelled_*`` onnxruntime's planner simulated
    for the executed order (equal to ``peak_*`` unless some in-place write depends on the order),
    ``measured_*`` what onnxruntime's arena held (``None`` with ``measure=False``)."""

    input: str
    output: str
    nodes: int
    ops: int
    baseline: str                # which order "before" is: "ort-default" or "file"
    peak_before: int
    peak_after: int
    lower_bound: int
    status: str
    method: str
    seconds: float               # the scheduling call's own seconds (kernel compilation excluded)
    kept_baseline: bool          # True when memopt found nothing better and the baseline order was written
    modelled_before: int
    modelled_after: int
    measured_before: int | None = None
    measured_after: int | None = None
    bitwise_equal: bool | None = None
    kernels_equal_before: bool | None = None  # measured bytes after every kernel == the modelled ones, to the byte
    kernels_equal_after: bool | None = None
    scratch_before: int | None = None    # arena high-water above the largest kernel-boundary sample (rounded
    scratch_after: int | None = None     # bytes): kernel-internal scratch; 0 = none
    scratch_modelled_before: bool | None = None  # the arena's high-water mark = max over kernels of the rounded
    scratch_modelled_after: bool | None = None   # bytes after it + its measured workspace (node_workspaces)
    exact_before: bool | None = None     # kernels_equal and scratch_modelled: measured_* is the run's exact peak
    exact_after: bool | None = None
    followed_order: bool | None = None   # onnxruntime executed the written node order
    conditional_inplace: int = 0
    resident_bytes: int = 0              # graph inputs, initializers, constants: the same in every order
    workspace_nodes: int = 0             # nodes with a measured scratch workspace in the model
    order: tuple = field(repr=False, default=())
    # onnxruntime's default session options (memopt.adapters.onnx_defaults): arena peak and reservation
    # above the start of the first run, original model ("before") and written model ("after")
    default_settings: str | None = None
    default_before: int | None = None
    default_after: int | None = None
    default_held_before: int | None = None
    default_held_after: int | None = None
    default_reordered: int | None = None       # memopt's order under the defaults (written or not)
    default_held_reordered: int | None = None
    kept_original_for_defaults: bool = False   # memopt's order was worse under the defaults: the input was written
    default_bitwise_equal: bool | None = None
    compile_seconds: float = 0.0               # first use in the process: memopt's kernels compiled or loaded and
    #                                            its modules imported (reported apart, not in ``seconds``)
    call_seconds: float = 0.0                  # wall seconds of the whole scheduling call, compilation included

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["order"] = list(self.order)
        return d


def write_order(model, mapping: OnnxMapping, op_order: Sequence[int], out_path: str):
    """Write ``model`` with its nodes in ``op_order`` (memopt op ids; ``Constant`` nodes first)
    to ``out_path``, checked by ``onnx.checker.check_model(full_check=True)``; returns the model."""
    import onnx

    if sorted(int(v) for v in op_order) != list(range(len(mapping.op_node))):
        raise ScheduleError(f"the order must list each of the {len(mapping.op_node)} ops exactly once")

    m = onnx.ModelProto()
    m.CopyFrom(model)
    old = list(model.graph.node)
    new = [old[i] for i in mapping.constant_nodes] + [old[mapping.op_node[v]] for v in op_order]
    del m.graph.node[:]
    m.graph.node.extend(new)
    # every node gets its unique name (the file's own where it had one), so that a profile of
    # the written model names the same nodes as memopt's plan
    for n, i in zip(m.graph.node, list(mapping.constant_nodes) + [mapping.op_node[v] for v in op_order]):
        n.name = mapping.node_names[i]
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as exc:
        raise InternalError("onnx-checker", f"the reordered model fails onnx.checker: {exc}") from None
    onnx.save(m, out_path)
    return m


def reorder(path, out_path, time_limit: float = 10.0, *, measure_runs: bool = True, method: str = "auto",
            seed: int = 0, workspaces: bool | None = None, settings=None, defaults: bool | None = None) -> ReorderReport:
    """Schedule an ONNX model's nodes with memopt and write the reordered model to ``out_path``.

    The baseline ("before") is onnxruntime's default execution order when ``measure_runs``
    (the order it actually ran, read from its profile), else the file's order. The written
    order is memopt's plan unless that plan's peak — in memopt's model or in onnxruntime's
    planner — is above the baseline's, in which case the baseline order is written: the output
    is never worse than the original in the model. With ``measure_runs`` both models are run
    in onnxruntime (same inputs) and their measured peaks and outputs compared.
    ``workspaces`` (default: ``measure_runs``) measures the scratch of every ``SCRATCH_OPS``
    node first (:func:`node_workspaces`) and schedules with it as the op's workspace.

    ``defaults`` (default: ``measure_runs``) also runs the input and the written model under
    onnxruntime's default session options with ``settings`` (a
    :class:`~memopt.adapters.onnx_defaults.RuntimeSettings`, whose ``threads`` the exact-mode
    runs use too) and measures the arena's peak and reservation
    (:func:`~memopt.adapters.onnx_defaults.measure_defaults`); if the reordered model is above
    the input on either, the input file is written unchanged instead
    (``kept_original_for_defaults``): the output is never worse under the defaults.
    """
    from memopt.adapters.onnx_defaults import RuntimeSettings, measure_defaults
    import memopt
    from memopt.core import peak as model_peak

    path, out_path = os.fspath(path), os.fspath(out_path)
    if os.path.exists(out_path) and os.path.exists(path) and os.path.samefile(path, out_path):
        raise OptionError(f"output {out_path!r} is the input file; refusing to overwrite it")
    settings = settings or RuntimeSettings()
    if measure_runs or defaults:
        settings.validate()
    threads = settings.threads or None
    ws = node_workspaces(path, threads=threads) if (measure_runs if workspaces is None else workspaces) else None
    graph, mapping = load(path, workspaces=ws)
    if graph.num_ops == 0:
        raise FormatError(f"{path}: the model has no nodes to schedule")
    model = _read_model(path)
    file_order = list(range(graph.num_ops))
    before = None
    baseline_name = "file"
    base_order = file_order
    if measure_runs:
        before = measure(model, mapping, order="default", threads=threads)
        base_order = mapping.op_order_from_nodes(before.order)
        if len(base_order) != graph.num_ops:
            raise OptionError(f"{path}: onnxruntime ran {len(before.order)} kernels for {graph.num_ops} nodes "
                              "(it expanded or fused some nodes); this model cannot be measured node by node "
                              "(reorder it without measuring: measure_runs=False, --no-measure)")
        baseline_name = "ort-default"
    t0 = time.perf_counter()
    res = memopt.schedule(graph, method=method, time_limit=time_limit, input_order=base_order, seed=seed)
    call_seconds = time.perf_counter() - t0
    order = [int(v) for v in res.order]
    pk_base = int(model_peak(graph, base_order))
    pk_after = int(res.peak)
    kept = False
    if pk_after > pk_base or mapping.ort_peak(order) > mapping.ort_peak(base_order):
        order, pk_after, kept = list(base_order), pk_base, True
    if int(model_peak(graph, order)) != pk_after:
        raise InternalError("onnx-peak", "memopt's peak of the written order disagrees with the evaluator")
    # the model without order-dependent in-place writes is exactly memopt's tensor graph
    if not mapping.conditional_inplace:
        for o in (order, base_order):
            if mapping.ort_peak(o) != int(model_peak(graph, o)):
                raise InternalError("onnx-planner-model", "the simulated onnxruntime planner disagrees with the "
                                                          "tensor graph on an order without conditional in-place")
    if pk_after == int(res.peak):
        status = res.status
    else:
        status = "optimal" if int(res.lower_bound) >= pk_after else "feasible"
    written = write_order(model, mapping, order, out_path)
    rep = dict(input=path, output=out_path, nodes=len(model.graph.node), ops=graph.num_ops,
               baseline=baseline_name, peak_before=pk_base, peak_after=pk_after,
               lower_bound=int(res.lower_bound), status=status, method=res.method if not kept else "baseline",
               seconds=round(float(res.seconds), 6), call_seconds=round(call_seconds, 6),
               compile_seconds=round(res.first_use_seconds, 6),
               kept_baseline=kept, modelled_before=mapping.ort_peak(base_order),
               modelled_after=mapping.ort_peak(order), conditional_inplace=len(mapping.conditional_inplace),
               resident_bytes=mapping.resident_bytes, workspace_nodes=len(mapping.workspace),
               order=tuple(mapping.node_names[mapping.op_node[v]] for v in order))
    if measure_runs:
        after = measure(written, mapping, order="priority", threads=threads)
        ws_before = [mapping.workspace.get(n, 0) for n in before.order]
        ws_after = [mapping.workspace.get(n, 0) for n in after.order]
        rep.update(measured_before=before.peak_with(ws_before), measured_after=after.peak_with(ws_after),
                   bitwise_equal=bitwise_equal(before.outputs, after.outputs),
                   followed_order=tuple(after.order) == rep["order"])
        for tag, o, m, w in (("before", base_order, before, ws_before), ("after", order, after, ws_after)):
            eq = kernels_equal(mapping, o, m)
            rep[f"kernels_equal_{tag}"] = eq
            rep[f"scratch_{tag}"] = m.arena_high_water - m.sampled_high_water
            rep[f"scratch_modelled_{tag}"] = m.scratch_matches(w)
            rep[f"exact_{tag}"] = eq and m.scratch_matches(w)
    if measure_runs if defaults is None else defaults:
        feeds = example_feeds(model)
        d_before = measure_defaults(model, settings, feeds=feeds, where=path)
        d_after = measure_defaults(written, settings, feeds=feeds, where=out_path)
        rep.update(default_settings=d_before.settings, default_reordered=d_after.peak, default_held_reordered=d_after.held)
        if not d_after.not_above(d_before):
            shutil.copyfile(path, out_path)  # the input itself: exactly what the user had
            d_after = d_before
            rep["kept_original_for_defaults"] = True
        rep.update(default_before=d_before.peak, default_after=d_after.peak, default_held_before=d_before.held,
                   default_held_after=d_after.held, default_bitwise_equal=bitwise_equal(d_before.outputs, d_after.outputs))
    return ReorderReport(**rep)


def kernels_equal(mapping: OnnxMapping, order: Sequence[int], m: Measurement) -> bool:
    """The bytes measured after every kernel equal onnxruntime's simulated planner for ``order``
    (both relative to the start of the run), to the byte, and the kernels ran in that order."""
    names = tuple(mapping.node_names[mapping.op_node[v]] for v in order)
    if names != tuple(m.order):
        return False
    expected = [b - mapping.resident_bytes for b in mapping.ort_profile(order)]
    got = [r - m.baseline for r in m.after_kernel]
    return expected == got


def import_graph(path, out_path) -> tuple:
    """``load`` + :func:`memopt.io.save_graph`: write the memopt-graph JSON of an ONNX model."""
    from memopt.io import save_graph

    graph, mapping = load(path)
    save_graph(graph, out_path)
    return graph, mapping
