"""Exact capped recomputation as a CP-SAT model of retention intervals (OR-Tools).

Moccasin (Bartan et al., ICML 2023; ``haoming-codes/moccasin``, ``src/moccasin/cp.py``) gives
each node ``C`` optional *retention intervals* — a computation followed by the time its
result is kept — and bounds memory with one cumulative constraint. As published it restricts
interval starts to Checkmate's stages and interval lengths to a log-spaced set of ``5N``
values, so its "optimal" is optimal for a restricted model. This model (written from the
idea, not the code) has neither restriction:

* time is the **run slot** ``0..T-1``, ``T = sum_v (1 + k(v))`` (no plan within the caps has
  more runs); ``nruns`` = number of runs, and runs fill exactly the slots ``0..nruns-1``;
* op ``v`` has ``1 + k(v)`` copies ``j`` with presence ``p[v, j]`` (``p[v, 0] = 1``, copies
  in order: ``p[v, j+1] -> p[v, j]``, ``s[v, j] < s[v, j+1]``) and run slot ``s[v, j]``;
  all run intervals ``[s, s+1)`` are pairwise disjoint (one run per slot), and
  ``s[v, j] < nruns = sum p``;
* every output ``x`` of copy ``j`` has its own retention interval ``[s[v, j], e[x, j])``
  (``e >= s + 1``: allocated while ``v`` runs; live before slot ``t`` iff ``s < t < e``;
  ``e = nruns`` means live at the end), so two outputs of one run may be freed at
  different times; copies of one tensor never overlap (``e[x, j] <= s[v, j+1]``), which is
  the rule "a run needs none of its outputs live";
* a non-resident graph input ``x`` has the interval ``[0, e_x)`` (``e_x = 0``: freed at the
  start);
* a run of ``v`` needs each input ``x`` live: a literal per copy ``i`` of ``x``'s producer
  with ``s[u, i] < s[v, j] < e[x, i]``, at least one true (``e_x > s[v, j]`` for inputs);
* graph outputs: some copy has ``e = nruns``;
* memory: one cumulative constraint over the tensor intervals (demand = size) and the
  workspace intervals ``[s, s+1)`` (demand = ``w(v)``), capacity ``M - resident`` or ``P``;
* redundant: first runs follow the graph's edges (``s[u, 0] < s[v, 0]``) and leave room for
  the op's descendants after them, which the reads imply only through a disjunction.

Objective: ``sum_{j >= 1} c(v) p[v, j]`` (``min_cost``) or ``P`` under the cost budget
(``min_peak``). Bytes are divided by their gcd; costs as in
:func:`~memopt.remat.model_common.cost_scale`.

**Exact for caps.** A valid plan with at most ``1 + k(v)`` runs per op: put run ``i`` in slot
``i``; the ``j``-th run of ``v`` is copy ``j``; each production of ``x`` lives from its run's
slot to the slot of the first run after its free (``nruns`` if never freed). Every
constraint is a rule of the model, and the cumulative load at slot ``t`` is exactly the
memory while run ``t`` runs (live before it, its outputs, its workspace). Conversely a
solution is the plan "run slot ``t``'s op; free each tensor after the last slot it covers"
(:func:`~memopt.remat.model_common.plan_from_slots`) with the same memory. The plan is
re-evaluated exactly and checked before it is returned.
Exactness: proofs/remat_exact_models.md

With several workers CP-SAT may return different optimal plans from run to run; the
optimal values do not change. ``num_workers=1`` is deterministic for a given ``seed``.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
...     [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
...      Op("h", ("a", "d"), ("c",))])
>>> r = solve_cpsat(g, "min_cost", memory_limit=12, cap=1, time_limit=10)
>>> r.status, r.extra_cost, r.peak
('optimal', 3, 12)
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

from memopt.clock import solve_by
from memopt.remat.lower_bounds import bound_units
from memopt.remat.model_common import (RematProblem, ancestor_counts, byte_scale, core_fixed_caps, cost_scale,
                                       count_vector_model,
                                       finish_result, footprint_bound, model_budget, nogood_fixed_caps, plan_from_slots,
                                       reduced_caps, slots_from_plan, start_result, within_caps)

__all__ = ["solve_cpsat", "cpsat_method"]

#: models with more copies x slots than this are not built (the incumbent comes back)
MAX_SIZE = 2_000_000
#: seconds for one oracle call of the decomposition (a model with small caps)
CHECK_SECONDS = 3.0
#: single re-runs tried to grow each no-good after the binary search
GROW_TRIES = 8
#: seconds for one relaxed oracle call of the decomposition (the other ops' outputs weigh 0)
RELAX_SECONDS = 10.0
# the shares of CP-SAT's time (the bound, the restricted model, the cap fixing, the
# decomposition) are the ``cpsat.*`` entries of memopt.time_shares.SHARES


def solve_cpsat(problem, question: str, *, memory_limit: int | None = None, cost_budget=None, cap=1,
                time_limit: float = 10.0, incumbent=None, seed: int = 0, num_workers: int = 2,
                cost_bound=None, bound_time: float | None = None, decompose: bool = False,
                restrict: bool = True, first_solution: bool = False, decompose_share: float | None = None,
                clock=None):
    """Solve ``question`` exactly with CP-SAT within ``time_limit`` seconds (or by ``clock``'s
    deadline, a :class:`memopt.clock.Clock`); a
    :class:`~memopt.remat.result.RematResult` (see :func:`memopt.remat.mip.solve_mip`).

    ``min_cost`` first bounds the extra cost from below
    (:func:`memopt.remat.lower_bounds.cost_lower_bound`; ``cost_bound`` gives one already
    computed, ``bound_time`` its most seconds, default the share ``cpsat.bound``): an incumbent
    that meets the bound is optimal without a search, and the bound's cores become clauses.
    With ``restrict``, a model whose caps are kept only on the bound's cheapest hitting set
    (and the zero-cost ops) first looks for a cheap incumbent for the share ``cpsat.restrict``
    of the time; if that plan meets the bound it is optimal.
    With an incumbent and cores, the caps are then fixed on the cores
    (:func:`~memopt.remat.model_common.core_fixed_caps`, reduced-cost fixing: only plans
    cheaper than the incumbent are looked for, and an infeasible model proves the incumbent
    optimal; ``proofs/remat_exact_models.md`` §3b).
    With ``decompose`` it then runs the implicit-hitting-set loop of :func:`_decompose`
    (small models with cut caps, and the relaxed graph of the ops a count vector does not
    re-run, as the oracles) for ``decompose_share`` of the time (default the share ``cpsat.decompose``)
    and gives the full model the rest, with its caps fixed again over the decomposition's
    no-goods and these no-goods as clauses (Lemma 7'). Caps are cut to what the incumbent's
    cost (or the budget) allows (:func:`~memopt.remat.model_common.reduced_caps`)."""
    from ortools.sat.python import cp_model

    from memopt.time_shares import remat_clock

    t0 = time.perf_counter()
    clock = remat_clock(time_limit, clock)
    full = RematProblem.of(problem, cap)
    early = start_result(full, question, memory_limit, cost_budget, incumbent, "cpsat", t0)
    if early.done:
        return early.result
    stats: dict = {}
    cb = None
    fixed = strict = None   # strict: the model looks only for plans cheaper than this cost
    nogoods: list = []      # the decomposition's no-goods (Theorem 4): clauses of the full model
    if question == "min_cost":
        from memopt.remat.lower_bounds import cost_lower_bound

        cb = cost_bound
        if cb is None:
            sub = clock.child("cpsat.bound") if bound_time is None else clock.part(1.0, most=float(bound_time))
            cb = cost_lower_bound(full.graph, early.memory_limit, list(full.caps), stop_at=early.incumbent_cost,
                                  time_limit=sub.left(), clock=sub)
        stats["cost_bound"] = {"value": cb.value, "cores": len(cb.cores), "complete": cb.complete, "ended": cb.ended}
        if cb.infeasible:
            stats["proof"] = "the relaxed graph of every op that may re-run has a trap above the limit"
            return finish_result(full, early, None, ("infeasible",), "cpsat", t0, stats)
        if early.incumbent is not None and Fraction(early.incumbent_cost) <= Fraction(cb.value):
            stats["solver_status"] = "not_run: the incumbent meets the cost bound"
            return finish_result(full, early, None, ("cost", cb.value), "cpsat", t0, stats)
        if cb.hitting_set and restrict:
            # a quick incumbent: re-run only the ops of the bound's cheapest hitting set
            inside = set(cb.hitting_set) | {v for v in range(full.n) if full.caps[v] > 0 and full.costs[v] == 0}
            found = _try_caps(full, early, [full.caps[v] if v in inside else 0 for v in range(full.n)],
                              clock.child("cpsat.restrict"), seed, num_workers, False)
            stats["restricted"] = {"ops": len(inside), "found": found}
            if early.incumbent is not None and Fraction(early.incumbent_cost) <= Fraction(cb.value):
                stats["solver_status"] = "not_run: the plan re-running the hitting set meets the cost bound"
                return finish_result(full, early, None, ("cost", cb.value), "cpsat", t0, stats)
        if early.incumbent is not None and (cb.cores or cb.cuts) and cost_scale(full)[2]:
            # reduced-cost fixing on the cores and cuts: caps that keep every plan cheaper than the
            # incumbent; the model then looks only for those (``strict``), and proves the
            # incumbent optimal by proving that none exists
            fixed = core_fixed_caps(full, reduced_caps(full, early.incumbent_cost), cb.cores, early.incumbent_cost,
                                    strict=True, deadline=clock.child("cpsat.fix").end, cuts=cb.cuts)
            strict = Fraction(early.incumbent_cost)
            stats["fixed_caps"] = {"slots": sum(1 + k for k in fixed),
                                   "ops_that_may_rerun": sum(1 for k in fixed if k > 0)}
        if decompose and cost_scale(full)[2]:
            part = clock.child("cpsat.decompose") if decompose_share is None else \
                clock.until(clock.start + float(decompose_share) * (clock.end - clock.start))
            cb = _decompose(full if fixed is None else RematProblem.of(full, fixed), early, cb, part, seed,
                            num_workers, stats, nogoods)
            if strict is not None and cb.value is not None and Fraction(cb.value) > strict:
                # over the fixed caps the master bounds the plans cheaper than the incumbent only
                cb = cb._replace(value=strict if strict.denominator > 1 else int(strict))
            if cb.infeasible:
                stats["proof"] = "every cap vector is a proven no-good (decomposition)"
                return finish_result(full, early, None, ("infeasible",), "cpsat", t0, stats)
            if early.incumbent is not None and Fraction(early.incumbent_cost) <= Fraction(cb.value):
                stats["solver_status"] = "not_run: the decomposition proved the incumbent optimal"
                return finish_result(full, early, None, ("cost", cb.value), "cpsat", t0, stats)
    if strict is not None and Fraction(early.incumbent_cost) < strict:
        # the decomposition found a cheaper plan: fix the caps again below its cost
        fixed = core_fixed_caps(full, reduced_caps(full, early.incumbent_cost), cb.cores, early.incumbent_cost,
                                strict=True, deadline=clock.part(1.0, most=_fix_seconds(clock)).end,
                                cuts=cb.cuts)
        strict = Fraction(early.incumbent_cost)
    if strict is not None and nogoods:
        # reduced-cost fixing over the decomposition's no-goods (Lemma 7'): the probes of its
        # master cut the re-runs that no count vector below the incumbent's cost allows
        t_fix = time.perf_counter()
        fixed = nogood_fixed_caps(full, fixed, nogoods, strict, strict=True,
                                  deadline=clock.part(1.0, most=_fix_seconds(clock)).end, cuts=cb.cuts)
        stats["nogood_fixed_caps"] = {"slots": sum(1 + k for k in fixed),
                                      "ops_that_may_rerun": sum(1 for k in fixed if k > 0),
                                      "seconds": round(time.perf_counter() - t_fix, 3)}
    caps = reduced_caps(full, model_budget(early))
    if strict is not None:
        caps = [min(a, b) for a, b in zip(caps, fixed)]
    p = RematProblem.of(full, caps)
    T = p.slots
    copies_total = T
    stats.update({"slots": T, "copies": copies_total})
    if copies_total * T > MAX_SIZE:
        stats["solver_status"] = "model_too_large"
        return finish_result(full, early, None, None if cb is None else ("cost", cb.value), "cpsat", t0, stats)
    g = byte_scale(p)
    cs, factor, exact = cost_scale(p)
    anc = ancestor_counts(p)
    m = cp_model.CpModel()
    nruns = m.new_int_var(max(p.n, 0), T, "nruns")
    K = [1 + k for k in p.caps]
    pres, start = [], []
    run_iv, ws_iv, ws_dem = [], [], []
    for v in range(p.n):
        pv, sv = [], []
        for j in range(K[v]):
            b = m.new_bool_var(f"p{v}_{j}")
            if j == 0:
                m.add(b == 1)
            lb = min(anc[v] + j, T - 1)
            s = m.new_int_var(lb, T - 1, f"s{v}_{j}")
            m.add(s + 1 <= nruns).only_enforce_if(b)
            if j > 0:
                m.add_implication(b, pv[j - 1])
                m.add(s >= sv[j - 1] + 1).only_enforce_if(b)
                m.add(s == lb).only_enforce_if(b.negated())  # absent copies: one fixed value
            pv.append(b)
            sv.append(s)
            run_iv.append(m.new_optional_fixed_size_interval_var(s, 1, b, f"run{v}_{j}"))
            if p.ws[v] // g:
                ws_iv.append(run_iv[-1])
                ws_dem.append(p.ws[v] // g)
        pres.append(pv)
        start.append(sv)
    m.add(nruns == sum(b for pv in pres for b in pv))
    # Redundant (Lemma 8): first runs follow the graph's edges, and every descendant's first
    # run comes after the first run of v; the read literals imply both, but only through a
    # disjunction over the producer's copies that propagation does not see through
    desc = ancestor_counts(p, descendants=True)
    for v in range(p.n):
        m.add(start[v][0] + 1 + desc[v] <= nruns)
    for a, b in sorted(set(zip(*(x.tolist() for x in p.graph.op_edges())))):
        if a != b:
            m.add(start[a][0] + 1 <= start[b][0])
    if run_iv:
        m.add_no_overlap(run_iv)
    # retention intervals
    end: dict = {}
    intervals, demands = list(ws_iv), list(ws_dem)
    for v in range(p.n):
        for x in p.outs[v]:
            ex = []
            for j in range(K[v]):
                e = m.new_int_var(1, T, f"e{x}_{j}")
                d = m.new_int_var(1, T, f"d{x}_{j}")
                iv = m.new_optional_interval_var(start[v][j], d, e, pres[v][j], f"keep{x}_{j}")
                m.add(e <= nruns).only_enforce_if(pres[v][j])
                m.add(e == start[v][j] + 1).only_enforce_if(pres[v][j].negated())
                if j > 0:
                    m.add(ex[j - 1] <= start[v][j]).only_enforce_if(pres[v][j])
                ex.append(e)
                if p.size[x] // g and not p.resident[x]:
                    intervals.append(iv)
                    demands.append(p.size[x] // g)
            end[x] = ex
    for x in p.inputs:
        e = m.new_int_var(0, T, f"e{x}")
        m.add(e <= nruns)
        end[x] = [e]
        if p.size[x] // g:
            intervals.append(m.new_interval_var(0, e, e, f"keep{x}"))
            demands.append(p.size[x] // g)
    # inputs live at every run; reads[(x, i)]: (literal, slot) of every run that reads copy i
    inputs = set(p.inputs)
    reads: dict = {}
    for v in range(p.n):
        for j in range(K[v]):
            s, b = start[v][j], pres[v][j]
            for x in p.ins[v]:
                if x in inputs:
                    m.add(end[x][0] >= s + 1).only_enforce_if(b)
                    reads.setdefault((x, 0), []).append((b, s))
                    continue
                u = p.producer[x]
                if K[u] == 1:
                    m.add(start[u][0] + 1 <= s).only_enforce_if(b)
                    m.add(end[x][0] >= s + 1).only_enforce_if(b)
                    reads.setdefault((x, 0), []).append((b, s))
                    continue
                lits = []
                for i in range(K[u]):
                    c = m.new_bool_var(f"c{v}_{j}_{x}_{i}")
                    m.add_implication(c, pres[u][i])
                    m.add(start[u][i] + 1 <= s).only_enforce_if(c)
                    m.add(end[x][i] >= s + 1).only_enforce_if(c)
                    lits.append(c)
                    reads.setdefault((x, i), []).append((c, s))
                m.add_bool_or(lits).only_enforce_if(b)
    finals: dict = {}
    for x in p.outputs:
        if x in inputs:
            m.add(end[x][0] >= nruns)
            finals[(x, 0)] = None
            continue
        u = p.producer[x]
        lits = []
        for i in range(K[u]):
            o = m.new_bool_var(f"o{x}_{i}")
            m.add_implication(o, pres[u][i])
            m.add(end[x][i] >= nruns).only_enforce_if(o)
            lits.append(o)
            finals[(x, i)] = o
        m.add_bool_or(lits)
    # Dominance 1 (frees as early as possible, which never raises memory): each copy of a
    # tensor ends right after its last read (right after its production if nobody reads it),
    # or at the end if it is the graph output's final copy.
    for x, ex in end.items():
        for i, e in enumerate(ex):
            terms = []
            if x not in inputs:
                terms.append(start[p.producer[x]][i] + 1)
            for lit, slot in reads.get((x, i), []):
                r = m.new_int_var(0, T, f"r{x}_{i}_{len(terms)}")
                m.add(r == slot + 1).only_enforce_if(lit)
                m.add(r == 0).only_enforce_if(lit.negated())
                terms.append(r)
            if (x, i) in finals:
                o = finals[(x, i)]
                if o is None:
                    terms.append(nruns)
                else:
                    r = m.new_int_var(0, T, f"f{x}_{i}")
                    m.add(r == nruns).only_enforce_if(o)
                    m.add(r == 0).only_enforce_if(o.negated())
                    terms.append(r)
            if terms:
                m.add_max_equality(e, terms)
            else:
                m.add(e == 0)
    # Dominance 2 (a re-run none of whose positive-size outputs is read afterwards or kept to
    # the end can be deleted without raising memory or cost: memopt.remat.brute_force,
    # rules 3 and 4): every re-run has such a use.
    for v in range(p.n):
        pos = [x for x in p.outs[v] if p.size[x] > 0]
        for j in range(1, K[v]):
            uses = [lit for x in pos for lit, _ in reads.get((x, j), [])]
            uses += [finals[(x, j)] for x in pos if finals.get((x, j)) is not None]
            if uses:
                m.add_bool_or(uses).only_enforce_if(pres[v][j])
            else:
                m.add(pres[v][j] == 0)
    terms = [cs[v] * pres[v][j] for v in range(p.n) for j in range(1, K[v]) if cs[v]]
    extra = sum(terms)
    lower = footprint_bound(p)
    P = None
    if question == "min_cost":
        capacity = (int(early.memory_limit) - p.resident_bytes) // g
        if intervals:
            m.add_cumulative(intervals, demands, capacity)
        m.minimize(extra)
        # every plan within the limit re-runs an op of each core and costs at least the bound
        # (proofs/remat_cost_bounds.md): implied constraints that the search cannot derive
        for core in cb.cores:
            m.add_bool_or([pres[v][1] for v in core if K[v] > 1])
        # and meets every trap cut (§7): ops without a second copy here never re-run
        from memopt.remat.trap_cuts import add_row, restrict_cuts

        for cut in restrict_cuts(cb.cuts, never=[v for v in range(p.n) if K[v] <= 1]):
            add_row(m, {v: pres[v][1] for v in cut.ops}, cut)
        # the decomposition's no-goods: every plan kept (cheaper than the incumbent under the
        # fixed caps) re-runs some op more often than the no-good allows (Theorem 4, Lemma 7')
        for ng in nogoods:
            m.add_bool_or([pres[v][y + 1] for v, y in ng.items() if y + 1 < K[v]])
        if exact and terms:
            m.add(extra >= math.ceil(Fraction(cb.value) * factor))
            if strict is not None:
                m.add(extra <= int(strict * factor) - 1)
            elif early.incumbent is not None:
                m.add(extra <= int(Fraction(early.incumbent_cost) * factor))
    else:
        lo_u = -(-(lower - p.resident_bytes) // g)
        hi_u = (early.upper_peak - p.resident_bytes) // g
        P = m.new_int_var(lo_u, max(lo_u, hi_u), "P")
        if intervals:
            m.add_cumulative(intervals, demands, P)
        m.add(extra <= math.floor(Fraction(early.cost_budget) * factor))
        m.minimize(P)
    if early.incumbent is not None and within_caps(early.incumbent, p.caps):
        _hint(m, p, early.incumbent, pres, start, end, nruns, P, g)
    solver = cp_model.CpSolver()
    left = clock.left()   # what is left on the clock as the solver starts
    if left <= 0:
        stats["solver_status"] = "time_limit_while_building"
        return finish_result(full, early, None, None if cb is None else ("cost", cb.value), "cpsat", t0, stats)
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed) % 2**31
    if first_solution:
        solver.parameters.stop_after_first_solution = True
    status = solve_by(solver, m, clock.end)
    answered = status is not None
    stats["solver_status"] = solver.status_name(status) if answered else "dropped_at_deadline"
    if not answered:
        status = cp_model.UNKNOWN
    plan = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan = _plan(solver, p, pres, start, end, nruns)
    if status == cp_model.INFEASIBLE and strict is not None:
        proven = ("cost", strict)  # no plan is cheaper than the incumbent (Lemma 7)
    elif status == cp_model.INFEASIBLE:
        proven = ("infeasible",)
    elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE) or (answered and math.isfinite(solver.best_objective_bound)):
        if status == cp_model.OPTIMAL and question == "min_cost":
            # the optimum read from the solution, exactly (the float64 bound may be rounded)
            units = sum(cs[v] for v in range(p.n) for j in range(1, K[v]) if cs[v] and solver.boolean_value(pres[v][j]))
        elif status == cp_model.OPTIMAL:
            units = solver.value(P)
        else:
            units = bound_units(solver.best_objective_bound)
        if status == cp_model.UNKNOWN and units <= -(2**53):
            proven = None
        elif question == "min_cost":
            proven = ("cost", Fraction(max(0, units)) / factor)
            if strict is not None:
                # the model's bound holds for the plans cheaper than the incumbent only
                proven = ("cost", min(proven[1], strict))
        else:
            proven = ("peak", p.resident_bytes + g * max(units, 0))
    else:
        proven = None
    if cb is not None and proven is None:
        proven = ("cost", Fraction(cb.value))
    elif cb is not None and proven[0] == "cost":
        proven = ("cost", max(proven[1], Fraction(cb.value)))
    return finish_result(full, early, plan, proven, "cpsat", t0, stats)


def _fix_seconds(clock) -> float:
    """The seconds of the share ``cpsat.fix`` of the clock's whole time (the cap fixing after
    the decomposition: its own slice, not one that ended with the first fixing)."""
    return clock.shares["cpsat.fix"].fraction * (clock.end - clock.start)


def _try_caps(full: RematProblem, early, caps, clock, seed: int, num_workers: int,
              first_solution: bool) -> bool | None:
    """Solve ``min_cost`` under ``early``'s limit with the smaller ``caps`` (no cost bound, no
    decomposition): ``True`` if it found a plan (the incumbent in ``early`` is replaced when
    the plan is cheaper; a plan within smaller caps is a plan within the full ones), ``False``
    if it proved that no plan within these caps fits, ``None`` if it could not tell."""
    from memopt.remat.lower_bounds import CostBound
    from memopt.remat.model_common import evaluate

    inc = early.incumbent if early.incumbent is not None and within_caps(early.incumbent, caps) else None
    r = solve_cpsat(full.graph, "min_cost", memory_limit=early.memory_limit, cap=caps, time_limit=clock.left(),
                    clock=clock, incumbent=inc, seed=seed, num_workers=num_workers, cost_bound=CostBound(0, ()), decompose=False,
                    restrict=False, first_solution=first_solution)
    if r.status == "infeasible":
        return False
    if r.plan is not None and r.status in ("optimal", "feasible"):
        if early.incumbent is None or Fraction(r.extra_cost) < Fraction(early.incumbent_cost):
            evaluate(full, r.plan)
            early.incumbent, early.incumbent_peak, early.incumbent_cost = r.plan, r.peak, r.extra_cost
        return True
    return None


def _decompose(full: RematProblem, early, cb, clock, seed: int, num_workers: int, stats: dict,
               nogoods_out: list | None = None):
    """Implicit hitting sets over re-run counts, with this model as the exact oracle.

    A plan's *count vector* ``z`` gives the re-runs of each positive-cost op; its extra cost
    is ``sum c(v) z(v)``. Master: the cheapest ``y`` (``0 <= y(v) <= k(v)``, caps cut by the
    incumbent's cost) such that for every *no-good* ``Y`` some ``y(v) > Y(v)`` — a minimum-cost
    problem solved exactly by CP-SAT; its optimum is a lower bound on the extra cost of every
    plan within the limit, since every such plan's ``z`` satisfies every no-good. A no-good is
    a cap vector ``Y`` under which no plan fits the limit (zero-cost ops keep their caps):
    each core of ``cb`` (``Y = k`` off the core, 0 on it), and every ``Y`` this model proves
    infeasible. Oracle: the model with caps ``y``; a plan found there costs at most
    ``sum c(v) y(v)``, which is the lower bound, so it is optimal. Otherwise ``y`` is grown
    into an infeasible ``Y`` as large as the time allows — caps raised one run at a time,
    cheapest first (1, 2, 4, ... runs at once, then single tries), each tried first on the relaxed-graph
    trap bound and then on the model (an answer it cannot give in its time counts as
    feasible, which only weakens the no-good). Every plan met is a candidate incumbent.
    Before that, the *relaxed oracle*: the model over the relaxed graph of every op that
    ``y`` does not re-run, with caps ``y`` on the others; if it is infeasible, no plan keeps
    those ops within ``y`` whatever the rest does (``proofs/remat_exact_models.md``,
    Lemma 9), a no-good free on every other op (on VGG19 at 0.8 it decides the instance in
    two rounds: one op must run three times, which the cores cannot see).
    Returns the strengthened bound (its ``cores`` unchanged); ``early``'s incumbent is
    updated in place; the no-goods (cores included) are appended to ``nogoods_out``.
    Proof: ``proofs/remat_cost_bounds.md``, Theorem 4."""
    from ortools.sat.python import cp_model

    from memopt.remat.lower_bounds import CostBound, relaxed_graph, relaxed_trap_exceeds

    n, M = full.n, early.memory_limit
    costs = full.costs
    pos = [v for v in range(n) if full.caps[v] > 0 and costs[v] != 0]
    zero = [v for v in range(n) if full.caps[v] > 0 and costs[v] == 0]
    # a core is "some op of C re-runs"; read as caps on the positive-cost ops it is a no-good
    # only if C has no zero-cost op (those keep their caps, and re-running one meets the core)
    free = set(zero)
    core_sets = [set(c) for c in cb.cores]
    nogoods = [{v: (0 if v in c else full.caps[v]) for v in pos} for c in core_sets if not free & c]
    lb = Fraction(cb.value)
    scaled, factor, _ = cost_scale(full)
    rounds = checks = relaxed = 0

    def caps_of(y):
        out = [0] * n
        for v in zero:
            out[v] = full.caps[v]
        for v, k in y.items():
            out[v] = k
        return out

    deadline = clock.end
    grow = clock.child("cpsat.grow")   # the rest is kept for the master
    grow_until = grow.end

    def feasible(y, seconds: float = CHECK_SECONDS) -> bool | None:
        """True (a plan, now a candidate incumbent), False (proved infeasible), None (unknown)."""
        nonlocal checks
        checks += 1
        # held inputs (G_S^+) and first and last runs are sound oracles too (proofs/remat_cost_bounds.md,
        # Theorems 1' and 6': under the caps y only the ops with a positive cap re-run)
        if relaxed_trap_exceeds(full.graph, [v for v in range(n) if caps_of(y)[v] > 0], M, deadline=deadline,
                                held_inputs=True, last_runs=True):
            return False
        if clock.left() <= 0.05:
            return None
        return _try_caps(full, early, caps_of(y), clock.part(1.0, most=seconds), seed, num_workers, True)

    def relaxed_infeasible(kept: dict) -> bool:
        """Proved that no plan within the limit re-runs each op ``v`` of ``kept`` at most
        ``kept[v]`` times, whatever the other ops do: the model over the relaxed graph of the
        other ops that may re-run (their outputs weigh 0 and count in the workspace of their
        producer and readers; they run once there) with caps ``kept`` is infeasible
        (``proofs/remat_exact_models.md``, Lemma 9). A plan found there is no plan of the graph."""
        nonlocal checks
        if clock.left() <= 0.05:
            return False
        checks += 1
        others = [v for v in range(n) if full.caps[v] > 0 and v not in kept]
        sub = clock.part(1.0, most=RELAX_SECONDS)
        r = solve_cpsat(relaxed_graph(full.graph, others), "min_cost", memory_limit=M,
                        cap=[kept.get(v, 0) for v in range(n)], time_limit=sub.left(), clock=sub, seed=seed,
                        num_workers=num_workers, cost_bound=CostBound(0, ()), restrict=False, first_solution=True)
        return r.status == "infeasible"

    def master():
        top = reduced_caps(full, early.incumbent_cost) if early.incumbent is not None else list(full.caps)
        m, b = count_vector_model(pos, top, nogoods, scaled, cb.cuts, free=zero)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 2
        st = solve_by(solver, m, clock.end)
        if st == cp_model.INFEASIBLE:
            return None, None  # nothing cheaper than the incumbent: it is optimal
        if st != cp_model.OPTIMAL:
            return False, None
        y = {v: sum(solver.boolean_value(x) for x in b[v]) for v in pos}
        # the optimum's value from y itself (exact), not the solver's float objective
        return Fraction(sum(scaled[v] * y[v] for v in pos)) / factor, y

    while time.perf_counter() < deadline - 0.05:
        if early.incumbent is not None and Fraction(early.incumbent_cost) <= lb:
            break
        rounds += 1
        value, y = master()
        if value is None:
            if early.incumbent is None:
                stats["decomposition"] = {"rounds": rounds, "checks": checks, "nogoods": len(nogoods)}
                return cb._replace(value=None, hitting_set=(), infeasible=True)
            lb = max(lb, Fraction(early.incumbent_cost))
            break
        if value is False:
            break
        lb = max(lb, value)
        kept = {v: y[v] for v in pos if y[v] > 0}
        if relaxed_infeasible(kept):
            # a no-good on the kept ops alone (every other op free); raised one re-run at a
            # time, cheapest first, while the relaxed model stays infeasible
            top = reduced_caps(full, early.incumbent_cost) if early.incumbent is not None else list(full.caps)
            for _, v in sorted((Fraction(costs[v]), v) for v in kept)[:GROW_TRIES]:
                if kept[v] < top[v] and time.perf_counter() < grow_until:
                    trial = {**kept, v: kept[v] + 1}
                    if relaxed_infeasible(trial):
                        kept = trial
            nogoods.append({v: kept.get(v, full.caps[v]) for v in pos})
            relaxed += 1
            continue
        ok = feasible(y, max(CHECK_SECONDS, grow.seconds("cpsat.main_check")))
        if ok:
            continue  # a plan of cost <= the bound: optimal (checked at the loop's top)
        if ok is None:
            break
        # grow y into a maximal infeasible cap vector, one re-run at a time, cheapest first
        top = reduced_caps(full, early.incumbent_cost) if early.incumbent is not None else list(full.caps)
        units = sorted(((Fraction(costs[v]), v, j) for v in pos for j in range(y[v] + 1, top[v] + 1)))
        def raised(k):
            Y = dict(y)
            for _, v, j in units[:k]:
                Y[v] = max(Y[v], j)
            return Y
        # galloping (1, 2, 4, ... cheapest units at once) keeps the early, easy checks small
        lo, step = 0, 1
        while lo + step <= len(units) and time.perf_counter() < grow_until:
            if feasible(raised(lo + step)) is not False:
                break
            lo, step = lo + step, 2 * step
        Y = raised(lo)
        for _, v, j in units[lo: lo + GROW_TRIES]:
            if time.perf_counter() >= grow_until:
                break
            if Y[v] == j - 1:
                trial = dict(Y)
                trial[v] = j
                if feasible(trial) is False:
                    Y = trial
        nogoods.append(Y)
    stats["decomposition"] = {"rounds": rounds, "checks": checks, "nogoods": len(nogoods), "relaxed_nogoods": relaxed,
                              "bound": lb}
    if nogoods_out is not None:
        nogoods_out.extend(nogoods)
    lb = int(lb) if lb.denominator == 1 else lb
    return cb._replace(value=lb, hitting_set=(), infeasible=False)


def _plan(solver, p: RematProblem, pres, start, end, nruns):
    n_runs = solver.value(nruns)
    run_at = [None] * n_runs
    cover: dict = {}
    for v in range(p.n):
        for j, b in enumerate(pres[v]):
            if solver.boolean_value(b):
                s = solver.value(start[v][j])
                run_at[s] = v
                for x in p.outs[v]:
                    cover.setdefault(x, []).append((s, solver.value(end[x][j])))
    for x in p.inputs:
        cover[x] = [(-1, solver.value(end[x][0]))]
    live = []
    for t in range(n_runs + 1):
        now = set()
        for x, ivs in cover.items():
            if p.resident[x]:
                continue
            for s, e in ivs:
                if s < t < e or (t == n_runs and s < t and e >= n_runs):
                    now.add(x)
                    break
        live.append(now)
    return plan_from_slots(p, run_at, live)


def _hint(m, p: RematProblem, plan, pres, start, end, nruns, P, g) -> None:
    run_at, _, copies, ends = slots_from_plan(p, plan)
    n_runs = len(run_at)
    m.add_hint(nruns, n_runs)
    for v in range(p.n):
        slots = copies[v]
        for j, b in enumerate(pres[v]):
            m.add_hint(b, j < len(slots))
            if j < len(slots):
                m.add_hint(start[v][j], slots[j])
        for x in p.outs[v]:
            ivs = sorted(ends.get(x, []))
            for j, (s, e) in enumerate(ivs[: len(pres[v])]):
                m.add_hint(end[x][j], max(e, s + 1))
    for x in p.inputs:
        ivs = ends.get(x, [(-1, n_runs)])
        m.add_hint(end[x][0], ivs[0][1])
    if P is not None:
        from memopt.remat.model_common import evaluate

        m.add_hint(P, (evaluate(p, plan)[0] - p.resident_bytes) // g)


def cpsat_method(problem, *, question: str, memory_limit=None, cost_budget=None, cap=1, time_limit: float = 10.0,
                 incumbent=None, seed: int = 0, cost_bound=None, clock=None):
    """Registry method ``cpsat`` (see :mod:`memopt.remat.registry`)."""
    # the decomposition ends in a few rounds where an op must run more often than the cores
    # can tell (VGG19 at 0.8), and hands the full model the rest of the time otherwise
    return solve_cpsat(problem, question, memory_limit=memory_limit, cost_budget=cost_budget, cap=cap,
                       time_limit=time_limit, incumbent=incumbent, seed=seed, cost_bound=cost_bound,
                       decompose=True, clock=clock)
