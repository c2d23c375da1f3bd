"""The lower bound on the peak of any capped plan (memopt.remat.lower_bounds) never exceeds
the exhaustive minimum peak, and its terms behave as proved in proofs/remat_infeasibility.md."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memopt.core import Op, Tensor, TensorGraph
from memopt.remat import brute_force as bf
from memopt.remat.lower_bounds import (
    infeasibility_witness,
    peak_lower_bound,
    peak_lower_bound_details,
)
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

SETTINGS = settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 10**9


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 2)))
def test_bound_never_exceeds_the_least_peak(args):
    seed, n, cap = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    least, _, _ = bf.min_peak(g, BIG, cap)
    b = peak_lower_bound_details(g, cap)
    assert b.value <= least
    # a limit below the bound has no plan at all (the bound is a proof of infeasibility)
    assert infeasibility_witness(g, b.value - 1, cap) is not None
    assert bf.min_extra_cost(g, b.value - 1, cap) == (None, None)
    assert infeasibility_witness(g, b.value, cap) is None


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6)))
def test_per_op_caps_bound_is_sound(args):
    seed, n = args
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, n, with_inputs=True)
    caps = [int(rng.integers(0, 2)) for _ in range(g.num_ops)]
    least, _, _ = bf.min_peak(g, BIG, caps)
    assert peak_lower_bound(g, caps) <= least
    # fewer caps can only raise the bound (more tensors are non-recomputable)
    assert peak_lower_bound(g, caps, trap=False) >= peak_lower_bound(g, 2, trap=False)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7)))
def test_cap_zero_bound_is_below_the_scheduling_optimum(args):
    seed, n = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    _, best = brute_force_schedule(g)
    assert peak_lower_bound(g, 0) <= best
    assert peak_lower_bound(g, 0, trap=False) <= peak_lower_bound(g, 0)


def test_a_graph_input_needed_downstream_is_counted():
    """x (size 10) is read by the last op only; it cannot be recomputed, so it is live while
    the big middle op runs: the bound is 10 + 8 + 1 = 19, above every op's own footprint."""
    g = TensorGraph.build(
        tensors=[Tensor("x", 10), Tensor("a", 1), Tensor("b", 8), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",)), Op("B", ("a",), ("b",)), Op("Z", ("b", "x"), ("z",))])
    b = peak_lower_bound_details(g, 2)
    assert (b.value, b.kind, g.op_names[b.op]) == (19, "first_run", "B")
    assert b.value == bf.min_peak(g, BIG, 2)[0]


def test_a_cap_zero_output_is_held():
    """a (size 6) is made early and read at the end. With cap 0 on its producer A it cannot
    be rebuilt, so it is live while the big op B runs: 6 + 1 + 5 = 12. With cap 1 it can be
    freed and rebuilt, and the bound drops to Z's footprint, 6 + 1 + 1 = 8: both exact."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",)), Op("M", ("a",), ("m",)), Op("B", ("m",), ("b",)), Op("C", ("b",), ("c",)),
             Op("Z", ("a", "c"), ("z",))])
    b0 = peak_lower_bound_details(g, {"A": 0}, trap=False)
    assert (b0.value, b0.kind, g.op_names[b0.op]) == (12, "first_run", "B")
    assert peak_lower_bound(g, 1, trap=False) == 8
    assert bf.min_peak(g, BIG, {"A": 0})[0] == 12
    assert bf.min_peak(g, BIG, 1)[0] == 8
    # under a budget below A's cost, A cannot re-run: the budget-aware bound sees it
    g2 = TensorGraph.build(
        tensors=[Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=3), Op("M", ("a",), ("m",)), Op("B", ("m",), ("b",)),
             Op("C", ("b",), ("c",)), Op("Z", ("a", "c"), ("z",))])
    assert peak_lower_bound(g2, 1, cost_budget=2, trap=False) == 12
    assert peak_lower_bound(g2, 1, cost_budget=3, trap=False) == 8
    assert bf.min_peak(g2, 2, 1)[0] == 12 and bf.min_peak(g2, 3, 1)[0] == 8


def test_empty_and_resident():
    g = TensorGraph.build(tensors=[Tensor("w", 7, resident=True), Tensor("x", 3, output=True)], ops=[])
    assert peak_lower_bound(g, 1) == 10


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 2), st.integers(0, 6)))
def test_budget_aware_bound_is_sound(args):
    seed, n, cap, budget = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    least, _, _ = bf.min_peak(g, budget, cap)
    assert peak_lower_bound(g, cap, cost_budget=budget) <= least
    assert peak_lower_bound(g, cap, cost_budget=budget) >= peak_lower_bound(g, cap)
