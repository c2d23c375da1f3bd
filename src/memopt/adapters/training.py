"""PyTorch training-step adapter: one step's forward and backward as a memopt tensor graph.

:func:`capture` traces ``loss_fn(model(*inputs))`` and its gradients with respect to the
model's parameters as **AOTAutograd's joint graph** (``torch._functorch.aot_autograd.
aot_export_module(..., trace_joint=True)``): one functional FX graph of ATen operators that
takes the parameters, buffers and inputs and returns the loss, the new buffer values (batch-norm
statistics) and the gradients. It is the graph torch's own min-cut partitioner and its
activation-memory budget decide on, which is why recomputation decisions are made here.

Form: **decomposition-free ATen** (no decomposition table is passed): every node is the
operator the eager step dispatches below autograd (``aten.convolution``,
``aten.convolution_backward``, ``aten.native_batch_norm_backward``, ``aten.addmm``, ...; only
CompositeImplicitAutograd operators such as ``linear`` are decomposed, as in eager). So a node
is one operator call that selective activation checkpointing's ``policy_fn`` sees, and the
FLOP formulas of ``torch.utils.flop_counter`` (registered on those operators, convolution
backward included) apply directly; core ATen would split each into several smaller nodes.
``capture(..., decompositions="inductor")`` captures with Inductor's decomposition table
instead: the joint graph Inductor's AOTAutograd partitions, which a plan must be made on to be
compiled by Inductor (normalizations and losses become their element-wise parts; convolutions,
matrix products and attention stay, so the FLOP formulas still count them).

The graph is functionalized: in-place operators of the model (``ReLU(inplace=True)``,
``x.add_(y)``) appear as their out-of-place form, and the memory modelled (and measured) is
that of the functional graph. Mutations of buffers (running statistics) and of user inputs
become graph outputs. In-place updates that cannot be captured are refused with one line
naming the operator (:class:`TrainingCaptureError`): a parameter modified in place, an in-place
change of a tensor autograd saved for the backward, and data-dependent control flow.

The tensor graph (``TrainingGraph.graph``; ``docs/formats.md``, ``memopt-graph``):

* one op per ATen call node (``getitem`` nodes select an output of a multi-output op; they are
  tensors, not ops), named as the FX node; its tensors are named after the FX node (or its
  ``getitem``; an output nobody selects is ``<node>.<i>``);
* sizes are exact: a tensor that owns its storage is ``storage nbytes`` of the traced (fake)
  value, which for a freshly allocated dense result is ``numel * element size``;
* views and aliases are explicit: a result sharing the storage of an earlier tensor (``t``,
  ``view``, ``expand``, ``detach``, ``_unsafe_view``; detected by storage identity of the
  traced values, not from a list) has size 0, and every op that reads it also reads the
  tensor owning the storage, so a view allocates nothing and keeps its base alive; a graph
  output that is a view makes its base an output;
* parameters, buffers and inputs are resident (live for the whole step, like ONNX
  initializers); the loss, new buffer values and gradients are graph outputs;
* costs are FLOPs from ``torch.utils.flop_counter``'s per-operator formulas applied to the
  node's traced shapes (plus CPU scaled-dot-product attention, which the registry names only
  for GPU kernels; and a grouped convolution's backward, whose weight gradient the registry
  counts as a dense convolution's: there each computed gradient costs the forward
  convolution's FLOPs, which is the registry's count when ``groups == 1``), and for every other
  op the number of elements it outputs, as the ONNX importer's costs; exact integers;
* ``TrainingGraph.phase`` marks each op ``forward`` (needed for the loss or the buffer updates,
  or traced before the last such op; the partitioner's forward) or ``backward``.

:func:`measure` runs the captured graph eagerly on the real tensors and measures its peak
with :func:`memopt.adapters.inductor.measure_peak` (the CPU allocator's own byte counts),
per op as well; the per-op excess over the op's outputs is a library transient (a
convolution's scratch), which :meth:`TrainingGraph.with_workspace` adds as op workspace.

torch is imported lazily; install the extra ``memopt[torch]``.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import InternalError, MemoptError, OptionError
from memopt._optional import import_torch

__all__ = ["capture", "measure", "transients", "TrainingGraph", "Measurement", "TrainingCaptureError", "op_flops",
           "op_flop_counts", "draws_random", "plan", "TrainingPlan"]


def __getattr__(name):
    # the recomputation planner (memopt.adapters.training_plan) builds on this module
    if name in ("plan", "TrainingPlan"):
        from memopt.adapters import training_plan

        return getattr(training_plan, name)
    raise AttributeError(f"module 'memopt.adapters.training' has no attribute {name!r}")


class TrainingCaptureError(MemoptError):
    """The training step cannot be captured as one joint graph (one line, naming the op)."""


def _torch():
    return import_torch("memopt.adapters.training")


# ----------------------------------------------------------------------------- costs
@functools.lru_cache(maxsize=1)
def _extra_formulas() -> dict:
    """FLOP formulas for operators ``torch.utils.flop_counter`` does not register: the CPU
    flash-attention kernels, counted as the registered GPU attention kernels."""
    torch = _torch()
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten

    def fwd(q, k, v, *args, out_val=None, **kwargs):
        return fc.sdpa_flop_count(q.shape, k.shape, v.shape)

    def bwd(grad_out, q, k, v, *args, out_val=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out.shape, q.shape, k.shape, v.shape)

    def conv_bwd(grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, mask,
                 *, out_val=None):
        # each computed gradient costs what the forward convolution costs; used for groups > 1,
        # where the registry's weight-gradient formula counts the convolution as dense
        fwd_flops = fc.conv_flop_count(x.shape, w.shape, grad_out.shape if not transposed else x.shape,
                                       bool(transposed))
        return fwd_flops * (int(bool(mask[0])) + int(bool(mask[1])))

    return {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd,
            "grouped convolution_backward": conv_bwd}


def op_flops(target, args: Sequence, kwargs: dict, out) -> int | None:
    """FLOPs of one ATen call from ``torch.utils.flop_counter``'s formula for its operator
    (applied to the shapes of ``args`` and ``out``), or ``None`` when there is none.

    Parameters
    ----------
    target : torch._ops.OpOverload
    args, kwargs
        The call's arguments (tensors, or fake tensors carrying the traced shapes).
    out
        Its result.

    Returns
    -------
    int or None

    Examples
    --------
    >>> import torch
    >>> a, b = torch.empty(3, 4), torch.empty(4, 5)
    >>> op_flops(torch.ops.aten.mm.default, (a, b), {}, torch.empty(3, 5))
    120
    """
    from torch.utils.flop_counter import flop_registry

    packet = getattr(target, "overloadpacket", None)
    extra = _extra_formulas()
    if packet is _torch().ops.aten.convolution_backward and len(args) > 9 and args[9] != 1:
        return int(extra["grouped convolution_backward"](*args, **kwargs, out_val=out))
    formula = flop_registry.get(packet) or extra.get(packet)
    if formula is None:
        return None
    return int(formula(*args, **kwargs, out_val=out))


def draws_random(target, args: Sequence, kwargs: dict) -> bool:
    """Does this ATen call draw random numbers (so that a second run would differ)? An operator
    tagged ``nondeterministic_seeded`` does, except when its ``dropout_p`` argument (attention
    kernels) is 0: those draw only for their dropout. PyTorch's partitioner re-runs them too
    (its random ops are dropout and ``rand_like``/``randn_like`` only).

    Examples
    --------
    >>> import torch
    >>> q = torch.empty(1, 1, 2, 4)
    >>> sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    >>> draws_random(sdpa, (q, q, q), {}), draws_random(sdpa, (q, q, q, 0.1), {})
    (False, True)
    >>> draws_random(torch.ops.aten.native_dropout.default, (q, 0.0, True), {})
    True
    """
    if _torch().Tag.nondeterministic_seeded not in getattr(target, "tags", ()):
        return False
    params = getattr(getattr(target, "_schema", None), "arguments", ())
    where = [i for i, a in enumerate(params) if a.name == "dropout_p"]
    if not where:
        return True
    i = where[0]
    p = kwargs.get("dropout_p", args[i] if i < len(args) else params[i].default_value)
    return p != 0


def op_flop_counts(tg: "TrainingGraph") -> dict:
    """``{op name: FLOPs}`` of every op of a captured step with a FLOP formula
    (:func:`op_flops`); an op without one is absent (its cost in the graph is an element count)."""
    counts = {}
    for o in tg._ops:
        node = tg.nodes[o.name]
        flops = op_flops(node.target, *_meta_args(node), node.meta.get("val"))
        if flops is not None:
            counts[o.name] = flops
    return counts


def _numel_cost(values: list) -> int:
    return sum(int(v.numel()) for v in values)


# ----------------------------------------------------------------------------- result
@dataclass(frozen=True)
class TrainingGraph:
    """A captured training step (see the module docstring).

    Attributes
    ----------
    graph : TensorGraph
        What :func:`memopt.remat` and :func:`memopt.schedule` take; op ``i`` is the ``i``-th
        ATen call of the FX graph, so ``range(graph.num_ops)`` is the captured order.
    module : torch.fx.GraphModule
        The joint graph; ``module(*args)`` runs one step and returns its outputs.
    args : list of torch.Tensor
        The real parameters, buffers and inputs, in ``module``'s placeholder order.
    nodes : dict
        Op name -> FX node (for realizing a plan).
    phase : dict
        Op name -> ``"forward"`` or ``"backward"``.
    loss : str
        The loss tensor's name.
    gradients : dict
        Gradient tensor name -> parameter name.
    buffer_updates : dict
        New-value tensor name -> buffer (or input) name it is written to.
    views : dict
        View tensor name -> the tensor owning its storage (its base; sizes 0 and > 0).
    seed : str or None
        The op making the backward's seed (the loss's gradient, one): ``ones_like(loss)``, or
        ``full([], 1)`` in a capture with Inductor's decompositions.
    decompositions : str or None
        ``"inductor"``: captured with Inductor's decomposition table (:func:`capture`).

    Examples
    --------
    >>> import torch
    >>> tg = capture(torch.nn.Linear(4, 2), torch.randn(3, 4))
    >>> tg.graph.num_ops == len(tg.forward_ops) + len(tg.backward_ops)
    True
    """

    graph: TensorGraph
    module: Any
    args: list
    nodes: dict
    phase: dict
    loss: str
    gradients: dict
    buffer_updates: dict
    views: dict = field(default_factory=dict)
    seed: str | None = None
    decompositions: str | None = None
    _tensors: tuple = field(default=(), repr=False)
    _ops: tuple = field(default=(), repr=False)

    @property
    def forward_ops(self) -> list[str]:
        return [n for n in self.graph.op_names if self.phase[n] == "forward"]

    @property
    def backward_ops(self) -> list[str]:
        return [n for n in self.graph.op_names if self.phase[n] == "backward"]

    def run(self):
        """One step of the captured graph on the real tensors (no autograd); its outputs."""
        torch = _torch()
        with torch.no_grad():
            return self.module(*self.args)

    def modelled_peak(self, order: Sequence | None = None) -> int:
        """Modelled peak of ``order`` (default: the captured order) above the resident bytes
        (parameters, buffers, inputs), i.e. what :func:`measure` measures."""
        from memopt.core import peak

        order = range(self.graph.num_ops) if order is None else order
        return peak(self.graph, list(order)) - self.graph.resident_bytes

    def with_workspace(self, workspace: dict) -> "TrainingGraph":
        """The same capture with op workspaces ``{op name: bytes}`` (e.g.
        ``measure(tg).transients``); ops not named keep theirs."""
        ops = tuple(dataclasses.replace(o, workspace=int(workspace.get(o.name, o.workspace))) for o in self._ops)
        g = TensorGraph.build(self._tensors, ops, name=self.graph.name)
        return dataclasses.replace(self, graph=g, _ops=ops)


# ----------------------------------------------------------------------------- capture
class _LossStep:
    """``model`` and ``loss_fn`` as one module returning ``(loss,)`` (what
    ``aot_export_module`` traces)."""

    def __new__(cls, model, loss_fn, n_targets: int = 0):
        torch = _torch()

        class LossStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *inputs):
                k = len(inputs) - n_targets
                return (_loss_of(self.model(*inputs[:k]), loss_fn, torch, inputs[k:]),)

        return LossStep()


def _loss_of(out, loss_fn, torch, targets=()):
    if loss_fn is not None:
        loss = loss_fn(out, *targets)
    elif isinstance(out, torch.Tensor) and out.dim() == 0:
        loss = out
    else:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        loss = sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TrainingCaptureError(f"the loss must be a tensor of one element, got {type(loss).__name__}"
                                   + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
    return loss.reshape(())


def _storage_key(val):
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(val.untyped_storage())


def capture(model, inputs, loss_fn: Callable | None = None, *, targets=(), name: str | None = None,
            decompositions: str | None = None) -> TrainingGraph:
    """Capture one training step of ``model`` as AOTAutograd's joint forward + backward graph.

    Parameters
    ----------
    model : torch.nn.Module
        Traced in its current mode (call ``model.train()`` first for a training step); its
        parameters that require grad get gradients.
    inputs : torch.Tensor or tuple of torch.Tensor
        Example inputs (shapes are fixed by them).
    loss_fn : callable, optional
        ``loss_fn(model(*inputs), *targets)`` -> a one-element tensor. Default: the output
        itself if it is a scalar, else the sum of all its tensors (as floats). Tensors it reads
        must come in through ``targets`` (a closure over a tensor cannot be traced).
    targets : tuple of torch.Tensor, optional
        Extra step inputs given to ``loss_fn`` only (labels); resident like the inputs.
    name : str, optional
        The graph's name (default: the model's class name).
    decompositions : str, optional
        ``None`` (default): the ATen operators as the eager step dispatches them (what the
        eager realizations run). ``"inductor"``: decomposed with Inductor's table
        (``torch._inductor.decomposition.select_decomp_table()``), the joint graph
        ``torch.compile`` hands a partitioner when AOTAutograd decomposes for Inductor, so that
        a plan of it can be compiled by Inductor (``plan(..., compiled="inductor")``).

    Returns
    -------
    TrainingGraph

    Raises
    ------
    TrainingCaptureError
        The step cannot be captured (one line naming the op): data-dependent control flow, an
        in-place update of a parameter or of a tensor saved for the backward.

    Examples
    --------
    >>> import torch
    >>> tg = capture(torch.nn.Linear(4, 2), torch.randn(3, 4))
    >>> tg.phase["addmm"], sorted(tg.gradients.values())
    ('forward', ['model.bias', 'model.weight'])
    """
    torch = _torch()
    from torch._functorch.aot_autograd import aot_export_module

    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    targets = (targets,) if isinstance(targets, torch.Tensor) else tuple(targets)
    tables = {None: lambda: None, "inductor": _inductor_decompositions}
    if decompositions not in tables:
        raise OptionError(f"decompositions must be None or 'inductor', got {decompositions!r}")
    table = tables[decompositions]()
    step = _LossStep(model, loss_fn, len(targets))
    try:
        gm, sig = aot_export_module(step, inputs + targets, trace_joint=True, output_loss_index=0,
                                    decompositions=table)
    except TrainingCaptureError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch raises many types; each becomes one line
        raise _diagnose(exc, model, inputs, loss_fn, targets) from None
    params = dict(step.named_parameters(remove_duplicate=False))
    buffers = dict(step.named_buffers(remove_duplicate=False))
    user = dict(zip(sig.user_inputs, inputs + targets))
    args = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        if n.name in sig.inputs_to_parameters:
            args.append(params[sig.inputs_to_parameters[n.name]])
        elif n.name in sig.inputs_to_buffers:
            args.append(buffers[sig.inputs_to_buffers[n.name]])
        elif n.name in user:
            args.append(user[n.name])
        else:
            raise InternalError("training-placeholder", f"joint graph input {n.name!r} is neither a parameter, "
                                                        "a buffer nor a user input")
    updates = {**sig.buffers_to_mutate, **sig.user_inputs_to_mutate}
    tg = _to_tensor_graph(gm, args, sig.user_outputs[0], dict(sig.backward_signature.gradients_to_parameters),
                          updates, name or type(model).__name__)
    return dataclasses.replace(tg, seed=_seed_op(gm, sig.user_outputs[0]), decompositions=decompositions)


def _inductor_decompositions() -> dict:
    import importlib

    importlib.import_module("torch._inductor.lowering")  # some decompositions consult Inductor's lowerings
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def _seed_op(gm, loss: str) -> str:
    """The op making the backward's seed: AOTAutograd traces ``ones_like`` of the loss (or of a
    view of it) right after the forward (``full([], 1)`` once decomposed); the first such call
    after the loss."""
    torch = _torch()
    aten = torch.ops.aten
    nodes = list(gm.graph.nodes)
    at = next(i for i, n in enumerate(nodes) if n.name == loss)
    for n in nodes[at + 1:]:
        if n.target is aten.ones_like.default and tuple(n.meta["val"].shape) == ():
            return n.name
        if n.target is aten.full.default and list(n.args[0]) == [] and n.args[1] == 1:
            return n.name
    raise InternalError("training-seed", f"no seed of the loss {loss!r} (ones_like or full([], 1)) in the joint graph")


_INPLACE_SAVED = re.compile(r"output (\d+) of (\w+)")


def _diagnose(exc: Exception, model, inputs, loss_fn, targets) -> TrainingCaptureError:
    """One line for a failed trace, naming the operator: the first line of torch's message,
    and for an in-place update, the in-place operator found by replaying the step eagerly on
    copies (so that the user's model is not modified)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = str(exc)
    if "_local_scalar_dense" in text or "data-dependent" in text.lower() or "DataDependent" in type(exc).__name__:
        return TrainingCaptureError(f"data-dependent control flow: the step reads a tensor's value "
                                    f"(aten._local_scalar_dense, e.g. `if x.sum() > 0` or `.item()`): {first}")
    if "mutation" in text or "inplace operation" in text:
        op = _find_inplace(model, inputs, loss_fn, targets, _INPLACE_SAVED.search(text))
        where = "a parameter" if "mutation" in text else "a tensor saved for the backward"
        return TrainingCaptureError(f"in-place op {op or '(unknown)'} modifies {where}; memopt captures a step "
                                    f"whose parameters and saved tensors are not updated in place ({first})")
    if "FakeTensor" in text:
        return TrainingCaptureError("the model or the loss reads a tensor that is neither a parameter, a buffer nor "
                                    f"an input (pass the loss's tensors as targets=): {first}")
    return TrainingCaptureError(f"cannot capture the training step: {type(exc).__name__}: {first}")


def _find_inplace(model, inputs, loss_fn, targets, saved_match) -> str | None:
    """The in-place ATen operator behind a refused trace: replays forward and backward on a
    deep copy of ``model`` under a dispatch mode recording in-place calls on tensors that
    require grad; prefers one whose tensor was produced by the autograd node the error names."""
    import copy

    torch = _torch()
    from torch.utils._python_dispatch import TorchDispatchMode

    found: list[tuple[str, str]] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = func._schema
            for a, v in zip(schema.arguments, args):
                if a.alias_info is not None and a.alias_info.is_write and isinstance(v, torch.Tensor):
                    if v.requires_grad or v.grad_fn is not None or isinstance(v, torch.nn.Parameter):
                        found.append((str(func), type(v.grad_fn).__name__ if v.grad_fn is not None else ""))
            return func(*args, **(kwargs or {}))

    try:
        m = copy.deepcopy(model)
        xs = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        with Spy():
            _loss_of(m(*xs), loss_fn, torch, targets).backward()
    except Exception:  # noqa: BLE001 - the replay fails as the trace did; what it recorded is enough
        pass
    if saved_match:
        for op, fn in found:
            if fn.startswith(saved_match.group(2)):
                return op
    return found[0][0] if found else None


def _tensor_values(val, torch) -> list:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        return [v if isinstance(v, torch.Tensor) else None for v in val]
    return []


def _propagate(gm, args: list) -> None:
    """Re-trace ``gm`` on fake copies of ``args`` (``node.meta["val"]``) outside
    functionalization: there a view's value shares its base's storage, as in eager; in the
    values AOTAutograd leaves (functional tensors unwrapped) every result has its own."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(a) for a in args])


def _to_tensor_graph(gm, args: list, loss: str, grads: dict, updates: dict, name: str) -> TrainingGraph:
    torch = _torch()
    _propagate(gm, args)
    nodes = list(gm.graph.nodes)
    tensors: list[Tensor] = []
    ops: list[dict] = []
    owner_of_storage: dict = {}      # storage key -> name of the tensor that owns (allocated) it
    owner: dict[str, str] = {}       # tensor name -> owning tensor name (itself if it allocates)
    tensor_of: dict = {}             # (node, output index) or node -> tensor name
    sizes: dict[str, int] = {}
    op_nodes: dict = {}

    def add_tensor(tname: str, val, resident: bool = False):
        key = _storage_key(val)
        if key in owner_of_storage:
            owner[tname] = owner_of_storage[key]
            sizes[tname] = 0
        else:
            owner_of_storage[key] = tname
            owner[tname] = tname
            sizes[tname] = int(val.untyped_storage().nbytes())
        tensors.append([tname, sizes[tname], resident])

    for n in nodes:
        if n.op == "placeholder":
            add_tensor(n.name, n.meta["val"], resident=True)
            tensor_of[n] = n.name
        elif n.op == "call_function" and n.target is operator.getitem:
            base, idx = n.args
            bval = base.meta.get("val")
            if isinstance(bval, (tuple, list)) and isinstance(idx, int) and idx < len(bval) and bval[idx] is None:
                tensor_of[n] = None  # an output the op did not compute (convolution_backward's masked grads)
                continue
            if (base, idx) not in tensor_of:
                raise TrainingCaptureError(f"node {n.name!r} selects item {idx} of {base.name!r}, which is not a "
                                           "tensor result of an ATen op")
            tensor_of[n] = tensor_of[(base, idx)]
        elif n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            schema = n.target._schema
            for a in schema.arguments:
                if a.alias_info is not None and a.alias_info.is_write:
                    raise TrainingCaptureError(f"in-place op {n.target} (node {n.name!r}) writes its argument "
                                               f"{a.name!r}: the joint graph must be functional")
            val = n.meta.get("val")
            outs = _tensor_values(val, torch)
            out_names = []
            if isinstance(val, torch.Tensor):
                add_tensor(n.name, val)
                tensor_of[n] = n.name
                out_names.append(n.name)
            else:
                picked = {u.args[1]: u.name for u in n.users if u.target is operator.getitem}
                for i, v in enumerate(outs):
                    if v is None:
                        continue
                    tname = picked.get(i, f"{n.name}.{i}")
                    add_tensor(tname, v)
                    tensor_of[(n, i)] = tname
                    out_names.append(tname)
            reads = []
            for a in n.all_input_nodes:
                if a not in tensor_of:
                    raise TrainingCaptureError(f"node {n.name!r} reads {a.name!r}, which is not a tensor")
                if tensor_of[a] is not None:
                    reads.append(tensor_of[a])
            flops = op_flops(n.target, *_meta_args(n), val)
            ops.append(dict(name=n.name, reads=reads, outs=out_names,
                            cost=flops if flops is not None else _numel_cost([v for v in outs if v is not None])))
            op_nodes[n.name] = n
        elif n.op == "output":
            continue
        else:
            target = getattr(n.target, "__name__", str(n.target))
            raise TrainingCaptureError(f"node {n.name!r} ({n.op} {target}) is not an ATen operator call; "
                                       "memopt captures graphs of ATen ops only")

    # graph outputs: each output and the tensor owning its storage
    out_node = next(n for n in nodes if n.op == "output")
    outputs: set[str] = set()
    for a in torch.utils._pytree.tree_leaves(out_node.args):
        if isinstance(a, torch.fx.Node) and tensor_of.get(a) is not None:
            t = tensor_of[a]
            outputs.update((t, owner[t]))
    resident = {t for t, _, r in tensors if r}

    # views: every reader of a view also reads the tensor owning its storage
    op_records = []
    for o in ops:
        reads = list(dict.fromkeys(r for t in o["reads"] for r in (t, owner[t])))
        op_records.append(Op(o["name"], tuple(reads), tuple(o["outs"]), cost=int(o["cost"])))
    tensor_records = [Tensor(t, size, output=t in outputs and t not in resident, resident=r) for t, size, r in tensors]
    graph = TensorGraph.build(tensor_records, op_records, name=name)

    # phases: forward = what the loss and the buffer updates need, and whatever was traced before
    fwd_roots = {loss, *updates}
    needed: set[str] = set()
    stack = [tensor_of[n] for n in nodes if n.op != "output" and n.name in fwd_roots and n in tensor_of]
    stack += [owner[t] for t in stack]
    producer = {t: o.name for o in op_records for t in o.outputs}
    reads_of = {o.name: o.inputs for o in op_records}
    while stack:
        t = stack.pop()
        p = producer.get(t)
        if p is not None and p not in needed:
            needed.add(p)
            stack.extend(reads_of[p])
    names = [o.name for o in op_records]
    last_fwd = max((i for i, nm in enumerate(names) if nm in needed), default=-1)
    phase = {nm: "forward" if (nm in needed or i <= last_fwd) else "backward" for i, nm in enumerate(names)}

    def out_name(node_name: str) -> str:
        return tensor_of[next(n for n in nodes if n.name == node_name)]

    return TrainingGraph(graph=graph, module=gm, args=args, nodes=op_nodes, phase=phase, loss=out_name(loss),
                         gradients={out_name(k): v for k, v in grads.items()},
                         buffer_updates={out_name(k): v for k, v in updates.items()},
                         views={t: b for t, b in owner.items() if t != b},
                         _tensors=tuple(tensor_records), _ops=tuple(op_records))


def _meta_args(n) -> tuple[tuple, dict]:
    """A node's arguments with every FX node replaced by its traced value."""
    torch = _torch()

    def val(a):
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

    return torch.utils._pytree.tree_map(val, n.args), torch.utils._pytree.tree_map(val, n.kwargs)


# ----------------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class Measurement:
    """The captured order run eagerly, measured against the model (bytes above the resident
    parameters, buffers and inputs, which the caller holds).

    ``measured_peak``: the allocator's peak of one plain call of the joint graph (after a
    warm-up call). ``modelled_peak``: the graph's peak in the captured order, workspaces as in
    the graph. ``transients``: per op, the bytes its call held above its outputs (library
    scratch), measured op by op. ``differences``: ``measured - modelled`` itemised by cause,
    ``[(cause, bytes), ...]``, the last item ``unattributed``; they add up exactly."""

    measured_peak: int
    modelled_peak: int
    transients: dict
    differences: list


def _run_per_op(tg: TrainingGraph) -> dict:
    """Each op's measured peak above the memory before it (its outputs and scratch), from an
    FX interpreter that frees values after their last use as the generated code does. One
    profiler records the whole run, each op's call marked by a record function
    (:func:`memopt.adapters.inductor.profiling.marked_peaks`): the same allocator events as a
    profiler started and stopped around each call, without paying a profiler's start and stop
    per op."""
    torch = _torch()
    from memopt.adapters.inductor.profiling import _profile, marked_peaks

    names: list[str] = []

    class PerOp(torch.fx.Interpreter):
        def run_node(self, n):
            if n.name in tg.nodes and tg.nodes[n.name] is n:
                names.append(n.name)
                with torch.profiler.record_function(f"memopt#{len(names) - 1}"):
                    return super(PerOp, self).run_node(n)
            return super().run_node(n)

    with torch.no_grad(), _profile() as prof:
        PerOp(tg.module).run(*tg.args)
    peaks = marked_peaks(prof)
    return {nm: int(peaks.get(i, 0)) for i, nm in enumerate(names)}


def measure(tg: TrainingGraph) -> Measurement:
    """Run the captured step eagerly (the joint graph's own generated code, real tensors, no
    autograd) and compare its measured peak with the modelled one.

    Parameters
    ----------
    tg : TrainingGraph

    Returns
    -------
    Measurement
        ``differences`` itemise ``measured - modelled``: ``library transients`` (what making
        the measured transients the ops' workspace changes in the modelled peak) and
        ``unattributed`` (the rest; 0 when the model with transients is exact).

    Examples
    --------
    >>> import torch
    >>> m = measure(capture(torch.nn.Linear(4, 2), torch.randn(3, 4)))
    >>> m.measured_peak == m.modelled_peak + sum(b for _, b in m.differences)
    True
    """
    torch = _torch()
    from memopt.adapters.inductor import measure_peak

    with torch.no_grad():
        tg.module(*tg.args)  # warm-up: library caches and lazy initialisation settle first
        measured, _ = measure_peak(lambda: tg.module(*tg.args))
    transients = _transients_of(tg, _run_per_op(tg))
    modelled = tg.modelled_peak()
    # the measured transients replace whatever workspace the graph had (they are its scratch)
    with_t = tg.with_workspace({nm: transients.get(nm, 0) for nm in tg.graph.op_names}).modelled_peak()
    differences = [("library transients", with_t - modelled), ("unattributed", int(measured) - with_t)]
    return Measurement(measured_peak=int(measured), modelled_peak=int(modelled), transients=transients,
                       differences=differences)


def _transients_of(tg: TrainingGraph, highs: dict) -> dict:
    """``{op name: bytes}`` of the ops whose measured peak (:func:`_run_per_op`) exceeds their
    outputs' bytes: the excess, their library transient."""
    out_bytes = tg.graph.op_output_bytes.tolist()
    index = tg.graph.op_index
    transients = {}
    for nm, high in highs.items():
        t = high - int(out_bytes[index[nm]]) if high > 0 else 0
        if t > 0:
            transients[nm] = t
    return transients


def transients(tg: TrainingGraph) -> dict:
    """The library transients of :func:`measure` (``measure(tg).transients``) without its
    measured plain call, which only the comparison of the peaks needs: one warm-up call of the
    step, then the op-by-op run. Two runs of the step instead of three: on a step of many
    small ops the runs are what the measurement costs (DenseNet-121 at batch 8, 64x64, under a
    load of 3 on two cores: about 15 s each).

    Examples
    --------
    >>> import torch
    >>> tg = capture(torch.nn.Conv2d(3, 8, 3), torch.randn(2, 3, 16, 16))
    >>> transients(tg) == measure(tg).transients
    True
    """
    torch = _torch()
    with torch.no_grad():
        tg.module(*tg.args)  # warm-up, as measure's
    return _transients_of(tg, _run_per_op(tg))
