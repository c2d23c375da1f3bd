"""The feasibility search with dominance (memopt.remat.feasibility) against the exhaustive
search of memopt.remat.brute_force: on random small graphs and series-parallel graphs, caps
0-2 and per-op caps, many limits, it says ``feasible`` exactly when a plan within the limit
exists, and every plan it returns passes the independent checker within the limit; a small
chain where dominance drops states; limits and options."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.remat import brute_force as bf
from memopt.remat import check_plan, evaluate_plan, plan_from_order
from memopt.remat.feasibility import feasible_plan
from memopt.remat.lower_bounds import peak_lower_bound
from memopt.schedule.brute_force import random_tensor_graph

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def limits(graph: TensorGraph, cap) -> list[int]:
    """Every limit from just below the peak lower bound to the no-recomputation peak of the
    topological order (where the answer changes from infeasible to feasible)."""
    hi = evaluate_plan(graph, plan_from_order(graph, graph.topological_order())).peak
    lb = peak_lower_bound(graph, cap, trap=False)
    return list(range(max(0, min(lb, hi) - 1), hi + 1))


def assert_matches_brute_force(graph: TensorGraph, cap):
    for M in limits(graph, cap):
        cost, _ = bf.min_extra_cost(graph, M, cap)
        r = feasible_plan(graph, M, cap)
        assert r.status == ("infeasible" if cost is None else "feasible"), (M, cap, cost, r)
        if r.plan is not None:
            peak, _ = check_plan(graph, r.plan, cap)
            assert peak <= M and r.peak == peak


@SETTINGS
@given(st.tuples(st.integers(0, 10**6), st.integers(1, 7), st.integers(0, 2)))
def test_feasible_iff_brute_force_finds_a_plan(args):
    seed, n, cap = args
    assert_matches_brute_force(random_tensor_graph(np.random.default_rng(seed), n), cap)


@SETTINGS
@given(st.tuples(st.integers(0, 10**6), st.integers(2, 8), st.integers(0, 2)))
def test_series_parallel_feasible_iff_brute_force(args):
    seed, n, cap = args
    assert_matches_brute_force(bf.random_sp_graph(np.random.default_rng(seed), n, 12), cap)


@SETTINGS
@given(st.tuples(st.integers(0, 10**6), st.integers(1, 7)))
def test_per_op_caps(args):
    seed, n = args
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, n)
    assert_matches_brute_force(g, [int(c) for c in rng.integers(0, 3, size=g.num_ops)])


def chain_with_late_reuse() -> TensorGraph:
    """``a`` (cheap, 10 bytes) is read by ``B`` and again by ``Z`` at the end; ``B``, ``C``,
    ``D`` each make 4 bytes."""
    return TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
             Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])


def test_chain_needs_a_rerun_below_the_hold_peak():
    g = chain_with_late_reuse()
    # holding a across C and D costs 10 + 4 + 4 = 18 at D's run
    assert feasible_plan(g, 18, cap=0).status == "feasible"
    assert feasible_plan(g, 17, cap=0).status == "infeasible"
    r = feasible_plan(g, 15, cap=1)
    assert r.status == "feasible" and r.peak <= 15
    assert check_plan(g, r.plan, 1)[1] == 1  # A ran twice
    assert feasible_plan(g, 14, cap=2).status == "infeasible"  # Z alone needs 10 + 4 + 1


def test_dominance_drops_states_on_a_wide_graph():
    """Two independent branches: the states after ``L1, R1`` and after ``R1, L1`` are the
    same (same ideal, counts and live set), so one of the two is dropped as dominated; the
    answer is still the exhaustive one."""
    g = TensorGraph.build(
        tensors=[Tensor("l1", 3), Tensor("l2", 3), Tensor("r1", 3), Tensor("r2", 3), Tensor("z", 1, output=True)],
        ops=[Op("L1", (), ("l1",)), Op("L2", ("l1",), ("l2",)), Op("R1", (), ("r1",)), Op("R2", ("r1",), ("r2",)),
             Op("Z", ("l2", "r2"), ("z",))])
    for M, cap in [(9, 0), (8, 2), (10, 1)]:
        r = feasible_plan(g, M, cap)
        cost, _ = bf.min_extra_cost(g, M, cap)
        assert r.status == ("infeasible" if cost is None else "feasible")
    r = feasible_plan(g, 6, cap=1)
    assert r.status == "infeasible" and r.pruned > 0


def test_unknown_on_state_limit_and_bad_options():
    g = bf.random_sp_graph(np.random.default_rng(5), 30, 12)
    hi = evaluate_plan(g, plan_from_order(g, g.topological_order())).peak
    r = feasible_plan(g, hi - 4, 2, max_states=5)
    assert r.status in ("unknown", "feasible") and r.states <= 6
    with pytest.raises(OptionError):
        feasible_plan(g, 10.5, 1)
    with pytest.raises(OptionError):
        feasible_plan(g, hi, None)  # no cap: run counts are unbounded


def test_registry_method_proves_infeasible_by_exhaustion():
    """A 7-op series-parallel limit above the peak lower bound and the no-recomputation
    heuristics' reach: only the feasibility search's exhaustion settles it."""
    from memopt.remat.registry import get_method

    g = bf.random_sp_graph(np.random.default_rng(3), 7, 12)
    M, cap = 16, 2
    assert peak_lower_bound(g, cap) <= M
    assert bf.min_extra_cost(g, M, cap) == (None, None)
    r = get_method("treedp").load()(g, question="min_cost", memory_limit=M, cap=cap, time_limit=30)
    assert r.status == "infeasible" and r.plan is None
    assert r.stats["feasibility"]["status"] == "infeasible"
    assert "feasibility search exhausted" in r.stats["feasibility"]["proof"]
