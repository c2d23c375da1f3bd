"""The cost bound in a child process (``memopt.remat.cost_bound_process``) and ``auto``'s use of it."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.core import Op, Tensor, TensorGraph, peak
from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.remat.brute_force import min_extra_cost, min_peak
from memopt.remat.cost_bound_process import CostBoundProcess
from memopt.remat.lower_bounds import cost_lower_bound
from memopt.schedule.brute_force import random_tensor_graph

INSTANCES = os.path.join(os.path.dirname(__file__), "..", "..", "instances")


def held_across_big_op() -> TensorGraph:
    """``a`` (6 bytes, re-run cost 5) is read again by the last op, after the big op ``B``:
    under 12 bytes it must be rebuilt, so the least extra cost at 11 is 5."""
    return TensorGraph.build(
        [Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        [Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1), Op("B", ("m",), ("b",), cost=1),
         Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])


def test_the_child_returns_the_bound_of_the_same_call_here():
    g = held_across_big_op()
    here = cost_lower_bound(g, 11, 1, time_limit=30)
    child = CostBoundProcess(g, 11, [1] * g.num_ops, time_limit=30).result()
    assert here.complete and child is not None
    assert (child.value, child.cores, child.hitting_set, child.infeasible, child.complete, child.cuts) == \
        (here.value, here.cores, here.hitting_set, here.infeasible, here.complete, here.cuts)
    # the trap cuts (A's 6 bytes are live across B and C) give the bound before any core
    assert (here.value, here.cores, here.hitting_set, [c.ops for c in here.cuts]) == (5, (), (0,), [(0,), (0,)])


def test_a_graph_pickles_without_its_cache_and_answers_the_same():
    g = held_across_big_op()
    order = g.topological_order()       # fills the cache
    assert g._cache
    h = pickle.loads(pickle.dumps(g))
    assert h._cache == {}
    assert h.op_names == g.op_names and peak(h, order) == peak(g, order) == 12


def test_a_killed_child_gives_no_bound_and_says_why():
    g = held_across_big_op()
    bg = CostBoundProcess(g, 11, [1] * g.num_ops, time_limit=30)
    bg._proc.kill()
    assert bg.result() is None
    assert "exit" in bg.error or "without an answer" in bg.error


def test_stop_returns_a_bound_at_once():
    """Asked to stop before it could start, the child still answers with a valid bound
    (here nothing was proved: 0, and not complete)."""
    g = held_across_big_op()
    bg = CostBoundProcess(g, 11, [1] * g.num_ops, time_limit=600)
    got = bg.result(stop=True, timeout=120)
    assert got is not None and Fraction(got.value) <= 5


def test_cancel_stops_the_bound_with_a_weaker_valid_one():
    g = held_across_big_op()
    assert cost_lower_bound(g, 11, 1, cancel=lambda: True)[:2] == (0, ())
    assert not cost_lower_bound(g, 11, 1, cancel=lambda: True).complete
    # a stop_at function is asked after each round, like a fixed stop_at
    assert cost_lower_bound(g, 11, 1, stop_at=lambda: 5).value == 5


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.integers(1, 8), st.integers(0, 12))
def test_a_cancelled_bound_never_exceeds_the_brute_force_optimum(seed, cap, cut, after):
    """Cancelled after ``after`` questions (mid-search, wherever that falls), the bound is
    still a lower bound on the least extra cost, and its cores still hold for an optimal plan."""
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, int(rng.integers(1, 7)))
    top = peak(g, g.topological_order())
    # at least the least peak any plan reaches (with the cap), so a plan exists
    limit = max(min_peak(g, 10**9, cap)[0], top - cut * max(1, top // 12))
    cost, plan = min_extra_cost(g, limit, cap)
    assert cost is not None
    asked = [0]

    def cancel():
        asked[0] += 1
        return asked[0] > after

    cb = cost_lower_bound(g, limit, cap, cancel=cancel, time_limit=30)
    assert not cb.infeasible and Fraction(cb.value) <= cost
    rerun = {int(v) for v, k in enumerate(np.bincount(plan.runs(), minlength=g.num_ops)) if k > 1}
    assert all(rerun & set(core) for core in cb.cores)


@pytest.mark.slow  # a child process and a 10 s+ auto run: in CI's second step
def test_auto_runs_the_bound_beside_the_heuristic_and_checks_the_plan():
    """``late_reuse_ddpm_unet`` (103 ops) at 0.9 of its optimal no-recomputation peak: with two
    jobs the bound comes from the child; the plan is checked as ever, and the bound is below it."""
    from memopt.io import load_instance

    g = load_instance(os.path.join(INSTANCES, "late_reuse_ddpm_unet.json")).graph
    r = memopt.remat(g, memory_ratio=0.9, cap=1, time_limit=15, jobs=2)
    assert r.status in ("optimal", "feasible")
    assert r.stats["parts"]["cost_bound"]["where"] == "process"
    assert Fraction(r.cost_lower_bound) <= Fraction(r.extra_cost)
    assert check_plan(g, r.plan, cap=1) == (r.peak, r.extra_cost)
    assert r.peak <= r.memory_limit


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2"])
def test_bad_jobs_are_option_errors(jobs):
    with pytest.raises(OptionError, match="jobs"):
        memopt.remat(held_across_big_op(), memory_limit=11, cap=1, jobs=jobs)


def test_cli_refuses_zero_jobs_in_one_line():
    path = os.path.join(INSTANCES, "late_reuse_edsr.json")
    out = subprocess.run([sys.executable, "-m", "memopt", "remat", path, "--memory-ratio", "0.9", "--jobs", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "--jobs" in out.stderr and len(out.stderr.strip().splitlines()) == 1
