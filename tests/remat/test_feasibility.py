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
from memopt.remat.feasibility import LastRunBound, feasible_plan, last_run_bound
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
    """With and without the last-run bound in front of the search (the search alone must be
    exact too)."""
    for M in limits(graph, cap):
        cost, _ = bf.min_extra_cost(graph, M, cap)
        for use_bound in (True, False):
            r = feasible_plan(graph, M, cap, use_bound=use_bound)
            assert r.status == ("infeasible" if cost is None else "feasible"), (M, cap, cost, use_bound, r)
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
        r = feasible_plan(g, M, cap, use_bound=False)
        cost, _ = bf.min_extra_cost(g, M, cap)
        assert r.status == ("infeasible" if cost is None else "feasible")
    r = feasible_plan(g, 6, cap=1, use_bound=False)
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
    """A 6-op series-parallel limit above the peak lower bound, the last-run bound and the
    no-recomputation heuristics' reach: only the feasibility search's exhaustion settles it."""
    from memopt.remat.registry import get_method

    g = bf.random_sp_graph(np.random.default_rng(7), 6, 12)
    M, cap = 22, 2
    assert peak_lower_bound(g, cap) <= M and last_run_bound(g).value <= M
    assert bf.min_extra_cost(g, M, cap) == (None, None)
    r = get_method("treedp").load()(g, question="min_cost", memory_limit=M, cap=cap, time_limit=30)
    assert r.status == "infeasible" and r.plan is None
    assert r.stats["feasibility"]["status"] == "infeasible"
    assert "feasibility search exhausted" in r.stats["feasibility"]["proof"]


# ---------------------------------------------------------------- Lemma 10: last runs before a read
def two_heavy_branches() -> TensorGraph:
    """``S`` reads two branches whose heads ``P`` / ``Q`` need 40 / 44 bytes to run (workspace):
    whichever runs last holds the other branch's result (``x`` + ``y2``: 9 bytes, or ``u`` +
    ``v2``: 15 bytes) next to it, so every plan peaks at ``min(44 + 9, 40 + 15) = 53``, above
    every single-run footprint."""
    return TensorGraph.build(
        tensors=[Tensor("x", 7), Tensor("y", 4), Tensor("y2", 2), Tensor("u", 11), Tensor("v", 6), Tensor("v2", 4),
                 Tensor("s", 1, output=True)],
        ops=[Op("P", (), ("x", "y"), workspace=29), Op("Y", ("y",), ("y2",)),
             Op("Q", (), ("u", "v"), workspace=27), Op("V", ("v",), ("v2",)),
             Op("S", ("x", "y2", "u", "v2"), ("s",))])


def test_last_run_bound_on_two_heavy_branches():
    g = two_heavy_branches()
    b = last_run_bound(g)
    assert (b.value, b.reader, set(b.ops)) == (53, "S", {"P", "Q"})
    assert dict(zip(b.ops, b.later)) == {"P": 55, "Q": 53}
    assert "Lemma 10" in b.proof
    assert peak_lower_bound(g, 2) < 53  # recomputation allowed: the footprint bounds do not see it
    for cap in (0, 1, 2):
        assert bf.min_peak(g, 10**6, cap)[0] == 53  # the bound is tight here, whatever the caps
        r = feasible_plan(g, 52, cap)
        assert r.status == "infeasible" and r.states == 0 and "Lemma 10" in r.proof
        assert feasible_plan(g, 52, cap, use_bound=False).status == "infeasible"
        assert feasible_plan(g, 53, cap).status == "feasible"
    assert last_run_bound(g, at_least=53) == LastRunBound(53)  # nothing beats 53
    from memopt.remat.treedp import min_extra_cost, min_peak

    assert min_extra_cost(g, 52, 1).status == "infeasible"
    r = min_peak(g, 10**6, 1)  # bisection from the bound: proved least at once
    assert (r.status, r.peak) == ("optimal", 53)


@pytest.mark.slow  # brute force on every draw (~25 s): in CI's second step
@SETTINGS
@given(st.tuples(st.integers(0, 10**6), st.integers(1, 7), st.booleans()))
def test_last_run_bound_never_exceeds_the_least_peak(args):
    """Lemma 10 holds for every plan: never above the exhaustive least peak with cap 2 (the
    least peak only falls as the caps grow, so this is the hardest of caps 0-2 to meet)."""
    seed, n, sp = args
    rng = np.random.default_rng(seed)
    g = bf.random_sp_graph(rng, n + 1, 12) if sp else random_tensor_graph(rng, n)
    assert last_run_bound(g).value <= bf.min_peak(g, 10**9, 2)[0]


def test_open_sixty_op_limit_is_infeasible():
    """The 60-op benchmark limit no search settled (seed 5 at 0.9 of P0 = 57: limit 51) is
    infeasible by Lemma 10 (every plan peaks at >= 54), for any cap."""
    g = bf.random_sp_graph(np.random.default_rng(5), 60, 12)
    b = last_run_bound(g)
    assert b.value == 54 and b.reader == "op1"
    r = feasible_plan(g, 51, 2)
    assert r.status == "infeasible" and r.states == 0
    from memopt.remat.registry import get_method

    m = get_method("treedp").load()(g, question="min_cost", memory_limit=51, cap=2, time_limit=10)
    assert m.status == "infeasible" and "Lemma 10" in m.stats["last_run_bound"]


def test_last_run_bound_over_three_ops():
    """Three sources (20 bytes of workspace, a 5-byte result each) read by one op: the last
    of them to run holds the other two results, 25 + 10 = 35 bytes; any two of them only
    show 30. The least peak is 35 whatever the caps."""
    g = TensorGraph.build(
        tensors=[Tensor("x", 5), Tensor("y", 5), Tensor("z", 5), Tensor("s", 1, output=True)],
        ops=[Op("X", (), ("x",), workspace=20), Op("Y", (), ("y",), workspace=20), Op("Z", (), ("z",), workspace=20),
             Op("S", ("x", "y", "z"), ("s",))])
    assert last_run_bound(g, max_ops=2).value == 30
    b = last_run_bound(g)
    assert (b.value, b.reader, set(b.ops), b.later) == (35, "S", {"X", "Y", "Z"}, (35, 35, 35))
    for cap in (0, 1, 2):
        assert bf.min_peak(g, 10**6, cap)[0] == 35
    assert peak_lower_bound(g, 2) < 35
