"""Recomputation in a real PyTorch training step: memopt decides what the forward saves and
what the backward recomputes, and the step runs exactly that plan.

**Realizable model.** :func:`plan` captures the step as AOTAutograd's joint graph
(:func:`memopt.adapters.training.capture`) and hands :func:`memopt.remat` a copy of it with two
constraints that make every plan the solver can return one that a forward program followed by a
backward program can run:

* a *barrier*: a zero-byte tensor produced by an op (cost 0, never recomputed) that reads the
  loss and the new buffer values, and that every backward op reads. So every backward op runs
  after the loss is known, as autograd does; whatever runs before the barrier is the forward
  program, whatever runs after it the backward program;
* *caps*: a forward op may run at most twice (once, then once more wherever the plan frees and
  rebuilds its result); a backward op, an op drawing random numbers (``dropout``: a second
  draw would differ) and the barrier run once.

The tensors live at the barrier (other than the parameters, buffers, inputs, the loss and the
new buffer values) are the **saved** tensors; the forward ops run a second time are the
**recomputed** ones. The plan is realized as two ``torch.fx.GraphModule`` programs built here
from the joint graph's own nodes, in the plan's order of runs (a recomputation is a copy of
the node placed where the plan runs it): the forward takes the parameters, buffers and inputs
and returns the loss, the new buffer values and the saved tensors; the backward takes the
saved tensors (in a list it clears, ``torch.fx``'s boxed calling convention, so each is freed
at its last use) and the parameters and inputs it reads, and returns the gradients. FX's
generated code drops every value right after its last use, which is the model's "free as
early as possible" (:func:`memopt.remat.plan_from_runs`), so the modelled peak of the realized
run sequence is the peak the step allocates. Ops' workspaces are the library transients
:func:`memopt.adapters.training.measure` finds (a convolution's scratch), so they move with
every run of their op.

What this does not express: a recomputation by the *backward* of a backward op (torch's
partitioners cannot either), and a plan that starts the backward before the loss is known.
The step is executed by these two programs (eager ATen calls, no autograd), not by
``loss.backward()``; the kernels are the eager step's, so the loss and the gradients are
those of the unmodified step (the tests compare them bit for bit).

**Compiled.** :attr:`TrainingPlan.backend` is a ``torch.compile`` backend (AOTAutograd with
eager, boxed compilers) whose partitioner returns the same two programs in AOTAutograd's
calling convention, after matching the joint graph Dynamo traced to the captured one by
structure (:func:`_match_joint`). AOTAutograd writes updated buffers before the backward runs,
so a backward recomputation reading one cannot run there: ``plan(..., compiled=True)``
excludes it, and the backend refuses it. ``plan(..., compiled="inductor")`` plans the step
captured with Inductor's decompositions, and the backend then decomposes alike and compiles both
programs with Inductor, memopt's scheduler pass ordering their fused kernels; Inductor's fusion is
not in the model, so :meth:`TrainingPlan.measure_compiled` itemises the measured peak by program.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import InternalError, OptionError
from memopt.adapters.training import TrainingGraph, _torch, capture, draws_random, transients

__all__ = ["plan", "TrainingPlan", "CompiledPeak", "realizable_graph", "FlopObjective", "BARRIER"]

#: Name of the barrier op and of its zero-byte tensor (see the module docstring).
BARRIER = "memopt.forward_done"


# ----------------------------------------------------------------------------- the model
def realizable_graph(tg: TrainingGraph) -> tuple[TensorGraph, dict]:
    """The remat instance whose plans a forward program and a backward program realize.

    Parameters
    ----------
    tg : TrainingGraph
        A captured step (op workspaces as wanted, e.g. its measured transients).

    Returns
    -------
    (TensorGraph, dict)
        The graph with the barrier op and tensor :data:`BARRIER` (read by every backward op),
        and the per-op caps ``{op name: k}`` for :func:`memopt.remat` (1 for a forward op that
        draws no random numbers, else 0).
    """
    tensors, ops, caps = realizable_records(tg)
    return TensorGraph.build(tensors, ops, name=tg.graph.name), caps


def realizable_records(tg: TrainingGraph) -> tuple[list, list, dict]:
    """The tensors, ops (in the captured order, the barrier after the last forward op) and caps
    of :func:`realizable_graph`, for realizations that add to them
    (:mod:`memopt.adapters.training_sac`)."""
    fwd_outs = [tg.loss, *tg.buffer_updates]
    reads = tuple(dict.fromkeys(r for t in fwd_outs for r in (t, tg.views.get(t, t))))
    ops = []
    caps = {BARRIER: 0}
    for o in tg._ops:
        if tg.phase[o.name] == "backward":
            ops.append(dataclasses.replace(o, inputs=(*o.inputs, BARRIER)))
            caps[o.name] = 0
        else:
            ops.append(o)
            node = tg.nodes[o.name]
            caps[o.name] = 0 if draws_random(node.target, node.args, node.kwargs) else 1
    last_fwd = max(i for i, o in enumerate(ops) if tg.phase[o.name] == "forward")
    ops.insert(last_fwd + 1, Op(BARRIER, reads, (BARRIER,), cost=0))
    return [*tg._tensors, Tensor(BARRIER, 0)], ops, caps


@dataclass(frozen=True)
class FlopObjective:
    """The extra cost :func:`plan` has :func:`memopt.remat` minimize: counted extra FLOPs
    first, then the fewest re-runs of ops without a FLOP formula, in one integer.

    An op with a FLOP formula (:func:`memopt.adapters.training.op_flop_counts`) costs its FLOPs
    times ``weight`` per re-run; an op without one costs its *tie-break*, the bit length of its
    element count (at least 1): a handful per re-run, so the search prefers fewer, smaller such
    re-runs without trading a single FLOP for them. ``weight`` is one more than ``tie_total``,
    the most tie-break any plan within the caps can pay, so a plan's cost ``C`` is
    ``weight * F + T`` with ``0 <= T < weight``: the order on costs is the order on ``(F, T)``,
    and a lower bound ``L`` on every plan's cost bounds every plan's counted FLOPs by
    ``ceil((L - tie_total) / weight)`` (:meth:`flop_bound`). When ``weight`` times the largest
    cost would pass 2**53 (the solvers' float guidance stops being exact there), ``weight`` is 1
    and the bound holds all the same (the order is then FLOPs plus tie-breaks).

    Example: a matrix product of 3,000 FLOPs and an element-wise op of 100 elements, each
    allowed one re-run: tie-break 7, ``weight`` 8, costs 24,000 and 7.

    >>> ob = FlopObjective(flops={"mm": 3000}, ties={"relu": 7}, weight=8, tie_total=7)
    >>> ob.cost("mm"), ob.cost("relu"), ob.flop_bound(24_000), ob.flop_bound(7)
    (24000, 7, 3000, 0)
    """

    flops: dict        # op name -> FLOPs of one run (ops with a formula)
    ties: dict         # op name -> tie-break cost of one re-run (ops without one)
    weight: int
    tie_total: int

    @classmethod
    def of(cls, tg: TrainingGraph, graph: TensorGraph, caps: dict) -> "FlopObjective":
        """The objective of the realizable ``graph`` of ``tg`` (:func:`realizable_graph`) under
        ``caps``."""
        from memopt.adapters.training import op_flop_counts

        flops = op_flop_counts(tg)
        # the realizable graph's costs: element counts where there is no FLOP formula
        ties = {n: max(1, int(c).bit_length()) for n, c in zip(graph.op_names, graph.op_cost_exact) if n not in flops}
        tie_total = sum(ties[n] * caps.get(n, 0) for n in ties)
        weight = tie_total + 1
        if weight * (sum(f * caps.get(n, 0) for n, f in flops.items()) + 1) >= 2 ** 53:
            weight = 1
        return cls(flops=flops, ties=ties, weight=weight, tie_total=tie_total)

    def cost(self, name: str) -> int:
        """The cost of one run of op ``name`` in :meth:`graph`."""
        return self.flops[name] * self.weight if name in self.flops else self.ties.get(name, 0)

    def graph(self, graph: TensorGraph) -> TensorGraph:
        """``graph`` with every op's cost :meth:`cost` (the barrier costs 0)."""
        names = graph.op_names
        tn, size = graph.tensor_names, graph.tensor_size.tolist()
        tensors = [Tensor(tn[t], size[t], output=bool(graph.tensor_output[t]),
                          resident=bool(graph.tensor_resident[t])) for t in range(graph.num_tensors)]
        ops = [Op(names[v], tuple(tn[t] for t in graph.inputs_of(v).tolist()),
                  tuple(tn[t] for t in graph.outputs_of(v).tolist()), workspace=int(graph.op_workspace[v]),
                  cost=0 if names[v] == BARRIER else self.cost(names[v])) for v in range(graph.num_ops)]
        return TensorGraph.build(tensors, ops, name=graph.name)

    def extra_flops(self, runs) -> int:
        """Counted extra FLOPs of a run sequence (op names): each re-run of an op with a FLOP
        formula, once per re-run."""
        return sum(self.flops.get(n, 0) * (k - 1) for n, k in Counter(runs).items())

    def reruns_without_flops(self, runs) -> int:
        """Re-runs of ops without a FLOP formula in a run sequence (op names)."""
        return sum(k - 1 for n, k in Counter(runs).items() if n in self.ties)

    def flop_bound(self, cost_bound) -> int | None:
        """A lower bound on the counted extra FLOPs of every plan from a lower bound on their
        cost (``None`` stays ``None``)."""
        if cost_bound is None:
            return None
        return max(0, -(-(Fraction(cost_bound) - self.tie_total) // self.weight))

    def cost_budget(self, flops: int):
        """The cost budget whose plans are exactly those of at most ``flops`` counted extra
        FLOPs, and whether it is exact (``weight`` 1: only a subset, the budget itself)."""
        if self.weight == 1:
            return flops, False
        return flops * self.weight + self.tie_total, True


# ----------------------------------------------------------------------------- realization
@dataclass(frozen=True)
class _Programs:
    """The two programs of a plan and how the step feeds them."""

    forward: Any                 # GraphModule: (*joint args) -> (loss, *updates, *saved)
    backward: Any                # GraphModule, boxed: [inputs] -> (*gradients, *rebuilt loss or updates)
    n_named: int                 # 1 + number of buffer updates: the forward outputs before the saved ones
    backward_inputs: tuple       # ("arg", i) joint argument i, or ("saved", j) saved tensor j
    saved: tuple                 # names of the saved tensors' FX nodes
    outputs: tuple               # (tensor name, "forward" or "backward", output index) of the step's results
    named: tuple = ()             # tensor names of the forward's first n_named outputs


    def run_step(self, rep: "TrainingPlan", args: list):
        """One step of the two programs on the joint graph's arguments ``args`` (see
        :meth:`TrainingPlan.step`); the loss."""
        torch = _torch()
        params = dict(rep._model.named_parameters(prefix="model", remove_duplicate=False))
        buffers = dict(rep._model.named_buffers(prefix="model", remove_duplicate=False))
        results = {}
        with torch.no_grad():
            named = list(self.forward(*args))
            saved = named[self.n_named:]
            del named[self.n_named:]
            boxed = [args[j] if kind == "arg" else saved[j] for kind, j in self.backward_inputs]
            saved.clear()
            results.update((t, named[i]) for t, where, i in self.outputs if where == "forward")
            named.clear()  # the copies the backward rebuilds are freed here, at the barrier
            outs = self.backward(boxed)
            results.update((t, outs[i]) for t, where, i in self.outputs if where == "backward")
            del outs
            for tname, param in rep.capture.gradients.items():
                g, p = results.pop(tname), params[param]
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad.add_(g)
                del g
            for tname, buffer in rep.capture.buffer_updates.items():
                buffers[buffer].copy_(results[tname])
        return results[rep.capture.loss]


def _tensor_name(node) -> str:
    """The graph tensor a joint-graph node stands for (capture names a selected output after
    the last ``getitem`` that selects it)."""
    if node.target is operator.getitem:
        base, idx = node.args
        return [u.name for u in base.users if u.target is operator.getitem and u.args[1] == idx][-1]
    return node.name


def _programs(tg: TrainingGraph, runs: list[str]) -> _Programs:
    """Build the forward and backward ``GraphModule`` s running ``runs`` (op names, the barrier
    among them) from the joint graph's nodes."""
    torch = _torch()
    from torch.fx.graph import _BoxedCodeGen

    joint = tg.module.graph
    position = {n: i for i, n in enumerate(joint.nodes)}
    selectors = {n: sorted((u for u in n.users if u.target is operator.getitem), key=position.get)
                 for n in tg.nodes.values()}
    placeholders = [n for n in joint.nodes if n.op == "placeholder"]
    out_node = next(n for n in joint.nodes if n.op == "output")

    node_of = {n.name: n for n in joint.nodes}

    def producer(n):
        return n.args[0] if n.target is operator.getitem else n

    def owner_op(a):
        """The op whose result a view node ``a`` shares storage with (None: not a view, or a
        view of a parameter, buffer or input, which never changes)."""
        base = tg.views.get(_tensor_name(a)) if a.op != "placeholder" else None
        op = producer(node_of[base]) if base is not None else None
        return op if op is not None and op.op != "placeholder" else None

    fw, bw = torch.fx.Graph(), torch.fx.Graph()
    fw_env = {}
    for p in placeholders:
        fw_env[p] = fw.placeholder(p.name)
        fw_env[p].meta = dict(p.meta)
    bw_env: dict = {}
    bw_inputs: list = []
    saved: list = []
    state = dict(graph=fw, env=fw_env, last_input=None, first_op=None)
    productions: dict = {}   # op node -> runs so far
    made_from: dict = {}     # view node -> runs of its owner op when its current copy was made

    def bw_input(a):
        if a in placeholders:
            source = ("arg", placeholders.index(a))
        elif a in fw_env:
            source = ("saved", len(saved))
            saved.append(a)
        else:
            raise InternalError("train-remat-read", f"the backward reads {a.name!r}, which no run produced")
        anchor = state["last_input"]
        ctx = bw.inserting_after(anchor) if anchor is not None else (
            bw.inserting_before(state["first_op"]) if state["first_op"] is not None else bw.inserting_after(None))
        with ctx:
            ph = bw.placeholder(a.name)
        ph.meta = dict(a.meta)
        state["last_input"] = ph
        bw_env[a] = ph
        bw_inputs.append(source)
        return ph

    def lookup(a):
        op = owner_op(a)
        if op is not None and made_from.get(a) != productions.get(op):
            # a view of a tensor the plan rebuilt: derive it again from the new copy, as the
            # model's readers of a view read its base (a metadata-only call, no bytes)
            emit(producer(a))
            return state["env"][a]
        if a in state["env"]:
            return state["env"][a]
        if state["graph"] is bw:
            return bw_input(a)
        raise InternalError("train-remat-read", f"the forward reads {a.name!r} before any run produced it")

    def emit(node):
        graph, env = state["graph"], state["env"]
        new = graph.node_copy(node, lookup)
        if graph is bw and state["first_op"] is None:
            state["first_op"] = new
        env[node] = new
        for g in selectors[node]:
            env[g] = graph.node_copy(g, lookup)
        for x in (node, *selectors[node]):
            op = owner_op(x)
            if op is not None:
                made_from[x] = productions.get(op)

    for name in runs:
        if name == BARRIER:
            state.update(graph=bw, env=bw_env)
            continue
        node = tg.nodes[name]
        productions[node] = productions.get(node, 0) + 1
        emit(node)

    outputs = [a for a in torch.utils._pytree.tree_leaves(out_node.args) if isinstance(a, torch.fx.Node)]
    updates = [a for a in outputs if _tensor_name(a) in tg.buffer_updates]
    loss = [a for a in outputs if _tensor_name(a) == tg.loss]
    grads = [a for a in outputs if _tensor_name(a) in tg.gradients]
    # a step result is its last production: a loss or buffer update the backward rebuilt comes
    # from there (the forward's copy was freed at the barrier, as the plan frees it)
    named = [*loss, *updates]
    state.update(graph=bw, env=bw_env)
    for a in named:
        op = owner_op(a)
        if op is not None and op in bw_env and bw_env[op].op != "placeholder":
            # a loss that is a view of a result the backward re-made (nll_loss's output): the
            # model frees the forward's copy at the barrier and keeps the new one (the view's
            # base is a step output), so the view is derived again from the new copy and taken
            # from the backward (else the step holds the forward's 4-byte copy to the end)
            lookup(a)
    rebuilt = [a for a in named if a in bw_env and bw_env[a].op != "placeholder"]
    results = [(_tensor_name(a), "forward", i) for i, a in enumerate(named) if a not in rebuilt]
    results += [(_tensor_name(a), "backward", i) for i, a in enumerate([*grads, *rebuilt])]
    bw.output(tuple(lookup(a) for a in (*grads, *rebuilt)))
    # the forward's own copies, as the barrier and the backward's inputs took them
    fw.output(tuple(fw_env[a] for a in (*named, *saved)))
    bw.set_codegen(_BoxedCodeGen())
    root = torch.nn.Module()
    fwm, bwm = torch.fx.GraphModule(root, fw), torch.fx.GraphModule(root, bw)
    return _Programs(forward=fwm, backward=bwm, n_named=len(named), backward_inputs=tuple(bw_inputs),
                     saved=tuple(a.name for a in saved), outputs=tuple(results),
                     named=tuple(_tensor_name(a) for a in named))


# ----------------------------------------------------------------------------- report
@dataclass(frozen=True)
class TrainingPlan:
    """A recomputation plan for one training step, and the step that runs it.

    Attributes
    ----------
    status : str
        :func:`memopt.remat`'s status (``optimal``, ``feasible``, ``infeasible``, ``unknown``).
    modelled_peak : int or None
        Bytes above the parameters, buffers and inputs at the step's peak, as modelled for the
        realized programs (library transients included).
    peak : int or None
        The same, measured by the CPU allocator in one step after a warm-up step (``None``
        when ``plan(..., measure=False)``).
    baseline_peak : int
        The modelled peak of the captured order without recomputation (what ratios refer to).
    memory_limit, cost_budget : int or None
        The question asked (``memory_limit`` in bytes above the parameters, buffers, inputs).
    extra_flops : int or None
        Counted FLOPs of the recomputations: each re-run of an op with a FLOP formula of
        ``torch.utils.flop_counter`` (:func:`memopt.adapters.training.op_flop_counts`) adds its
        FLOPs; ops without one count 0 (what a ``FlopCounterMode`` over the step counts, less the
        plain step's count).
    reruns_without_flops : int or None
        Re-runs of ops without a FLOP formula (element-wise ops, views, normalizations' cheap
        parts): memopt's second objective, after the FLOPs (:class:`FlopObjective`).
    lower_bound : int or None
        memopt's lower bound on ``extra_flops`` of every plan of the realizable model within
        ``memory_limit`` (``memory_limit`` / ``memory_ratio`` questions), or on the modelled
        peak of every plan within ``cost_budget`` (``cost_budget``); ``None`` when none is known
        (``realize="sac"`` claims none).
    saved, recomputed : tuple of str
        Forward values kept for the backward (FX node names; with ``realize="sac"``, the ops
        whose results the checkpoints cache) and ops run a second time.
    runs : tuple of str
        The plan's runs in order (the barrier :data:`BARRIER` between forward and backward;
        with ``realize="sac"`` the hold ops of :mod:`memopt.adapters.training_sac` too).
    realize : str
        How the step runs the plan: ``"fx"`` (two FX programs) or ``"sac"`` (selective
        activation checkpointing of the model's blocks).
    """

    status: str
    modelled_peak: int | None
    peak: int | None
    baseline_peak: int
    memory_limit: int | None
    cost_budget: object
    extra_flops: object
    lower_bound: object
    saved: tuple
    recomputed: tuple
    runs: tuple
    seconds: float
    reruns_without_flops: int | None = None
    remat: Any = field(repr=False, default=None)
    graph: Any = field(repr=False, default=None)
    capture: Any = field(repr=False, default=None)
    realize: str = "fx"
    _programs: Any = field(repr=False, default=None)
    _model: Any = field(repr=False, default=None)
    _user_positions: tuple = field(repr=False, default=())
    _loss_fn: Any = field(repr=False, default=None)
    _n_inputs: int = field(repr=False, default=0)
    _pass_decisions: list = field(repr=False, default_factory=list)
    _program_runs: list = field(repr=False, default_factory=lambda: [0, 0])   # forward, backward calls

    def to_dict(self) -> dict:
        """JSON-ready fields (exact numbers: a Fraction as ``"p/q"``)."""
        from memopt.remat.result import json_number

        keys = ("peak", "modelled_peak", "baseline_peak", "memory_limit", "cost_budget", "extra_flops", "lower_bound",
                "reruns_without_flops")
        doc = {"status": self.status, **{k: json_number(getattr(self, k)) for k in keys}, "seconds": self.seconds}
        doc.update(saved=list(self.saved), recomputed=list(self.recomputed), method=self.remat.method if self.remat
                   else None, ops=self.capture.graph.num_ops, resident_bytes=self.capture.graph.resident_bytes,
                   realize=self.realize)
        if self._programs is not None and hasattr(self._programs, "describe"):
            doc.update(self._programs.describe())
        if self.peak is not None and self.modelled_peak is not None:
            doc["differences"] = [{"cause": c, "bytes": b} for c, b in self.attribute()]
        return doc

    def _need_plan(self):
        if self._programs is None:
            raise OptionError(f"no plan to run: the step's plan is {self.status}")
        return self._programs

    def step(self, *inputs):
        """Run one training step with the plan: forward, loss, backward; gradients are added to
        the parameters' ``.grad`` (set when ``None``) and the new buffer values (batch-norm
        statistics) copied into the buffers, as ``loss.backward()`` and the modules do.

        Parameters
        ----------
        *inputs : torch.Tensor
            The step's inputs followed by its targets, shaped as the example ones (default:
            the example tensors given to :func:`plan`).

        Returns
        -------
        torch.Tensor
            The loss.
        """
        torch = _torch()
        prog = self._need_plan()
        args = list(self.capture.args)
        if inputs:
            if len(inputs) != len(self._user_positions):
                raise OptionError(f"step takes {len(self._user_positions)} tensors (inputs, then targets), "
                                  f"got {len(inputs)}")
            for k, (i, x) in enumerate(zip(self._user_positions, inputs)):
                ex = args[i]
                if not isinstance(x, torch.Tensor) or x.shape != ex.shape or x.dtype != ex.dtype:
                    raise OptionError(f"step input {k} must be a {ex.dtype} tensor of shape {tuple(ex.shape)}, "
                                      f"got {getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
                args[i] = x
        return prog.run_step(self, args)

    def _need_sac(self):
        prog = self._need_plan()
        if not hasattr(prog, "context_fn"):
            raise OptionError(f"the plan is realized as {self.realize!r}; plan(..., realize='sac') for checkpointing")
        return prog

    @property
    def context_fn(self):
        """``realize="sac"``: a ``context_fn`` for ``torch.utils.checkpoint.checkpoint(block, x,
        use_reentrant=False, context_fn=rep.context_fn)``, one block after the other in forward
        order (the k-th checkpoint call of a step gets the k-th block's policy); a call the plan
        does not expect raises :class:`~memopt.errors.OptionError`. Per block:
        ``rep.context_fn_for(name)``."""
        return self._need_sac().context_fn(self._model)

    def context_fn_for(self, block: str):
        """``realize="sac"``: the ``context_fn`` of one block (a name of :attr:`blocks`)."""
        return self._need_sac().context_fn_for(block, self._model)

    @property
    def blocks(self) -> tuple:
        """``realize="sac"``: the checkpointed submodules, in forward order."""
        return self._need_sac().step_info.blocks

    def apply(self, model=None):
        """``realize="sac"``: a context manager running ``model`` (default: the planned one, or a
        copy of it with the same structure) with the plan's blocks checkpointed, its code
        unchanged; restored on exit::

            with rep.apply():
                loss_fn(model(x), y).backward()
        """
        return self._need_sac().apply(self._model if model is None else model)

    @property
    def backend(self):
        """A ``torch.compile`` backend running this plan: AOTAutograd with a partitioner that
        returns the plan's two programs (see :func:`_partition`) and eager, boxed programs (as
        ``aot_eager``). It refuses (:class:`~memopt.errors.OptionError`) a compiled step whose
        joint graph is not the planned one; compile :meth:`compile`'s function."""
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop

        if self._need_plan() is not None and self.realize != "fx":
            raise OptionError(f"the compiled backend runs the two FX programs; this plan is realized as {self.realize!r}")

        def partition(joint, joint_inputs, *, num_fwd_outputs, **_):
            return _partition(self, joint, num_fwd_outputs)

        if self.capture.decompositions == "inductor":
            from memopt.adapters.training import _inductor_decompositions

            return aot_autograd(fw_compiler=_marked(_inductor_compiler(False, self._pass_decisions), 0,
                                                    self._program_runs),
                                bw_compiler=_marked(_inductor_compiler(True, self._pass_decisions), 1,
                                                    self._program_runs),
                                partition_fn=partition, decompositions=_inductor_decompositions())
        return aot_autograd(fw_compiler=_marked(boxed_nop, 0, self._program_runs),
                            bw_compiler=_marked(boxed_nop, 1, self._program_runs), partition_fn=partition)

    def compile(self, backend=None):
        """The step's loss as a ``torch.compile`` d function of the inputs then the targets:
        ``loss = f(*inputs, *targets); loss.backward()`` is one training step with the plan.

        Parameters
        ----------
        backend : optional
            Default :attr:`backend`; ``"aot_eager"`` gives the stock compiled step to compare with.

        Returns
        -------
        callable
        """
        from memopt.adapters.training import _loss_of

        torch = _torch()
        model, loss_fn, k = self._model, self._loss_fn, self._n_inputs

        def step(*args):
            return _loss_of(model(*args[:k]), loss_fn, torch, args[k:])

        # a code object of its own: Dynamo keeps its compiled entries on the code object, so a
        # shared one counts every plan's compile against Dynamo's recompile limit, past which
        # the step runs eagerly, without the plan
        step.__code__ = step.__code__.replace()

        # static shapes: the plan is for the planned ones (Dynamo would otherwise recompile with
        # symbolic sizes after seeing this code object with other shapes)
        return torch.compile(step, backend=self.backend if backend is None else backend, dynamic=False)

    def measure_compiled(self, step, *inputs) -> "CompiledPeak":
        """Measure one compiled training step, ``step(*inputs).backward()`` (``step`` from
        :meth:`compile`), after a warm-up step, as :meth:`measure` does (``.grad`` set to
        ``None`` first), and itemise ``peak - modelled_peak`` by program: the forward program,
        what is held between the programs, the backward program (:class:`CompiledPeak`).

        With :attr:`backend`'s eager programs every item is 0 but a scalar; with Inductor's
        (``plan(..., compiled="inductor")``) the programs are Inductor's fused kernels in the
        order memopt's scheduler pass chose, which the plan (made for the unfused operators)
        does not model: the items say where they differ."""
        from memopt.adapters.inductor.profiling import _alloc_events, _peak, _profile, marked_levels

        self._need_plan()
        step(*inputs).backward()
        self._model.zero_grad(set_to_none=True)
        runs = list(self._program_runs)
        with _profile() as prof:
            loss = step(*inputs)
            loss.backward()
        peak = _peak(_alloc_events(prof))
        levels = marked_levels(prof)
        if set(levels) != {0, 1} or [b - a for a, b in zip(runs, self._program_runs)] != [1, 1]:
            raise OptionError("the step did not run this plan's two programs once each (marked spans "
                              f"{sorted(levels)}): measure a step compiled by this plan's compile()")
        (_, fw_peak), (handover, bw_peak) = levels[0], levels[1]
        model = self.modelled_phases()
        measured = (fw_peak, handover, bw_peak - handover)

        def step_peak(phases):
            return max(phases[0], phases[1] + phases[2])

        current = list(model)
        items = []
        for k, cause in enumerate(CompiledPeak.CAUSES):
            before = step_peak(current)
            current[k] = measured[k]
            items.append((cause, step_peak(current) - before))
        items.append(("unattributed", peak - step_peak(current)))
        return CompiledPeak(peak=int(peak), modelled_peak=self.modelled_peak, phases=tuple(int(x) for x in measured),
                            modelled_phases=model, differences=tuple(items), loss=loss.detach(),
                            pass_decisions=tuple(self._pass_decisions[-2:]))

    def modelled_phases(self) -> tuple[int, int, int]:
        """``(forward, handover, backward)`` of the modelled step, in bytes above the
        parameters, buffers and inputs: the forward program's peak, what is held when the
        backward starts (after the barrier and the frees that follow it), the backward's peak
        above that; ``max(forward, handover + backward) == modelled_peak``."""
        from memopt.remat import evaluate_plan, plan_from_runs
        from memopt.remat.plan import RUN

        self._need_plan()
        graph = self.graph
        plan = plan_from_runs(graph, list(self.runs))
        profile = evaluate_plan(graph, plan).profile.astype(int) - graph.resident_bytes
        barrier = graph.op_names.index(BARRIER)
        at = next(i for i in range(len(plan.kind)) if plan.kind[i] == RUN and plan.index[i] == barrier)
        nxt = next((i for i in range(at + 1, len(plan.kind)) if plan.kind[i] == RUN), len(plan.kind))
        handover = int(profile[nxt])            # profile[i]: before step i (after step i - 1)
        return int(profile[:at + 2].max()), handover, int(profile[nxt:].max()) - handover

    def measure(self, *inputs) -> int:
        """The measured peak of one step (after a warm-up step): the most CPU bytes allocated
        during :meth:`step` above the level at its start (parameters, buffers and inputs
        excluded). Before each step the parameters' ``.grad`` are set to ``None``, as
        ``optimizer.zero_grad()`` does, so the peak counts the new gradients, as the model
        does (gradients are outputs of the step). Leaves ``.grad`` and the buffers updated."""
        from memopt.adapters.inductor import measure_peak

        self.step(*inputs)
        self._model.zero_grad(set_to_none=True)
        peak, _ = measure_peak(lambda: self.step(*inputs))
        return int(peak)

    def attribute(self) -> list:
        """``peak - modelled_peak`` itemised by cause, ``[(cause, bytes), ...]``, the last item
        ``unattributed``; they add up exactly. The FX programs have no known cause (their
        model is exact: the tests hold them to the byte); the SAC step has one, what the plain
        eager step of a copy of the model (no checkpoint) is off its own model
        (:func:`memopt.adapters.training_sac.eager_difference`): autograd's bookkeeping, the
        same with or without the plan."""
        if self.peak is None or self.modelled_peak is None:
            raise OptionError("no measured step to attribute: plan(..., measure_step=True)")
        known = self._programs.known_differences(self) if hasattr(self._programs, "known_differences") else []
        return [*known, ("unattributed", self.peak - self.modelled_peak - sum(b for _, b in known))]


# ----------------------------------------------------------------------------- planning
def _limit(memory_limit, memory_ratio, cost_budget, baseline: int) -> tuple[int | None, object]:
    """The question as ``(memory limit in bytes, cost budget)``, one of them ``None``; a ratio
    is of ``baseline`` (the ratio is parsed as :func:`memopt.remat` parses it, capped at 1)."""
    from memopt.remat.options import exactly_one, limit_of_ratio, parse_ratio

    exactly_one(memory_limit=memory_limit, memory_ratio=memory_ratio, cost_budget=cost_budget)
    if memory_ratio is not None:
        return limit_of_ratio(parse_ratio(memory_ratio, high=1, name="memory_ratio"), baseline), None
    if memory_limit is not None:
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < 0:
            raise OptionError(f"memory_limit must be an integer number of bytes >= 0, got {memory_limit!r}")
        return memory_limit, None
    if isinstance(cost_budget, bool) or not isinstance(cost_budget, (int, Fraction)) or cost_budget < 0:
        raise OptionError(f"cost_budget must be an integer (FLOPs) >= 0, got {cost_budget!r}")
    return None, cost_budget


def plan(model, inputs, loss_fn: Callable | None = None, *, targets=(), memory_limit: int | None = None,
         memory_ratio=None, cost_budget=None, time_limit: float = 60.0, method: str = "auto",
         measure_step: bool = True, seed: int = 0, captured: TrainingGraph | None = None,
         compiled: bool | str = False, realize: str = "fx", blocks=None, seeds: bool = True) -> TrainingPlan:
    """Plan what one training step of ``model`` saves and recomputes, and realize it.

    Parameters
    ----------
    model : torch.nn.Module
        In the mode to train in (``model.train()``).
    inputs : torch.Tensor or tuple of torch.Tensor
        Example inputs (the step's shapes).
    loss_fn : callable, optional
        ``loss_fn(model(*inputs), *targets)`` -> one-element tensor (as
        :func:`memopt.adapters.training.capture`).
    targets : tuple of torch.Tensor, optional
        Tensors given to ``loss_fn`` only (labels).
    memory_limit : int, optional
        Bytes the step may allocate above the parameters, buffers and inputs (the measured
        peak's reference): minimum extra FLOPs under this limit.
    memory_ratio : number, optional
        The limit as a fraction (0, 1] of :attr:`TrainingPlan.baseline_peak`.
    cost_budget : int, optional
        Extra counted FLOPs allowed (:attr:`TrainingPlan.extra_flops`): minimum peak under this
        budget.
    time_limit : float
        Seconds for the whole call, on one clock started on entry: the capture (unless
        ``captured``), the measurement of the ops' library transients (once per capture:
        :func:`measured`), the warm starts, :func:`memopt.remat` and the realization (the share
        ``train.close`` of :data:`memopt.time_shares.SHARES` is kept for that). The search gets
        what the capture and the measurement left. What the clock bounds and what it does not:

        * the capture (one trace by torch) and the measurement (two eager runs of the step: a
          warm-up and the op-by-op run) are not interrupted: no plan can be modelled without the
          measured transients (its modelled peak would not be the measured one), and a call
          with no time returns its first answer, as :func:`memopt.remat` does;
        * the search gets what they left, 0 seconds once it is gone: :func:`memopt.remat` then
          returns its first answer from the warm starts (the min-cut seeds are built in any
          case; the search over the cheap ops alone is skipped), and the realization builds the
          programs. On DenseNet-121 (2,314 ops) that first answer and its programs take about
          2 s past the deadline.

        Measuring the step (``measure_step``) comes on top.
    method : str
        A :func:`memopt.remat` method (default ``auto``).
    measure_step : bool
        Run two steps and measure the second one's peak (:attr:`TrainingPlan.peak`); this
        updates ``.grad`` and the buffers of ``model``.
    seed : int
    captured : TrainingGraph, optional
        ``capture(model, inputs, loss_fn, targets=targets)`` made before (several limits on
        one step capture it once); its op workspaces are replaced by the measured transients.
    compiled : bool or str
        Keep the plan runnable by :attr:`TrainingPlan.backend` too: an op reading a buffer the
        step updates is not run twice (AOTAutograd writes the buffers before the backward).
        ``"inductor"``: besides, capture with Inductor's decompositions
        (``capture(..., decompositions="inductor")``) so that the backend compiles the two
        programs with Inductor, their fused kernels ordered by memopt's scheduler pass
        (``realize="fx"`` only).
    realize : str
        ``"fx"`` (default): two FX programs run the plan (:meth:`TrainingPlan.step`,
        :attr:`TrainingPlan.backend`). ``"sac"``: selective activation checkpointing of the
        model's blocks, the model's own code running eagerly (:attr:`TrainingPlan.context_fn`,
        :meth:`TrainingPlan.apply`; :mod:`memopt.adapters.training_sac`).
    blocks : list of str, optional
        ``realize="sac"``: the submodules to checkpoint (default: the model's children,
        containers opened, :func:`memopt.adapters.training_sac.default_blocks`).
    seeds : bool
        Start :func:`memopt.remat` from the min-cut saved sets and block-like checkpointing
        plans of :mod:`memopt.adapters.training_seeds` (``initial=``; default). The answer is
        then never worse than the best of them within the limit.

    Returns
    -------
    TrainingPlan

    Raises
    ------
    OptionError
        Not exactly one of ``memory_limit``, ``memory_ratio``, ``cost_budget``, or a bad value.
    TrainingCaptureError
        The step cannot be captured (one line naming the op).
    """
    import time

    import memopt
    from memopt.clock import Clock, check_time_limit
    from memopt.adapters.training_seeds import cheap_caps, seed_runs, with_reordered, within
    from memopt.time_shares import SHARES

    torch = _torch()
    time_limit = check_time_limit(time_limit, "time_limit")
    _limit(memory_limit, memory_ratio, cost_budget, 0)  # reject bad options before the capture
    realizations = _realizations()
    if realize not in realizations:
        raise OptionError(f"realize must be one of {', '.join(realizations)}, got {realize!r}")
    realizer = realizations[realize]
    if compiled not in (False, True, "inductor"):
        raise OptionError(f"compiled must be False, True or 'inductor', got {compiled!r}")
    decompositions = "inductor" if compiled == "inductor" else None
    if captured is not None and decompositions is not None and captured.decompositions != decompositions:
        raise OptionError("compiled='inductor' needs a capture with Inductor's decompositions: "
                          "capture(..., decompositions='inductor')")
    decomposed = captured.decompositions if captured is not None else decompositions
    if decomposed is not None and realize != "fx":
        raise OptionError(f"a step captured with {decomposed}'s decompositions is realized by realize='fx' only "
                          f"(the checkpoints of realize={realize!r} see the eager operators)")
    t0 = time.perf_counter()
    clock = Clock(time_limit, shares=SHARES)
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    targets = (targets,) if isinstance(targets, torch.Tensor) else tuple(targets)
    tg = captured if captured is not None else capture(model, inputs, loss_fn, targets=targets,
                                                       decompositions=decompositions)
    tg = tg.with_workspace(measured(tg))
    graph, caps = realizable_graph(tg)
    if compiled:
        buffers = dict(model.named_buffers(prefix="model", remove_duplicate=False))
        mutated = {id(buffers[b]) for b in tg.buffer_updates.values() if b in buffers}
        reads = {n.name for n, a in zip((n for n in tg.module.graph.nodes if n.op == "placeholder"), tg.args)
                 if id(a) in mutated}
        caps.update((o.name, 0) for o in tg._ops if reads.intersection(o.inputs))
    objective = FlopObjective.of(tg, graph, caps)
    solved = objective.graph(graph)
    resident = graph.resident_bytes
    baseline = tg.modelled_peak()
    limit, budget = _limit(memory_limit, memory_ratio, cost_budget, baseline)
    # what is kept to hand the answer back (programs built from the plan, the report)
    searching = clock.until(clock.end - clock.seconds("train.close"))
    # the min-cut saved sets (memopt.adapters.training_seeds) are the solver's warm starts; built
    # on the element-count costs their prices are in, and valid plans of ``solved`` (same ops)
    initial = with_reordered(graph, seed_runs(tg, graph, caps), searching.child("train.seed_order")) if seeds \
        else None
    cheap_seconds = searching.seconds("train.cheap_first")
    if seeds and budget is None and realizer.remat_share is None and cheap_seconds > 0:
        # first the smaller search where only the ops without a FLOP formula re-run, on their
        # element counts (a finer guide than the tie-breaks); its plan is one more warm start
        # (none when the capture and the measurement left no time: the call's one search
        # starts from the seeds at once)
        cheap = cheap_caps(tg, graph, caps)
        first = memopt.remat(graph, memory_limit=limit + resident, cap=cheap, time_limit=cheap_seconds,
                             method=method, seed=seed, initial=[r for r in initial if within(graph, r, cheap)])
        if first.plan is not None and first.status in ("optimal", "feasible"):
            initial.append(first.plan.runs().tolist())
    seconds = searching.left() if realizer.remat_share is None else searching.seconds(realizer.remat_share)
    if budget is not None:
        cost_budget_of, exact = objective.cost_budget(budget)
        res = memopt.remat(solved, cost_budget=cost_budget_of, cap=caps, time_limit=seconds, method=method,
                           seed=seed, initial=initial)
        lower = None if res.lower_bound is None or not exact else res.lower_bound - resident
    else:
        res = memopt.remat(solved, memory_limit=limit + resident, cap=caps, time_limit=seconds, method=method,
                           seed=seed, initial=initial)
        lower = objective.flop_bound(res.cost_lower_bound)
    user = [i for x in inputs + targets for i, a in enumerate(tg.args) if a is x][:len(inputs + targets)]
    common = dict(baseline_peak=baseline, memory_limit=limit, cost_budget=budget, lower_bound=lower, remat=res,
                  graph=graph, capture=tg, realize=realize, _model=model, _user_positions=tuple(user),
                  _loss_fn=loss_fn, _n_inputs=len(inputs))
    question = _Question(tg=tg, graph=graph, caps=caps, remat=res, limit=limit, budget=budget, model=model,
                         inputs=inputs, loss_fn=loss_fn, targets=targets, blocks=blocks, clock=searching)
    got = realizer.realize(question) or {"status": res.status}
    common.update(got.pop("common", {}))
    if got.get("_programs") is None:
        return TrainingPlan(status=got["status"], modelled_peak=None, peak=None, extra_flops=None, saved=(),
                            recomputed=(), runs=(), seconds=time.perf_counter() - t0, **common)
    runs = got["runs"]
    got.update(extra_flops=objective.extra_flops(runs), reruns_without_flops=objective.reruns_without_flops(runs))
    if budget is None and common["lower_bound"] is not None and got["status"] in ("optimal", "feasible"):
        # a plan within the limit answers the FLOP question when its FLOPs meet the bound,
        # whatever the tie-breaks; a cost-optimal plan under weight 1 may not be FLOP-optimal
        # (an ``unknown`` answer's best plan is above the limit and stays unknown)
        if got["extra_flops"] <= common["lower_bound"]:
            got["status"] = "optimal"
        elif got["status"] == "optimal":
            got["status"] = "feasible"
    rep = TrainingPlan(**got, seconds=time.perf_counter() - t0, **common)
    if measure_step:
        rep = dataclasses.replace(rep, peak=rep.measure())
    return rep


def measured(tg: TrainingGraph) -> dict:
    """The library transients of a capture (:func:`memopt.adapters.training.transients`,
    ``{op name: bytes}``), measured once per capture and kept on it: several :func:`plan` calls
    on one ``captured`` step measure them once."""
    m = tg.__dict__.get("_transients")
    if m is None:
        m = transients(tg)
        object.__setattr__(tg, "_transients", m)
    return m


# ----------------------------------------------------------------------------- realizations
@dataclass(frozen=True)
class _Question:
    """What a realization gets: the capture, the two-program instance (:func:`realizable_graph`)
    and :func:`memopt.remat`'s answer on it, the question, the user's step and the clock."""

    tg: Any
    graph: Any
    caps: dict
    remat: Any
    limit: int | None
    budget: object
    model: Any
    inputs: tuple
    loss_fn: Any
    targets: tuple
    blocks: Any
    clock: Any


class _FxRealization:
    """The plan of :func:`memopt.remat` on :func:`realizable_graph`, run as two FX programs."""

    remat_share = None   # memopt.remat gets the whole time limit

    @staticmethod
    def realize(q: _Question) -> dict | None:
        """The step's plan fields, or ``None`` when remat has no plan (its status stands)."""
        from memopt.remat import check_plan, plan_from_runs

        if q.blocks is not None:
            raise OptionError("blocks= is for realize='sac' (the FX programs cover the whole step)")
        if q.remat.plan is None:
            return None
        graph = q.graph
        runs = [graph.op_names[i] for i in q.remat.plan.runs().tolist()]
        peak, extra = check_plan(graph, plan_from_runs(graph, runs), cap=[q.caps[n] for n in graph.op_names])
        progs = _programs(q.tg, runs)
        seen: set = set()
        recomputed = tuple(dict.fromkeys(n for n in runs if n in seen or seen.add(n)))
        return dict(status=q.remat.status, modelled_peak=int(peak) - graph.resident_bytes, peak=None,
                    extra_flops=extra, saved=progs.saved, recomputed=recomputed, runs=tuple(runs),
                    _programs=progs)


@dataclass(frozen=True)
class CompiledPeak:
    """One compiled step measured (:meth:`TrainingPlan.measure_compiled`).

    ``peak``: the step's measured peak (bytes above what was allocated when it began);
    ``phases``: measured ``(forward, handover, backward)`` as
    :meth:`TrainingPlan.modelled_phases` (``modelled_phases``) models them: the forward
    program's peak, what is allocated when the backward program starts, the backward
    program's peak above that. ``differences``: ``peak - modelled_peak`` itemised, each item
    what the peak changes when that phase's measured value replaces the modelled one (in
    :data:`CAUSES` order), then ``unattributed`` (allocations outside the two programs); they
    add up exactly. ``loss``: the step's loss. ``pass_decisions``: with Inductor's programs,
    ``(program, decision)`` of memopt's scheduler pass on the last forward and backward compiled
    (:class:`memopt.adapters.inductor.compile_pass.PassDecision`, ``None`` for a program served
    by Inductor's FX-graph cache)."""

    CAUSES = ("forward program", "held between the programs", "backward program")

    peak: int
    modelled_peak: int
    phases: tuple
    modelled_phases: tuple
    differences: tuple
    loss: Any = field(repr=False, default=None)
    pass_decisions: tuple = ()

    def to_dict(self) -> dict:
        return {"peak": self.peak, "modelled_peak": self.modelled_peak,
                "pass_decisions": [{"program": k, **(d._asdict() if d is not None else {"cached": True})}
                                   for k, d in self.pass_decisions],
                "phases": dict(zip(("forward", "handover", "backward"), self.phases)),
                "modelled_phases": dict(zip(("forward", "handover", "backward"), self.modelled_phases)),
                "differences": [{"cause": c, "bytes": b} for c, b in self.differences]}


def _marked(compiler, index: int, runs: list):
    """``compiler``'s program run inside the record function ``memopt#<index>`` (0: forward,
    1: backward), so that a profiled step finds each program's span, and counted in
    ``runs[index]``, so that a step of another plan is told apart
    (:meth:`TrainingPlan.measure_compiled`); boxed, as AOTAutograd calls it."""
    def compile_marked(gm, example_inputs):
        from torch._functorch._aot_autograd.utils import make_boxed_func
        from torch.autograd.profiler import record_function

        program = compiler(gm, example_inputs)
        if not getattr(program, "_boxed_call", False):
            program = make_boxed_func(program)
        tag = f"memopt#{index}"

        def run(args):
            runs[index] += 1
            with record_function(tag):
                return program(args)

        run._boxed_call = True
        return run

    return compile_marked


#: Inductor options for the plan's programs besides memopt's scheduler pass: no layout
#: optimization (channels-last convolutions), whose copies of activations and weights the plan
#: does not model (ResNet-18's step at 0.9: 31.7 MB above the modelled peak with it, 2.2 MB without)
INDUCTOR_OPTIONS = {"layout_optimization": False}


def _inductor_compiler(is_backward: bool, decisions: list):
    """AOTAutograd's compiler of one program: Inductor (``compile_fx_inner``, what
    ``torch.compile``'s default backend runs per program) with memopt's scheduler pass ordering
    the fused kernels (:func:`memopt.adapters.inductor.compile_path_options`) and
    :data:`INDUCTOR_OPTIONS`; appends ``("forward" or "backward", the pass's PassDecision)`` to
    ``decisions`` (``None``: the program came from Inductor's FX-graph cache, the pass did not run)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from memopt.adapters.inductor import compile_path_options

    def compile_program(gm, example_inputs):
        options = {**compile_path_options(), **INDUCTOR_OPTIONS}
        with config.patch(options):
            program = compile_fx_inner(gm, example_inputs, is_backward=is_backward)
        decisions.append(("backward" if is_backward else "forward", options["_post_fusion_custom_pass"].last))
        return program

    return compile_program


def _realizations() -> dict:
    from memopt.adapters.training_sac import SacRealizer

    return {"fx": _FxRealization, "sac": SacRealizer}


# ----------------------------------------------------------------------------- compiled realization
def _canonical_nodes(graph, seeds: set) -> tuple[list, dict]:
    """The ATen calls of a joint graph that compute something, each with its arguments mapped
    to their canonical producers: a ``detach`` or a view of the same shape resolves to its
    input; ``seeds`` (the nodes standing for the backward's seed: the tangent placeholder, or
    the captured graph's seed op) resolve to the token ``"seed"``, a ``getitem`` to
    ``("item", call, index)``."""
    torch = _torch()
    resolve: dict = {}
    calls = []
    aten = torch.ops.aten
    same_view = (aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.alias.default)
    # checks that compute nothing (a decomposition's dtype assertion); Dynamo's graph may lack them
    checks = (aten._assert_tensor_metadata.default,)

    def res(a):
        return resolve.get(a, a) if isinstance(a, torch.fx.Node) else a

    for n in graph.nodes:
        if n in seeds:
            resolve[n] = "seed"
        elif n.op != "call_function" or n.target in checks:
            continue
        elif n.target is aten.detach.default or (
                n.target in same_view and tuple(n.meta["val"].shape) == tuple(n.args[0].meta["val"].shape)):
            resolve[n] = res(n.args[0])
        elif n.target is operator.getitem:  # graphs select a call's outputs in different orders
            resolve[n] = ("item", res(n.args[0]), n.args[1])
        else:
            calls.append(n)
    return calls, resolve


def _first_inputs(tg: TrainingGraph) -> list[int]:
    """Per input of the captured graph, the first input holding the same tensor: a parameter
    tied to another (GPT-2's embedding and output weights) is two captured inputs and one of
    Dynamo's, which the compiled step passes once."""
    first: dict = {}
    return [first.setdefault(id(a), j) for j, a in enumerate(tg.args)]


def _match_joint(tg: TrainingGraph, joint) -> tuple[dict, dict]:
    """Map the nodes of the joint graph ``torch.compile`` hands a partitioner to the captured
    graph's, by structure: the same ATen calls in the same order on matching arguments (an
    input is matched to the captured input in the same argument position of the first call
    reading it; its shape and dtype must agree).

    Returns
    -------
    (dict, dict)
        Joint node -> captured node, and the captured graph's canonical producers
        (:func:`_canonical_nodes`).

    Raises
    ------
    OptionError
        The compiled step traces a different computation (naming the first differing call).
    """
    torch = _torch()
    leaves = torch.utils._pytree.tree_leaves
    cap_ph = [n for n in tg.module.graph.nodes if n.op == "placeholder"]
    ph = [n for n in joint.graph.nodes if n.op == "placeholder"]
    primals = [n for n in ph if not n.name.startswith("tangents")]
    tangents = [n for n in ph if n.name.startswith("tangents")]
    cap_calls, cap_res = _canonical_nodes(tg.module.graph, {n for n in tg.module.graph.nodes if n.name == tg.seed})
    for n, c in zip(cap_ph, _first_inputs(tg)):
        cap_res[n] = cap_ph[c]
    j_calls, j_res = _canonical_nodes(joint.graph, set(tangents))
    mapping: dict = {"seed": "seed"}
    arg_of = dict(zip(cap_ph, tg.args))

    def same(ja, ca) -> bool:
        ja = j_res.get(ja, ja) if isinstance(ja, torch.fx.Node) else ja
        ca = cap_res.get(ca, ca) if isinstance(ca, torch.fx.Node) else ca
        if ja in primals and ja not in mapping and ca in arg_of and ca not in mapping.values():
            val, real = ja.meta["val"], arg_of[ca]
            if tuple(val.shape) == tuple(real.shape) and val.dtype == real.dtype:
                mapping[ja] = ca
        if isinstance(ja, tuple) and isinstance(ca, tuple):
            return ja[0] == ca[0] == "item" and mapping.get(ja[1]) is ca[1] and ja[2] == ca[2]
        if isinstance(ja, torch.fx.Node) or ja == "seed":
            return mapping.get(ja) is ca or mapping.get(ja) == ca
        return type(ja) is type(ca) and ja == ca

    # Dynamo's graph sums a tied parameter's two gradients (an add returned as its gradient);
    # the captured graph returns both (TrainingPlan.step accumulates them; _partition sums them)
    tied = len(cap_ph) - len({id(a) for a in tg.args})
    out = next(n for n in joint.graph.nodes if n.op == "output")
    sums, at = 0, 0
    for k, j in enumerate(j_calls):
        c = cap_calls[at] if at < len(cap_calls) else None
        jl = leaves((j.args, j.kwargs))
        cl = leaves((c.args, c.kwargs)) if c is not None else []
        if c is not None and j.target is c.target and len(jl) == len(cl) and all(same(x, y) for x, y in zip(jl, cl)):
            mapping[j] = c
            at += 1
        elif sums < tied and j.target is torch.ops.aten.add.Tensor and set(j.users) == {out}:
            sums += 1
        else:
            raise OptionError(f"the compiled step differs from the planned one at call {k} ({j.name}: {j.target}"
                              + (f" against {c.name}: {c.target})" if c is not None else ", beyond the planned calls)"))
    if at != len(cap_calls) or len(primals) != len(cap_ph) - tied or not all(p in mapping for p in primals):
        raise OptionError(f"the compiled step ({len(j_calls)} ATen calls, {len(primals)} inputs) is not the planned "
                          f"one ({len(cap_calls)} calls, {len(cap_ph)} inputs): compile TrainingPlan.compile's "
                          "function with the planned shapes")
    for j, r in j_res.items():
        if isinstance(r, tuple):
            mapping[j] = ("item", mapping[r[1]], r[2])
        elif r != "seed":
            mapping[j] = mapping.get(r, r)
    return mapping, cap_res


def _partition(rep: "TrainingPlan", joint, num_fwd_outputs: int):
    """AOTAutograd's two programs for ``rep``'s plan: the forward returns the compiled step's
    forward outputs then the saved tensors (the plan's, then the inputs the backward reads);
    the backward takes the saved tensors then the tangent (the loss's seed) and returns one
    gradient (or ``None``) per input."""
    torch = _torch()
    tg, prog = rep.capture, rep._need_plan()
    mapping, cap_res = _match_joint(tg, joint)
    cap_node = {n.name: n for n in tg.module.graph.nodes}
    cap_ph = [n for n in tg.module.graph.nodes if n.op == "placeholder"]
    primals = [n for n in joint.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
    order = [cap_ph.index(mapping[p]) for p in primals]
    j_out = next(n for n in joint.graph.nodes if n.op == "output").args[0]
    fw_index = {cap_res.get(cap_node[t], cap_node[t]): i for i, t in enumerate(prog.named)}
    fw_graph = torch.fx.Graph()
    old_out = fw_graph.graph_copy(prog.forward.graph, {}, return_output_node=True)[0]
    fw_ph = [n for n in fw_graph.nodes if n.op == "placeholder"]
    canon_of = _first_inputs(tg)
    for j, c in enumerate(canon_of):
        if c != j:
            fw_ph[j].replace_all_uses_with(fw_ph[c])
            fw_graph.erase_node(fw_ph[j])
    first = next(n for n in fw_graph.nodes if n.op != "placeholder")
    for i in order:
        first.prepend(fw_ph[i])
    arg_reads = list(dict.fromkeys(canon_of[j] for kind, j in prog.backward_inputs if kind == "arg"))
    buffers = dict(rep._model.named_buffers(prefix="model", remove_duplicate=False))
    mutated = {id(buffers[b]) for b in tg.buffer_updates.values() if b in buffers}
    for j in arg_reads:
        if id(tg.args[j]) in mutated:
            raise OptionError(f"the plan recomputes in the backward an op reading {cap_ph[j].name!r}, a buffer the "
                              "step updates; AOTAutograd writes it before the backward runs: use TrainingPlan.step")
    named = [old_out[fw_index[mapping[o]]] for o in j_out[:num_fwd_outputs]]
    fw_graph.output((*named, *old_out[prog.n_named:], *(fw_ph[j] for j in arg_reads)))
    root = torch.nn.Module()

    bw_graph = torch.fx.Graph()
    grads = bw_graph.graph_copy(prog.backward.graph, {}, return_output_node=True)[0]
    bw_ph = [n for n in bw_graph.nodes if n.op == "placeholder"]
    bw_of: dict = {}
    for k, (kind, j) in enumerate(prog.backward_inputs):
        if kind == "arg" and bw_of.setdefault(canon_of[j], bw_ph[k]) is not bw_ph[k]:
            bw_ph[k].replace_all_uses_with(bw_of[canon_of[j]])
            bw_graph.erase_node(bw_ph[k])
    bw_order = sorted((k for k, (kind, j) in enumerate(prog.backward_inputs) if kind == "saved"
                       or bw_of[canon_of[j]] is bw_ph[k]),
                      key=lambda k: (prog.backward_inputs[k][0] == "arg", prog.backward_inputs[k][1]
                                     if prog.backward_inputs[k][0] == "saved"
                                     else arg_reads.index(canon_of[prog.backward_inputs[k][1]])))
    first = next(n for n in bw_graph.nodes if n.op != "placeholder")
    for k in bw_order:
        first.prepend(bw_ph[k])
    with bw_graph.inserting_before(first):
        tangent = bw_graph.placeholder("tangents_1")
    tangent.meta = dict(next(n for n in joint.graph.nodes if n.name.startswith("tangents")).meta)
    seeds = [n for n in bw_graph.nodes if n.name == tg.seed]
    if len(seeds) != 1:
        raise InternalError("train-remat-seed", f"the backward has {len(seeds)} seeds, expected 1")
    seeds[0].replace_all_uses_with(tangent)
    bw_graph.erase_node(seeds[0])
    grad_at = {t: i for t, where, i in prog.outputs if where == "backward"}
    # the captured graph's first inputs are the parameters, in named_parameters order, a tied
    # one under each of its names (its gradients are summed: one input of Dynamo's)
    param_of = [name for name, _ in rep._model.named_parameters(prefix="model", remove_duplicate=False)]
    tname_of = {v: t for t, v in tg.gradients.items()}
    outs = []
    for i, g in enumerate(j_out[num_fwd_outputs:]):
        # order[i] is the first captured input of its tensor (_match_joint maps primals there)
        parts = [] if g is None else [grads[grad_at[tname_of[param_of[j]]]] for j in range(len(param_of))
                                      if canon_of[j] == order[i] and param_of[j] in tname_of]
        while len(parts) > 1:
            parts[:2] = [bw_graph.call_function(torch.ops.aten.add.Tensor, tuple(parts[:2]))]
        outs.append(parts[0] if parts else None)
    bw_graph.output(tuple(outs))
    bw_graph.eliminate_dead_code()  # a loss or buffer update the plan rebuilt: AOTAutograd takes the forward's
    # a saved tensor the backward does not read (a view whose base the backward rebuilds and
    # derives again) is not handed over: AOTAutograd's backward would hold it, and its base,
    # until the backward ends, where the model (and TrainingPlan.step) free it at the barrier
    fw_out = next(n for n in fw_graph.nodes if n.op == "output")
    handed = list(fw_out.args[0][num_fwd_outputs:])
    inputs = [n for n in bw_graph.nodes if n.op == "placeholder" and n is not tangent]
    for p in inputs:
        if not p.users:
            bw_graph.erase_node(p)
    fw_out.args = ((*fw_out.args[0][:num_fwd_outputs], *(o for o, p in zip(handed, inputs) if p.users)),)
    fw_graph.eliminate_dead_code()
    fw = torch.fx.GraphModule(root, fw_graph)
    bw = torch.fx.GraphModule(root, bw_graph)
    if tg.decompositions is not None:
        _refake(fw, bw, joint, num_fwd_outputs)
    return fw, bw


def _refake(fw, bw, joint, num_fwd_outputs: int) -> None:
    """Give the two programs' nodes traced values of the joint graph's fake mode (Inductor
    compiles from them; the programs' nodes carry the capture's, another mode): the forward
    on the joint graph's inputs, the backward on the forward's saved outputs and the tangent."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    ph = [n for n in joint.graph.nodes if n.op == "placeholder"]
    primals = [n.meta["val"] for n in ph if not n.name.startswith("tangents")]
    tangents = [n.meta["val"] for n in ph if n.name.startswith("tangents")]
    mode = detect_fake_mode(primals + tangents)
    outs = FakeTensorProp(fw, mode).propagate_dont_convert_inputs(*primals)
    FakeTensorProp(bw, mode).propagate_dont_convert_inputs(*outs[num_fwd_outputs:], *tangents)
