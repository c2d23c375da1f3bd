"""Recomputation solvers against brute force: the exact models (CP-SAT, SCIP MIP) on random
small graphs and caps for both questions, MIP = CP-SAT, the cap-0 equality with the
scheduling core, the step evaluator's special case, and the heuristic on larger graphs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from memopt.core import Op, Tensor, TensorGraph, peak
from memopt.core.remat import evaluate_steps
from memopt.remat import check_plan, plan_from_order
from memopt.remat.brute_force import min_extra_cost, min_peak
from memopt.remat.cpsat import solve_cpsat
from memopt.remat.heuristic import heuristic_method
from memopt.remat.mip import solve_mip
from memopt.remat.model_common import RematProblem, footprint_bound, plan_from_runs
from memopt.remat.registry import get_method, method_names
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

from conftest import random_topological_order

SOLVERS = (solve_cpsat, solve_mip)


def small_graph(seed: int, n_max: int = 6) -> TensorGraph:
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, int(rng.integers(1, n_max + 1)))


def skewed_graph(seed: int, n: int) -> TensorGraph:
    """A graph with cheap early values read late (where recomputation pays)."""
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, n, max_size=30, edge_prob=0.25)


# ---------------------------------------------------------------------------- evaluator
@settings(max_examples=40)
@given(st.integers(0, 10**6))
def test_order_evaluator_is_the_special_case_of_the_step_evaluator(seed):
    g = small_graph(seed, 10)
    rng = np.random.default_rng(seed + 1)
    order = g.topological_order().tolist()
    done = random_topological_order(g, rng)
    for o in (order, done):
        plan = plan_from_order(g, o)
        ev = evaluate_steps(g, plan.kind, plan.index, [0] * g.num_ops)
        assert ev.peak == peak(g, o)
        assert ev.extra_cost == 0
        # the heuristic's run-sequence builder frees as early as plan_from_order
        p = RematProblem.of(g, 0)
        assert evaluate_steps(g, *_arrays(plan_from_runs(p, o))).peak == peak(g, o)


def _arrays(plan):
    return plan.kind, plan.index


def test_evaluate_plan_still_lives_in_remat_plan():
    from memopt.remat.plan import evaluate_plan

    g = small_graph(3)
    plan = plan_from_order(g, g.topological_order())
    assert evaluate_plan(g, plan).peak == peak(g, g.topological_order())


# ---------------------------------------------------------------------------- exact = brute force
@settings(max_examples=15)
@given(st.integers(0, 10**6), st.integers(0, 2), st.integers(0, 12))
def test_exact_solvers_equal_brute_force_min_peak(seed, cap, budget):
    g = small_graph(seed)
    pk, _, _ = min_peak(g, budget, cap)
    for solve in SOLVERS:
        r = solve(g, "min_peak", cost_budget=budget, cap=cap, time_limit=30)
        assert r.status == "optimal", (solve.__name__, r.stats)
        assert r.peak == pk == r.lower_bound
        assert Fraction(r.extra_cost) <= budget
        assert check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


@settings(max_examples=20)
@given(st.integers(0, 10**6), st.integers(0, 2), st.integers(0, 6))
def test_exact_solvers_equal_brute_force_min_cost(seed, cap, below):
    g = small_graph(seed)
    top = peak(g, g.topological_order())
    limit = max(0, top - below * max(1, top // 10))
    cost, _ = min_extra_cost(g, limit, cap)
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=limit, cap=cap, time_limit=30)
        if cost is None:
            assert r.status == "infeasible" and r.plan is None, solve.__name__
        else:
            assert r.status == "optimal", (solve.__name__, r.stats)
            assert r.extra_cost == cost == r.cost_lower_bound
            assert r.peak <= limit
            check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


@pytest.mark.parametrize("seed", (0, 2))
def test_mip_equals_cpsat_with_cap_two(seed):
    g = skewed_graph(seed, 6)
    top = peak(g, g.topological_order())
    for limit in (top, top - top // 8):
        a = solve_cpsat(g, "min_cost", memory_limit=limit, cap=2, time_limit=30)
        b = solve_mip(g, "min_cost", memory_limit=limit, cap=2, time_limit=30)
        assert a.status == b.status
        assert a.status in ("optimal", "infeasible")
        assert a.extra_cost == b.extra_cost
    a = solve_cpsat(g, "min_peak", cost_budget=10, cap=2, time_limit=30)
    b = solve_mip(g, "min_peak", cost_budget=10, cap=2, time_limit=30)
    assert (a.status, a.peak) == (b.status, b.peak) == ("optimal", min_peak(g, 10, 2)[0])


@settings(max_examples=20)
@given(st.integers(0, 10**6))
def test_cap_zero_min_peak_is_the_scheduling_optimum(seed):
    g = small_graph(seed, 6)
    _, best = brute_force_schedule(g)
    for solve in SOLVERS:
        r = solve(g, "min_peak", cost_budget=0, cap=0, time_limit=30)
        assert (r.status, r.peak, r.extra_cost) == ("optimal", best, 0)


def test_per_op_caps_are_respected():
    # a mapping must name every op for the solvers (an unnamed op would be uncapped)
    g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
                          [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
                           Op("h", ("a", "d"), ("c",))])
    for solve in SOLVERS:
        assert solve(g, "min_cost", memory_limit=12, cap={"f": 1, "g": 0, "k": 0, "h": 0},
                     time_limit=10).extra_cost == 3
        assert solve(g, "min_cost", memory_limit=12, cap=[0, 1, 1, 1], time_limit=10).status == "infeasible"


def test_fractional_costs_are_exact():
    def graph(c):
        return TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
                                 [Op("f", (), ("a",), cost=c), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
                                  Op("h", ("a", "d"), ("c",))])

    for solve in SOLVERS:
        # a dyadic cost scales exactly: optimal
        r = solve(graph(0.375), "min_cost", memory_limit=12, cap=1, time_limit=10)
        assert r.extra_cost == Fraction(3, 8) and r.status == "optimal"
        # 0.1 does not scale to a small integer: the models round costs down (a relaxation),
        # the plan's cost is still exact and the cost bound still sound
        r = solve(graph(0.1), "min_cost", memory_limit=12, cap=1, time_limit=10)
        assert r.extra_cost == Fraction(0.1) and r.status in ("optimal", "feasible")
        assert Fraction(r.cost_lower_bound) <= r.extra_cost


def test_time_limit_zero_returns_a_status_and_never_hangs():
    g = skewed_graph(1, 7)
    top = peak(g, g.topological_order())
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=top - 1, cap=2, time_limit=0)
        assert r.status in ("optimal", "feasible", "infeasible", "unknown")
        r = solve(g, "min_peak", cost_budget=5, cap=2, time_limit=0)
        assert r.plan is not None  # the no-recomputation plan always answers min_peak
        check_plan(g, r.plan, cap=2)


# ---------------------------------------------------------------------------- heuristic
@pytest.mark.parametrize("seed", range(3))
def test_heuristic_plans_are_valid_and_within_limits_on_larger_graphs(seed):
    g = skewed_graph(seed, 50)
    base = peak(g, g.topological_order())
    lower = footprint_bound(RematProblem.of(g, 1))
    for ratio in (1.0, 0.9, 0.8):
        limit = int(ratio * base)
        r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=1, time_limit=1)
        if r.status == "infeasible":
            assert limit < lower
            continue
        pk, c = check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
        if r.status in ("optimal", "feasible"):
            assert pk <= limit
        else:
            assert r.status == "unknown" and pk > limit
    r = heuristic_method(g, question="min_peak", cost_budget=20, cap=1, time_limit=1)
    pk, c = check_plan(g, r.plan, cap=1)
    assert Fraction(c) <= 20 and r.lower_bound <= pk


def test_heuristic_recomputes_a_cheap_value_held_across_the_peak():
    # x is cheap and read at the very end; the peak op in the middle needs 10 bytes of workspace
    g = TensorGraph.build([Tensor("x", 6), Tensor("y", 1), Tensor("z", 1), Tensor("out", 1, output=True)],
                          [Op("mk", (), ("x",), cost=1), Op("a", ("x",), ("y",)),
                           Op("big", ("y",), ("z",), workspace=10), Op("end", ("x", "z"), ("out",))])
    r = heuristic_method(g, question="min_cost", memory_limit=12, cap=1, time_limit=5)
    assert r.status == "optimal" or r.status == "feasible"
    assert r.peak <= 12 and r.extra_cost == 1
    assert min_extra_cost(g, 12, 1)[0] == 1


def test_registry_has_one_signature():
    assert set(method_names()) >= {"heuristic", "cpsat", "mip"}
    g = small_graph(11)
    for name in method_names():
        r = get_method(name).load()(g, question="min_peak", cost_budget=3, cap=1, time_limit=10, incumbent=None,
                                    seed=0)
        check_plan(g, r.plan, cap=1, claimed_peak=r.peak)


# ---------------------------------------------------------------------------- proving optimality
# proofs/remat_cost_bounds.md: caps cut by the incumbent's cost (Lemma 3), the cost bound's
# cores as clauses (Theorem 2), the implicit-hitting-set decomposition (Theorem 4)
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(1, 5))
def test_incumbent_cut_caps_cores_and_decomposition_keep_the_models_exact(seed, cap, below):
    from memopt.remat.model_common import reduced_caps

    g = skewed_graph(seed, 6)
    top = peak(g, g.topological_order())
    limit = max(0, top - below * max(1, top // 8))
    cost, _ = min_extra_cost(g, limit, cap)
    h = heuristic_method(g, question="min_cost", memory_limit=limit, cap=cap, time_limit=5)
    inc = h.plan if h.status in ("optimal", "feasible") else None
    if cost is not None:
        # no plan at the optimum's cost is lost when the caps are cut to what it pays for
        p = RematProblem.of(g, cap)
        assert min_extra_cost(g, limit, reduced_caps(p, cost))[0] == cost
    # decompose_share=0.01: the decomposition stops early and the full model runs with the caps
    # fixed over its no-goods and the no-goods as clauses (Lemma 7')
    runs = [(solve_cpsat, {"decompose": False}), (solve_cpsat, {"decompose": True}),
            (solve_cpsat, {"decompose": True, "decompose_share": 0.01}), (solve_mip, {})]
    for solve, kw in runs:
        r = solve(g, "min_cost", memory_limit=limit, cap=cap, time_limit=30, incumbent=inc, **kw)
        if cost is None:
            assert r.status == "infeasible" and r.plan is None, (solve.__name__, kw)
        else:
            assert r.status == "optimal", (solve.__name__, kw, r.stats)
            assert r.extra_cost == cost == r.cost_lower_bound
            check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


def test_an_incumbent_that_meets_the_cost_bound_needs_no_search():
    """a (6 bytes, cost 5) held across the big op B must be rebuilt below 12 bytes: the cost
    bound is 5, and the heuristic's plan (re-run A before Z) costs 5, so CP-SAT is not run."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1), Op("B", ("m",), ("b",), cost=1),
             Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])
    h = heuristic_method(g, question="min_cost", memory_limit=11, cap=1, time_limit=5)
    r = solve_cpsat(g, "min_cost", memory_limit=11, cap=1, time_limit=30, incumbent=h.plan)
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 5, 5)
    assert r.stats["solver_status"].startswith("not_run")
    assert r.stats["cost_bound"]["value"] == 5


# ---------------------------------------------------------------------------- reduced-cost fixing
# proofs/remat_exact_models.md, Lemma 7: caps fixed on the cores keep every plan cheaper
# than the incumbent; the strict model proves the incumbent optimal by being infeasible
def _rerun_case(seed, cap, where):
    """A skewed 6-op graph and a limit below its no-recomputation optimum that some plan meets
    (re-runs are needed; ``where`` in [0, 1] places it), with the least extra cost there."""
    g = skewed_graph(seed, 6)
    floor, p0 = min_peak(g, 10**9, cap)[0], min_peak(g, 0, cap)[0]
    if floor >= p0:
        return None
    limit = floor + int(where * (p0 - 1 - floor))
    return g, RematProblem.of(g, cap), limit, min_extra_cost(g, limit, cap)[0]


def _check_fixed_caps(g, p, limit, cap, cost, slack, fix):
    """``fix(caps, incumbent_cost, strict)`` cuts caps; with an incumbent ``slack`` above the
    optimum the strict caps keep an optimal plan (none left when ``slack`` is 0 is allowed too),
    and the non-strict caps at the optimum's own cost keep it."""
    from memopt.remat.model_common import reduced_caps

    upper = Fraction(cost) + slack
    strict = fix(reduced_caps(p, upper), upper, True)
    loose = fix(reduced_caps(p, cost), cost, False)
    assert all(0 <= a <= b <= cap for a, b in zip(strict, reduced_caps(p, upper)))
    # the optimum costs below ``upper`` when slack > 0: the strict caps keep it
    got = min_extra_cost(g, limit, strict)[0]
    if slack > 0:
        assert got == cost
    else:
        assert got is None or got == cost
    assert min_extra_cost(g, limit, loose)[0] == cost


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.floats(0, 1), st.integers(0, 8))
def test_caps_fixed_on_the_cores_keep_every_plan_below_the_incumbent(seed, cap, where, slack):
    from memopt.remat.lower_bounds import cost_lower_bound
    from memopt.remat.model_common import core_fixed_caps

    case = _rerun_case(seed, cap, where)
    assume(case is not None)
    g, p, limit, cost = case
    cb = cost_lower_bound(g, limit, cap, time_limit=5)
    _check_fixed_caps(g, p, limit, cap, cost, slack,
                      lambda caps, u, strict: core_fixed_caps(p, caps, cb.cores, u, strict=strict))


def test_core_fixing_keeps_only_the_runs_below_the_incumbent_and_the_model_proves_it_optimal():
    """held_value_graph(3) under 22 bytes: A (cost 1) must run before each of the three C{i}
    (extra cost 2), while the cost bound sees only the core {A} (bound 1). Below the
    incumbent's 2, A keeps one re-run and every cost-50 op none; the strict model (8 slots
    instead of 21) is infeasible, which proves the incumbent optimal."""
    from memopt.remat.lower_bounds import cost_lower_bound
    from memopt.remat.model_common import core_fixed_caps, reduced_caps

    from conftest import held_value_graph

    g = held_value_graph(3)
    p = RematProblem.of(g, 2)
    cb = cost_lower_bound(g, 22, 2, time_limit=5, trap_cuts=False)
    assert (cb.value, cb.cores) == (1, ((0,),))
    assert core_fixed_caps(p, reduced_caps(p, 2), cb.cores, 2) == [1, 0, 0, 0, 0, 0, 0]
    # the trap cuts (no core then) fix the same caps: every row needs A's bytes
    with_cuts = cost_lower_bound(g, 22, 2, time_limit=5)
    assert (with_cuts.value, with_cuts.cores) == (1, ()) and with_cuts.cuts
    assert core_fixed_caps(p, reduced_caps(p, 2), (), 2, cuts=with_cuts.cuts) == [1, 0, 0, 0, 0, 0, 0]
    assert core_fixed_caps(p, reduced_caps(p, 2), cb.cores, 2, strict=False) == [2, 0, 0, 0, 0, 0, 0]
    # a core no op may re-run in: nothing is cheaper than the incumbent, every cap goes
    assert core_fixed_caps(p, [0] * 7, cb.cores, 2) == [0] * 7
    incumbent = plan_from_runs(p, [0, 1, 2, 3, 0, 4, 5, 0, 6])
    r = solve_cpsat(g, "min_cost", memory_limit=22, cap=2, time_limit=30, incumbent=incumbent)
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 2, 2)
    assert r.stats["solver_status"] == "INFEASIBLE"
    assert r.stats["fixed_caps"] == {"slots": 8, "ops_that_may_rerun": 1}
    check_plan(g, r.plan, cap=2, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


# proofs/remat_exact_models.md, Lemma 9: the relaxed oracle of the decomposition
@pytest.mark.slow  # 25 brute-force searches (~25 s): in CI's second step
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(0, 2**12))
def test_relaxing_the_other_ops_never_raises_the_least_peak(seed, cap, pick):
    """Every plan whose re-runs of the kept ops stay within their caps (the other ops
    re-running freely within theirs) peaks at least at the least peak over the relaxed graph
    of the other ops, with the kept caps and no other re-run."""
    from memopt.remat.lower_bounds import relaxed_graph

    g = skewed_graph(seed, 6)
    n = g.num_ops
    kept = [(pick >> (2 * v)) % (cap + 1) if (pick >> (2 * v + 1)) & 1 else 0 for v in range(n)]
    kept_ops = {v for v in range(n) if kept[v] > 0}
    others = [v for v in range(n) if v not in kept_ops]
    full = [kept[v] if v in kept_ops else cap for v in range(n)]
    exact = min_peak(g, 10**9, full)[0]
    relaxed = min_peak(relaxed_graph(g, others), 10**9, kept)[0]
    assert relaxed <= exact
    # with nothing relaxed it is the same question
    assert min_peak(relaxed_graph(g, []), 10**9, full)[0] == exact


def test_the_relaxed_oracle_proves_a_three_run_op_optimal_by_a_no_good_on_it_alone():
    """held_value_graph(4) under 22 bytes: A must run before each C{i} (extra cost 3); the cost
    bound sees only {A} (bound 1). With the incumbent given, caps fixed below its cost keep A
    at two re-runs; the decomposition's first master answer is one re-run of A, and the
    relaxed graph of every other op with A at one re-run is infeasible: a no-good on A alone.
    The bound climbs to the incumbent's cost and it is proved optimal without the full model."""
    from conftest import held_value_graph

    g = held_value_graph(4)
    p = RematProblem.of(g, 3)
    incumbent = plan_from_runs(p, [0, 1, 2, 3, 0, 4, 0, 5, 6, 0, 7, 8])
    r = solve_cpsat(g, "min_cost", memory_limit=22, cap=3, time_limit=60, incumbent=incumbent, decompose=True)
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 3, 3)
    assert r.stats["decomposition"]["relaxed_nogoods"] >= 1
    assert r.stats["solver_status"].startswith("not_run: the decomposition")
    check_plan(g, r.plan, cap=3, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


# proofs/remat_exact_models.md, Lemma 7': reduced-cost fixing over no-goods on re-run counts
@pytest.mark.slow  # 20 CP-SAT models against brute force (~40 s): in CI's second step
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.floats(0, 1), st.integers(0, 8), st.integers(0, 2**24))
def test_caps_fixed_on_the_no_goods_keep_every_plan_below_the_incumbent(seed, cap, where, slack, pick):
    """No-goods = the cost bound's cores plus random count vectors under which brute force
    finds no plan within the limit; the caps the probes leave keep the optimum whenever it is
    below the incumbent's cost (strict), resp. at most it (non-strict)."""
    from memopt.remat.lower_bounds import cost_lower_bound
    from memopt.remat.model_common import nogood_fixed_caps

    case = _rerun_case(seed, cap, where)
    assume(case is not None)
    g, p, limit, cost = case
    positive = [v for v in range(p.n) if p.costs[v] != 0]
    nogoods = [{v: 0 for v in core} for core in cost_lower_bound(g, limit, cap, time_limit=5).cores]
    for k in range(4):
        Y = {v: (pick >> (2 * (k * p.n + v) % 24)) % (cap + 1) for v in positive}
        if min_extra_cost(g, limit, [Y.get(v, cap) for v in range(p.n)])[0] is None:
            nogoods.append(Y)     # no plan re-runs every op within Y: a valid no-good
    _check_fixed_caps(g, p, limit, cap, cost, slack,
                      lambda caps, u, strict: nogood_fixed_caps(p, caps, nogoods, u, strict=strict))


def test_no_good_fixing_cuts_what_the_cores_cannot():
    """held_value_graph(3) under 22 bytes: A (cost 1) must run three times (extra cost 2). The
    cost bound's core {A} and the no-good "A at most once" (the decomposition proves it) give
    the probes what the cores alone cannot: below an incumbent of cost 2 nothing is left
    (every count vector satisfying both costs 2), where the cores keep A at one re-run; below
    3, A keeps both re-runs and every cost-50 op none."""
    from memopt.remat.lower_bounds import cost_lower_bound
    from memopt.remat.model_common import core_fixed_caps, nogood_fixed_caps, reduced_caps

    from conftest import held_value_graph

    g = held_value_graph(3)
    p = RematProblem.of(g, 2)
    assert min_extra_cost(g, 22, [1, 2, 2, 2, 2, 2, 2])[0] is None   # A at most once: no plan
    cores = cost_lower_bound(g, 22, 2, time_limit=5).cores
    nogoods = [{v: 0 for v in c} for c in cores] + [{0: 1}]
    assert core_fixed_caps(p, reduced_caps(p, 2), cores, 2) == [1, 0, 0, 0, 0, 0, 0]
    assert nogood_fixed_caps(p, reduced_caps(p, 2), nogoods, 2) == [0] * 7
    assert nogood_fixed_caps(p, reduced_caps(p, 3), nogoods, 3) == [2, 0, 0, 0, 0, 0, 0]
    # the cores alone, as no-goods, cut exactly what core_fixed_caps cuts
    assert nogood_fixed_caps(p, reduced_caps(p, 2), nogoods[:-1], 2) == [1, 0, 0, 0, 0, 0, 0]
    assert min_extra_cost(g, 22, [2, 0, 0, 0, 0, 0, 0])[0] == 2


def test_the_full_model_after_the_decomposition_uses_its_no_goods_and_proves_the_incumbent_optimal():
    """held_value_graph(4) under 22 bytes, cap 3, the incumbent re-running A three times (cost
    3): with almost no time for the decomposition its no-goods are the cost bound's cores; the
    caps are fixed again over them (A keeps two re-runs below 3, every cost-50 op none) and the
    strict full model, with the no-goods as clauses, is infeasible: the incumbent is optimal."""
    from conftest import held_value_graph

    g = held_value_graph(4)
    p = RematProblem.of(g, 3)
    from memopt.remat.lower_bounds import cost_lower_bound

    incumbent = plan_from_runs(p, [0, 1, 2, 3, 0, 4, 0, 5, 6, 0, 7, 8])
    # with the trap cuts the cost bound has no core (its rows say the same): without them here
    cb = cost_lower_bound(g, 22, 3, time_limit=5, trap_cuts=False)
    r = solve_cpsat(g, "min_cost", memory_limit=22, cap=3, time_limit=60, incumbent=incumbent, decompose=True,
                    decompose_share=0.0, cost_bound=cb)
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 3, 3)
    assert r.stats["decomposition"]["rounds"] == 0
    assert {k: r.stats["nogood_fixed_caps"][k] for k in ("slots", "ops_that_may_rerun")} == {"slots": 11,
                                                                                            "ops_that_may_rerun": 1}
    assert r.stats["solver_status"] == "INFEASIBLE"
    check_plan(g, r.plan, cap=3, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    # with the cuts (the default bound) the caps are fixed on them and the model proves it too
    r = solve_cpsat(g, "min_cost", memory_limit=22, cap=3, time_limit=60, incumbent=incumbent, decompose=True,
                    decompose_share=0.0)
    assert (r.status, r.extra_cost, r.cost_lower_bound, r.stats["solver_status"]) == ("optimal", 3, 3, "INFEASIBLE")


def test_a_core_with_a_zero_cost_op_is_no_no_good():
    """Z is free to re-run, P costs 1; below 17 bytes one of z, p must be re-made after W.
    The cost bound's core {Z} is met by re-running Z for nothing, so the decomposition must
    not read it as "re-run some positive-cost op of it" (a no-good nothing meets, which once
    made the decomposition call this feasible instance infeasible)."""
    g = TensorGraph.build(
        [Tensor("z", 5), Tensor("p", 5), Tensor("x", 1), Tensor("w", 1), Tensor("o", 1, output=True)],
        [Op("Z", outputs=["z"], cost=0), Op("P", outputs=["p"], cost=1), Op("X", inputs=["z", "p"], outputs=["x"], cost=5),
         Op("W", inputs=["x"], outputs=["w"], workspace=10, cost=5),
         Op("Y", inputs=["z", "p", "w"], outputs=["o"], cost=5)])
    best, plan = min_extra_cost(g, 16, 1)
    assert best is not None and plan is not None
    for decompose in (False, True):
        r = solve_cpsat(g, "min_cost", memory_limit=16, cap=1, time_limit=30, num_workers=1, decompose=decompose,
                        restrict=False)
        assert r.status == "optimal" and r.extra_cost == best
        assert check_plan(g, r.plan, cap=1)[0] <= 16
