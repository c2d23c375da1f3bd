"""The held-tensor moves (:mod:`memopt.remat.held_tensors`) against brute force on small
random graphs, on an instance only the group move solves, and on the ReDimNet-style stacking
pattern (:func:`memopt.zoo.synthetic.stacked_taps`) where the peak-driven greedy alone finds
no plan.

Claimed: the run sequence returned is valid within the caps and never worse (peak, then runs
at the peak) than the start; a sequence within the limit never costs less than the
brute-force optimum; ``min_peak`` stays within its budget; the heuristic that starts from it
says ``optimal`` only at the optimum. Not claimed: that it finds a plan whenever one exists."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, reject, settings, strategies as st

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.remat.brute_force import min_extra_cost
from memopt.remat.heuristic import STRATEGIES, _profile, heuristic_method, improve_runs
from memopt.remat.held_tensors import held_moves, held_tensor_moves
from memopt.remat.model_common import RematProblem, plan_from_runs
from memopt.schedule import schedule
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph
from memopt.zoo.synthetic import stacked_taps


def small_graph(seed: int):
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, int(rng.integers(2, 8)), max_size=30, edge_prob=0.3)


def _at_peak(prof):
    return sum(1 for m in prof if m == max(prof))


def _valid(g, p, runs, cap):
    """Checker's (peak, cost) of the plan of ``runs``, which must match the direct profile."""
    pk, cost = check_plan(g, plan_from_runs(p, runs), cap)
    _, fpk, fcost, _ = _profile(p, runs)
    assert (pk, Fraction(cost)) == (fpk, Fraction(fcost))
    counts = np.bincount(np.asarray(runs, dtype=np.int64), minlength=g.num_ops)
    assert counts.min() >= 1 and counts.max() <= 1 + cap
    return pk, cost


def _assert_not_below_the_least_extra_cost(g, limit, cap, cost):
    """A plan within ``limit`` costs at least the brute-force least extra cost (the draw is
    rejected where brute force would need too many states)."""
    try:
        opt, _ = min_extra_cost(g, limit, cap, max_states=200_000)
    except OptionError:
        reject()
    assert opt is not None and Fraction(cost) >= Fraction(opt)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 2), st.sampled_from([0.95, 0.9, 0.8, 0.7]))
def test_min_cost_moves_are_valid_and_never_below_the_optimum(seed, cap, ratio):
    g = small_graph(seed)
    order, start = brute_force_schedule(g)
    p = RematProblem.of(g, cap)
    limit = int(ratio * start)
    runs = held_tensor_moves(p, order, "min_cost", memory_limit=limit, deadline=float("inf"))
    pk, cost = _valid(g, p, runs, cap)
    prof0, prof = _profile(p, order)[3], _profile(p, runs)[3]
    assert (pk, _at_peak(prof)) <= (start, _at_peak(prof0))
    if pk <= limit:
        _assert_not_below_the_least_extra_cost(g, limit, cap, cost)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(0, 20))
def test_min_peak_moves_stay_within_the_budget(seed, cap, budget):
    g = small_graph(seed)
    order, start = brute_force_schedule(g)
    p = RematProblem.of(g, cap)
    runs = held_tensor_moves(p, order, "min_peak", cost_budget=budget, deadline=float("inf"))
    pk, cost = _valid(g, p, runs, cap)
    assert Fraction(cost) <= budget and pk <= start


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.sampled_from([0.9, 0.8]))
def test_heuristic_claims_optimal_only_at_the_optimum(seed, cap, ratio):
    g = small_graph(seed)
    order, start = brute_force_schedule(g)
    p = RematProblem.of(g, cap)
    limit = int(ratio * start)
    r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=cap, time_limit=5,
                         incumbent=plan_from_runs(p, order))
    if r.status not in ("optimal", "feasible"):
        return
    pk, cost = check_plan(g, r.plan, cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    try:
        opt, _ = min_extra_cost(g, limit, cap, max_states=200_000)
    except OptionError:
        reject()
    assert pk <= limit and Fraction(cost) >= Fraction(opt)
    if r.status == "optimal":
        assert Fraction(cost) == Fraction(opt)


def _two_views():
    """``b``, ``c`` made early from the input ``x`` (larger than each) and read together by
    ``fy``; the peak is at ``fe`` (b + c + w + e = 31)."""
    g = TensorGraph.build(
        [Tensor("x", 6), Tensor("b", 5), Tensor("c", 5), Tensor("d", 1), Tensor("w", 20), Tensor("e", 1),
         Tensor("y", 1, output=True)],
        [Op("fb", ("x",), ("b",), cost=1), Op("fc", ("x",), ("c", "d"), cost=1), Op("fw", ("d",), ("w",), cost=9),
         Op("fe", ("w",), ("e",), cost=9), Op("fy", ("b", "c", "e"), ("y",), cost=1)])
    return g, [0, 1, 2, 3, 4]


def test_only_the_group_move_fits_two_views_read_together():
    g, order = _two_views()
    p = RematProblem.of(g, 1)
    _, start, _, prof = _profile(p, order)
    assert start == brute_force_schedule(g)[1] == 31
    # every single move holds x across the peak: none lowers it
    singles = [m for m in held_moves(p, order, prof, [1] * g.num_ops, 27) if len(m[1]) == 1]
    assert singles and all(_profile(p, order[:j] + ops + order[j:])[1] >= start for _, _, ops, j in singles)
    # nor does the peak-driven greedy, in either ranking
    for strategy in STRATEGIES:
        assert improve_runs(p, order, "min_cost", memory_limit=27, strategy=strategy)[2] > 27
    runs = held_tensor_moves(p, order, "min_cost", memory_limit=27, deadline=float("inf"))
    assert _valid(g, p, runs, 1) == (27, 2)
    assert min_extra_cost(g, 27, 1)[0] == 1  # from another order: the moves do not reorder
    r = heuristic_method(g, question="min_cost", memory_limit=27, cap=1, time_limit=5)
    assert r.status == "feasible" and check_plan(g, r.plan, 1)[0] <= 27


@pytest.mark.parametrize("cap", [1, 2])
def test_stacked_taps_need_the_group_move(cap):
    """The stacking head holds twelve taps across the backbone's peak; re-making them all
    (the stem re-run on the held input, then the taps' cheap chains) lowers it by 10.9 %."""
    g = stacked_taps()
    p = RematProblem.of(g, cap)
    order = schedule(g, time_limit=2).order.tolist()
    _, start, _, _ = _profile(p, order)
    assert start == 376832
    limit = int(0.95 * start)
    for strategy in STRATEGIES:
        assert improve_runs(p, order, "min_cost", memory_limit=limit, strategy=strategy)[2] > limit
    runs = held_tensor_moves(p, order, "min_cost", memory_limit=limit, deadline=float("inf"))
    stem, cheap = 64 * 2 * 1024, 1024
    assert _valid(g, p, runs, cap) == (335872, stem + 24 * cheap)
    r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=cap, time_limit=5)
    pk, cost = check_plan(g, r.plan, cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    assert r.status == "feasible" and pk <= limit and 0 < cost <= stem + 24 * cheap


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(1, 3), st.integers(1, 8),
       st.integers(1, 3), st.integers(1, 2), st.sampled_from([0.95, 0.9, 0.8]))
def test_small_stacks_against_brute_force(taps, chain, stages, input_units, feature_units, tap_units, cap, ratio):
    """Small stacking heads of every shape (not only the ones the group move is made for; at
    most 12 ops, for the brute-force scheduler)."""
    g = stacked_taps(taps, chain, stages, unit=4, input_units=input_units, feature_units=feature_units,
                     tap_units=tap_units, wide=2, conv_macs=4)
    order, start = brute_force_schedule(g)
    p = RematProblem.of(g, cap)
    limit = int(ratio * start)
    runs = held_tensor_moves(p, order, "min_cost", memory_limit=limit, deadline=float("inf"))
    pk, cost = _valid(g, p, runs, cap)
    assert pk <= start
    if pk <= limit:
        _assert_not_below_the_least_extra_cost(g, limit, cap, cost)
