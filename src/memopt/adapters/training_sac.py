"""The eager realization of a training recomputation plan: selective activation checkpointing.

The user's modules run unchanged; :meth:`SacRealization.apply` wraps the *blocks* the plan covers
(submodules, by default the model's children with containers such as ``nn.Sequential`` opened)
in ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)``, whose
``context_fn`` comes from ``torch.utils.checkpoint.create_selective_checkpoint_contexts`` with a
per-call policy: ``MUST_SAVE`` for the forward values the plan keeps, ``PREFER_RECOMPUTE`` for
those it recomputes.

**What SAC runs** (``torch/utils/checkpoint.py``, non-reentrant): in the forward, the block's
autograd nodes save *holders* instead of tensors, the checkpoint keeps the block's inputs, and
the caching dispatch mode keeps a reference to each ``MUST_SAVE`` output. At the *first unpack*
in the backward (the first backward node that needs a tensor the block saved for autograd) the
whole block reruns in forward order: a ``PREFER_RECOMPUTE`` call runs again, a ``MUST_SAVE``
call returns its cached output (and the cache lets go of it); the rerun stops right after the
call that saves the block's last autograd tensor (early stop). The tensors the block's backward
nodes need are then held until their node runs; everything else the rerun made is dropped.
That is a fixed run sequence for a given save set, and this module models exactly it
(:func:`sac_instance`): the captured joint graph, with each eager in-place call's result an
alias of the tensor it writes (eager memory, not the functional graph's), the forward in the
captured order, the backward in autograd's order, and before the first-unpack backward op of
each block, the block's recomputed calls up to its early stop followed by a zero-cost *hold*
op reading what SAC kept until then (the cached outputs and the block's inputs).

Where the backward unpacks each block, how far its rerun goes, which eager call is which
joint-graph node and which calls write in place are not guessed: :func:`record` runs one step
of a copy of the model with every block checkpointed and records the ATen calls below autograd
(forward, recomputations, backward), then aligns them call by call with the captured graph
(same operator, up to the functional form of an in-place or batch-norm call, same result shape);
any difference is refused with one line naming the first differing call.

**What SAC cannot express** (so the realized plans never need it): a recomputation anywhere but
at the block's first unpack; a recomputation of part of a block only (all its
``PREFER_RECOMPUTE`` calls before the early stop rerun, needed or not); a recomputation of an op
outside the blocks; freeing a cached value before the block's rerun; two reruns of one op.
Forced choices: a call whose result the block later writes in place cannot be cached (SAC
refuses a cached tensor that changed), so it is recomputed; a block writing its own input in
place is not wrapped; a buffer write (batch-norm statistics, ``num_batches_tracked``) rerun in
the recomputation writes a scratch copy, so the buffers are updated once, as in the plain step.

The policy checks every call it is asked about against the recorded one (operator and shape,
in order, per block) and raises :class:`~memopt.errors.OptionError` at the first mismatch, so
a changed model or other input shapes are refused, never run with a misapplied plan.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import operator
from fractions import Fraction
from dataclasses import dataclass
from typing import Any

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.adapters.training import TrainingGraph, _loss_of, _torch, draws_random

__all__ = ["default_blocks", "record", "EagerStep", "sac_instance", "evaluate", "choose", "SacRealization",
           "SacRealizer", "HOLD"]

#: Prefix of the hold ops of the SAC instance (one per block; see the module docstring).
HOLD = "memopt.sac_hold."
#: The SAC instance's last op: ``loss.backward()`` returning, which frees the seed gradient.
BACKWARD_RETURNS = "memopt.backward_returns"

# eager (in-place or stateful) operators and the functional one the joint graph has instead
_FUNCTIONAL = {"aten.native_batch_norm.default": "aten._native_batch_norm_legit_functional.default",
               "aten._native_batch_norm_legit.default": "aten._native_batch_norm_legit_functional.default",
               "aten._batch_norm_with_update.default": "aten._batch_norm_with_update_functional.default"}


def canonical(func) -> str:
    """The joint graph's name for an eager ATen call: the functional form of an in-place
    operator (``aten.relu_.default`` -> ``aten.relu.default``) or of a batch norm updating its
    statistics in place."""
    name = str(func)
    if name in _FUNCTIONAL:
        return _FUNCTIONAL[name]
    packet, _, overload = name.rpartition(".")
    ns, _, base = packet.partition(".")
    if base.endswith("_") and not base.endswith("__") and _writes(func):
        return f"{ns}.{base[:-1]}.{overload}"
    return name


# operators whose schema does not declare the arguments they write (the batch norm updating its
# running statistics): positions written
_UNDECLARED_WRITES = {"aten.native_batch_norm.default": (3, 4)}


def _writes(func) -> list[int]:
    """Positions of the arguments ``func`` writes in place."""
    declared = [i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    return declared or list(_UNDECLARED_WRITES.get(str(func), ()))


def _first_shape(value) -> tuple | None:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor):
                return tuple(v.shape)
    return None


def _tensors(value) -> list:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def default_blocks(model) -> list[str]:
    """The model's children, a container (``Sequential``, ``ModuleList``, ``ModuleDict``)
    replaced by its children, recursively: ``layer1.0``, ``layer1.1``, ... for a ResNet."""
    torch = _torch()
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
    out = []

    def walk(mod, prefix):
        for name, child in mod.named_children():
            full = f"{prefix}{name}"
            if isinstance(child, containers):
                walk(child, full + ".")
            else:
                out.append(full)

    walk(model, "")
    return out


# ----------------------------------------------------------------------------- recording
@dataclass(frozen=True)
class Call:
    """One eager ATen call of a block's forward (below autograd, as SAC's policy sees it)."""

    op: str                  # canonical operator name (:func:`canonical`)
    shape: tuple | None      # shape of its first tensor result
    node: str | None         # the joint-graph op it is, None for an eager-only call (allocates nothing)
    writes_outside: bool     # writes in place a tensor the block did not make (a buffer)
    mutated_later: bool      # its result is written in place (by it or later): rerun, never cached
    random: bool = False     # draws random numbers: cached, never rerun (no RNG state is kept)


@dataclass(frozen=True)
class EagerStep:
    """What one recorded eager step with every block checkpointed shows (see :func:`record`)."""

    blocks: tuple            # block names in forward order
    calls: dict              # block -> tuple of Call
    unpack_at: dict          # block -> backward op (joint name) before which the block reruns
    rerun_upto: dict         # block -> number of its calls the rerun reaches (early stop)
    inplace: dict            # joint op name -> joint tensor whose storage its eager call writes
    buffer_alias: dict       # new buffer value (joint tensor) -> the buffer's placeholder: eager writes in place
    block_of: dict           # joint op name -> block (forward ops inside blocks)
    skipped: tuple = ()      # blocks not wrapped, with the reason: ((name, reason), ...)


class _Recorder:
    """A TorchDispatchMode recording every call that SAC's policy would see."""

    def __new__(cls):
        torch = _torch()
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.checkpoint import SAC_IGNORED_OPS

        class Recorder(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.calls: list[dict] = []
                self.block = None
                self.phase = "forward"
                self.keep: list = []   # results kept alive so that storages are not reused while recording

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                read = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                        if isinstance(t, torch.Tensor)}
                out = func(*args, **kwargs)
                if func in SAC_IGNORED_OPS:
                    return out
                written = [args[i] for i in _writes(func) if i < len(args) and isinstance(args[i], torch.Tensor)]
                outs = _tensors(out)
                if self.phase == "forward":
                    # storages stay distinct while the forward is analysed; not in the backward,
                    # where an extra reference would stop autograd from stealing a gradient
                    self.keep.append(outs + written)
                self.calls.append(dict(
                    op=canonical(func), shape=_first_shape(out), block=self.block, phase=self.phase,
                    random=draws_random(func, args, kwargs),
                    new_bytes=sum(int(t.untyped_storage().nbytes()) for t in outs
                                  if t.untyped_storage().data_ptr() not in read),
                    out_ptrs={t.untyped_storage().data_ptr() for t in outs},
                    written_ptrs={t.untyped_storage().data_ptr() for t in written}))
                return out

        return Recorder()


def _joint_shape(node) -> tuple | None:
    return _first_shape(node.meta.get("val"))


def _align(eager: list[dict], joint: list, tg: TrainingGraph, where: str) -> dict[int, str]:
    """Pair eager calls with joint-graph op nodes in order: same canonical operator and result
    shape. An eager call allocating nothing new and matching nothing is eager-only (an empty
    placeholder result); a joint ``detach`` or view (no bytes) may have no eager call."""
    torch = _torch()
    pairs: dict[int, str] = {}
    i = j = 0
    while i < len(eager) or j < len(joint):
        e = eager[i] if i < len(eager) else None
        n = joint[j] if j < len(joint) else None
        if e is not None and n is not None and e["op"] == str(n.target) and e["shape"] == _joint_shape(n):
            pairs[i] = n.name
            i += 1
            j += 1
        elif n is not None and n.target is torch.ops.aten.detach.default:  # SAC's policy never sees a detach
            j += 1
        elif e is not None and e["new_bytes"] == 0:
            i += 1
        elif n is not None and _no_bytes(tg, n.name):
            j += 1
        else:
            got = f"{e['op']} {e['shape']}" if e is not None else "nothing"
            want = f"{n.target} {_joint_shape(n)} (node {n.name})" if n is not None else "nothing"
            raise OptionError(f"the eager step differs from the captured one at {where} call {i}: {got}, "
                              f"captured {want}")
    return pairs


def _no_bytes(tg: TrainingGraph, op_name: str) -> bool:
    g = tg.graph
    o = g.op_index[op_name]
    return int(g.op_output_bytes[o]) == 0


@contextlib.contextmanager
def _wrapped(model, blocks, context_fn_of, on_enter=None):
    """``model`` with each block's ``forward`` run under non-reentrant checkpoint (restored on
    exit). ``context_fn_of(name)`` gives the block's ``context_fn``; ``on_enter(name, first)``
    is called before the block's code runs (``first``: in the forward, not a rerun) and returns
    what to call when it ends (also when a rerun stops early)."""
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    mods = dict(model.named_modules())
    missing = [b for b in blocks if b not in mods]
    if missing:
        raise OptionError(f"block {missing[0]!r} is not a submodule of {type(model).__name__}")
    patched = []
    try:
        for name in blocks:
            mod = mods[name]
            orig = mod.forward
            seen = {"forward": False}

            def body(*args, _name=name, _orig=orig, _seen=seen, **kwargs):
                on_exit = on_enter(_name, not _seen["forward"]) if on_enter is not None else None
                _seen["forward"] = True
                try:
                    return _orig(*args, **kwargs)
                finally:
                    if on_exit is not None:
                        on_exit()

            def run(*args, _name=name, _body=body, _seen=seen, **kwargs):
                _seen["forward"] = False
                if not torch.is_grad_enabled():
                    return _body(*args, **kwargs)
                # no RNG state: random calls are cached, never rerun (see forced)
                return checkpoint(_body, *args, use_reentrant=False, preserve_rng_state=False,
                                  context_fn=context_fn_of(_name), **kwargs)

            had = "forward" in mod.__dict__
            patched.append((mod, had, mod.__dict__.get("forward")))
            mod.forward = run
        yield
    finally:
        for mod, had, old in reversed(patched):
            if had:
                mod.forward = old
            else:
                del mod.forward


def record(tg: TrainingGraph, model, inputs: tuple, loss_fn, targets: tuple, blocks=None) -> EagerStep:
    """Run one step of a copy of ``model`` with every block checkpointed (plain, everything
    recomputed) under a recording dispatch mode, and align the calls with ``tg``.

    Parameters
    ----------
    tg : TrainingGraph
        ``capture(model, inputs, loss_fn, targets=targets)``.
    blocks : list of str, optional
        Submodule names to wrap (default :func:`default_blocks`); a block writing its input in
        place is dropped from the default (:attr:`EagerStep.skipped`) and refused if named.

    Raises
    ------
    OptionError
        A block is not a submodule, runs more than once per step or is nested in another; the
        eager step differs from the captured one (one line naming the first differing call).
    """
    torch = _torch()
    explicit = blocks is not None
    blocks = list(default_blocks(model) if blocks is None else blocks)
    for a in blocks:
        for b in blocks:
            if a != b and b.startswith(a + "."):
                raise OptionError(f"block {b!r} is inside block {a!r}: blocks must not nest")
    m = copy.deepcopy(model)
    rec = _Recorder()
    entries: dict = {}
    block_inputs: dict = {}

    def on_enter(name, first):
        if first:
            entries[name] = entries.get(name, 0) + 1
            if entries[name] > 1:
                raise OptionError(f"block {name!r} runs {entries[name]} times in one step; a block must run once")
        else:
            rec.calls.append(dict(op=None, block=name, phase="rerun"))  # the block's first unpack
        rec.block = name

        def on_exit():
            rec.block = None

        return on_exit

    def plain():
        return contextlib.nullcontext(), contextlib.nullcontext()

    def note_inputs(name, args):
        block_inputs.setdefault(name, {t.untyped_storage().data_ptr() for t in _tensors(tuple(args))})

    mods = dict(m.named_modules())
    hooks = [mods[name].register_forward_pre_hook(lambda mod, args, _n=name: note_inputs(_n, args))
             for name in blocks if name in mods]
    xs = [x.detach().clone() for x in inputs]
    skipped = []
    try:
        with _wrapped(m, blocks, lambda n: plain, on_enter), rec:
            out = m(*xs)
            rec.block = None
            loss = _loss_of(out, loss_fn, torch, tuple(targets))
            del out
            # checkpoint keeps a block's inputs for its rerun: one written in place from the block
            # on (by it or later) would fail autograd's version check in the backward
            calls = rec.calls
            for name in blocks:
                first = next((k for k, c in enumerate(calls) if c["block"] == name), len(calls))
                if any(c["written_ptrs"] & block_inputs.get(name, set()) for c in calls[first:]):
                    if explicit:
                        raise OptionError(f"block {name!r}: its input is written in place in the step; checkpoint "
                                          "cannot keep it for the rerun")
                    skipped.append((name, "its input is written in place"))
            if not skipped:
                rec.phase = "backward"
                loss.backward()
    finally:
        for h in hooks:
            h.remove()
    if skipped:
        wrapped = [b for b in blocks if b not in {s for s, _ in skipped}]
        again = record(tg, model, inputs, loss_fn, targets, wrapped)
        return dataclasses.replace(again, skipped=tuple(skipped) + again.skipped)
    wrapped = blocks

    forward = [c for c in calls if c["phase"] == "forward"]
    backward = [c for c in calls if c["phase"] == "backward" and c["block"] is None]
    fw_pairs = _align(forward, [tg.nodes[n] for n in tg.forward_ops], tg, "forward")
    bw_pairs = _align(backward, [tg.nodes[n] for n in tg.backward_ops], tg, "backward")

    # eager in-place calls: the joint result is an alias of the written tensor
    producer_of_ptr: dict = {}
    inplace: dict = {}
    from memopt.adapters.training_plan import _tensor_name

    for seq, pairs in ((forward, fw_pairs), (backward, bw_pairs)):
        for i, c in enumerate(seq):
            if i in pairs and c["written_ptrs"]:
                node = tg.nodes[pairs[i]]
                arg = node.args[0]
                if isinstance(arg, torch.fx.Node) and c["written_ptrs"] & c["out_ptrs"]:
                    inplace[pairs[i]] = _tensor_name(arg)
            for p in c["out_ptrs"]:
                producer_of_ptr.setdefault(p, i)

    # a storage written in place after an earlier forward call made it: every call producing it
    # reruns (SAC refuses a cached tensor that changed; a cached writer over a rerun producer
    # would model the wrong copy); so does an in-place call (autograd bumps the version after the
    # dispatch mode cached the result, so SAC would refuse it in the rerun)
    made: set = set()
    rewritten: set = set()
    for c in forward:
        rewritten |= c["written_ptrs"] & made
        made |= c["out_ptrs"]
    block_calls: dict = {}
    block_of: dict = {}
    for name in wrapped:
        own: set = set()
        result = []
        for i, c in enumerate(forward):
            if c["block"] != name:
                continue
            result.append(Call(op=c["op"], shape=c["shape"], node=fw_pairs.get(i),
                               writes_outside=bool(c["written_ptrs"] - own),
                               mutated_later=bool(c["out_ptrs"] & (rewritten | c["written_ptrs"])),
                               random=c["random"]))
            if result[-1].random and result[-1].mutated_later:
                raise OptionError(f"block {name!r}: {c['op']} draws random numbers and its result is written in "
                                  "place; SAC can neither cache nor rerun it (leave the block out)")
            own |= c["out_ptrs"]
        block_calls[name] = tuple(result)
        block_of.update((r.node, name) for r in result if r.node is not None)

    # where each block reruns: before the next backward call recorded after its first rerun call
    unpack_at: dict = {}
    rerun_upto: dict = {}
    n_bw = 0
    for c in calls:
        if c["phase"] == "rerun":
            after = [bw_pairs[i] for i in range(n_bw, len(backward)) if i in bw_pairs]
            unpack_at[c["block"]] = after[0] if after else None
            rerun_upto[c["block"]] = 0
        elif c["phase"] == "backward" and c["block"] is None:
            n_bw += 1
        elif c["phase"] == "backward":
            rerun_upto[c["block"]] += 1
    for b in wrapped:
        reran = [c["op"] for c in calls if c["block"] == b and c["phase"] == "backward"]
        if reran != [c.op for c in block_calls[b]][:len(reran)]:
            raise OptionError(f"block {b!r} reran other calls than its forward's; its code is not deterministic")
    buffers = dict(model.named_buffers(prefix="model", remove_duplicate=False))
    placeholder_of = {id(a): n.name for n, a in zip((n for n in tg.module.graph.nodes if n.op == "placeholder"),
                                                     tg.args)}
    buffer_alias = {t: placeholder_of[id(buffers[b])] for t, b in tg.buffer_updates.items()
                    if b in buffers and id(buffers[b]) in placeholder_of}
    return EagerStep(blocks=tuple(wrapped), calls=block_calls, unpack_at=unpack_at, rerun_upto=rerun_upto,
                     inplace=inplace, buffer_alias=buffer_alias, block_of=block_of)


# ----------------------------------------------------------------------------- the model
def forced(step: EagerStep) -> tuple[set, set]:
    """``(kept, rerun)``: joint ops whose SAC policy is fixed — a call drawing random numbers is
    cached (so checkpoint keeps no RNG state: ``preserve_rng_state=False``); a call whose
    result is written in place is rerun (:attr:`Call.mutated_later`), and so is every call past
    the block's early stop (it never reruns). A buffer write rerun writes a scratch copy, so
    nothing else is forced."""
    calls = [c for cs in step.calls.values() for c in cs if c.node is not None]
    # past the early stop nothing reruns, and a cached value there would be held until the
    # block's backward ends: recompute (free, never run)
    late = {c.node for b, cs in step.calls.items() for c in cs[step.rerun_upto.get(b, 0):] if c.node is not None}
    return {c.node for c in calls if c.random} - late, {c.node for c in calls if c.mutated_later} | late


def _eager_graph(tg: TrainingGraph, step: EagerStep) -> tuple[list, list, dict, Any]:
    """The realizable records (:func:`memopt.adapters.training_plan.realizable_records`) with
    each eager in-place call's result an alias (0 bytes) of the storage it writes, read
    wherever the result is read; and the storage owner of every tensor."""
    from memopt.adapters.training_plan import _tensor_name, realizable_records

    tensors, ops, caps = realizable_records(tg)
    owner: dict = {}
    for op_name, written in step.inplace.items():
        node = tg.nodes[op_name]
        res = [u for u in node.users if u.target is operator.getitem]
        out = node.name if not res else _tensor_name(res[0])
        base_t = tg.views.get(written, written)
        owner[out] = owner.get(base_t, base_t)
    for t, ph in step.buffer_alias.items():  # the module writes its buffers in place
        owner.setdefault(t, ph)
    for v, b in tg.views.items():  # views of an aliased result read the written storage too
        if b in owner:
            owner[v] = owner[b]

    def owner_of(t):
        return owner.get(t, tg.views.get(t, t))

    out_owners = {owner[t.name] for t in tensors if t.output and t.name in owner}
    tensors = [dataclasses.replace(t, size=0 if t.name in owner else t.size,
                                   output=(t.output or t.name in out_owners) and not t.resident) for t in tensors]
    ops = [dataclasses.replace(o, inputs=tuple(dict.fromkeys(r for t in o.inputs for r in (t, owner_of(t)))))
           for o in ops]
    return tensors, ops, caps, owner_of


def sac_instance(tg: TrainingGraph, step: EagerStep, saved: set) -> tuple[TensorGraph, list, list]:
    """The SAC model of ``saved`` (joint forward ops of the blocks that are cached, the forced
    choices of :func:`forced` applied; the blocks' other ops are recomputed): ``(graph, runs, caps)`` for :func:`memopt.remat.plan_from_runs` and
    :func:`memopt.remat.check_plan`.
    """
    from memopt.adapters.training_plan import BARRIER

    kept, rerun = forced(step)
    saved = (set(saved) | kept) - rerun
    tensors, ops, caps, owner_of = _eager_graph(tg, step)
    base_ops = list(ops)
    produced_by = {t: o.name for o in ops for t in o.outputs}
    op_by = {o.name: o for o in ops}
    holds: dict = {}
    reruns: dict = {}
    for b in step.blocks:
        calls = step.calls[b]
        own = {c.node for c in calls if c.node is not None}
        upto = [c.node for c in calls[:step.rerun_upto.get(b, 0)] if c.node is not None]
        reruns[b] = [n for n in upto if n not in saved]
        keep = [t for n in own if n in saved for t in op_by[n].outputs]
        ins = [t for n in own for t in op_by[n].inputs if produced_by.get(t) not in own and t != BARRIER]
        hold = HOLD + b
        tensors.append(Tensor(hold, 0))
        ops.append(Op(hold, tuple(dict.fromkeys(r for t in keep + ins for r in (t, owner_of(t)))), (hold,), cost=0))
        holds[b] = hold
    # torch.autograd.backward keeps the seed (ones_like of the loss) in its list of gradients
    # until the engine returns
    torch = _torch()
    seeds = tuple(t for n in tg.backward_ops if tg.nodes[n].target is torch.ops.aten.ones_like.default
                  for t in op_by[n].outputs)
    tensors.append(Tensor(BACKWARD_RETURNS, 0))
    ops.append(Op(BACKWARD_RETURNS, seeds, (BACKWARD_RETURNS,), cost=0))
    graph = TensorGraph.build(tensors, ops, name=tg.graph.name)
    at: dict = {}
    after: dict = {}
    for b in step.blocks:
        if step.unpack_at.get(b) is not None:
            at.setdefault(step.unpack_at[b], []).append(b)
        else:
            # nobody unpacks the block (it saved no autograd tensor): nothing refers to its
            # checkpoint frame once its forward ends, which frees the inputs and the cache
            last = [c.node for c in step.calls[b] if c.node is not None]
            after.setdefault(last[-1] if last else BARRIER, []).append(b)
    runs = []
    for o in base_ops:
        for b in at.get(o.name, ()):
            runs.extend(reruns[b])
            runs.append(holds[b])
        runs.append(o.name)
        runs.extend(holds[b] for b in after.get(o.name, ()))
    runs.append(BACKWARD_RETURNS)
    k = dict(caps)
    for b in step.blocks:
        k.update((c.node, 1) for c in step.calls[b] if c.node is not None)
        k[holds[b]] = 0
    k[BACKWARD_RETURNS] = 0
    return graph, runs, [k[n] for n in graph.op_names]


def evaluate(tg, step, saved) -> tuple[int, Any, list, TensorGraph]:
    """``(peak, extra cost, runs, graph)`` of the SAC run of ``saved``, by memopt's independent
    checker (peak includes the resident bytes)."""
    from memopt.remat import check_plan, plan_from_runs

    graph, runs, capk = sac_instance(tg, step, saved)
    peak, extra = check_plan(graph, plan_from_runs(graph, runs), cap=capk)
    return int(peak), extra, runs, graph


def choose(tg, step, start_saved: set, limit: int | None, budget, deadline: float) -> tuple[set, int, Any]:
    """A save set for the question, by greedy search on the exact SAC evaluation: from
    ``start_saved``, while the peak exceeds ``limit``, recompute the cheapest call that brings
    the peak within it, else the one lowering it most per extra FLOP; under a cost budget, while
    it allows, the call lowering the peak most. Then, under a limit, cache again every
    recomputed call whose caching keeps the peak within it (most expensive first).
    Returns ``(saved, peak, extra)``; stops at ``deadline`` (``time.perf_counter()``)."""
    import time

    kept, rerun = forced(step)
    movable = [c.node for b in step.blocks for c in step.calls[b]
               if c.node is not None and c.node not in rerun and c.node not in kept]
    saved = (set(start_saved) | kept) - rerun
    peak, extra, _, _ = evaluate(tg, step, saved)
    cost = {o.name: o.cost for o in tg._ops}

    def fits(p, e):
        return p <= limit if limit is not None else e <= budget

    while time.perf_counter() < deadline:
        if limit is not None and peak <= limit:
            break
        best = None
        for n in movable:
            if n not in saved or time.perf_counter() >= deadline:
                continue
            p, e, _, _ = evaluate(tg, step, saved - {n})
            if (budget is not None and e > budget) or p >= peak:
                continue
            if limit is None:
                key = (p, e)                                   # least peak, then least cost
            elif p <= limit:
                key = (0, e)                                   # meets the limit: the cheapest such
            else:
                key = (1, -Fraction(peak - p, e - extra + 1))  # most bytes per extra FLOP
            if best is None or key < best[0]:
                best = (key, p, e, n)
        if best is None:
            break
        _, peak, extra, n = best
        saved = saved - {n}
    if limit is not None and peak <= limit:
        for n in sorted((n for n in movable if n not in saved), key=lambda n: -cost[n]):
            if time.perf_counter() >= deadline:
                break
            p, e, _, _ = evaluate(tg, step, saved | {n})
            if fits(p, e):
                saved, peak, extra = saved | {n}, p, e
    return saved, peak, extra


# ----------------------------------------------------------------------------- the step
class _BlockPolicy:
    """The SAC policy of one block: the recorded calls and the decision for each, checked in
    order against the calls the checkpointed forward makes."""

    def __init__(self, name: str, calls: tuple, save: tuple):
        self.name, self.calls, self.save = name, calls, save
        self.k = 0

    def __call__(self, ctx, func, *args, **kwargs):
        from torch.utils.checkpoint import CheckpointPolicy

        k = self.k
        self.k += 1
        got = (canonical(func), _first_shape(ctx.op_output))
        if k >= len(self.calls) or got != (self.calls[k].op, self.calls[k].shape):
            want = f"{self.calls[k].op} {self.calls[k].shape}" if k < len(self.calls) else "no more calls"
            raise OptionError(f"block {self.name!r} call {k} is {got[0]} {got[1]}, the plan expects {want}: "
                              "the plan is for another model or other input shapes")
        return CheckpointPolicy.MUST_SAVE if self.save[k] else CheckpointPolicy.PREFER_RECOMPUTE

    def done(self):
        if self.k != len(self.calls):
            raise OptionError(f"block {self.name!r} made {self.k} calls, the plan expects {len(self.calls)}")


class _ScratchBufferWrites:
    """A TorchDispatchMode for a block's recomputation: a call writing a parameter or buffer in
    place (batch-norm statistics) writes a copy, so the step updates its buffers once."""

    def __new__(cls, state_ptrs: set):
        torch = _torch()
        from torch.utils._python_dispatch import TorchDispatchMode

        class Scratch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                pos = _writes(func)
                if pos:
                    args = list(args)
                    for i in pos:
                        a = args[i] if i < len(args) else None
                        if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in state_ptrs:
                            args[i] = a.clone()
                return func(*args, **kwargs)

        return Scratch()


@dataclass(frozen=True)
class SacRealization:
    """A plan as selective activation checkpointing of the model's blocks."""

    step_info: EagerStep
    saved: frozenset         # joint forward ops of the blocks that are cached
    peak: int                # modelled, above the resident bytes
    runs: tuple
    _cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def _save_flags(self, block: str) -> tuple:
        upto = self.step_info.rerun_upto.get(block, 0)
        return tuple(k < upto and (c.random or (not c.mutated_later and (c.node is None or c.node in self.saved)))
                     for k, c in enumerate(self.step_info.calls[block]))

    def policy(self, block: str) -> _BlockPolicy:
        """A fresh policy for one forward of ``block`` (a ``policy_fn`` for
        ``create_selective_checkpoint_contexts``)."""
        if block not in self.step_info.calls:
            raise OptionError(f"{block!r} is not a block of this plan (blocks: {', '.join(self.step_info.blocks)})")
        return _BlockPolicy(block, self.step_info.calls[block], self._save_flags(block))

    def context_fn_for(self, block: str, model=None, _policies=None):
        """The ``context_fn`` of ``block``: ``checkpoint(block_module, x, use_reentrant=False,
        context_fn=rep.context_fn_for("layer1.0"))``."""
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        state = _state_ptrs(model)

        def context_fn():
            pol = self.policy(block)
            if _policies is not None:
                _policies.append(pol)
            fwd, rec = create_selective_checkpoint_contexts(pol)
            stack = _Stacked(_ScratchBufferWrites(state), rec) if state else rec
            return fwd, stack

        return context_fn

    def context_fn(self, model=None):
        """One ``context_fn`` for all blocks, taken in forward order: the k-th checkpoint call of
        a step gets the k-th block's policy (the cycle restarts after the last block)."""
        fns = [self.context_fn_for(b, model) for b in self.step_info.blocks]
        cursor = {"k": 0}

        def context_fn():
            k = cursor["k"]
            cursor["k"] = (k + 1) % len(fns)
            return fns[k]()

        return context_fn

    @contextlib.contextmanager
    def apply(self, model):
        """``model`` with the plan's blocks checkpointed (restored on exit)."""
        policies: list = []
        fns = {b: self.context_fn_for(b, model, policies) for b in self.step_info.blocks}
        with _wrapped(model, self.step_info.blocks, lambda n: fns[n]):
            yield
        for p in policies:
            p.done()

    def eager_step(self, model, loss_fn, inputs, targets=()):
        """One eager training step of ``model`` with the plan (``loss.backward()``: gradients
        added to ``.grad``, buffers updated by the modules); the loss, detached."""
        torch = _torch()
        with self.apply(model):
            loss = _loss_of(model(*inputs), loss_fn, torch, tuple(targets))
            loss.backward()
        return loss.detach()

    def run_step(self, rep, args: list):
        """:meth:`memopt.adapters.training_plan.TrainingPlan.step`: the user's tensors are at
        ``rep._user_positions`` of the joint graph's arguments ``args``."""
        user = [args[i] for i in rep._user_positions]
        return self.eager_step(rep._model, rep._loss_fn, user[:rep._n_inputs], user[rep._n_inputs:])

    def known_differences(self, rep) -> list:
        """The SAC step's itemised causes (:meth:`TrainingPlan.attribute`): the plain eager
        step's own difference from its model, measured once per plan."""
        if "eager" not in self._cache:
            self._cache["eager"] = eager_difference(rep.capture, rep._model, *_user_tensors(rep))
        return [("eager step without checkpoints", self._cache["eager"])]

    def describe(self) -> dict:
        """JSON fields: the blocks, those left out, and the policy counts."""
        flags = {b: self._save_flags(b) for b in self.step_info.blocks}
        return {"blocks": list(self.step_info.blocks),
                "blocks_left_out": [{"block": b, "reason": r} for b, r in self.step_info.skipped],
                "must_save_calls": sum(sum(f) for f in flags.values()),
                "prefer_recompute_calls": sum(len(f) - sum(f) for f in flags.values())}


class SacRealizer:
    """The ``realize="sac"`` entry of :func:`memopt.adapters.training_plan.plan`'s registry:
    :func:`memopt.remat`'s plan on the two-program instance seeds the save set (its recomputed
    ops in the blocks recompute, the rest is cached), :func:`choose` adjusts it on the exact
    SAC model, and memopt's checker evaluates the result. Status ``feasible`` when it meets the
    question, else ``unknown`` (no plan); no lower bound is claimed: the eager in-place aliasing
    makes the SAC instance another problem than the one remat bounds."""

    remat_share = "train.sac_seed"

    @staticmethod
    def realize(q) -> dict | None:
        tg = q.tg
        step = record(tg, q.model, q.inputs, q.loss_fn, q.targets, q.blocks)
        in_blocks = {c.node for b in step.blocks for c in step.calls[b] if c.node is not None}
        rerun_by_remat: set = set()
        if q.remat.plan is not None:
            names = q.graph.op_names
            seen: set = set()
            for i in q.remat.plan.runs().tolist():
                n = names[i]
                if n in seen:
                    rerun_by_remat.add(n)
                seen.add(n)
        resident = q.graph.resident_bytes
        limit = None if q.limit is None else q.limit + resident
        saved, _, _ = choose(tg, step, in_blocks - rerun_by_remat, limit, q.budget, q.clock.end)
        peak, extra, runs, graph = evaluate(tg, step, saved)
        fits = peak <= limit if limit is not None else extra <= q.budget
        if not fits:
            return dict(status="unknown", common=dict(lower_bound=None))
        kept, rerun = forced(step)
        real = SacRealization(step_info=step, saved=frozenset((saved | kept) - rerun), peak=peak - resident,
                              runs=tuple(runs))
        seen = set()
        recomputed = tuple(dict.fromkeys(n for n in runs if n in seen or seen.add(n)))
        cached = tuple(c.node for b in step.blocks for c, f in zip(step.calls[b], real._save_flags(b))
                       if f and c.node is not None)
        return dict(status="feasible", modelled_peak=peak - resident, peak=None, extra_flops=extra, saved=cached,
                    recomputed=recomputed, runs=tuple(runs), _programs=real,
                    common=dict(graph=graph, lower_bound=None))


def _user_tensors(rep) -> tuple:
    user = [rep.capture.args[i] for i in rep._user_positions]
    return user[:rep._n_inputs], rep._loss_fn, user[rep._n_inputs:]


def eager_difference(tg: TrainingGraph, model, inputs, loss_fn, targets=()) -> int:
    """Measured minus modelled peak of the plain eager step (``loss.backward()``, no
    checkpoint) of a copy of ``model``, modelled as the SAC instance without blocks (eager
    in-place aliasing, buffers written in place, the seed held to the end), measured after a
    warm-up step with ``.grad`` set to ``None``. What autograd's engine holds beyond the joint
    graph's values (a gradient it copies or keeps a moment longer) shows here."""
    from memopt.adapters.inductor import measure_peak

    torch = _torch()
    plain = record(tg, model, tuple(inputs), loss_fn, tuple(targets), blocks=[])
    peak, _, _, graph = evaluate(tg, plain, set())
    m = copy.deepcopy(model)

    def step():
        _loss_of(m(*inputs), loss_fn, torch, tuple(targets)).backward()

    step()
    m.zero_grad(set_to_none=True)
    measured, _ = measure_peak(step)
    return int(measured) - (peak - graph.resident_bytes)


def _state_ptrs(model) -> set:
    if model is None:
        return set()
    return {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}


class _Stacked:
    """Two context managers entered as one (the first outermost)."""

    def __init__(self, outer, inner):
        self.outer, self.inner = outer, inner
        self._stack = None

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self.outer)
        self._stack.enter_context(self.inner)
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

