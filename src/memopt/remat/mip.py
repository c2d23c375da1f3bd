"""Capped recomputation as an exact time-indexed MIP formulation, solved by SCIP (pyscipopt).

Checkmate (Jain et al., MLSys 2020; ``checkmate/core/solvers/gurobi_solver.py``) decides
``R[t, i]`` ("compute node ``i`` in stage ``t``"), ``S[t, i]`` ("keep ``i`` into stage
``t``"), ``U`` (memory) and ``FREE``, with ``n`` stages where stage ``t`` computes node ``t``
for the first time and runs its other computations in node order. That fixes the order of
first computations and the order inside a stage: its optimum is optimal *for that restricted
model*. memopt's model (``docs/remat.md``) has no stages, so the MIP is indexed by **run
slots** instead:

* with caps ``k(v)`` a plan has at most ``T = sum_v (1 + k(v))`` runs; number them
  ``0..T-1``. ``R[t, v] = 1`` iff slot ``t`` runs ``v``; ``L[t, x] = 1`` iff the non-resident
  tensor ``x`` is live just before slot ``t`` (``t = 0..T``; ``L[T]`` is the end);
* ``sum_v R[t, v] <= 1``; runs are packed at the front
  (``sum_v R[t+1, v] <= sum_v R[t, v]``); ``1 <= sum_t R[t, v] <= 1 + k(v)``;
* liveness: a produced tensor is not live at the start (``L[0, x] = 0``) and stays or
  becomes live only through its producer, ``L[t+1, x] <= L[t, x] + R[t, p(x)]``; a graph
  input may be freed and never comes back, ``L[t+1, x] <= L[t, x]``; graph outputs are live
  at the end, ``L[T, x] = 1``;
* a run needs its inputs live, ``R[t, v] <= L[t, x]`` for ``x`` in ``in(v)``, and none of its
  outputs live, ``L[t, y] + R[t, v] <= 1`` for ``y`` in ``out(v)``;
* memory while slot ``t`` runs:
  ``sum_x s(x) L[t, x] + sum_v (s(out(v)) + w(v)) R[t, v] <= M - resident`` (or ``<= P``);
* ``R[t, v] = 0`` for ``t < |anc(v)|`` (every ancestor runs before the first run of ``v``).

The caps are first cut to what the budget (``min_peak``) or the incumbent's extra cost
(``min_cost``) allows, ``min(k(v), floor(B / c(v)))`` (no optimal answer is lost:
:func:`~memopt.remat.model_common.reduced_caps`), which drops the slots of expensive ops.

Objective: extra cost ``sum c(v) R[t, v] - sum c(v)`` (``min_cost``), or ``P`` with the extra
cost at most the budget (``min_peak``). Bytes are divided by their gcd; costs are integers
(exact, or rounded down so that the model stays a relaxation:
:func:`~memopt.remat.model_common.cost_scale`).

**Exact for caps.** A valid plan with at most ``1 + k(v)`` runs of each ``v`` has at most
``T`` runs; put its ``i``-th run in slot ``i`` and let ``L[t]`` be its live set just before
that run (the end set for the empty slots after the last run). Every constraint is a rule of
the model, and the memory of slot ``t`` is the plan's memory while run ``t`` runs (an empty
slot holds a subset of the previous run's memory). Conversely a solution is the plan "run
slot ``t``'s op, then free ``(L[t] ∪ out) \\ L[t+1]``" (:func:`plan_from_slots`), with exactly
the solution's memory. Hence both optima equal the model's. SCIP solves it in floating point
with tolerances, so its ``optimal`` and ``infeasible`` are as reliable as SCIP's numerics: every
plan is re-evaluated exactly and checked (a disagreement is an
:class:`~memopt.errors.InternalError`), a bound is not. Exactness of the formulation:
proofs/remat_exact_models.md (§0 for this caveat).

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
...     [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
...      Op("h", ("a", "d"), ("c",))])
>>> r = solve_mip(g, "min_cost", memory_limit=12, cap=1, time_limit=10)
>>> r.status, r.extra_cost, r.peak
('optimal', 3, 12)
>>> solve_mip(g, "min_peak", cost_budget=0, cap=1, time_limit=10).peak
14
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

from memopt.remat.model_common import (RematProblem, ancestor_counts, byte_scale, cost_scale,
                                       footprint_bound, model_budget, plan_from_slots, reduced_caps,
                                       slots_from_plan, start_result, finish_result)

__all__ = ["solve_mip", "mip_method"]

#: models with more ``R`` and ``L`` variables than this are not built (the incumbent comes back)
MAX_VARIABLES = 400_000


def solve_mip(problem, question: str, *, memory_limit: int | None = None, cost_budget=None, cap=1,
              time_limit: float = 10.0, incumbent=None, seed: int = 0, clock=None):
    """Solve ``question`` (``"min_cost"`` under ``memory_limit``, ``"min_peak"`` under
    ``cost_budget``) exactly with SCIP, within ``time_limit`` seconds; a :class:`RematResult`
    whose plan (if any) is valid and answers the question. ``incumbent`` (a plan) is given to
    SCIP as a start solution when it answers the question. ``clock``: the caller's
    :class:`memopt.clock.Clock` (else one of ``time_limit`` seconds); SCIP's ``limits/time`` is
    what is left on it when the model is built."""
    from memopt.time_shares import remat_clock

    t0 = time.perf_counter()
    clock = remat_clock(time_limit, clock)
    full = RematProblem.of(problem, cap)
    early = start_result(full, question, memory_limit, cost_budget, incumbent, "mip", t0)
    if early.done:
        return early.result
    # no optimal answer costs more than the budget / the incumbent: cut the caps to that
    p = RematProblem.of(full, reduced_caps(full, model_budget(early)))
    T = p.slots
    xs = p.live_tensors()
    stats = {"slots": T, "variables": T * p.n + (T + 1) * len(xs)}
    if stats["variables"] > MAX_VARIABLES:
        stats["solver_status"] = "model_too_large"
        return finish_result(full, early, None, None, "mip", t0, stats)
    from pyscipopt import Model, quicksum

    g = byte_scale(p)
    cs, factor, exact = cost_scale(p)
    first = sum(cs)
    m = Model("remat")
    m.hideOutput()
    m.setParam("limits/time", max(0.01, clock.left()))
    m.setParam("randomization/randomseedshift", int(seed) % 2**31)
    m.setParam("limits/gap", 0.0)
    m.setParam("limits/absgap", 0.0)
    anc = ancestor_counts(p)
    R = [[None] * p.n for _ in range(T)]
    for t in range(T):
        for v in range(p.n):
            if t >= anc[v]:
                R[t][v] = m.addVar(vtype="B", name=f"R{t}_{v}")
    L = [{x: m.addVar(vtype="B", name=f"L{t}_{x}") for x in xs} for t in range(T + 1)]

    def r(t, v):
        return R[t][v] if R[t][v] is not None else 0

    for t in range(T):
        row = [R[t][v] for v in range(p.n) if R[t][v] is not None]
        if row:
            m.addCons(quicksum(row) <= 1)
        if t + 1 < T:
            nxt = [R[t + 1][v] for v in range(p.n) if R[t + 1][v] is not None]
            if nxt:
                m.addCons(quicksum(nxt) <= quicksum(row))
    for v in range(p.n):
        col = [R[t][v] for t in range(T) if R[t][v] is not None]
        m.addCons(quicksum(col) >= 1)
        m.addCons(quicksum(col) <= 1 + p.caps[v])
    inputs = set(p.inputs)
    for x in xs:
        if x not in inputs:
            m.addCons(L[0][x] == 0)
        u = p.producer[x]
        for t in range(T):
            m.addCons(L[t + 1][x] <= L[t][x] + (r(t, u) if u >= 0 else 0))
    for x in p.outputs:
        m.addCons(L[T][x] == 1)
    for t in range(T):
        for v in range(p.n):
            if R[t][v] is None:
                continue
            for x in p.ins[v]:
                m.addCons(R[t][v] <= L[t][x])
            for y in p.outs[v]:
                m.addCons(L[t][y] + R[t][v] <= 1)
    s = {x: p.size[x] // g for x in xs}
    load = [p.out_bytes(v) // g + p.ws[v] // g for v in range(p.n)]
    total_cost = quicksum(cs[v] * R[t][v] for t in range(T) for v in range(p.n) if R[t][v] is not None and cs[v])
    lo_peak = footprint_bound(p)
    if question == "min_cost":
        cap_units = (int(memory_limit) - p.resident_bytes) // g
        P = None
        m.setObjective(total_cost, "minimize")
    else:
        hi = early.upper_peak
        lo_u = -(-(lo_peak - p.resident_bytes) // g)
        hi_u = (hi - p.resident_bytes) // g if hi is not None else sum(s.values()) + max(load, default=0)
        P = m.addVar(vtype="I", lb=lo_u, ub=max(lo_u, hi_u), name="P")
        budget_units = math.floor(Fraction(cost_budget) * factor)
        m.addCons(total_cost <= budget_units + first)
        m.setObjective(P, "minimize")
    for t in range(T):
        expr = quicksum(s[x] * L[t][x] for x in xs if s[x]) + \
            quicksum(load[v] * R[t][v] for v in range(p.n) if R[t][v] is not None and load[v])
        if question == "min_cost":
            m.addCons(expr <= cap_units)
        else:
            m.addCons(expr <= P)
    # warm start
    inc = early.incumbent
    if inc is not None:
        run_at, states, _, _ = slots_from_plan(p, inc)
        sol = m.createSol()
        for t in range(T):
            for v in range(p.n):
                if R[t][v] is not None:
                    m.setSolVal(sol, R[t][v], 1.0 if t < len(run_at) and run_at[t] == v else 0.0)
            st = states[min(t, len(run_at))]
            for x in xs:
                m.setSolVal(sol, L[t][x], 1.0 if x in st else 0.0)
        for x in xs:
            m.setSolVal(sol, L[T][x], 1.0 if x in states[len(run_at)] else 0.0)
        if P is not None:
            m.setSolVal(sol, P, float((early.incumbent_peak - p.resident_bytes) // g))
        m.addSol(sol, free=True)
    left = clock.left()
    if left <= 0:
        m.freeProb()
        stats["solver_status"] = "time_limit_while_building"
        return finish_result(full, early, None, None, "mip", t0, stats)
    m.setParam("limits/time", max(0.01, left))
    m.optimize()
    status = m.getStatus()
    stats["solver_status"] = status
    plan = None
    if m.getNSols() > 0 and status != "infeasible":
        best = m.getBestSol()
        run_at = []
        for t in range(T):
            vs = [v for v in range(p.n) if R[t][v] is not None and m.getSolVal(best, R[t][v]) > 0.5]
            run_at.append(vs[0] if vs else None)
        live = [{x for x in xs if m.getSolVal(best, L[t][x]) > 0.5} for t in range(T + 1)]
        plan = plan_from_slots(p, run_at, live)
    if status == "infeasible":
        proven = ("infeasible",)
    else:
        dual = m.getDualbound()
        if not math.isfinite(dual):
            proven = None
        else:
            # SCIP's tolerances are relative: a margin of 1e-6 of the value keeps the bound sound
            units = math.ceil(dual - 1e-6 * max(1.0, abs(dual)))
            if question == "min_cost":
                proven = ("cost", Fraction(max(0, units - first)) / factor)
            else:
                proven = ("peak", p.resident_bytes + g * max(units, 0))
    m.freeProb()
    return finish_result(full, early, plan, proven, "mip", t0, stats)


def mip_method(problem, *, question: str, memory_limit=None, cost_budget=None, cap=1, time_limit: float = 10.0,
               incumbent=None, seed: int = 0, clock=None):
    """Registry method ``mip`` (see :mod:`memopt.remat.registry`)."""
    return solve_mip(problem, question, memory_limit=memory_limit, cost_budget=cost_budget, cap=cap,
                     time_limit=time_limit, incumbent=incumbent, seed=seed, clock=clock)
