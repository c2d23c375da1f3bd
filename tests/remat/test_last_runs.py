"""The last-run trap (memopt.remat.last_runs, proofs/remat_cost_bounds.md §6) against brute force."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memopt.bounds.trap import forward_trap_bound
from memopt.core import Op, Tensor, TensorGraph
from memopt.remat import brute_force as bf
from memopt.remat import evaluate_plan
from memopt.remat.last_runs import last_run_trap, last_run_trap_bound, last_run_trap_exceeds
from memopt.remat.lower_bounds import cost_lower_bound, held_inputs_graph, relaxed_peak_bound, relaxed_trap_exceeds
from memopt.remat.plan import RUN
from memopt.schedule.brute_force import random_tensor_graph

from conftest import odd_tensor_graph, shared_graph

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 10**9


def _plan_facts(g: TensorGraph, plan):
    """Step of each op's first and last run, and the inverted ops (a reader's last run
    comes before the op's own last run)."""
    runs = [(i, int(x)) for i, (k, x) in enumerate(zip(plan.kind.tolist(), plan.index.tolist())) if k == RUN]
    first, last = {}, {}
    for i, v in runs:
        first.setdefault(v, i)
        last[v] = i
    inverted = {p for p in range(g.num_ops) for t in g.outputs_of(p) for u in g.consumers_of(t)
                if last[int(u)] < last[p]}
    return first, last, inverted


def _case(args):
    seed, n, k, pick = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.35)
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    least, _, plan = bf.min_peak(g, BIG, [k if v in S else 0 for v in range(g.num_ops)])
    return g, S, least, plan


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20)))
def test_each_op_last_run_is_at_least_its_trap(args):
    """Pointwise: in a plan, the memory at the last run of ``v`` is at least the trap of ``v``
    for the plan's inverted ops (Theorem 6 needs only those, a subset of its re-runs), and
    at its first run at least the first-run trap for the plan's re-run ops."""
    g, S, least, plan = _case(args)
    ev = evaluate_plan(g, plan)
    first, last, inverted = _plan_facts(g, plan)
    assert inverted <= set(S)
    reruns = sorted(v for v in range(g.num_ops) if first[v] != last[v])
    for T in (sorted(inverted), reruns, S):
        for v in range(g.num_ops):
            assert last_run_trap(g, T, v) <= int(ev.profile[last[v] + 1])
    # a first run apart from the last needs the op in the set (an op outside runs once)
    for T in (reruns, S):
        for v in range(g.num_ops):
            assert last_run_trap(g, T, v, first=True) <= int(ev.profile[first[v] + 1])
    b = last_run_trap_bound(g, S)
    assert b <= least
    assert last_run_trap_bound(g, S, first_runs=False) <= b
    hints: list = []
    assert last_run_trap_exceeds(g, S, b - 1, hints=hints) and not last_run_trap_exceeds(g, S, b, hints=hints)
    assert last_run_trap_exceeds(g, S, b - 1, hints=hints)   # with the hint found
    # more ops that may re-run can only lower it
    assert last_run_trap_bound(g, range(g.num_ops)) <= b


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 9), st.booleans()))
def test_with_no_rerun_it_is_the_forward_trap(args):
    seed, n, multi = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=50, edge_prob=0.3, multi_output=multi)
    assert last_run_trap_bound(g, []) == int(forward_trap_bound(g).value)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20)))
def test_first_runs_are_at_least_the_relaxed_graph_and_the_last_runs_alone(args):
    """With the first runs, the bound is at least the forward trap of ``G_S`` (its ops are
    the first runs, its ideals the first-run ideals), and each last run's trap at least its
    trap in the order of last runs alone (more nodes, more requirements: e.g. an op of ``S``
    that reads the output of an op outside it runs, first and last, after that op's only run)."""
    seed, n, _, pick = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.35)
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    assert last_run_trap_bound(g, S) >= relaxed_peak_bound(g, S)
    assert last_run_trap_bound(g, S) >= last_run_trap_bound(g, S, first_runs=False)
    from memopt.remat.last_runs import _runner

    both = _runner(g, S, True).run(np.arange(g.num_ops), -1)
    alone = _runner(g, S, False).run(np.arange(g.num_ops), -1)
    assert (both >= alone).all()


def _chain_case() -> TensorGraph:
    """``y -> A -> a -> B -> b``; ``b`` is read before and after ``W`` (workspace 10)."""
    return TensorGraph.build(
        [Tensor("y", 6), Tensor("a", 5), Tensor("b", 5), Tensor("h", 1), Tensor("w", 4),
         Tensor("o", 1, output=True)],
        [Op("A", inputs=["y"], outputs=["a"], cost=1), Op("B", inputs=["a"], outputs=["b"], cost=1),
         Op("H", inputs=["b"], outputs=["h"], cost=9), Op("W", inputs=["h"], outputs=["w"], workspace=10, cost=9),
         Op("O", inputs=["b", "w"], outputs=["o"], cost=9)])


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 5), st.integers(1, 2), st.integers(0, 2**20)))
def test_odd_graphs_each_run_is_at_least_its_trap(args):
    seed, n, k, pick = args
    g = odd_tensor_graph(np.random.default_rng(seed), n)
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    least, _, plan = bf.min_peak(g, BIG, [k if v in S else 0 for v in range(g.num_ops)])
    ev = evaluate_plan(g, plan)
    first, last, _ = _plan_facts(g, plan)
    for v in range(g.num_ops):
        assert last_run_trap(g, S, v) <= int(ev.profile[last[v] + 1])
        assert last_run_trap(g, S, v, first=True) <= int(ev.profile[first[v] + 1])
    assert last_run_trap_bound(g, S, first_runs=False) <= last_run_trap_bound(g, S) <= least


def test_a_chain_of_reruns_holds_one_of_its_links():
    """Re-making ``b`` after ``W`` needs ``a`` at ``B``'s last run, so ``a`` or, further back,
    ``y`` is held across ``W`` if ``b`` is not: the last-run trap of ``W`` counts the least of
    the three (5), as every plan does (least peak 20, brute force). The relaxed graph lets
    ``a`` and ``b`` weigh nothing across ``W`` and frees ``y`` after ``A``'s first run (15);
    its held inputs keep ``y`` only up to ``B``'s first run (``a``'s reader), still 15."""
    g = _chain_case()
    S = [0, 1]
    least, _, _ = bf.min_peak(g, BIG, [2, 2, 0, 0, 0])
    assert least == 20
    assert [last_run_trap(g, S, v) for v in range(5)] == [11, 10, 6, 20, 10]
    assert last_run_trap_bound(g, S) == 20
    assert relaxed_peak_bound(g, S) == 15
    assert forward_trap_bound(held_inputs_graph(g, S)).value == 15
    # so the cost bound proves every limit below 20 infeasible, as brute force finds, where
    # without it the bound is 2 (re-run A and B)
    for limit in range(16, 20):
        assert bf.min_extra_cost(g, limit, 2)[0] is None
        assert cost_lower_bound(g, limit, 2, time_limit=10).infeasible
        without = cost_lower_bound(g, limit, 2, time_limit=10, last_runs=False)
        assert not without.infeasible and without.value == 2


def test_on_random_layered_n250_the_first_core_is_larger_than_the_relaxed_graphs():
    """Exact figures on a real instance: at 0.9 of the optimal no-recomputation peak
    (105,170 B), the relaxed graph with held inputs fits once the 83 cheapest ops may re-run;
    the order of last runs still has a trap above the limit with the 118 cheapest, and with
    the first runs too with the 166 cheapest."""
    from memopt.io import load_instance

    g = load_instance(shared_graph("random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json")).graph
    limit = math.floor(0.9 * 105170)
    order = sorted(range(g.num_ops), key=lambda v: (float(g.op_cost[v]), v))
    assert last_run_trap_bound(g, []) == 105170           # the forward trap, here the optimum
    assert relaxed_trap_exceeds(g, order[:82], limit, held_inputs=True)
    assert not relaxed_trap_exceeds(g, order[:83], limit, held_inputs=True)
    assert last_run_trap_exceeds(g, order[:118], limit, first_runs=False)
    assert not last_run_trap_exceeds(g, order[:119], limit, first_runs=False)
    assert last_run_trap_exceeds(g, order[:166], limit)
    assert not last_run_trap_exceeds(g, order[:167], limit)
    assert relaxed_trap_exceeds(g, order[:166], limit, held_inputs=True, last_runs=True)
