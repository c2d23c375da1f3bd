"""Reductions: knapsack <-> capped recomputation (value-preserving, series-parallel) and
3-PARTITION -> capped recomputation (cap 1), checked against brute force on both sides."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from memopt.errors import OptionError
from memopt.reductions import op_adjacency, treewidth_at_most_two
from memopt.reductions.knapsack import (KnapsackInstance, knapsack_optimum, knapsack_to_remat, packing_to_plan,
                                        plan_to_packing)
from memopt.reductions.three_partition import (ThreePartitionInstance, partition_to_plan, solve_three_partition,
                                               three_partition_to_remat)
from memopt.remat import check_plan, evaluate_plan
from memopt.remat.brute_force import min_extra_cost, min_peak


# ---------------------------------------------------------------------------- treewidth check
def _exact_treewidth(G: nx.Graph) -> int:
    """Minimum over all elimination orders of the largest neighbourhood (tiny graphs)."""
    best = G.number_of_nodes()
    for perm in itertools.permutations(G.nodes):
        H, width = nx.Graph(G), 0
        for v in perm:
            nb = list(H[v])
            width = max(width, len(nb))
            if width >= best:
                break
            H.add_edges_from(itertools.combinations(nb, 2))
            H.remove_node(v)
        best = min(best, width)
    return best


@settings(max_examples=80)
@given(st.integers(1, 6), st.floats(0, 1), st.integers(0, 2**31))
def test_treewidth_two_test_is_exact(n, p, seed):
    G = nx.gnp_random_graph(n, p, seed=seed)
    adj = {v: set(G[v]) for v in G}
    assert treewidth_at_most_two(adj) == (_exact_treewidth(G) <= 2)


def test_treewidth_two_test_known_graphs():
    adj = lambda G: {v: set(G[v]) for v in G}  # noqa: E731
    assert not treewidth_at_most_two(adj(nx.complete_graph(4)))
    assert not treewidth_at_most_two(adj(nx.grid_2d_graph(3, 3)))
    assert treewidth_at_most_two(adj(nx.grid_2d_graph(2, 8)))
    assert treewidth_at_most_two(adj(nx.cycle_graph(9)))
    # a subdivided K4 is still out
    G = nx.complete_graph(4)
    G = nx.relabel_nodes(G, str)
    G.remove_edge("0", "1")
    G.add_edges_from([("0", "s"), ("s", "t"), ("t", "1")])
    assert not treewidth_at_most_two(adj(G))


# ---------------------------------------------------------------------------- knapsack
knapsacks = st.integers(0, 3).flatmap(lambda n: st.builds(
    KnapsackInstance,
    st.tuples(*[st.integers(0, 7)] * n), st.tuples(*[st.integers(0, 7)] * n), st.integers(0, 12)))


def _knapsack_brute(inst: KnapsackInstance) -> int:
    best = 0
    for r in range(inst.n + 1):
        for items in itertools.combinations(range(inst.n), r):
            if sum(inst.weights[i] for i in items) <= inst.capacity:
                best = max(best, sum(inst.values[i] for i in items))
    return best


@settings(max_examples=40)
@given(knapsacks, st.integers(1, 2))
def test_knapsack_reduction_preserves_the_optimum(inst, cap):
    value, items = knapsack_optimum(inst)
    assert value == _knapsack_brute(inst)
    assert sum(inst.weights[i] for i in items) <= inst.capacity
    assert sum(inst.values[i] for i in items) == value
    red = knapsack_to_remat(inst)
    g = red.graph
    # the graph: series-parallel (treewidth <= 2, checked exactly), stated size
    assert treewidth_at_most_two(op_adjacency(g))
    assert (g.num_ops, g.num_tensors) == (2 * inst.n + 1, 3 * inst.n + 1)
    # recomputation optimum = sum p - knapsack optimum
    cost, plan = min_extra_cost(g, red.memory_limit, cap)
    assert cost == red.offset - value
    peak, c = check_plan(g, plan, cap=cap)
    assert peak <= red.memory_limit and c == cost
    # plan -> packing: fits and is worth at least sum p - extra cost (here: optimal)
    packed = plan_to_packing(inst, red, plan)
    assert sum(inst.weights[i] for i in packed) <= inst.capacity
    assert sum(inst.values[i] for i in packed) >= red.offset - cost
    # packing -> plan: peak Q + weight, extra cost sum p - value, cap 1 suffices
    forward = packing_to_plan(inst, red, items)
    fpeak, fcost = check_plan(g, forward, cap=1)
    assert fcost == red.offset - value
    assert fpeak == max(sum(inst.weights) + sum(inst.weights[i] for i in items), sum(inst.weights))
    assert fpeak <= red.memory_limit


@settings(max_examples=15)
@given(knapsacks)
def test_knapsack_packings_map_to_plans_and_back(inst):
    red = knapsack_to_remat(inst)
    for r in range(inst.n + 1):
        for items in itertools.combinations(range(inst.n), r):
            plan = packing_to_plan(inst, red, items)
            peak, cost = evaluate_plan(red.graph, plan, cap=1)[:2]
            assert cost == red.offset - sum(inst.values[i] for i in items)
            assert peak == sum(inst.weights) + sum(inst.weights[i] for i in items)
            assert plan_to_packing(inst, red, plan) == items


def test_knapsack_min_peak_under_budget():
    inst = KnapsackInstance(weights=(3, 4, 5), values=(4, 5, 6), capacity=7)
    red = knapsack_to_remat(inst)
    # budget b: drop a set of value <= b, keep the rest: peak Q + kept weight
    for budget, kept in ((0, 12), (4, 9), (5, 8), (6, 7), (9, 5), (15, 0)):
        peak, cost, plan = min_peak(red.graph, budget, cap=1)
        assert peak == 12 + kept
        assert check_plan(red.graph, plan, cap=1) == (peak, cost)


def test_knapsack_rejects_bad_instances():
    with pytest.raises(OptionError):
        KnapsackInstance((1, 2), (1,), 3)
    with pytest.raises(OptionError):
        KnapsackInstance((-1,), (1,), 3)
    with pytest.raises(OptionError):
        KnapsackInstance((1,), (1,), -3)


# ---------------------------------------------------------------------------- 3-partition
def _fits(numbers) -> bool:
    try:
        ThreePartitionInstance(tuple(numbers))
        return True
    except OptionError:
        return False


@st.composite
def three_partitions(draw, m_max=2):
    """Valid 3-PARTITION instances without filtering: a random multiset whose last number is
    forced to make the total m*B (often a no-instance), or, when that number falls outside
    (B/4, B/2), a planted yes-instance built triple by triple."""
    m = draw(st.integers(1, m_max))
    B = draw(st.integers(7, 16))
    lo, hi = B // 4 + 1, (B - 1) // 2
    nums = [draw(st.integers(lo, hi)) for _ in range(3 * m - 1)]
    nums.append(m * B - sum(nums))
    if not _fits(nums):
        # a target whose triples exist: 3 * (B // 4 + 1) <= B <= 3 * ((B - 1) // 2)
        B = draw(st.sampled_from([b for b in range(7, 17) if 3 * (b // 4 + 1) <= b <= 3 * ((b - 1) // 2)]))
        lo, hi = B // 4 + 1, (B - 1) // 2
        nums = []
        for _ in range(m):
            a = draw(st.integers(max(lo, B - 2 * hi), min(hi, B - 2 * lo)))
            b = draw(st.integers(max(lo, B - a - hi), min(hi, B - a - lo)))
            nums += [a, b, B - a - b]
        nums = draw(st.permutations(nums))
    return ThreePartitionInstance(tuple(nums))


def _brute_three_partition(inst) -> bool:
    """Independent of solve_three_partition: try every assignment of items to groups."""
    m, B, a = inst.m, inst.target, inst.numbers
    for assign in itertools.product(range(m), repeat=len(a)):
        if all(sum(a[j] for j in range(len(a)) if assign[j] == t) == B and assign.count(t) == 3 for t in range(m)):
            return True
    return False


# yes and no instances with m = 2 (the brute force on the recomputation side is exhaustive)
FIXED = [((6, 6, 6, 6, 7, 9), False), ((6, 6, 6, 7, 7, 8), True), ((8, 8, 8, 12, 12, 12), False)]


@pytest.mark.parametrize("numbers,answer", FIXED)
def test_three_partition_reduction_yes_and_no(numbers, answer):
    inst = ThreePartitionInstance(numbers)
    assert (solve_three_partition(inst) is not None) == _brute_three_partition(inst) == answer
    red = three_partition_to_remat(inst, cap=1)
    cost, plan = min_extra_cost(red.graph, red.memory_limit, red.cap)
    assert (cost is not None and cost <= red.cost_budget) == answer
    if answer:
        assert cost == red.cost_budget
        assert check_plan(red.graph, plan, cap=red.cap)[0] <= red.memory_limit


@pytest.mark.slow
@pytest.mark.parametrize("numbers,answer", FIXED[:2])
def test_three_partition_reduction_cap_two(numbers, answer):
    """The private humps at work: with k = 2 the answer is kept both ways (about 5 s each)."""
    inst = ThreePartitionInstance(numbers)
    red = three_partition_to_remat(inst, cap=2)
    cost, plan = min_extra_cost(red.graph, red.memory_limit, 2)
    assert (cost is not None and cost <= red.cost_budget) == answer
    if answer:
        assert check_plan(red.graph, plan, cap=2) == (red.memory_limit, red.cost_budget)


@settings(max_examples=3)
@given(three_partitions(m_max=2))
def test_three_partition_reduction_random(inst):
    answer = _brute_three_partition(inst)
    assert (solve_three_partition(inst) is not None) == answer
    red = three_partition_to_remat(inst, cap=1)
    cost, _ = min_extra_cost(red.graph, red.memory_limit, red.cap)
    assert (cost is not None and cost <= red.cost_budget) == answer


@pytest.mark.parametrize("k", [1, 2, 3])
def test_private_humps_use_up_the_cap(k):
    """m = 1: always a yes-instance; the optimum uses exactly k re-runs per item, and the
    same graph under cap k - 1 has no plan within the limit."""
    inst = ThreePartitionInstance((3, 3, 4))
    red = three_partition_to_remat(inst, cap=k)
    cost, plan = min_extra_cost(red.graph, red.memory_limit, k)
    assert cost == red.cost_budget == 3 * k
    assert check_plan(red.graph, plan, cap=k) == (red.memory_limit, 3 * k)
    assert min_extra_cost(red.graph, red.memory_limit, k - 1) == (None, None)


@settings(max_examples=20)
@given(three_partitions(m_max=5), st.integers(1, 3))
def test_three_partition_solutions_map_to_plans(inst, k):
    sol = solve_three_partition(inst)
    red = three_partition_to_remat(inst, cap=k)
    g = red.graph
    m = inst.m
    assert red.cap == k and red.memory_limit == m * inst.target and red.cost_budget == 3 * m * k
    assert g.num_ops == (5 + 6 * (k - 1)) * m + 1 == g.num_tensors
    assert max(int(s) for s in g.tensor_size) < inst.target and max(int(w) for w in g.op_workspace) == inst.target
    if sol is not None:
        assert check_plan(g, partition_to_plan(inst, red, sol), cap=k) == (red.memory_limit, 3 * m * k)


def test_three_partition_scope_is_stated():
    inst = ThreePartitionInstance((5, 5, 6, 5, 5, 6))
    for bad_cap in (0, -1, 1.0, True):
        with pytest.raises(OptionError):
            three_partition_to_remat(inst, cap=bad_cap)
    # the honest limitation: this construction is not of treewidth <= 2 (item x check is a K_{3m, m+1})
    assert not treewidth_at_most_two(op_adjacency(three_partition_to_remat(inst).graph))
    for bad in ((1, 2), (1, 1, 2), (2, 2, 8), (3, 3, 3, 3, 3, 4)):
        with pytest.raises(OptionError):
            ThreePartitionInstance(bad)
