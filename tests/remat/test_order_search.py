"""Least-overflow orders (:mod:`memopt.remat.order_search`) and their use as starting orders
of the recomputation heuristic.

What is claimed: :func:`least_overflow_order` returns the same runs (so the same extra
cost) in another valid order whose ``(overflow, peak)`` above the limit is never higher
than the given sequence's, checked by the independent plan checker (peak, cost) and by an
independent per-run simulation (overflow); without a deadline the answer is a local optimum
of its neighbourhood (no single run moved within the window lowers the score: checked by
enumerating every move); on ``random_layered_n250`` it lowers the overflow of the
scheduler's least-peak order. The heuristic's starts from it are valid plans within the
limit. Nothing here claims a least overflow over all orders."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memopt.errors import ScheduleError
from memopt.remat import check_plan
from memopt.remat.model_common import RematProblem, footprint_bound, plan_from_runs
from memopt.remat.order_search import ORDER_WINDOW, least_overflow_order, overflow
from memopt.schedule.brute_force import random_tensor_graph

GRAPHS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "checkmate-graphs")


def _graph(seed: int):
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, int(rng.integers(2, 9)), max_size=30, edge_prob=0.3)


def _memory_per_run(p: RematProblem, runs) -> list[int]:
    """Independent of the heuristic's direct profile: simulate the plan run by run (each
    production live from its run to its last read before the next production, graph
    outputs' last production to the end)."""
    intervals = []  # (tensor, first run it is live *before* (exclusive start), last run it is live before)
    made, last = {}, {}
    for t in p.inputs:
        made[t], last[t] = -1, -1
    for i, v in enumerate(runs):
        for t in p.ins[v]:
            last[t] = i
        for t in p.outs[v]:
            if t in made:
                intervals.append((t, made[t], last[t]))
            made[t], last[t] = i, i
    for t in made:
        intervals.append((t, made[t], len(runs) if t in p.outputs else last[t]))
    out = []
    for i, v in enumerate(runs):
        live = sum(p.size[t] for t, a, b in intervals if a < i <= b)
        out.append(p.resident_bytes + live + sum(p.size[t] for t in p.outs[v]) + p.ws[v])
    return out


def _score(p, runs, limit):
    prof = _memory_per_run(p, runs)
    return overflow(prof, limit), max([p.start] + prof)


def _sequence(g, p, with_rerun: bool):
    runs = g.topological_order().tolist()
    return runs + [runs[0]] if with_rerun else runs


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.booleans(), st.sampled_from([0.9, 0.8, 0.6]))
def test_same_runs_valid_plan_never_a_higher_score_and_a_local_optimum(seed, cap, with_rerun, ratio):
    g = _graph(seed)
    p = RematProblem.of(g, cap)
    runs0 = _sequence(g, p, with_rerun)
    pk0, cost0 = check_plan(g, plan_from_runs(p, runs0), cap)
    limit = max(footprint_bound(p), int(ratio * pk0))
    runs, over, pk = least_overflow_order(p, runs0, limit, deadline=float("inf"), seed=seed)
    assert sorted(runs) == sorted(runs0)
    got_pk, got_cost = check_plan(g, plan_from_runs(p, runs), cap)
    assert got_pk == pk and Fraction(got_cost) == Fraction(cost0)
    assert (over, pk) == _score(p, runs, limit)
    assert (over, pk) <= _score(p, runs0, limit)
    if over == 0:
        return
    # no single run moved within the window lowers the score any further
    assert len(runs) <= ORDER_WINDOW  # so every move is in the neighbourhood
    for q in range(len(runs)):
        rest = runs[:q] + runs[q + 1:]
        for d in range(len(runs)):
            if d == q:
                continue
            new = rest[:d] + [runs[q]] + rest[d:]
            try:
                plan_from_runs(p, new)
            except ScheduleError:
                continue
            assert _score(p, new, limit) >= (over, pk)


def test_a_value_read_last_is_made_after_the_values_read_at_once():
    """``a`` is read last, ``b`` at once: the least-overflow order makes ``b`` and its reader
    first, so ``a`` and ``b`` are never held together (the least peak drops from 21 to 12)."""
    from memopt.core import Op, Tensor, TensorGraph

    g = TensorGraph.build(
        [Tensor("a", 10), Tensor("b", 10), Tensor("d", 1, output=True), Tensor("c", 1, output=True)],
        [Op("fa", (), ("a",)), Op("fb", (), ("b",)), Op("fd", ("b",), ("d",)), Op("fc", ("a",), ("c",))])
    p = RematProblem.of(g, 1)
    assert _score(p, [0, 1, 2, 3], 15) == (11, 21)
    assert least_overflow_order(p, [0, 1, 2, 3], 15, deadline=float("inf")) == ([1, 2, 0, 3], 0, 12)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 2), st.sampled_from([0.9, 0.8]))
def test_greedy_from_the_least_overflow_order_fits_the_limit(seed, cap, ratio):
    """The heuristic's extra start: a plan within the limit (or none), checked independently."""
    from memopt.remat.heuristic import _greedy_least_overflow
    from memopt.remat.model_common import start_result
    from memopt.time_shares import remat_clock

    g = _graph(seed)
    p = RematProblem.of(g, cap)
    order = g.topological_order().tolist()
    pk0, _ = check_plan(g, plan_from_runs(p, order), cap)
    limit = max(footprint_bound(p), int(ratio * pk0))
    early = start_result(p, "min_cost", limit, None, None, "heuristic", 0.0)
    for runs, plan, pk, cost in _greedy_least_overflow(p, order, early, remat_clock(), seed):
        assert check_plan(g, plan, cap) == (pk, cost)
        assert pk <= limit and plan_from_runs(p, runs).runs().tolist() == runs


@pytest.mark.skipif(not os.path.isdir(GRAPHS), reason="../shared/data/checkmate-graphs is not present")
def test_random_layered_n250_the_least_peak_order_overflows_more():
    """The scheduler's least-peak order is not the least-overflow one: single moves lower
    its overflow above ``floor(0.9 P0)`` (364,868 -> about 161,000 when run to the end)."""
    import glob
    import time

    from memopt.io.checkmate import load_checkmate
    from memopt.remat.heuristic import _profile
    from memopt.schedule import schedule

    g = load_checkmate(glob.glob(os.path.join(GRAPHS, "random_layered_n250_*.json"))[0]).graph
    p = RematProblem.of(g, 2)
    order = schedule(g, time_limit=30).order.tolist()
    _, pk0, _, prof0 = _profile(p, order)
    limit = math.floor(0.9 * pk0)
    runs, over, _ = least_overflow_order(p, order, limit, deadline=time.perf_counter() + 20)
    assert sorted(runs) == sorted(order)
    assert over == overflow(_memory_per_run(p, runs), limit) < overflow(prof0, limit)
