"""Reductions: knapsack <-> capped recomputation (value-preserving, series-parallel) and
3-PARTITION -> capped recomputation (every cap k >= 1, forests), checked against exact
solvers on both sides (brute force; CP-SAT where brute force is too slow)."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.errors import OptionError, ScheduleError
from memopt.reductions import op_adjacency, treewidth_at_most_two
from memopt.reductions.knapsack import (KnapsackInstance, knapsack_optimum, knapsack_to_remat, packing_to_plan,
                                        plan_to_packing)
from memopt.reductions.three_partition import (ThreePartitionInstance, partition_to_plan, plan_to_partition,
                                               solve_three_partition, three_partition_to_remat)
from memopt.remat import RematPlan, check_plan, evaluate_plan
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
def three_partitions(draw, m_min=1, m_max=2):
    """Valid 3-PARTITION instances without filtering: a random multiset whose last number is
    forced to make the total m*B (often a no-instance), or, when that number falls outside
    (B/4, B/2), a planted yes-instance built triple by triple."""
    m = draw(st.integers(m_min, m_max))
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


def _is_partition(inst, triples) -> bool:
    return (sorted(itertools.chain.from_iterable(triples)) == list(range(len(inst.numbers)))
            and all(len(t) == 3 and sum(inst.numbers[j] for j in t) == inst.target for t in triples))


def _decide(inst, red, answer, time_limit, cap=None):
    """CP-SAT on the decision instance (under ``cap``, default the reduction's), asserting
    what holds whatever it has when the time is up: every plan is checked and within the
    limit; a plan within the budget exists only for a yes-instance (there it costs exactly the
    budget, runs each item 1 + k times, takes first runs epoch by epoch and maps back to a
    partition); ``infeasible`` only for a no-instance; ``optimal`` at the budget exactly for a
    yes-instance. Returns the result (its status says whether CP-SAT decided)."""
    cap = red.cap if cap is None else cap
    r = memopt.remat(red.graph, memory_limit=red.memory_limit, cap=cap, method="cpsat", time_limit=time_limit)
    assert r.status in ("optimal", "feasible", "infeasible", "unknown")
    assert not (answer and r.status == "infeasible")
    assert r.plan is not None or r.status in ("infeasible", "unknown")
    if r.plan is not None:
        assert check_plan(red.graph, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)[0] \
            <= red.memory_limit
        assert (r.extra_cost <= red.cost_budget) <= answer
        if r.extra_cost <= red.cost_budget:
            assert r.extra_cost == red.cost_budget and _runs_per_item(red, r.plan) == {1 + cap}
            assert _first_runs_follow_the_epochs(red, r.plan)
            assert _is_partition(inst, plan_to_partition(inst, red, r.plan))
    if r.status == "optimal":
        assert (r.extra_cost == red.cost_budget) == answer
    return r


def _first_runs_follow_the_epochs(red, plan) -> bool:
    """Lemma 1 of the proof, observed on a plan: first runs of round ops and humps come epoch by epoch."""
    g = red.graph
    first = {}
    for i, (kind, x) in enumerate(zip(plan.kind.tolist(), plan.index.tolist())):
        if kind == 0:
            first.setdefault(g.op_names[x], i)
    spans = []
    for kind, what in red.epochs:
        names = what if kind == "round" else (what,)
        spans.append((min(first[v] for v in names), max(first[v] for v in names)))
    return all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


def _runs_per_item(red, plan) -> set:
    """How many times each item op runs (the proof: exactly 1 + k in every plan within the limit)."""
    g = red.graph
    runs = [g.op_names[x] for kind, x in zip(plan.kind.tolist(), plan.index.tolist()) if kind == 0]
    return {runs.count(v) for v in g.op_names if v.startswith("item")}


# m = 2 yes and no instances (B = 19 and 20)
FIXED = [((6, 6, 6, 6, 7, 9), False), ((6, 6, 6, 7, 7, 8), True), ((8, 8, 8, 12, 12, 12), False)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_three_partition_smallest_instances_by_brute_force(k):
    """m = 1 (always a yes-instance), brute force on the recomputation side: the optimum is
    exactly k re-runs per item (the budget), it maps back to the triple, and the same graph
    under cap k - 1 has no plan within the limit (the burns use up the cap)."""
    inst = ThreePartitionInstance((3, 3, 4))
    red = three_partition_to_remat(inst, cap=k)
    cost, plan = min_extra_cost(red.graph, red.memory_limit, k)
    assert cost == red.cost_budget == 3 * k
    assert check_plan(red.graph, plan, cap=k) == (red.memory_limit, 3 * k)
    assert _first_runs_follow_the_epochs(red, plan)
    assert plan_to_partition(inst, red, plan) == [[0, 1, 2]]
    assert _runs_per_item(red, plan) == {1 + k}
    assert min_extra_cost(red.graph, red.memory_limit, k - 1) == (None, None)


@settings(max_examples=6)
@given(three_partitions(m_max=1), st.integers(1, 3))
def test_three_partition_random_single_triples_by_brute_force(inst, k):
    red = three_partition_to_remat(inst, cap=k)
    cost, plan = min_extra_cost(red.graph, red.memory_limit, k)
    assert cost == red.cost_budget
    assert _is_partition(inst, plan_to_partition(inst, red, plan))


@pytest.mark.parametrize("k", [1, 2])
def test_three_partition_single_triple_decided_by_cpsat(k):
    """m = 1 (7 ops at k = 1, 11 at k = 2): CP-SAT decides in seconds (13 s on a core shared
    six ways), far below the limit, so it must: the optimum is the budget (its plan maps back
    to the triple), and under cap k - 1 no plan fits."""
    inst = ThreePartitionInstance((3, 3, 4))
    red = three_partition_to_remat(inst, cap=k)
    assert _decide(inst, red, True, 600.0).status == "optimal"
    assert _decide(inst, red, False, 600.0, cap=k - 1).status == "infeasible"


@pytest.mark.parametrize("numbers,answer", FIXED)
def test_three_partition_reduction_yes_and_no(numbers, answer):
    """m = 2, cap 1 (brute force is too slow at 20 ops): a yes-instance's partition gives a
    plan at the limit and the budget exactly; CP-SAT, whatever it has after a few seconds
    (its proofs here take minutes: the slow tests below), contradicts nothing."""
    inst = ThreePartitionInstance(numbers)
    assert (solve_three_partition(inst) is not None) == _brute_three_partition(inst) == answer
    red = three_partition_to_remat(inst, cap=1)
    if answer:
        plan = partition_to_plan(inst, red, solve_three_partition(inst))
        assert check_plan(red.graph, plan, cap=1) == (red.memory_limit, red.cost_budget)
    _decide(inst, red, answer, 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 3])
def test_three_partition_no_instance_stays_no_for_larger_caps(k):
    """The burns at work: with k = 2, 3 a no-instance has no plan within the limit (CP-SAT
    finds none, and on two idle cores proves it), while a yes-instance's plan from its
    partition meets limit and budget exactly. With no plan to stop it, the decomposition runs
    its whole share (half the limit) and the full model then proves the instance infeasible in
    seconds (k = 3 on two cores: 481 s at 900 s, most of it the decomposition's 450 s)."""
    no = ThreePartitionInstance((6, 6, 6, 6, 7, 9))
    red = three_partition_to_remat(no, cap=k)
    r = _decide(no, red, False, 900.0)
    assert r.plan is None   # no plan within the limit at all (proved: infeasible; else none found)
    yes = ThreePartitionInstance((6, 6, 6, 7, 7, 8))
    red = three_partition_to_remat(yes, cap=k)
    plan = partition_to_plan(yes, red, solve_three_partition(yes))
    assert check_plan(red.graph, plan, cap=k) == (red.memory_limit, red.cost_budget)


@settings(max_examples=2)
@given(three_partitions(m_min=2, m_max=2))
def test_three_partition_reduction_random(inst):
    answer = _brute_three_partition(inst)
    assert (solve_three_partition(inst) is not None) == answer
    red = three_partition_to_remat(inst, cap=1)
    if answer:
        plan = partition_to_plan(inst, red, solve_three_partition(inst))
        assert check_plan(red.graph, plan, cap=1) == (red.memory_limit, red.cost_budget)
    _decide(inst, red, answer, 5.0)


def _incidence_graph(g) -> nx.Graph:
    """Ops and tensors as vertices, an edge for every read and every write."""
    G = nx.Graph()
    G.add_nodes_from(("op", v) for v in range(g.num_ops))
    G.add_nodes_from(("t", t) for t in range(g.num_tensors))
    for v in range(g.num_ops):
        G.add_edges_from((("op", v), ("t", int(t))) for t in g.inputs_of(v))
        G.add_edges_from((("op", v), ("t", int(t))) for t in g.outputs_of(v))
    return G


@settings(max_examples=25)
@given(three_partitions(m_max=5), st.integers(1, 3))
def test_three_partition_instances_are_forests_of_stated_size(inst, k):
    sol = solve_three_partition(inst)
    red = three_partition_to_remat(inst, cap=k)
    g = red.graph
    m, B, A = inst.m, inst.target, sum(inst.numbers)
    N = m + k - 1
    assert red.cap == k and red.cost_budget == 3 * m * k
    assert red.memory_limit == N * (3 * m + 1) * (A + 1) + A
    # size: polynomial in the unary size m + B of the source
    assert g.num_ops == 3 * m * (N + 1) + N == g.num_tensors
    assert max(max(int(s) for s in g.tensor_size), max(int(w) for w in g.op_workspace)) <= red.memory_limit
    assert red.memory_limit <= (m + k) * (3 * m + 1) * (m * B + 1)
    # treewidth <= 2 exactly (series-parallel reduction), and in fact forests
    adj = op_adjacency(g)
    assert treewidth_at_most_two(adj)
    op_graph = nx.Graph()
    op_graph.add_nodes_from(adj)
    op_graph.add_edges_from((u, v) for u in adj for v in adj[u])
    assert nx.is_forest(op_graph)
    assert nx.is_forest(_incidence_graph(g))
    assert [kind for kind, _ in red.epochs] == ["round", "burn"] * (k - 1) + ["round", "hump"] * m
    if sol is not None:
        plan = partition_to_plan(inst, red, sol)
        assert check_plan(g, plan, cap=k) == (red.memory_limit, 3 * m * k)
        assert plan_to_partition(inst, red, plan) == [sorted(t) for t in sol]


@settings(max_examples=25)
@given(three_partitions(m_max=5), st.integers(1, 3))
def test_three_partition_source_clocks_have_treewidth_two_and_no_inputs(inst, k):
    sol = solve_three_partition(inst)
    red = three_partition_to_remat(inst, cap=k, clocks="source")
    g = red.graph
    m, N = inst.m, inst.m + k - 1
    assert g.num_ops == 3 * m * (N + 1) + N + 1 and g.num_tensors == 3 * m * (N + 1) + N
    assert all(int(p) >= 0 for p in g.tensor_producer)  # no graph input
    assert g.op_cost[g.op_index["start"]] == red.cost_budget + 1
    adj = op_adjacency(g)
    assert treewidth_at_most_two(adj)
    op_graph = nx.Graph()
    op_graph.add_nodes_from(adj)
    op_graph.add_edges_from((u, v) for u in adj for v in adj[u])
    assert nx.is_forest(op_graph) == (N == 1)  # a cycle through start and item0 once N >= 2
    assert treewidth_at_most_two({v: set(G) for v, G in _incidence_graph(g).adjacency()})
    if sol is not None:
        plan = partition_to_plan(inst, red, sol)
        assert check_plan(g, plan, cap=k) == (red.memory_limit, red.cost_budget)
        assert plan_to_partition(inst, red, plan) == [sorted(t) for t in sol]


def test_three_partition_source_clocks_smallest_by_brute_force():
    inst = ThreePartitionInstance((3, 3, 4))
    red = three_partition_to_remat(inst, cap=1, clocks="source")
    cost, plan = min_extra_cost(red.graph, red.memory_limit, 1)
    assert cost == red.cost_budget == 3
    assert plan_to_partition(inst, red, plan) == [[0, 1, 2]]
    assert min_extra_cost(red.graph, red.memory_limit, 0) == (None, None)


@pytest.mark.slow
@pytest.mark.parametrize("numbers,answer", FIXED[:2])
def test_three_partition_source_clocks_yes_and_no(numbers, answer):
    """m = 2, global cap 1. Plans within the budget never re-run `start` (it costs more than
    the budget), so the decision is the same under the caps start: 0, others: 1, which CP-SAT
    decides (about 40 s each on two cores)."""
    from memopt.remat.cpsat import solve_cpsat

    inst = ThreePartitionInstance(numbers)
    red = three_partition_to_remat(inst, cap=1, clocks="source")
    caps = [0 if v == "start" else 1 for v in red.graph.op_names]
    # yes: any plan within the limit is the witness (the theorem: it costs exactly the budget),
    # so CP-SAT stops at its first solution. no: no plan fits. Asserted is what holds whatever
    # CP-SAT has when the time is up (on two idle cores it decides both)
    r = solve_cpsat(red.graph, "min_cost", memory_limit=red.memory_limit, cap=caps, time_limit=600.0,
                    first_solution=answer)
    assert r.status in (("optimal", "feasible", "unknown") if answer else ("infeasible", "unknown"))
    assert r.plan is not None or r.status in ("infeasible", "unknown")
    if r.plan is not None:
        assert check_plan(red.graph, r.plan, cap=1) == (red.memory_limit, red.cost_budget)
        assert _is_partition(inst, plan_to_partition(inst, red, r.plan))


def test_plan_to_partition_rejects_plans_that_prove_nothing():
    inst = ThreePartitionInstance((6, 6, 6, 7, 7, 8))
    red = three_partition_to_remat(inst, cap=1)
    with pytest.raises(OptionError, match="summing to B"):
        partition_to_plan(inst, red, [[0, 1, 2], [3, 4, 5]])      # 18 and 22, not 20
    g = red.graph
    # the no-recomputation plan is valid but exceeds the limit at the first hump
    steps = [{"run": f"item{j}"} for j in range(6)]
    for kind, what in red.epochs:
        for v in (what if kind == "round" else (what,)):
            steps += [{"run": v}, {"free": f"clock.{v}"}]
    plan = RematPlan.from_steps(g, steps)
    peak = evaluate_plan(g, plan, cap=1)[0]
    assert peak > red.memory_limit
    with pytest.raises(OptionError, match="memory limit"):
        plan_to_partition(inst, red, plan)
    # a plan breaking the cap is invalid under the instance's cap
    forward = partition_to_plan(inst, red, solve_three_partition(inst))
    extra = RematPlan.from_pairs(list(zip(forward.kind.tolist(), forward.index.tolist()))
                                 + [(1, g.tensor_index["x0"]), (0, g.op_index["item0"])])
    with pytest.raises(ScheduleError):
        plan_to_partition(inst, red, extra)
    # with clocks="source" a plan re-running start is within the limit but over the budget
    red = three_partition_to_remat(inst, cap=1, clocks="source")
    g = red.graph
    forward = partition_to_plan(inst, red, solve_three_partition(inst))
    again = RematPlan.from_pairs(list(zip(forward.kind.tolist(), forward.index.tolist())) + [(0, g.op_index["start"])])
    peak, cost = check_plan(g, again, cap=1)
    assert peak <= red.memory_limit and cost > red.cost_budget
    with pytest.raises(OptionError, match="budget"):
        plan_to_partition(inst, red, again)


def test_three_partition_scope_is_stated():
    inst = ThreePartitionInstance((5, 5, 6, 5, 5, 6))
    for bad_cap in (0, -1, 1.0, True):
        with pytest.raises(OptionError):
            three_partition_to_remat(inst, cap=bad_cap)
    with pytest.raises(OptionError):
        partition_to_plan(inst, three_partition_to_remat(inst), [[0, 1, 2]])
    with pytest.raises(OptionError):
        three_partition_to_remat(inst, clocks="nope")
    for bad in ((1, 2), (1, 1, 2), (2, 2, 8), (3, 3, 3, 3, 3, 4)):
        with pytest.raises(OptionError):
            ThreePartitionInstance(bad)
