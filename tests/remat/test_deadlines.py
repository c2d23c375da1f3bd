"""Running out of time is never a bug report.

Every optimizer stops at its deadline with the best answer it has (``unknown`` /
``feasible`` allowed, a checked plan when it returns one); an :class:`InternalError` is kept
for broken invariants, so no deadline, however small, may raise one. Here every remat and
schedule method runs with a tiny time limit, and :func:`improve_by_stages` (whose start
plan comes from a search that stops at a deadline, so any fitting plan) starts from a plan
whose staged form does not fit.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.remat import check_plan, remat
from memopt.remat.model_common import RematProblem, evaluate, plan_from_runs
from memopt.remat.registry import method_names as remat_methods
from memopt.remat.stage_model import (first_run_order, improve_by_stages, solve_stages, staged_reruns,
                                      staged_runs)
from memopt.schedule import schedule
from memopt.schedule.brute_force import random_tensor_graph
from memopt.schedule.registry import method_names as schedule_methods

TINY = 1e-3


def _two_sources():
    """A and B (workspace 50) make a and b (10 bytes each) that only C reads. The plan
    A, B, B, A, C peaks at 60 (the first a and b are freed unread, so the second B runs with
    nothing else live); its staged form A, B, A, B, C runs the second B beside a: 70."""
    return TensorGraph.build(
        [Tensor("a", 10), Tensor("b", 10), Tensor("c", 1, output=True)],
        [Op("A", (), ("a",), cost=1), Op("B", (), ("b",), workspace=50, cost=2), Op("C", ("a", "b"), ("c",), cost=1)])


def test_two_sources_staged_form_peaks_above_the_plan():
    p = RematProblem.of(_two_sources(), 1)
    runs = [0, 1, 1, 0, 2]
    order = first_run_order(runs)
    staged = staged_runs(order, staged_reruns(p, runs, order))
    assert staged == [0, 1, 0, 1, 2]
    assert evaluate(p, plan_from_runs(p, runs)) == (60, 3)
    assert evaluate(p, plan_from_runs(p, staged)) == (70, 3)


@pytest.mark.parametrize("deadline", [0.0, float("inf")])
def test_improve_by_stages_from_a_plan_whose_staged_form_does_not_fit(deadline):
    g = _two_sources()
    p = RematProblem.of(g, 1)
    got = improve_by_stages(p, [0, 1, 1, 0, 2], 60, deadline=deadline, width=2)
    assert got["peak"] <= 60 and Fraction(got["extra_cost"]) <= 3
    check_plan(g, got["plan"], cap=1, claimed_peak=got["peak"], claimed_extra_cost=got["extra_cost"])
    if deadline == 0.0:
        assert (got["runs"], got["status"], got["stats"]["windows"]) == ([0, 1, 1, 0, 2], "unknown", 0)


def test_a_window_is_solved_only_over_a_hint_that_fits():
    """Outside a window the hint's stages are kept unchecked, so over the two-sources plan
    (staged: 70 > 60) a window returns ``unknown`` without solving; the whole model (5 ops:
    it decides at once) finds A, B, A, C (60 bytes, extra cost 1)."""
    g = _two_sources()
    p = RematProblem.of(g, 1)
    got = solve_stages(p, [0, 1, 1, 0, 2], 60, time_limit=600, window=(0, 2))
    assert (got["runs"], got["status"], got["hint_cost"]) == (None, "unknown", None)
    whole = solve_stages(p, [0, 1, 1, 0, 2], 60, time_limit=600)
    assert (whole["runs"], whole["peak"], whole["extra_cost"], whole["status"]) == ([0, 1, 0, 2], 60, 1, "optimal")
    check_plan(g, whole["plan"], cap=1, claimed_peak=60, claimed_extra_cost=1)


def test_improve_by_stages_refuses_runs_above_the_limit():
    p = RematProblem.of(_two_sources(), 1)
    with pytest.raises(OptionError, match="above the limit 59"):
        improve_by_stages(p, [0, 1, 1, 0, 2], 59, deadline=0.0)


def _graph(seed: int, n_ops: int):
    return random_tensor_graph(np.random.default_rng(seed), n_ops, max_size=30, edge_prob=0.3)


@pytest.mark.parametrize("method", remat_methods() + ("auto",))
@pytest.mark.parametrize("seed, ratio", [(3, 0.6), (8, 0.9)])
def test_remat_with_a_tiny_time_limit_raises_no_internal_error(method, seed, ratio):
    g = _graph(seed, 12)
    r = remat(g, memory_ratio=ratio, cap=1, method=method, time_limit=TINY)
    assert r.status in ("certified", "optimal", "feasible", "infeasible", "unknown")
    assert r.plan is not None or r.status in ("infeasible", "unknown")
    if r.plan is not None:
        check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


# liu and series-parallel apply to their graph classes only (a ScheduleError elsewhere)
@pytest.mark.parametrize("method", [m for m in schedule_methods() if m not in ("liu", "series-parallel")])
def test_schedule_with_a_tiny_time_limit_raises_no_internal_error(method):
    g = _graph(5, 40)
    r = schedule(g, method=method, time_limit=TINY)
    assert r.lower_bound <= r.peak and sorted(r.order.tolist()) == list(range(len(r.order)))


def test_heuristic_then_stage_windows_at_any_deadline():
    """The chain of ``test_random_layered_n100_windows_keep_the_plan_valid`` on a small graph:
    whatever plan the heuristic stops with, the windows keep a fitting plan no dearer; a plan
    above the limit (the heuristic's ``unknown``: here its incumbent, at the tiny limit) is
    refused as an argument."""
    from memopt.remat.heuristic import heuristic_method

    g = _graph(11, 30)
    p = RematProblem.of(g, 2)
    s = schedule(g, method="greedy")
    limit = (9 * int(s.peak)) // 10
    for tl in (TINY, 0.1, 1.0):
        r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=2, time_limit=tl,
                             incumbent=plan_from_runs(p, s.order.tolist()))
        runs = r.plan.runs().tolist()
        if r.peak <= limit:
            got = improve_by_stages(p, runs, limit, deadline=time.perf_counter() + TINY, width=6)
            assert got["peak"] <= limit and Fraction(got["extra_cost"]) <= Fraction(r.extra_cost)
            check_plan(g, got["plan"], cap=2, claimed_peak=got["peak"], claimed_extra_cost=got["extra_cost"])
        else:
            assert r.status == "unknown"
            with pytest.raises(OptionError, match=f"above the limit {limit}"):
                improve_by_stages(p, runs, limit, deadline=time.perf_counter() + TINY)


def test_the_closing_reserve_ends_parts_before_the_call_and_never_above_its_share():
    """``auto``'s parts end ``close_reserve()`` before the call's deadline: the closing
    evaluations and the last solver's stop (at least ``SOLVER_STOP_CPU`` seconds), at most
    ``close_most``; never after the clock it is given."""
    from memopt.remat.api import SOLVER_STOP_CPU, _Call

    call = _Call(_two_sources(), 1, 30.0, 0, "auto")
    assert call.close_reserve() == 0.0   # no plan to time yet
    call.close_plan, call.close_most = call.base()[0], 2.0
    assert SOLVER_STOP_CPU <= call.close_reserve() <= 2.0
    c = call.closing(call.clock)
    assert call.clock.end - 2.0 <= c.end <= call.clock.end - SOLVER_STOP_CPU
    call.close_most = SOLVER_STOP_CPU / 2   # a reserve above the cap keeps the cap
    assert call.closing(call.clock).end == call.clock.end - SOLVER_STOP_CPU / 2
    assert call.closing(c.until(c.end - 5.0)).end == c.end - 5.0   # never later than the clock given
