"""``memopt.remat``: the three questions, memory ratios, statuses (``infeasible`` only with a
proof), the independent check of every plan, the Pareto frontier, results as JSON."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.core import Op, Tensor, TensorGraph, peak
from memopt.errors import InternalError, OptionError
from memopt.remat import RematPlan, check_plan
from memopt.remat.brute_force import min_extra_cost, min_peak
from memopt.remat.result import RematResult
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

from conftest import held_value_graph


def late_reuse() -> TensorGraph:
    """f's cheap value a is read at the very end; recomputing it lowers the peak 14 -> 12."""
    return TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
                             [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
                              Op("h", ("a", "d"), ("c",))])


def small_graph(seed: int, n_max: int = 6) -> TensorGraph:
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, int(rng.integers(1, n_max + 1)))


def test_reachable_from_import_memopt_and_the_three_questions():
    g = late_reuse()
    r = memopt.remat(g, memory_limit=12, cap=1, time_limit=10)
    assert (r.status, r.peak, r.extra_cost, r.cost_lower_bound) == ("optimal", 12, 3, 3)
    assert check_plan(g, r.plan, cap=1) == (12, 3)
    r = memopt.remat(g, cost_budget=0, cap=1)
    assert (r.status, r.peak, r.extra_cost) == ("optimal", 14, 0)
    r = memopt.remat(g, cost_budget=3, cap=1)
    assert (r.status, r.peak) == ("optimal", 12)
    front = memopt.remat(g, pareto=True, cap=1)
    assert [(p.extra_cost, p.peak) for p in front.points] == [(0, 14), (3, 12)]
    assert front.complete and front.status == "optimal"


def test_memory_ratio_is_relative_to_the_scheduling_optimum():
    g = late_reuse()
    r = memopt.remat(g, memory_ratio=0.9, cap=1)
    assert r.memory_limit == int(0.9 * 14) == 12
    assert r.stats["baseline"]["peak"] == 14 and r.extra_cost == 3
    r = memopt.remat(g, memory_ratio=0.5, cap=1)
    assert r.status == "infeasible" and r.plan is None and r.lower_bound > r.memory_limit


@pytest.mark.parametrize("kw", [{}, {"memory_limit": 5, "cost_budget": 1}, {"memory_limit": -1},
                                {"memory_ratio": 0}, {"memory_ratio": float("nan")}, {"cost_budget": -1},
                                {"memory_limit": 12, "method": "nope"}, {"memory_limit": 12, "time_limit": -1},
                                {"memory_limit": 12, "cap": -1}, {"memory_limit": 12, "cap": 1000}])
def test_bad_options_are_option_errors(kw):
    with pytest.raises(OptionError):
        memopt.remat(late_reuse(), **kw)


@settings(max_examples=15)
@given(st.integers(0, 10**6), st.integers(0, 2), st.integers(1, 8))
def test_auto_equals_brute_force_and_infeasible_only_when_it_agrees(seed, cap, cut):
    g = small_graph(seed)
    top = peak(g, g.topological_order())
    limit = max(0, top - cut * max(1, top // 12))
    cost, _ = min_extra_cost(g, limit, cap)
    r = memopt.remat(g, memory_limit=limit, cap=cap, time_limit=20)
    if r.status == "infeasible":
        assert cost is None
    else:
        assert cost is not None and r.status == "optimal" and r.extra_cost == cost and r.peak <= limit
    for method in ("heuristic", "cpsat", "mip"):
        r = memopt.remat(g, memory_limit=limit, cap=cap, method=method, time_limit=20)
        if r.status == "infeasible":
            assert cost is None, method
        elif r.status in ("optimal", "feasible"):
            assert r.peak <= limit and Fraction(r.extra_cost) >= cost
            check_plan(g, r.plan, cap=cap, claimed_peak=r.peak)


@settings(max_examples=10)
@given(st.integers(0, 10**6))
def test_cap_zero_is_scheduling(seed):
    g = small_graph(seed)
    _, best = brute_force_schedule(g)
    r = memopt.remat(g, cost_budget=0, cap=0)
    assert (r.status, r.peak) == ("optimal", best)
    assert memopt.remat(g, memory_limit=best - 1, cap=0).status == "infeasible" if best > 0 else True


@settings(max_examples=8)
@given(st.integers(0, 10**6), st.integers(1, 2))
def test_pareto_points_are_brute_force_optima(seed, cap):
    g = small_graph(seed, 5)
    front = memopt.remat(g, pareto=True, cap=cap, time_limit=30)
    assert front.complete and front.status == "optimal"
    prev = None
    for p in front.points:
        check_plan(g, p.plan, cap=cap, claimed_peak=p.peak, claimed_extra_cost=p.extra_cost)
        assert min_peak(g, p.extra_cost, cap)[0] == p.peak
        if prev is not None:
            assert p.peak < prev.peak and Fraction(p.extra_cost) > Fraction(prev.extra_cost)
            # nothing cheaper reaches this peak
            assert min_extra_cost(g, p.peak, cap)[0] == p.extra_cost
        prev = p
    # below the last point nothing is possible
    assert min_extra_cost(g, front.points[-1].peak - 1, cap)[0] is None


def test_every_plan_is_checked_before_it_is_returned(monkeypatch):
    g = late_reuse()
    from memopt.remat import heuristic

    def bad(problem, **kw):  # claims a peak the plan does not have
        plan = RematPlan.from_steps(g, [{"run": "f"}, {"run": "g"}, {"run": "k"}, {"run": "h"}])
        return RematResult(plan=plan, peak=1, extra_cost=0, status="feasible", question=kw["question"],
                           memory_limit=kw.get("memory_limit"), cost_budget=kw.get("cost_budget"), method="heuristic")

    monkeypatch.setattr(heuristic, "heuristic_method", bad)
    with pytest.raises(InternalError):
        memopt.remat(g, memory_limit=100, cap=1, method="heuristic")


def test_to_dict_and_from_dict_round_trip():
    g = late_reuse()
    r = memopt.remat(g, memory_limit=12, cap=1)
    d = r.to_dict(g)
    assert d["plan"][0] == {"run": "f"} and {"free": "a"} in d["plan"]
    for key in ("plan", "peak", "extra_cost", "cost_lower_bound", "lower_bound", "status", "seconds"):
        assert key in d
    back = RematResult.from_dict(d, g)
    assert (back.peak, back.extra_cost, back.status, back.question) == (12, 3, "optimal", "min_cost")
    assert check_plan(g, back.plan, cap=1) == (12, 3)
    assert RematResult.from_dict(r.to_dict()).plan.kind.tolist() == r.plan.kind.tolist()


def test_time_limit_zero_still_answers():
    g = small_graph(7)
    r = memopt.remat(g, cost_budget=0, cap=1, time_limit=0)
    check_plan(g, r.plan, cap=1, claimed_peak=r.peak)
    assert r.status in ("optimal", "feasible")


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(1, 8))
def test_auto_without_the_models_proves_only_what_the_cost_bound_proves(seed, cap, cut):
    """With no room for the slot models, ``auto`` answers ``min_cost`` with the heuristic's
    plan and the extra-cost lower bound (proofs/remat_cost_bounds.md, Theorem 2): ``optimal``
    only at the brute-force optimum, ``infeasible`` only when brute force agrees."""
    from memopt.remat import api

    g = small_graph(seed)
    top = peak(g, g.topological_order())
    limit = max(0, top - cut * max(1, top // 12))
    cost, _ = min_extra_cost(g, limit, cap)
    saved = api.AUTO_EXACT_SLOTS
    api.AUTO_EXACT_SLOTS = 0
    try:
        r = memopt.remat(g, memory_limit=limit, cap=cap, time_limit=20)
    finally:
        api.AUTO_EXACT_SLOTS = saved
    assert "cpsat" not in r.stats.get("parts", {})
    if r.status == "infeasible":
        assert cost is None
    elif r.status in ("optimal", "feasible"):
        assert cost is not None and r.peak <= limit
        assert Fraction(r.cost_lower_bound) <= cost <= Fraction(r.extra_cost)
        assert (r.status == "optimal") == (Fraction(r.extra_cost) == Fraction(r.cost_lower_bound))
        check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


def test_a_late_reuse_is_proved_optimal_by_the_cost_bound_alone():
    """a (cost 5) held across the big op B must be rebuilt under 12 bytes; the heuristic
    re-runs it, and the cost bound (5) proves that optimal without the slot models."""
    from memopt.remat import api

    g = TensorGraph.build(
        tensors=[Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1), Op("B", ("m",), ("b",), cost=1),
             Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])
    saved = api.AUTO_EXACT_SLOTS
    api.AUTO_EXACT_SLOTS = 0
    try:
        r = memopt.remat(g, memory_limit=11, cap=1, time_limit=20)
    finally:
        api.AUTO_EXACT_SLOTS = saved
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 5, 5)
    assert r.stats["parts"]["cost_bound"]["value"] == 5


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(1, 8))
def test_auto_with_only_the_hitting_set_model_stays_sound(seed, cap, cut):
    """Room for a model with caps on the cost bound's hitting set only (n + 2 slots), not for
    the full one: its plans are checked, ``optimal`` only at the brute-force optimum."""
    from memopt.remat import api

    g = small_graph(seed)
    top = peak(g, g.topological_order())
    limit = max(0, top - cut * max(1, top // 12))
    cost, _ = min_extra_cost(g, limit, cap)
    saved = api.AUTO_EXACT_SLOTS
    api.AUTO_EXACT_SLOTS = g.num_ops + 2
    try:
        r = memopt.remat(g, memory_limit=limit, cap=cap, time_limit=20)
    finally:
        api.AUTO_EXACT_SLOTS = saved
    if r.status == "infeasible":
        assert cost is None
    elif r.status in ("optimal", "feasible"):
        assert cost is not None and r.peak <= limit and r.cap == [cap] * g.num_ops
        assert Fraction(r.cost_lower_bound) <= cost <= Fraction(r.extra_cost)
        check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


def _auto_with_full_caps_share(g, limit, share, cap=2):
    """``auto`` at ``cap`` with the share ``auto.cpsat_full_caps`` set to ``share`` (0: the
    full model has no time of its own, so the cap-1 model runs whenever it has not closed)."""
    from memopt.clock import Share
    from memopt.time_shares import SHARES

    saved = SHARES["auto.cpsat_full_caps"]
    SHARES["auto.cpsat_full_caps"] = Share(share) if share is not None else saved
    try:
        return memopt.remat(g, memory_limit=limit, cap=cap, time_limit=10)
    finally:
        SHARES["auto.cpsat_full_caps"] = saved


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 8), st.sampled_from((None, 0.0)))
def test_auto_at_cap_2_never_answers_worse_than_the_cap_1_optimum(seed, cut, share):
    """Every cap-1 plan is a cap-2 plan, so the cap-2 answer costs at most the cap-1 optimum
    (brute force), also when the full model gets no time and the cap-1 model stands in for
    it; its plan is checked at cap 2, ``optimal`` only at the cap-2 optimum."""
    g = small_graph(seed, 7)
    top = peak(g, g.topological_order())
    while True:   # the tightest of these limits that a cap-1 plan meets (cut 0: the order's peak)
        limit = max(0, top - cut * max(1, top // 12))
        cost1, _ = min_extra_cost(g, limit, 1)
        if cost1 is not None:
            break
        cut -= 1
    cost2, _ = min_extra_cost(g, limit, 2)
    r = _auto_with_full_caps_share(g, limit, share)
    assert r.status in ("optimal", "feasible"), (r.status, r.stats.get("parts"))
    assert cost2 <= Fraction(r.extra_cost) <= cost1 and r.peak <= limit
    assert (r.status == "optimal") <= (Fraction(r.extra_cost) == cost2)
    assert Fraction(r.cost_lower_bound) <= cost2
    check_plan(g, r.plan, cap=2, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


def test_the_cap_1_model_stands_in_when_the_full_model_has_not_closed():
    """A graph where the heuristic's plan is not optimal and the cost bound does not prove
    it: with no time for the full model, the cap-1 model and then the full model again from
    its plan find and prove the optimum."""
    g = small_graph(170, 7)
    top = peak(g, g.topological_order())
    limit = top - 2 * max(1, top // 12)
    cost1, cost2 = min_extra_cost(g, limit, 1)[0], min_extra_cost(g, limit, 2)[0]
    r = _auto_with_full_caps_share(g, limit, 0.0)
    parts = r.stats["parts"]
    assert parts["cpsat"]["status"] != "optimal" and "cpsat_cap1" in parts, parts
    assert (r.status, Fraction(r.extra_cost)) == ("optimal", cost2) and cost2 <= cost1


def test_unlimited_cap_is_refused_not_solved_with_another_cap():
    # cap=None means "no upper limit" in the model; the slot models need a finite cap, so the
    # API must refuse it (it used to solve with cap 1 and could answer "infeasible" here)
    g = held_value_graph(3)
    assert min_extra_cost(g, 22, None)[0] == 2
    with pytest.raises(OptionError, match="finite cap"):
        memopt.remat(g, memory_limit=22, cap=None)
    assert memopt.remat(g, memory_limit=22, cap=2).extra_cost == 2


def test_min_peak_with_an_incumbent_over_the_budget_starts_from_the_plain_order():
    from memopt.remat.cpsat import solve_cpsat
    from memopt.remat.mip import solve_mip

    g = held_value_graph(2)
    costly = memopt.remat(g, memory_limit=22, cap=1).plan          # extra cost 1
    for solve in (solve_cpsat, solve_mip):
        r = solve(g, "min_peak", cost_budget=0, cap=1, incumbent=costly, time_limit=10)
        assert (r.status, r.extra_cost) == ("optimal", 0)
        assert r.peak == min_peak(g, 0, 1)[0]


def test_checker_refuses_caps_it_cannot_read():
    g = held_value_graph(2)
    plan = memopt.remat(g, memory_limit=22, cap=1).plan
    for bad in ({"A": 1}, "1", [1, 1], [1, -1, 0, 0, 0], [True] * g.num_ops, 1.5):
        with pytest.raises(OptionError):
            check_plan(g, plan, cap=bad)


def test_plan_from_runs_takes_names_or_ids_and_frees_as_early_as_possible():
    from memopt.errors import ScheduleError
    from memopt.remat import plan_from_order, plan_from_runs

    g = held_value_graph(3)
    order = g.topological_order().tolist()
    # no repeats: the plan of the order, by names or by ids
    assert plan_from_runs(g, [g.op_names[v] for v in order]) == plan_from_order(g, order)
    assert plan_from_runs(g, order) == plan_from_order(g, order)
    # re-running A before every reader: the optimum of the limit 22 (brute force: extra cost 2)
    runs = ["H0", "A", "C0", "H1", "A", "C1", "H2", "A", "C2"]
    assert check_plan(g, plan_from_runs(g, runs), cap=2) == (22, 2)
    for bad in (["A", "Z"], ["C0"], [99], [True]):
        with pytest.raises(ScheduleError):
            plan_from_runs(g, bad)
