"""``memopt.remat(..., initial=[plans])``: warm starts, against brute force on small graphs.

A seed is a random valid run sequence (a topological order with random re-runs within the
caps). Checked: the answer passes the independent checker; when the seed answers the question
the answer is at least as good (cost under a memory limit, peak under a budget), even with no
time at all; ``optimal`` only when brute force agrees; a bad seed is one OptionError.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.core import peak
from memopt.errors import OptionError
from memopt.remat import check_plan, plan_from_runs
from memopt.remat.brute_force import min_extra_cost, min_peak

from test_api import late_reuse, small_graph


def random_runs(g, cap: int, rng) -> list[int]:
    """A topological order of ``g`` with up to ``cap`` re-runs of random ops at random places
    after their first run (always a valid run sequence: the inputs were produced before)."""
    runs = g.topological_order().tolist()
    for v in rng.permutation(g.num_ops).tolist():
        for _ in range(int(rng.integers(0, cap + 1))):
            at = int(rng.integers(runs.index(v) + 1, len(runs) + 1))
            runs.insert(at, v)
    return runs


def _checked(g, r, cap):
    assert r.plan is not None
    assert check_plan(g, r.plan, cap=cap) == (r.peak, r.extra_cost)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.sampled_from(["auto", "heuristic", "cpsat"]),
       st.sampled_from([0, 2]))
def test_a_warm_start_answers_at_least_as_well_as_its_seed_under_a_limit(seed, cap, method, time_limit):
    rng = np.random.default_rng(seed)
    g = small_graph(seed)
    runs = random_runs(g, cap, rng)
    seed_peak, seed_cost = check_plan(g, plan_from_runs(g, runs), cap=cap)
    top = peak(g, g.topological_order())
    limit = int(rng.integers(max(0, seed_peak - 2), top + 1)) if seed_peak <= top else seed_peak
    cost, _ = min_extra_cost(g, limit, cap)
    r = memopt.remat(g, memory_limit=limit, cap=cap, method=method, time_limit=time_limit, initial=[runs])
    if seed_peak <= limit:
        assert r.status in ("optimal", "feasible")
        _checked(g, r, cap)
        assert r.peak <= limit and Fraction(r.extra_cost) <= Fraction(seed_cost)
    if r.status == "optimal":
        assert cost is not None and Fraction(r.extra_cost) == cost
    if r.status == "infeasible":
        assert cost is None and seed_peak > limit
    if r.status in ("optimal", "feasible"):
        _checked(g, r, cap)
        assert r.peak <= limit and cost is not None and Fraction(r.extra_cost) >= cost


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["auto", "heuristic"]), st.sampled_from([0, 2]))
def test_a_warm_start_answers_at_least_as_well_as_its_seed_under_a_budget(seed, method, time_limit):
    rng = np.random.default_rng(seed)
    g = small_graph(seed)
    runs = random_runs(g, 1, rng)
    seed_peak, seed_cost = check_plan(g, plan_from_runs(g, runs), cap=1)
    best = min_peak(g, seed_cost, 1)[0]
    r = memopt.remat(g, cost_budget=seed_cost, cap=1, method=method, time_limit=time_limit, initial=[runs])
    _checked(g, r, 1)
    assert best <= r.peak <= seed_peak and Fraction(r.extra_cost) <= Fraction(seed_cost)
    if r.status == "optimal":
        assert r.peak == best


def test_the_best_seed_is_kept_with_no_time_and_named():
    g = late_reuse()
    # peak 12 at cost 3: the only plan within 12; with no time the scheduler's order (14) is all else
    r = memopt.remat(g, memory_limit=12, cap=1, time_limit=0, initial=[["f", "g", "k", "h"], ["f", "g", "k", "f", "h"]])
    assert (r.status, r.peak, r.extra_cost) == ("feasible", 12, 3)
    assert "initial plan" in r.method
    assert memopt.remat(g, memory_limit=12, cap=1, time_limit=0).status == "unknown"
    # with time the bound proves the seed optimal
    assert memopt.remat(g, memory_limit=12, cap=1, time_limit=10, initial=[["f", "g", "k", "f", "h"]]).status \
        == "optimal"


@pytest.mark.parametrize("initial, words", [
    ("fgkh", "a list of plans"),
    ([["g", "f", "k", "h"]], "initial plan 0"),          # g reads a before f made it
    ([["f", "g", "k", "f", "f", "h"]], "initial plan 0"),  # f three times, above cap 1
    ([["f", "nope"]], "initial plan 0"),
    ([3.5], "initial plan 0"),
])
def test_a_bad_seed_is_one_option_error(initial, words):
    with pytest.raises(OptionError, match=words) as exc:
        memopt.remat(late_reuse(), memory_limit=12, cap=1, initial=initial)
    assert "\n" not in str(exc.value)


def test_the_heuristic_starts_from_the_checked_seeds():
    from memopt.remat.model_common import RematProblem
    from memopt.remat.registry import get_method
    from memopt.remat.warm_start import checked_initial, heuristic_starts

    g = late_reuse()
    p = RematProblem.of(g, 1)
    seeds = checked_initial(p, [["f", "g", "k", "h"], ["f", "g", "k", "f", "h"]])
    assert [(s.peak, s.extra_cost) for s in seeds] == [(14, 0), (12, 3)]
    # the seeds that answer, best first; when none answers (min_cost) the one of least peak
    assert heuristic_starts(seeds, "min_cost", memory_limit=14) == [seeds[0], seeds[1]]
    assert heuristic_starts(seeds, "min_cost", memory_limit=11) == [seeds[1]]
    assert heuristic_starts(seeds, "min_peak", cost_budget=0) == [seeds[0]]
    assert heuristic_starts(seeds[1:], "min_peak", cost_budget=0) == []
    heuristic = get_method("heuristic").load()
    r = heuristic(p, question="min_cost", memory_limit=12, cap=1, time_limit=5, starts=seeds)
    assert (r.peak, r.extra_cost) == (12, 3)
    # plans that did not go through checked_initial are refused, in one line
    with pytest.raises(OptionError, match="checked_initial"):
        heuristic(p, question="min_cost", memory_limit=12, cap=1, time_limit=5, starts=[seeds[1].plan])
