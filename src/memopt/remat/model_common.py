"""What the recomputation solvers share: the problem, slots, bounds, scaling, plan building.

Nothing here belongs to one solver; :mod:`memopt.remat.mip` and :mod:`memopt.remat.cpsat`
import only this module (never each other), so each stays an independent cross-check.

* :class:`RematProblem` — a tensor graph with resolved, finite per-op caps and the flat
  arrays every model reads (non-resident inputs and outputs of each op, sizes, costs);
* **slots**: with caps ``k(v)`` a plan has at most ``T = sum_v (1 + k(v))`` runs, so
  numbering the runs ``0..T-1`` loses nothing — both exact models are indexed by these
  slots (:attr:`RematProblem.slots`); :func:`slots_from_plan` maps a plan to its slots (for
  warm starts) and :func:`plan_from_slots` maps a slot solution back to a plan;
* :func:`footprint_bound` — a lower bound on the peak of *every* plan, whatever the caps;
* :func:`byte_scale` / :func:`cost_scale` — gcd scaling of bytes, exact-or-floor integer costs;
* :func:`plan_from_runs` — the plan of a run sequence with every tensor freed as early as
  possible (used by the heuristic).

The footprint bound
-------------------
Let ``R`` be the resident bytes, ``I`` the non-resident graph inputs that are graph outputs
(never freed: they have no producer and must be live at the end), and for an op ``v`` let
``F(v) = R + s(inputs(v) ∪ outputs(v) ∪ I) + w(v)`` (non-resident tensors). Every plan runs
``v`` at least once; while it runs, its inputs are live (a rule), its outputs are allocated
and its workspace held, and ``I`` is live — so the peak is at least ``F(v)``. The start
memory ``R + s(non-resident graph inputs)`` is a moment of every plan. At the last run of a
plan (if there is any op) every graph output is live or being allocated — an output freed
earlier would have to be produced again by a later run — so the peak is at least
``R + s(non-resident graph outputs)``. Hence

    peak(P) >= max(start, max_v F(v), R + s(outputs))      for every valid plan P,

for every cap, which is what ``infeasible`` may rest on without an exact solver
(``docs/remat.md``, "Infeasibility").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction

import numpy as np

from memopt.clock import solve_by
from memopt.core.remat import FREE, RUN, evaluate_steps, exact_costs
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import MemoptError, OptionError, ScheduleError

__all__ = ["RematProblem", "MAX_CAP", "footprint_bound", "byte_scale", "cost_scale", "plan_from_runs",
           "plan_from_slots", "slots_from_plan", "evaluate", "QUESTIONS", "reduced_caps", "model_budget",
           "core_fixed_caps", "count_vector_model", "nogood_fixed_caps", "within_caps"]

#: the largest per-op cap the slot models accept (a model has ``sum (1 + k)`` slots)
MAX_CAP = 64
QUESTIONS = ("min_cost", "min_peak")


@dataclass(frozen=True, eq=False)
class RematProblem:
    """A tensor graph with finite per-op caps, flattened for the models.

    ``ins[v]`` / ``outs[v]``: non-resident input / output tensor ids of op ``v``;
    ``inputs``: non-resident graph inputs; ``outputs``: non-resident graph outputs;
    ``start``: the memory at the start (resident + non-resident graph inputs).
    """

    graph: TensorGraph
    caps: tuple
    size: tuple
    producer: tuple
    resident: tuple
    ins: tuple
    outs: tuple
    ws: tuple
    costs: tuple
    inputs: tuple
    outputs: tuple
    resident_bytes: int
    start: int

    @classmethod
    def of(cls, problem, cap=None) -> "RematProblem":
        """The problem of a :class:`TensorGraph` (or of a problem object with a ``graph``) for
        ``cap`` (one ``k`` for every op, a list or a mapping; see
        :func:`memopt.remat.plan.resolve_caps`). Returned unchanged if it already is one and
        ``cap`` is ``None``. Caps must be finite and at most :data:`MAX_CAP`."""
        from memopt.remat.plan import resolve_caps

        if isinstance(problem, RematProblem):
            if cap is None:
                return problem
            problem = problem.graph
        graph = problem if isinstance(problem, TensorGraph) else getattr(problem, "graph", None)
        if not isinstance(graph, TensorGraph):
            raise OptionError(f"recomputation needs a tensor graph, got {type(problem).__name__}")
        if cap is None:
            # the docs' cap=None means "no upper limit", which no slot model can represent:
            # refuse rather than silently solving for some finite cap
            raise OptionError("the recomputation solvers need a finite cap: give cap=k (one k for every op), "
                              "a list of one k per op, or a mapping {op: k} naming every op")
        caps = resolve_caps(graph, cap)
        big = [v for v, k in enumerate(caps) if k > MAX_CAP]
        if big:
            raise OptionError(f"op {graph.op_names[big[0]]!r}: recomputation cap {caps[big[0]]} is above "
                              f"{MAX_CAP}; the solvers need a finite cap (give every op one)")
        size = tuple(int(s) for s in graph.tensor_size.tolist())
        resident = tuple(bool(r) for r in graph.tensor_resident.tolist())
        producer = tuple(int(p) for p in graph.tensor_producer.tolist())
        n = graph.num_ops
        ins = tuple(tuple(int(t) for t in graph.inputs_of(v) if not resident[int(t)]) for v in range(n))
        outs = tuple(tuple(int(t) for t in graph.outputs_of(v)) for v in range(n))
        inputs = tuple(t for t in range(graph.num_tensors) if producer[t] < 0 and not resident[t])
        outputs = tuple(int(t) for t in np.flatnonzero(graph.tensor_output).tolist() if not resident[int(t)])
        rb = int(graph.resident_bytes)
        return cls(graph=graph, caps=tuple(caps), size=size, producer=producer, resident=resident, ins=ins,
                   outs=outs, ws=tuple(int(w) for w in graph.op_workspace.tolist()),
                   costs=tuple(exact_costs(graph)), inputs=inputs, outputs=outputs, resident_bytes=rb,
                   start=rb + sum(size[t] for t in inputs))

    @property
    def n(self) -> int:
        return self.graph.num_ops

    @property
    def num_tensors(self) -> int:
        return self.graph.num_tensors

    @property
    def slots(self) -> int:
        """``T = sum_v (1 + k(v))``: no plan within the caps has more runs."""
        return sum(1 + k for k in self.caps)

    @property
    def max_extra_runs(self) -> int:
        return sum(self.caps)

    def out_bytes(self, v: int) -> int:
        return sum(self.size[t] for t in self.outs[v])

    @cached_property
    def arrays(self) -> dict:
        """The flattened graph as int64 arrays, made once per problem (for vectorized
        evaluation of run sequences): ``in_ptr``/``in_idx`` and ``out_ptr``/``out_idx`` (the
        ``ins`` and ``outs`` of every op, CSR), ``size`` (per tensor), ``out_bytes`` and ``ws``
        (per op), ``output`` (bool per tensor: a non-resident graph output), ``inputs``."""
        def csr(lists):
            ptr = np.zeros(len(lists) + 1, dtype=np.int64)
            ptr[1:] = np.cumsum([len(x) for x in lists])
            idx = np.fromiter((t for x in lists for t in x), dtype=np.int64, count=int(ptr[-1]))
            return ptr, idx

        in_ptr, in_idx = csr(self.ins)
        out_ptr, out_idx = csr(self.outs)
        output = np.zeros(self.num_tensors, dtype=bool)
        output[list(self.outputs)] = True
        return {"in_ptr": in_ptr, "in_idx": in_idx, "out_ptr": out_ptr, "out_idx": out_idx,
                "size": np.array(self.size, dtype=np.int64), "ws": np.array(self.ws, dtype=np.int64),
                "out_bytes": np.array([self.out_bytes(v) for v in range(self.n)], dtype=np.int64),
                "output": output, "inputs": np.array(self.inputs, dtype=np.int64)}

    def live_tensors(self) -> list[int]:
        """Non-resident tensors (the ones whose liveness a model decides)."""
        return [t for t in range(self.num_tensors) if not self.resident[t]]


# ---------------------------------------------------------------------------- bounds
def footprint_bound(p: RematProblem) -> int:
    """``max(start, max_v F(v), R + s(outputs))``: a lower bound on the peak of every valid
    plan, for every cap (the argument is in the module docstring)."""
    pinned = set(t for t in p.outputs if p.producer[t] < 0)
    best = p.start
    for v in range(p.n):
        ts = set(p.ins[v]) | set(p.outs[v]) | pinned
        best = max(best, p.resident_bytes + sum(p.size[t] for t in ts) + p.ws[v])
    if p.n:
        best = max(best, p.resident_bytes + sum(p.size[t] for t in p.outputs))
    return int(best)


# ---------------------------------------------------------------------------- scaling
def byte_scale(p: RematProblem) -> int:
    """The gcd of every positive non-resident size and workspace (1 if there is none): the
    models count bytes in these units, so coefficients stay small and comparisons exact."""
    g = 0
    for t in p.live_tensors():
        g = math.gcd(g, p.size[t])
    for w in p.ws:
        g = math.gcd(g, w)
    return max(g, 1)


def cost_scale(p: RematProblem) -> tuple[list[int], Fraction, bool]:
    """Integer costs for the models: ``(scaled, factor, exact)`` with
    ``scaled[v] = floor(c(v) * factor)``. ``exact`` is true when every ``c(v) * factor`` is an
    integer (then model costs are the true costs times ``factor``). Rounding down keeps every
    model a relaxation of the true cost: ``sum scaled / factor <= true extra cost``, so model
    bounds stay valid lower bounds either way. Model totals stay below ``2**62``
    (:func:`memopt.remat.lower_bounds.floor_scaled_costs`): int64 sums cannot overflow."""
    from memopt.remat.lower_bounds import floor_scaled_costs

    return floor_scaled_costs(p.costs, p.max_extra_runs + p.n)


# ---------------------------------------------------------------------------- plans
def evaluate(p: RematProblem, plan):
    """``(peak, extra_cost)`` of ``plan`` under the problem's caps (validates every rule)."""
    ev = evaluate_steps(p.graph, plan.kind, plan.index, list(p.caps))
    return ev.peak, ev.extra_cost


def plan_from_runs(p: RematProblem, runs) -> "object":
    """The plan that runs ``runs`` (op ids, repetitions allowed) in that order and frees every
    tensor as early as possible: each production of a tensor serves the reads up to the next
    production; it is freed right after the last of them (right after it is produced if
    nobody reads it), except that the last production of a graph output stays live. Graph
    inputs that nobody reads (and that are not outputs) are freed at the start. Raises
    :class:`ScheduleError` if a run reads a tensor that was never produced before it."""
    from memopt.remat.plan import RematPlan

    runs = [int(v) for v in runs]
    T = p.num_tensors
    n_runs = len(runs)
    dies_after = [[] for _ in range(n_runs + 1)]   # index 0: at the start, i + 1: after run i
    # current production of each tensor: the run index that made it (-1 = start) and its last read
    cur = [None] * T
    for t in p.inputs:
        cur[t] = [-1, -1]
    out_set = set(p.outputs)
    names = p.graph.op_names

    def close(t, prod):
        made, last = prod
        dies_after[max(made, last) + 1].append(t)

    for i, v in enumerate(runs):
        for t in p.ins[v]:
            if cur[t] is None:
                raise ScheduleError(f"run {i}: op {names[v]!r} reads {p.graph.tensor_names[t]!r}, "
                                    "which has not been produced before")
            cur[t][1] = i
        for t in p.outs[v]:
            if cur[t] is not None:
                close(t, cur[t])
            cur[t] = [i, -1]
    for t in range(T):
        if cur[t] is not None and t not in out_set and not p.resident[t]:
            close(t, cur[t])
    steps = [(FREE, t) for t in sorted(dies_after[0])]
    for i, v in enumerate(runs):
        # a re-run needs its outputs not live: their previous production died after its last
        # read, which comes before this run
        steps.append((RUN, v))
        steps.extend((FREE, t) for t in sorted(dies_after[i + 1]))
    return RematPlan.from_pairs(steps)


def plan_from_slots(p: RematProblem, run_at, live) -> "object":
    """The plan of a slot solution: ``run_at[t]`` is the op run in slot ``t`` (``None``/-1:
    idle) and ``live[t]`` the set of non-resident tensors live just before slot ``t``
    (``live[len(run_at)]``: at the end). Frees are emitted right after the slot in which a
    tensor stops being live (before the first run for graph inputs)."""
    from memopt.remat.plan import RematPlan

    steps = [(FREE, t) for t in sorted(set(p.inputs) - set(live[0]))]
    for t_slot, v in enumerate(run_at):
        before = set(live[t_slot])
        if v is not None and v >= 0:
            steps.append((RUN, int(v)))
            before |= set(p.outs[v])
        steps.extend((FREE, t) for t in sorted(before - set(live[t_slot + 1])))
    return RematPlan.from_pairs(steps)


def slots_from_plan(p: RematProblem, plan) -> tuple[list[int], list[set], dict, dict]:
    """A valid plan as slots: ``(run_at, live, copies, ends)`` where ``run_at`` lists the ops
    in run order, ``live[t]`` the non-resident tensors live just before run ``t`` (after the
    frees before it; ``live[len(run_at)]`` at the end), ``copies[v]`` the slots of ``v``'s runs,
    and ``ends[t]`` for each tensor the list of ``(start, end)`` liveness intervals in slots
    (``start = -1`` for a graph input; ``end`` = the first slot at which it is no longer live,
    ``len(run_at)`` if it is live at the end)."""
    live: set = set(p.inputs)
    run_at: list[int] = []
    states: list[set] = []
    copies: dict = {v: [] for v in range(p.n)}
    open_at: dict = {t: -1 for t in p.inputs}
    ends: dict = {}
    for k, x in zip(plan.kind.tolist(), plan.index.tolist()):
        if k == RUN:
            slot = len(run_at)
            states.append(set(live))
            run_at.append(x)
            copies[x].append(slot)
            for t in p.outs[x]:
                live.add(t)
                open_at[t] = slot
        else:
            if p.resident[x]:
                continue
            live.discard(x)
            # the tensor is not live before the next run: its interval ends at the next slot
            ends.setdefault(x, []).append((open_at.pop(x), len(run_at)))
    states.append(set(live))
    for t, s in open_at.items():
        ends.setdefault(t, []).append((s, len(run_at)))
    return run_at, states, copies, ends


def reduced_caps(p: RematProblem, budget) -> list[int]:
    """Caps that lose no plan of extra cost at most ``budget`` (``None``: the caps as they
    are): such a plan runs ``v`` at most ``1 + floor(budget / c(v))`` times, since each run
    beyond the first costs ``c(v) >= 0``. Applied with the question's budget (``min_peak``)
    or an incumbent's extra cost (``min_cost``: an optimal plan costs no more), it turns
    every expensive op into a cap-0 op and shrinks the slot models to the cheap ops that
    can matter (``proofs/remat_cost_bounds.md``, Lemma 3)."""
    if budget is None:
        return list(p.caps)
    b = Fraction(budget)
    return [k if c == 0 else min(k, int(b // Fraction(c))) for k, c in zip(p.caps, p.costs)]


def within_caps(plan, caps) -> bool:
    """Does ``plan`` run every op ``v`` at most ``1 + caps[v]`` times?"""
    counts = np.bincount(plan.runs(), minlength=len(caps))
    return bool((counts <= 1 + np.asarray(caps, dtype=np.int64)).all())


def core_fixed_caps(p: RematProblem, caps, cores, incumbent_cost, *, strict: bool = True,
                    deadline: float = float("inf"), cuts=()) -> list[int]:
    """Caps that lose no plan within the limit of extra cost below ``incumbent_cost``
    (``strict``; at most it otherwise), given ``cores`` of the cost bound (every such plan
    re-runs an op of each core, ``proofs/remat_cost_bounds.md`` Lemma 2) and ``caps`` that
    already lose none of them: *reduced-cost fixing* on the hitting-set relaxation.

    A plan that re-runs ``v`` ``z`` times costs at least ``z c(v) + h(v)``, ``h(v)`` = the
    least cost of an op set without ``v`` meeting every core that does not contain ``v``
    (its other re-run ops form one), using only ops whose cap is still positive. So ``v``
    keeps at most ``z - 1`` re-runs for the least ``z`` with ``z c(v) + h(v) >= U`` (``> U``
    when not ``strict``); repeated to a fixpoint, since a cap cut to 0 takes ``v`` out of
    every core and raises the ``h`` of the others. ``h`` is a proved lower bound of
    :func:`memopt.remat.lower_bounds.min_hitting_set` (exact when it finishes by
    ``deadline``; a core left without any op gives ``h = inf``: no plan below ``U`` at all,
    every positive-cost cap becomes 0). With the cheapest op of a core the only one below
    ``U``, it alone keeps a cap — on VGG19 at 0.8 this leaves 4 of 51 ops that must re-run
    and the cheap ones. Argument: ``proofs/remat_exact_models.md``, Lemma 7.

    ``cuts``: trap cuts (:mod:`memopt.remat.trap_cuts`, ``proofs/remat_cost_bounds.md`` §7),
    met by every plan within the limit; ``h(v)`` then also meets them with ``v``'s bytes
    counted (:func:`~memopt.remat.trap_cuts.restrict_cuts`), and a ``v`` that no set meeting
    them all can contain re-runs in no plan within the limit (its cap becomes 0)."""
    import time

    from memopt.remat.lower_bounds import min_hitting_set
    from memopt.remat.trap_cuts import restrict_cuts

    U = Fraction(incumbent_cost)
    caps = list(caps)
    costs = [Fraction(c) for c in p.costs]

    def excluded(z: int, v: int, h) -> bool:
        total = z * costs[v] + h
        return total >= U if strict else total > U

    def live_cores():
        """The cores restricted to the ops that may still re-run; ``None`` when one is empty."""
        live = [tuple(u for u in c if caps[u] > 0) for c in cores]
        return None if any(not c for c in live) else live

    # some core has no op left that may re-run: no plan of cost below U exists
    nothing_below = [k if costs[v] == 0 else 0 for v, k in enumerate(caps)]
    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        live = live_cores()
        # the rows over the ops that may still re-run, once per pass: a cap cut later in the
        # pass only raises the h of the others, so a value computed before it stays a bound
        base_rows = restrict_cuts(cuts, never=[u for u in range(p.n) if caps[u] == 0])
        if live is None or any(sum(r.bytes) < r.need for r in base_rows):
            return nothing_below
        in_rows = {w for r in base_rows for w in r.ops}
        alone = None   # h of an op in no live core and no row: the same for every such op
        for v in range(p.n):
            if caps[v] == 0 or costs[v] == 0 or time.perf_counter() >= deadline:
                continue
            outside = v not in in_rows and not any(v in c for c in live)
            if outside and alone is not None:
                h = alone
            else:
                rest = [c for c in live if v not in c]  # non-empty cores: ``live`` has no empty one
                rows = restrict_cuts(base_rows, rerun=(v,))
                h, _, done = (Fraction(0), (), True) if not rest and not rows else \
                    min_hitting_set(rest, costs, min(deadline, time.perf_counter() + 2.0), cuts=rows)
                if h is None and done:
                    h = U  # no plan within the limit re-runs v (c(v) > 0: any z is excluded)
                h = Fraction(0) if h is None else Fraction(h)
                if outside:
                    alone = h
            keep = caps[v]
            for z in range(1, caps[v] + 1):
                if excluded(z, v, h):
                    keep = z - 1
                    break
            if keep < caps[v]:
                caps[v] = keep
                changed = True
                if keep == 0:
                    live = live_cores()
                    if live is None:
                        return nothing_below
    return caps


def count_vector_model(pos, caps, nogoods, scaled, cuts=(), free=()):
    """The CP-SAT model over re-run *count vectors* shared by the decomposition's master
    (:func:`memopt.remat.cpsat._decompose`) and :func:`nogood_fixed_caps`: ``b[v][j]`` (``v``
    in ``pos``, ``j < caps[v]``) means ``y(v) > j``; every no-good ``Y`` (a mapping op ->
    count) is met by some ``y(v) > Y[v]``, and the objective is ``sum scaled[v] y(v)``. A
    no-good that no op may still exceed makes the model infeasible. ``cuts``: trap cut rows
    over ``y(v) > 0``; ``free``: the ops outside ``pos`` that may re-run (zero-cost ops, kept
    out of the model), whose bytes count as uncovered; every other op outside the model never
    re-runs in the plans it stands for (:func:`memopt.remat.trap_cuts.restrict_cuts`).
    Returns ``(model, b)``."""
    from ortools.sat.python import cp_model

    from memopt.remat.trap_cuts import add_row, restrict_cuts

    m = cp_model.CpModel()
    b = {v: [m.new_bool_var(f"y{v}_{j}") for j in range(caps[v])] for v in pos}
    for v in pos:
        for j in range(1, caps[v]):
            m.add_implication(b[v][j], b[v][j - 1])
    for ng in nogoods:
        m.add_bool_or([b[v][y] for v, y in dict(ng).items() if v in b and y < len(b[v])])
    free = set(free)
    never = {w for cut in cuts for w in cut.ops if w not in free and not b.get(w)}
    for cut in restrict_cuts(cuts, rerun=free, never=never):
        add_row(m, {w: b[w][0] for w in cut.ops}, cut)
    obj = sum(scaled[v] * x for v in pos for x in b[v])
    if not isinstance(obj, int):  # no variable at all: nothing to minimise
        m.minimize(obj)
    return m, b


def nogood_fixed_caps(p: RematProblem, caps, nogoods, incumbent_cost, *, strict: bool = True,
                      deadline: float = float("inf"), probe_seconds: float = 2.0, cuts=()) -> list[int]:
    """Reduced-cost fixing over *no-goods on re-run counts* (Lemma 7'; generalises
    :func:`core_fixed_caps`, whose cores are the no-goods "0 on the core").

    A no-good is a mapping ``Y`` from positive-cost ops to counts: every plan to be kept (within
    the limit and ``caps``, of extra cost below ``incumbent_cost`` when ``strict``, at most it
    otherwise) re-runs some op ``v`` of ``Y`` more than ``Y[v]`` times — the cores of the cost
    bound and the no-goods of :func:`memopt.remat.cpsat._decompose` are such. For each op ``v``
    and ``z = 1..caps[v]`` the *probe* is the least ``sum c(u) y(u)`` over count vectors
    ``0 <= y <= caps`` that satisfy every no-good and have ``y(v) >= z``, a lower bound on the
    extra cost of every kept plan that re-runs ``v`` at least ``z`` times (CP-SAT with the
    assumption ``y(v) >= z``; its objective bound is used when a probe runs out of
    ``probe_seconds``). The least ``z`` whose probe reaches ``incumbent_cost`` (``>= U``
    strict, ``> U`` otherwise) cuts ``caps[v]`` to ``z - 1``; repeated until nothing changes
    or ``deadline``. Probes for ``(v, z)`` that the master's own optimum already satisfies
    cannot cut (that optimum is below ``U`` or everything is cut) and are skipped. A no-good
    without any op that may still re-run past its count leaves no plan to keep: every
    positive-cost cap becomes 0. Zero-cost ops keep their caps. ``cuts``: trap cuts (every
    plan within the limit meets them, ``proofs/remat_cost_bounds.md`` §7), rows of the
    model with the zero-cost ops' bytes counted as uncovered. Argument:
    ``proofs/remat_exact_models.md``, Lemma 7'."""
    import time

    from ortools.sat.python import cp_model

    caps = list(caps)
    from memopt.remat.lower_bounds import bound_units

    scaled, factor, _ = cost_scale(p)     # floor-scaled: probes stay lower bounds when inexact
    U = Fraction(incumbent_cost) * factor
    pos = [v for v in range(p.n) if caps[v] > 0 and p.costs[v] != 0]
    nothing_below = [k if p.costs[v] == 0 else 0 for v, k in enumerate(caps)]

    def reaches(units) -> bool:
        return units >= U if strict else units > U

    # the trap cuts hold for every plan within the limit; zero-cost ops (outside the model) may re-run freely
    m, b = count_vector_model(pos, caps, nogoods, scaled, cuts,   # a no-good with no op left: infeasible
                              free=[v for v in range(p.n) if caps[v] > 0 and p.costs[v] == 0])

    def solve(assume=None):
        """``(lower bound in scaled units or None if infeasible, the solution's y or None)``"""
        m.clear_assumptions()
        if assume is not None:
            m.add_assumptions([assume])
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        st = solve_by(solver, m, min(time.perf_counter() + probe_seconds, deadline))
        if st is None:
            return 0, None  # dropped at its deadline: no bound learnt
        if st == cp_model.INFEASIBLE:
            return None, None
        y = None
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            y = {v: sum(solver.boolean_value(x) for x in b[v]) for v in pos}
        bound = solver.best_objective_bound
        return (bound_units(bound) if math.isfinite(bound) else 0), y

    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        best, y_best = solve()
        if best is None or reaches(best):
            return nothing_below        # no count vector below U: no plan to keep
        for v in pos:
            if time.perf_counter() >= deadline:
                break
            for z in range(1, caps[v] + 1):
                if y_best is not None and y_best[v] >= z:
                    continue            # the master's optimum re-runs v z times and is below U
                bound, _ = solve(b[v][z - 1])
                if time.perf_counter() >= deadline and bound is not None and not reaches(bound):
                    break
                if bound is None or reaches(bound):
                    for j in range(z - 1, caps[v]):
                        m.add(b[v][j] == 0)
                    caps[v] = z - 1
                    changed = True
                    break
    return caps


def ancestor_counts(p: RematProblem, *, descendants: bool = False) -> list[int]:
    """Number of (op) ancestors of every op: no run of ``v`` can be in a slot below it.
    ``descendants``: the number of descendants instead — each has its first run after the
    first run of ``v``, so at least that many runs follow it."""
    g = p.graph
    preds = [set() for _ in range(p.n)]
    for a, b in zip(*g.op_edges()):
        a, b = (int(b), int(a)) if descendants else (int(a), int(b))
        preds[b].add(a)
    order = g.topological_order().tolist()
    anc = [0] * p.n
    for v in (order[::-1] if descendants else order):
        mask = 0
        for u in preds[v]:
            mask |= anc[u] | (1 << u)
        anc[v] = mask
    return [bin(a).count("1") for a in anc]


def model_budget(st: "Start"):
    """The extra cost no optimal answer exceeds: the budget of ``min_peak``, the incumbent's
    extra cost for ``min_cost`` (``None`` without an incumbent)."""
    return st.cost_budget if st.question == "min_peak" else st.incumbent_cost


# ---------------------------------------------------------------------------- results
@dataclass
class Start:
    """What every method knows before it searches: the question, the footprint bound, and
    an incumbent plan that answers the question (if any). ``done`` with ``result``: the
    question is settled already (infeasible by the footprint bound, or the incumbent
    meets its bound)."""

    question: str
    memory_limit: int | None
    cost_budget: object
    lower: int
    done: bool = False
    result: object = None
    incumbent: object = None
    incumbent_peak: int | None = None
    incumbent_cost: object = None

    @property
    def upper_peak(self) -> int | None:
        return self.incumbent_peak


def check_question(question: str, memory_limit, cost_budget):
    """Validate the question and its one parameter; returns ``(memory_limit, cost_budget)``
    as an ``int`` and an exact number."""
    if question not in QUESTIONS:
        raise OptionError(f"unknown question {question!r}; choose from {', '.join(QUESTIONS)}")
    if question == "min_cost":
        if memory_limit is None or isinstance(memory_limit, bool):
            raise OptionError("min_cost needs a memory limit (bytes)")
        if isinstance(memory_limit, float) and not memory_limit.is_integer():
            raise OptionError(f"memory limit must be a whole number of bytes, got {memory_limit!r}")
        try:
            ml = int(memory_limit)
        except (TypeError, ValueError):
            raise OptionError(f"memory limit must be a whole number of bytes, got {memory_limit!r}") from None
        if ml < 0 or ml >= 2**62:
            raise OptionError(f"memory limit must be in [0, 2**62) bytes, got {memory_limit!r}")
        return ml, None
    if cost_budget is None or isinstance(cost_budget, bool):
        raise OptionError("min_peak needs a cost budget")
    try:
        b = Fraction(cost_budget)
    except (TypeError, ValueError, OverflowError):
        raise OptionError(f"cost budget must be a finite number >= 0, got {cost_budget!r}") from None
    if b < 0 or b >= 2**62:
        raise OptionError(f"cost budget must be a finite number in [0, 2**62), got {cost_budget!r}")
    return None, (int(b) if b.denominator == 1 else b)


def answers(question: str, peak: int, cost, memory_limit, cost_budget) -> bool:
    return peak <= memory_limit if question == "min_cost" else Fraction(cost) <= Fraction(cost_budget)


def better(question: str, a: tuple, b: tuple | None) -> bool:
    """Is ``a = (peak, cost)`` a better answer than ``b``?"""
    if b is None:
        return True
    if question == "min_cost":
        return (Fraction(a[1]), a[0]) < (Fraction(b[1]), b[0])
    return (a[0], Fraction(a[1])) < (b[0], Fraction(b[1]))


def start_result(p: RematProblem, question: str, memory_limit, cost_budget, incumbent, method: str,
                 t0: float) -> Start:
    """The common start of every method (see :class:`Start`)."""
    import time

    from memopt.remat.result import RematResult

    memory_limit, cost_budget = check_question(question, memory_limit, cost_budget)
    lower = footprint_bound(p)
    st = Start(question, memory_limit, cost_budget, lower)
    caps = list(p.caps)
    if question == "min_cost" and lower > memory_limit:
        st.done = True
        st.result = RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", question=question,
                                lower_bound=lower, cost_lower_bound=None, memory_limit=memory_limit,
                                cap=caps, method=method, seconds=time.perf_counter() - t0,
                                stats={"proof": "footprint bound"})
        return st
    if incumbent is not None:
        pk, c = evaluate(p, incumbent)
        if question == "min_peak" and c > cost_budget:
            incumbent = None      # over the budget it answers nothing; min_peak starts from one that does
    if incumbent is None and question == "min_peak":
        incumbent = plan_from_runs(p, p.graph.topological_order().tolist())
        pk, c = evaluate(p, incumbent)
    if incumbent is not None:
        if answers(question, pk, c, memory_limit, cost_budget):
            st.incumbent, st.incumbent_peak, st.incumbent_cost = incumbent, pk, c
            if (question == "min_cost" and c == 0) or (question == "min_peak" and pk <= lower):
                st.done = True
                st.result = RematResult(plan=incumbent, peak=pk, extra_cost=c, status="optimal", question=question,
                                        lower_bound=lower,
                                        cost_lower_bound=0 if question == "min_cost" else None,
                                        memory_limit=memory_limit, cost_budget=cost_budget, cap=caps,
                                        method=method, seconds=time.perf_counter() - t0,
                                        stats={"proof": "incumbent meets its bound"})
    return st


def finish_result(p: RematProblem, st: Start, plan, proven, method: str, t0: float, stats: dict):
    """The method's :class:`RematResult` from the plan its solver found (or ``None``) and what
    it proved: ``None``, ``("infeasible",)``, ``("cost", lower bound on the extra cost)`` or
    ``("peak", lower bound on the peak)``. The solver's plan is re-evaluated exactly; the
    better of it and the incumbent is returned."""
    import time

    from memopt.errors import InternalError
    from memopt.remat.result import RematResult

    q = st.question
    best, best_pc = st.incumbent, None if st.incumbent is None else (st.incumbent_peak, st.incumbent_cost)
    if plan is not None:
        try:
            pk, c = evaluate(p, plan)
        except MemoptError as exc:  # the solver's plan breaks a rule of the model: a bug, not bad input
            raise InternalError(f"{method}-plan", f"the {method} model's plan breaks the model: {exc}") from exc
        if answers(q, pk, c, st.memory_limit, st.cost_budget):
            if better(q, (pk, c), best_pc):
                best, best_pc = plan, (pk, c)
        elif q == "min_cost" or cost_scale(p)[2]:
            raise InternalError(f"{method}-answer", f"the {method} model's plan (peak {pk}, extra cost {c}) does not "
                                                    "answer the question it was solved for")
        else:
            stats["discarded"] = "rounded costs: the plan is over the true budget"
    caps = list(p.caps)
    common = dict(question=q, memory_limit=st.memory_limit, cost_budget=st.cost_budget, cap=caps, method=method,
                  seconds=time.perf_counter() - t0, stats=stats)
    if proven is not None and proven[0] == "infeasible":
        if best is not None:
            raise InternalError(f"{method}-infeasible", f"{method} proved the question infeasible, but a plan "
                                                        f"answers it (peak {best_pc[0]}, extra cost {best_pc[1]})")
        stats["proof"] = f"{method} proved infeasibility"
        return RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", lower_bound=st.lower, **common)
    if q == "min_cost":
        clb = proven[1] if proven is not None and proven[0] == "cost" else 0
        clb = int(clb) if Fraction(clb).denominator == 1 else clb
        if best is None:
            return RematResult(plan=None, peak=None, extra_cost=None, status="unknown", lower_bound=st.lower,
                               cost_lower_bound=clb, **common)
        if Fraction(clb) > Fraction(best_pc[1]):
            raise InternalError(f"{method}-cost-bound", f"{method}: cost lower bound {clb} above a verified plan's "
                                                        f"extra cost {best_pc[1]}")
        status = "optimal" if Fraction(best_pc[1]) <= Fraction(clb) else "feasible"
        return RematResult(plan=best, peak=best_pc[0], extra_cost=best_pc[1], status=status, lower_bound=st.lower,
                           cost_lower_bound=clb, **common)
    lb = max(st.lower, proven[1] if proven is not None and proven[0] == "peak" else 0)
    if lb > best_pc[0]:
        raise InternalError(f"{method}-peak-bound", f"{method}: peak lower bound {lb} above a verified plan's "
                                                    f"peak {best_pc[0]}")
    status = "optimal" if best_pc[0] <= lb else "feasible"
    return RematResult(plan=best, peak=best_pc[0], extra_cost=best_pc[1], status=status, lower_bound=lb, **common)
