"""The recomputation heuristic (:mod:`memopt.remat.heuristic`) against brute force on small
graphs (n <= 7), and on the random layered graphs of ``../shared/data/checkmate-graphs/``
where it used to find no plan within 0.9 of the no-recomputation optimum (issue 7).

What is claimed (and only that), starting from an optimal order as :func:`memopt.remat`
does: every plan it returns passes the independent checker with the peak and extra cost it
reports; a plan within the limit never costs less than the brute-force optimum, and
``optimal`` only when it costs exactly that; when the start already fits, the answer is the
start with extra cost 0; ``infeasible`` only below the footprint bound (brute force agrees);
for ``min_peak`` the plan stays within the budget and never peaks above the start. It is
*not* claimed to find a plan whenever one exists: on these small graphs (seeds 0-299, caps 1
and 2, limits 0.9/0.8/0.7 of the optimal order's peak) it found a plan in 121 of the 133
feasible cases and an optimal one in 94; the misses need a different order, not only
inserted re-runs. Also: the direct per-run profile of a run sequence equals the evaluator's
on its plan; the extra starting orders are orders of the graph; with the search on, the
answer never costs more than the greedy's from the given order alone."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, reject, settings, strategies as st

from memopt.core import peak
from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.remat.brute_force import min_extra_cost
from memopt.remat.heuristic import _profile, heuristic_method, improve_by_lns, improve_runs, reorder_runs
from memopt.remat.model_common import RematProblem, footprint_bound, plan_from_runs
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

GRAPHS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "checkmate-graphs")


def small_graph(seed: int, n_max: int = 7):
    rng = np.random.default_rng(seed)
    # large tensors, sparse edges: cheap early values read late, where re-runs pay
    return random_tensor_graph(rng, int(rng.integers(1, n_max + 1)), max_size=30, edge_prob=0.3)


def _checked(g, r, cap):
    pk, cost = check_plan(g, r.plan, cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    assert (pk, Fraction(cost)) == (r.peak, Fraction(r.extra_cost))
    return pk, cost


def _heuristic_case(seed, cap, ratio, **kw):
    """A small random graph, its problem, its least no-recomputation peak, the limit ``ratio``
    times that, and the heuristic's answer started from the optimal order."""
    g = small_graph(seed)
    order, start = brute_force_schedule(g)
    limit = int(ratio * start)
    p = RematProblem.of(g, cap)
    r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=cap, time_limit=5,
                         incumbent=plan_from_runs(p, order), **kw)
    return g, p, start, limit, r


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 2), st.sampled_from([1.0, 0.9, 0.8, 0.7]))
def test_min_cost_plans_are_valid_and_never_below_the_brute_force_optimum(seed, cap, ratio):
    g, p, start, limit, r = _heuristic_case(seed, cap, ratio)
    try:
        opt, _ = min_extra_cost(g, limit, cap, max_states=200_000)
    except OptionError:
        reject()  # a state space too large for brute force: no reference answer
    if r.status == "infeasible":
        assert limit < footprint_bound(p) and opt is None
        return
    pk, cost = _checked(g, r, cap)
    if pk <= limit:
        assert r.status in ("optimal", "feasible")
        assert opt is not None and Fraction(cost) >= Fraction(opt)
        if r.status == "optimal":
            assert Fraction(cost) == Fraction(opt)
    else:
        assert r.status == "unknown"
    if start <= limit:
        # the starting order fits: it is the answer, with no re-run
        assert (r.status, cost, pk) == ("optimal", 0, start)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 2), st.integers(0, 20))
def test_min_peak_plans_stay_within_budget_and_below_the_start(seed, cap, budget):
    g = small_graph(seed)
    order, start = brute_force_schedule(g)
    p = RematProblem.of(g, cap)
    r = heuristic_method(g, question="min_peak", cost_budget=budget, cap=cap, time_limit=5,
                         incumbent=plan_from_runs(p, order))
    pk, cost = _checked(g, r, cap)
    assert Fraction(cost) <= budget
    assert footprint_bound(p) <= pk <= start


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2))
@example(549389, 1)
def test_improve_runs_lowers_the_overflow_and_respects_caps(seed, cap):
    g = small_graph(seed)
    p = RematProblem.of(g, cap)
    order = g.topological_order().tolist()
    start = peak(g, order)
    limit = max(footprint_bound(p), int(0.75 * start))
    runs, plan, pk, cost = improve_runs(p, order, "min_cost", memory_limit=limit)
    assert check_plan(g, plan, cap) == (pk, cost)
    # the search minimises (bytes above the limit summed over the runs, then the peak): a
    # sequence that fits has peak <= limit; one that does not may peak higher than the start
    # (seed 549389, cap 1: 101 > 99, with less overflow), but never has more overflow
    overflow = lambda rs: sum(m - limit for m in _profile(p, rs)[3] if m > limit)  # noqa: E731
    assert (overflow(runs), pk) <= (overflow(order), start)
    counts = np.bincount(np.asarray(runs, dtype=np.int64), minlength=g.num_ops)
    assert counts.min() >= 1 and counts.max() <= 1 + cap


def test_a_cheap_value_read_late_is_recomputed():
    """a -> (big chain) -> c reads a again: re-running the cheap producer of ``a`` after the
    chain lowers the peak, which no order can."""
    from memopt.core import Op, Tensor, TensorGraph

    g = TensorGraph.build(
        [Tensor("a", 10), Tensor("b", 20), Tensor("c", 20), Tensor("d", 1, output=True)],
        [Op("fa", (), ("a",), cost=1), Op("fb", ("a",), ("b",), cost=5), Op("fc", ("b",), ("c",), cost=5),
         Op("fd", ("a", "c"), ("d",), cost=5)])
    start = peak(g, g.topological_order())
    assert start == 50  # a + b + c while fc runs
    r = heuristic_method(g, question="min_cost", memory_limit=40, cap=1, time_limit=5)
    assert r.status in ("optimal", "feasible")
    assert _checked(g, r, 1) == (40, 1)


def test_a_graph_output_held_to_the_end_is_made_again_at_the_end():
    """``a`` is read first and is a graph output: every order holds it across the peak of
    ``fc``; re-running its cheap producer at the end frees it there."""
    from memopt.core import Op, Tensor, TensorGraph

    g = TensorGraph.build(
        [Tensor("a", 10, output=True), Tensor("b", 20), Tensor("c", 20), Tensor("d", 1, output=True)],
        [Op("fa", (), ("a",), cost=1), Op("fb", ("a",), ("b",), cost=5), Op("fc", ("b",), ("c",), cost=5),
         Op("fd", ("c",), ("d",), cost=5)])
    assert brute_force_schedule(g)[1] == 50
    r = heuristic_method(g, question="min_cost", memory_limit=40, cap=1, time_limit=5)
    assert r.status in ("optimal", "feasible")
    assert _checked(g, r, 1) == (40, 1)
    assert r.plan.runs().tolist()[-1] == 0


# ---------------------------------------------------------------------------- issue 7 graphs
@pytest.mark.skipif(not os.path.isdir(GRAPHS), reason="../shared/data/checkmate-graphs is not present")
@pytest.mark.parametrize("name", ["random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json",
                                  "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json"])
def test_random_layered_graphs_get_a_plan_within_nine_tenths_of_the_start(name):
    """The start is a topological order here (the proven optimum takes a minute to find):
    the heuristic must fit 0.9 of its peak with cap 2, checked independently."""
    from memopt.io.checkmate import load_checkmate

    g = load_checkmate(os.path.join(GRAPHS, name)).graph
    order = g.topological_order().tolist()
    limit = int(Fraction(9, 10) * peak(g, order))
    p = RematProblem.of(g, 2)
    r = heuristic_method(p, question="min_cost", memory_limit=limit, cap=2, time_limit=120,
                         incumbent=plan_from_runs(p, order), lns=False)
    assert r.status in ("optimal", "feasible"), r.stats
    pk, _ = _checked(g, r, 2)
    assert pk <= limit


# ---------------------------------------------------------------------------- local search
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.sampled_from([0.9, 0.8, 0.7]))
def test_lns_keeps_a_fitting_plan_never_dearer_and_never_below_the_optimum(seed, cap, ratio):
    g, p, _, limit, greedy = _heuristic_case(seed, cap, ratio, lns=False)
    if greedy.status not in ("optimal", "feasible"):
        # no plan within the limit to improve (often, at 0.7): the greedy says so soundly
        assert greedy.status in ("unknown", "infeasible") and (greedy.plan is None or greedy.peak > limit)
        return
    runs, plan, pk, cost, stats = improve_by_lns(p, greedy.plan.runs().tolist(), limit,
                                                 deadline=float("inf"), seed=seed, patience=20)
    assert check_plan(g, plan, cap) == (pk, cost)
    assert pk <= limit and Fraction(cost) <= Fraction(greedy.extra_cost)
    counts = np.bincount(np.asarray(runs, dtype=np.int64), minlength=g.num_ops)
    assert counts.min() >= 1 and counts.max() <= 1 + cap
    try:
        opt, _ = min_extra_cost(g, limit, cap, max_states=200_000)
    except OptionError:
        return
    assert opt is not None and Fraction(cost) >= Fraction(opt)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2))
def test_reorder_keeps_the_runs_and_never_raises_the_overflow(seed, cap):
    g = small_graph(seed)
    p = RematProblem.of(g, cap)
    runs0 = g.topological_order().tolist()
    # a re-run of the first op at the end (a valid sequence), then reorder against a tight limit
    runs0 = runs0 + [runs0[0]]
    plan0 = plan_from_runs(p, runs0)
    pk0, cost0 = check_plan(g, plan0, cap)
    limit = max(footprint_bound(p), int(0.7 * pk0))
    runs, plan, pk, cost = reorder_runs(p, runs0, limit, deadline=float("inf"))
    assert sorted(runs) == sorted(runs0)
    assert check_plan(g, plan, cap) == (pk, cost) and Fraction(cost) == Fraction(cost0)
    # the score (overflow above the limit summed over the runs, then the peak) never rises
    from memopt.remat.heuristic import _profile, _score
    assert _score("min_cost", limit, *_profile(p, runs)[1::2]) <= _score("min_cost", limit, *_profile(p, runs0)[1::2])


@pytest.mark.skipif(not os.path.isdir(GRAPHS), reason="../shared/data/checkmate-graphs is not present")
def test_lns_lowers_the_cost_on_random_layered_n250():
    """From a topological order of random_layered_n250 at 0.9 of its peak, cap 2: the search
    after the greedy finds a cheaper plan (checked independently) than the greedy alone."""
    from memopt.io.checkmate import load_checkmate

    g = load_checkmate(os.path.join(GRAPHS, "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json")).graph
    order = g.topological_order().tolist()
    limit = int(Fraction(9, 10) * peak(g, order))
    p = RematProblem.of(g, 2)
    greedy = heuristic_method(p, question="min_cost", memory_limit=limit, cap=2, time_limit=120,
                              incumbent=plan_from_runs(p, order), lns=False)
    assert greedy.status == "feasible"
    runs, plan, pk, cost, stats = improve_by_lns(p, greedy.plan.runs().tolist(), limit, deadline=float("inf"),
                                                 patience=30)
    assert check_plan(g, plan, 2) == (pk, cost) and pk <= limit
    assert Fraction(cost) < Fraction(greedy.extra_cost), stats


# ---------------------------------------------------------------------------- fast profile
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 2))
def test_the_direct_profile_equals_the_evaluated_plan(seed, cap):
    """``_profile`` (memory of each run computed without building the plan) gives the peak,
    extra cost and per-run memory of evaluating ``plan_from_runs`` step by step."""
    from memopt.core.remat import RUN, evaluate_steps
    from memopt.remat.heuristic import _profile

    g = small_graph(seed)
    p = RematProblem.of(g, cap)
    rng = np.random.default_rng(seed)
    runs = g.topological_order().tolist()
    for _ in range(int(rng.integers(0, 2 * g.num_ops + 1))):
        v = int(rng.integers(g.num_ops))
        if runs.count(v) <= cap:
            runs.insert(int(rng.integers(runs.index(v) + 1, len(runs) + 1)), v)  # after its first run
    plan = plan_from_runs(p, runs)
    ev = evaluate_steps(g, plan.kind, plan.index, list(p.caps))
    _, pk, cost, prof = _profile(p, runs)
    assert (pk, Fraction(cost)) == (ev.peak, Fraction(ev.extra_cost))
    assert prof == ev.profile[1:][plan.kind == RUN].tolist()


def test_lns_searches_more_than_one_order_and_keeps_the_cheapest_plan():
    """With the search on, ``min_cost`` greedy results from several orders are searched; the
    answer is never dearer than the greedy answer from the given order alone."""
    g = _late_reuse_chain()
    p = RematProblem.of(g, 1)
    order, start = brute_force_schedule(g)
    limit = start - 1
    alone = heuristic_method(g, question="min_cost", memory_limit=limit, cap=1, time_limit=5,
                             incumbent=plan_from_runs(p, order), lns=False)
    both = heuristic_method(g, question="min_cost", memory_limit=limit, cap=1, time_limit=5,
                            incumbent=plan_from_runs(p, order))
    assert alone.status in ("optimal", "feasible") and both.status in ("optimal", "feasible")
    assert Fraction(both.extra_cost) <= Fraction(alone.extra_cost)
    assert _checked(g, both, 1)[0] <= limit
    assert both.stats["orders"] >= 1 and both.stats["starts"]


def _late_reuse_chain():
    """Two cheap values read early and again at the end, with a wide middle: re-running one
    of them lowers the peak."""
    from memopt.core import Op, Tensor, TensorGraph

    return TensorGraph.build(
        [Tensor("a", 10), Tensor("b", 12), Tensor("m1", 20), Tensor("m2", 20), Tensor("m3", 20),
         Tensor("z", 1, output=True)],
        [Op("fa", (), ("a",), cost=1), Op("fb", (), ("b",), cost=2), Op("g1", ("a", "b"), ("m1",), cost=5),
         Op("g2", ("m1",), ("m2",), cost=5), Op("g3", ("m2",), ("m3",), cost=5),
         Op("fz", ("a", "b", "m3"), ("z",), cost=5)])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2))
def test_relaxed_orders_are_orders_of_the_graph(seed, cap):
    """The extra starts of the search: an order of every op (a valid no-recomputation run
    sequence) per relaxed graph of the re-run ops, none for a sequence without re-runs."""
    from memopt.remat.heuristic import _relaxed_orders
    from memopt.time_shares import remat_clock

    g = small_graph(seed)
    p = RematProblem.of(g, cap)
    order = g.topological_order().tolist()
    assert _relaxed_orders(p, order, remat_clock()) == []
    runs = order + [order[0]]
    got = _relaxed_orders(p, runs, remat_clock())
    assert len(got) == 2
    for o in got:
        assert sorted(o) == list(range(g.num_ops))
        assert check_plan(g, plan_from_runs(p, o), 0)[1] == 0
