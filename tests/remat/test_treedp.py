"""The exact recomputation DP (memopt.remat.treedp) against the exhaustive search, on
random small graphs and random small series-parallel graphs, caps 0-2, both questions;
its plans pass the independent checker; with cap 0 it is the scheduling core's optimum;
the A* order and plain Dijkstra agree; the bound charges what Lemma 4 says; branch and
bound (an incumbent plan, a proven cost lower bound: Lemma 5) keeps the optimum and answers
with the incumbent on a time-out; on series-parallel graphs of 14-20 ops it agrees with
CP-SAT."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.reductions.knapsack import KnapsackInstance, knapsack_to_remat
from memopt.remat import brute_force as bf
from memopt.remat import check_plan, evaluate_plan, plan_from_order
from memopt.remat.lower_bounds import peak_lower_bound
from memopt.remat.treedp import _Instance, min_extra_cost, min_peak
from memopt.schedule.brute_force import brute_force_schedule, random_sp_edges, random_tensor_graph

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_sp(rng: np.random.Generator, n_ops: int) -> TensorGraph:
    """Random two-terminal series-parallel op graph (subdivisions and parallel paths), one
    tensor per edge, random graph outputs, graph inputs, workspaces and costs."""
    edges, n = random_sp_edges(rng, n_ops)
    tensors, ins, outs = [], [[] for _ in range(n)], [[] for _ in range(n)]
    for i, (u, w) in enumerate(edges):
        tensors.append(Tensor(f"e{i}", int(rng.integers(0, 12)), output=bool(rng.random() < 0.1)))
        outs[u].append(f"e{i}")
        ins[w].append(f"e{i}")
    for v in range(n):
        if rng.random() < 0.2:
            tensors.append(Tensor(f"in{v}", int(rng.integers(0, 12)), resident=bool(rng.random() < 0.2)))
            ins[v].append(f"in{v}")
        if not outs[v]:
            tensors.append(Tensor(f"o{v}", int(rng.integers(0, 12)), output=True))
            outs[v].append(f"o{v}")
    ops = [Op(f"op{v}", tuple(ins[v]), tuple(outs[v]), workspace=int(rng.integers(0, 6)) if rng.random() < 0.3 else 0,
              cost=float(rng.integers(1, 10))) for v in range(n)]
    return TensorGraph.build(tensors, ops)


def limits(graph: TensorGraph, cap) -> list[int]:
    """Memory limits around the interesting range: the no-recomputation peak of the
    topological order, fractions of it, the lower bound and just below it."""
    hi = evaluate_plan(graph, plan_from_order(graph, graph.topological_order())).peak
    lb = peak_lower_bound(graph, cap, trap=False)
    return sorted({hi, hi - 1, (hi * 4) // 5, (hi * 3) // 5, lb, lb - 1} - {-1})


def assert_same_min_cost(graph, cap):
    for M in limits(graph, cap):
        c, _ = bf.min_extra_cost(graph, M, cap)
        r = min_extra_cost(graph, M, cap, use_bound=False)
        if c is None:
            assert r.status == "infeasible" and r.plan is None
        else:
            assert r.status == "optimal" and r.extra_cost == c
            assert r.peak <= M
            assert check_plan(graph, r.plan, cap) == (r.peak, r.extra_cost)
            assert check_plan(graph, r.plan.to_doc(graph), cap) == (r.peak, r.extra_cost)
        # the bound shortcut gives the same answer
        r2 = min_extra_cost(graph, M, cap)
        assert r2.status == r.status and r2.extra_cost == r.extra_cost


def assert_same_min_peak(graph, cap, budgets=(0, 4, 1000)):
    for B in budgets:
        p, _, _ = bf.min_peak(graph, B, cap)
        r = min_peak(graph, B, cap)
        assert r.status == "optimal" and r.peak == p and r.extra_cost <= B
        assert check_plan(graph, r.plan, cap) == (r.peak, r.extra_cost)


graphs = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 2))


@SETTINGS
@given(graphs)
def test_min_extra_cost_equals_brute_force(args):
    seed, n, cap = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    assert_same_min_cost(g, cap)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(0, 2)))
def test_min_peak_equals_brute_force(args):
    seed, n, cap = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    assert_same_min_peak(g, cap)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 7), st.integers(0, 2)))
def test_series_parallel_equals_brute_force(args):
    seed, n, cap = args
    g = random_sp(np.random.default_rng(seed), n)
    assert_same_min_cost(g, cap)


@settings(max_examples=15, deadline=None)
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 6), st.integers(0, 2)))
def test_series_parallel_min_peak_equals_brute_force(args):
    seed, n, cap = args
    g = random_sp(np.random.default_rng(seed), n)
    assert_same_min_peak(g, cap, budgets=(0, 5))


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7)))
def test_cap_zero_is_the_scheduling_optimum(args):
    seed, n = args
    g = random_tensor_graph(np.random.default_rng(seed), n)
    _, best = brute_force_schedule(g)
    r = min_peak(g, 0, 0)
    assert r.status == "optimal" and r.peak == best and r.extra_cost == 0
    assert check_plan(g, r.plan, 0) == (best, 0)
    assert min_extra_cost(g, best - 1, 0, use_bound=False).status == "infeasible"


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 2)))
def test_per_op_caps(args):
    seed, n, cap = args
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, n)
    caps = [int(rng.integers(0, cap + 1)) for _ in range(g.num_ops)]
    for M in limits(g, caps)[:3]:
        c, _ = bf.min_extra_cost(g, M, caps)
        r = min_extra_cost(g, M, caps, use_bound=False)
        assert (c is None) == (r.status == "infeasible")
        if c is not None:
            assert r.extra_cost == c and check_plan(g, r.plan, caps)[1] == c


@pytest.mark.parametrize("weights,values,W", [((3, 4, 5), (4, 5, 6), 7), ((1, 2, 3, 4), (1, 3, 3, 5), 5),
                                              ((5, 5), (1, 1), 4)])
def test_knapsack_instances(weights, values, W):
    """The knapsack reduction: min extra cost = sum of values - knapsack optimum."""
    import itertools
    inst = KnapsackInstance(weights, values, W)
    red = knapsack_to_remat(inst)
    best = max(sum(values[i] for i in K) for r in range(len(weights) + 1)
               for K in itertools.combinations(range(len(weights)), r) if sum(weights[i] for i in K) <= W)
    for cap in (1, 2):
        r = min_extra_cost(red.graph, red.memory_limit, cap)
        assert r.status == "optimal" and r.extra_cost == red.offset - best


def test_a_chain_recomputes_a_cheap_early_value():
    """A long skip from a cheap op: recomputing it is the only way under the limit."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
             Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])
    no_remat = min_peak(g, 0, 0)
    assert no_remat.peak == 18  # a (10) + c (4) + d (4) while D runs
    r = min_extra_cost(g, 15, 1)
    assert r.status == "optimal" and r.extra_cost == 1 and r.peak <= 15
    assert min_extra_cost(g, 15, 0).status == "infeasible"
    assert min_peak(g, 1, 1).peak == 15  # 10 (a, re-run) + 4 (d) + 1 (z)
    assert min_peak(g, 0, 1).peak == 18


def test_time_limit_and_bad_options():
    g = random_sp(np.random.default_rng(3), 7)
    r = min_extra_cost(g, 10**9, 2, max_states=0)
    assert r.status in ("time_limit", "optimal")
    with pytest.raises(OptionError):
        min_extra_cost(g, 10, -1)
    with pytest.raises(OptionError):
        min_extra_cost(g, 1.5, 1)
    with pytest.raises(OptionError):
        min_peak(g, -1, 1)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.sampled_from([1.0, 0.9, 0.8]))
def test_registry_method_equals_cpsat(seed, n, ratio):
    """The DP through the recomputation registry (common start/finish) agrees with CP-SAT."""
    from memopt.core import peak
    from memopt.remat.registry import get_method

    g = random_tensor_graph(np.random.default_rng(seed), n)
    limit = int(int(peak(g, g.topological_order())) * ratio)
    r = get_method("treedp").load()(g, question="min_cost", memory_limit=limit, cap=1, time_limit=30)
    c = get_method("cpsat").load()(g, question="min_cost", memory_limit=limit, cap=1, time_limit=30)
    assert (r.status, r.extra_cost) == (c.status, c.extra_cost)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 2), st.booleans()))
def test_astar_and_dijkstra_agree(args):
    """The bound only reorders the search: same status and optimum with and without it (an
    overestimating bound would make A* stop at a costlier goal)."""
    seed, n, cap, sp = args
    rng = np.random.default_rng(seed)
    g = random_sp(rng, n + 1) if sp else random_tensor_graph(rng, n)
    for M in limits(g, cap):
        a = min_extra_cost(g, M, cap, use_bound=False)
        d = min_extra_cost(g, M, cap, use_bound=False, use_astar=False)
        assert (a.status, a.extra_cost) == (d.status, d.extra_cost)


def test_rerun_bound_charges_a_kept_and_a_missing_tensor():
    """A chain A -> B -> C -> Z with all of A, B run: keeping ``a`` (B's input) after B ran
    charges B, dropping ``b`` (still needed by C) charges B and, ``a`` gone, A too."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 3), Tensor("b", 2), Tensor("c", 2), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=7), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=3),
             Op("Z", ("c",), ("z",), cost=1)])
    inst = _Instance(g, 2)
    t = {name: i for i, name in enumerate(g.tensor_names)}
    ran = [1, 1, 0, 0]
    assert inst.rerun_bound(1 << t["b"], ran) == 0
    assert inst.rerun_bound((1 << t["a"]) | (1 << t["b"]), ran) == 5
    assert inst.rerun_bound(0, ran) == 5 + 7


SP_VS_CPSAT = [(14, 0, 0.8), (14, 3, 0.9), (20, 1, 0.9), (20, 4, 0.9)]


@pytest.mark.parametrize("n_ops,seed,ratio", SP_VS_CPSAT)
def test_series_parallel_equals_cpsat(n_ops, seed, ratio):
    """Random series-parallel graphs of 14-20 ops (the benchmark's generator), cap 2, a
    limit below the no-recomputation optimum: the DP and CP-SAT prove the same optimum."""
    from memopt.remat.brute_force import random_sp_graph
    from memopt.remat.registry import get_method
    from memopt.schedule import schedule

    g = random_sp_graph(np.random.default_rng(seed), n_ops)
    p0 = schedule(g, method="exact", time_limit=60)
    assert p0.status in ("optimal", "certified")
    limit = int(ratio * int(p0.peak))
    r = min_extra_cost(g, limit, 2, time_limit=120)
    c = get_method("cpsat").load()(g, question="min_cost", memory_limit=limit, cap=2, time_limit=120)
    assert r.status == "optimal" and c.status == "optimal"
    assert r.extra_cost == c.extra_cost > 0 and r.peak <= limit
    assert check_plan(g, r.plan, 2) == (r.peak, r.extra_cost)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.booleans()))
def test_incumbent_and_cost_lower_bound_keep_the_optimum(args):
    """Branch and bound (Lemma 5): an incumbent plan within the limit (the heuristic's, or
    the optimum itself) and a proven cost lower bound change neither the status nor the
    optimum; an optimal incumbent that meets the bound is returned without a search."""
    from memopt.remat.lower_bounds import cost_lower_bound
    from memopt.remat.registry import get_method

    seed, n, cap, sp = args
    rng = np.random.default_rng(seed)
    g = random_sp(rng, n + 1) if sp else random_tensor_graph(rng, n)
    for M in limits(g, cap):
        c, _ = bf.min_extra_cost(g, M, cap)
        if c is None:
            continue
        opt = min_extra_cost(g, M, cap, use_bound=False)
        h = get_method("heuristic").load()(g, question="min_cost", memory_limit=M, cap=cap, time_limit=5)
        lower = cost_lower_bound(g, M, cap, time_limit=5).value
        assert lower <= c
        for plan in (h.plan if h.peak is not None and h.peak <= M else None, opt.plan):
            r = min_extra_cost(g, M, cap, use_bound=False, incumbent=plan, cost_lower=lower)
            assert r.status == "optimal" and r.extra_cost == c and r.peak <= M
            assert check_plan(g, r.plan, cap) == (r.peak, r.extra_cost)
        met = min_extra_cost(g, M, cap, incumbent=opt.plan, cost_lower=c)
        assert (met.status, met.extra_cost, met.states) == ("optimal", c, 0)


def test_time_limit_returns_the_incumbent():
    """Stopped before the proof, the DP answers with the incumbent it was given (not proved);
    an incumbent over the limit is ignored."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
             Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])
    inc = min_extra_cost(g, 15, 1).plan  # re-runs A: extra cost 1
    r = min_extra_cost(g, 15, 1, max_states=0, incumbent=inc)
    assert (r.status, r.extra_cost) == ("time_limit", 1) and r.plan is inc
    assert check_plan(g, r.plan, 1) == (r.peak, 1)
    proved = min_extra_cost(g, 15, 1, incumbent=inc)  # nothing cheaper: the incumbent is optimal
    assert (proved.status, proved.extra_cost) == ("optimal", 1) and proved.states > 0
    over = min_extra_cost(g, 14, 1, max_states=0, incumbent=inc)
    assert over.status in ("time_limit", "infeasible") and over.plan is None


@pytest.mark.slow
@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 8), st.integers(0, 2), st.booleans()))
def test_held_tensor_rule_keeps_the_optimum(args):
    """Lemma 6 (a state whose held tensors leave no room for the first run of an op still to
    run is a dead end) drops no optimal plan: with and without it the DP equals the
    exhaustive search, and the rule only ever removes states' successors, never adds any."""
    seed, n, cap, sp = args
    rng = np.random.default_rng(seed)
    g = random_sp(rng, n) if sp else random_tensor_graph(rng, n)
    for M in limits(g, cap):
        c, _ = bf.min_extra_cost(g, M, cap)
        on = min_extra_cost(g, M, cap, use_bound=False)
        off = min_extra_cost(g, M, cap, use_bound=False, prune_held=False)
        for r in (on, off):
            assert (r.status == "infeasible") == (c is None)
            if c is not None:
                assert r.extra_cost == c and check_plan(g, r.plan, cap) == (r.peak, c)
        dijkstra_on = min_extra_cost(g, M, cap, use_bound=False, use_astar=False)
        dijkstra_off = min_extra_cost(g, M, cap, use_bound=False, use_astar=False, prune_held=False)
        assert dijkstra_on.states <= dijkstra_off.states


def test_held_tensor_rule_prunes():
    """A tensor ``a`` kept for a late reader ``Z`` while ``D`` (16 bytes out) still has to
    run does not fit under 27 bytes: the rule sees it at once (the state after ``B`` with
    ``a`` kept is dropped; only ``A`` may re-run, so ``Z`` is ``a``'s one possible reader),
    so the search needs fewer states for the same optimum."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 16), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
             Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])
    caps = [1, 0, 0, 0, 0]
    on = min_extra_cost(g, 27, caps, use_bound=False, use_astar=False)
    off = min_extra_cost(g, 27, caps, use_bound=False, use_astar=False, prune_held=False)
    assert on.status == off.status == "optimal" and on.extra_cost == off.extra_cost == 1
    assert on.states < off.states


@settings(max_examples=10, deadline=None)
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 8), st.integers(1, 2)))
def test_compiled_kernel_equals_its_pure_twin(args):
    """The expansion kernel compiled by numba and its pure-Python twin (what small graphs
    run) expand the same states and find the same optimum."""
    from memopt import _jit

    seed, n, cap = args
    g = random_sp(np.random.default_rng(seed), n)
    for M in limits(g, cap):
        with _jit.mode("pure"):
            a = min_extra_cost(g, M, cap, use_bound=False)
        with _jit.mode("compiled"):
            b = min_extra_cost(g, M, cap, use_bound=False)
        assert (a.status, a.extra_cost, a.peak, a.states) == (b.status, b.extra_cost, b.peak, b.states)


@settings(max_examples=15, deadline=None)
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 6), st.sampled_from([0.25, 1e13, 3e14])))
def test_fractional_and_huge_costs_stay_exact(args):
    """Costs that are not integers are scaled to exact integers for the kernel (units of
    1/D); costs too large for int64 sums take the exact fallback (the kernel returns the
    bound's op set, Python adds exact costs). Both equal the exhaustive search."""
    seed, n, unit = args
    rng = np.random.default_rng(seed)
    base = random_sp(rng, n)
    ops = [Op(base.op_names[v], tuple(base.tensor_names[t] for t in base.inputs_of(v)),
              tuple(base.tensor_names[t] for t in base.outputs_of(v)), workspace=int(base.op_workspace[v]),
              cost=float(base.op_cost[v]) * unit + 0.5) for v in range(base.num_ops)]
    tensors = [Tensor(base.tensor_names[t], int(base.tensor_size[t]), output=bool(base.tensor_output[t]),
                      resident=bool(base.tensor_resident[t])) for t in range(base.num_tensors)]
    g = TensorGraph.build(tensors, ops)
    for M in limits(g, 1):
        c, _ = bf.min_extra_cost(g, M, 1)
        r = min_extra_cost(g, M, 1, use_bound=False)
        assert (r.status == "infeasible") == (c is None)
        if c is not None:
            assert r.extra_cost == c and check_plan(g, r.plan, 1) == (r.peak, c)


def test_large_caps_use_wide_run_counts():
    """Caps above 253 store run counts in four bytes per op: same optimum as a cap that is
    just large enough (the chain needs one re-run)."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
             Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])
    for cap in (300, None):
        r = min_extra_cost(g, 15, cap)
        assert (r.status, r.extra_cost) == ("optimal", 1) and check_plan(g, r.plan, cap) == (r.peak, 1)


def test_memory_forced_rerun_is_charged_at_the_start():
    """Lemma 7: ``a`` (10 bytes, made by ``A``) is read only by ``Z``, after ``D`` (4 in, 16
    out); under 27 bytes ``a`` cannot be held across ``D``, so ``A`` must re-run: the start
    state's bound is ``c(A) = 1`` (Lemma 4 alone sees nothing yet), and the optimum is 1."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("b", 1), Tensor("c", 4), Tensor("d", 16), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a", "b"), cost=1), Op("B", ("b",), ("c",), cost=5), Op("D", ("c",), ("d",), cost=5),
             Op("Z", ("a", "d"), ("z",), cost=5)])
    assert _Instance(g, 1).settle_start(0, 27)[2] == 1
    assert _Instance(g, 1, prune_held=False).settle_start(0, 27)[2] == 0
    assert _Instance(g, 1).settle_start(0, 40)[2] == 0  # room to hold it: nothing forced
    assert _Instance(g, 0).settle_start(0, 27) is None  # cap 0: A cannot re-run, a is held: dead end
    r = min_extra_cost(g, 27, 1, use_bound=False)
    assert (r.status, r.extra_cost) == ("optimal", 1) and check_plan(g, r.plan, 1) == (r.peak, 1)
    assert min_extra_cost(g, 27, 0, use_bound=False).status == "infeasible"
    assert bf.min_extra_cost(g, 27, 1)[0] == 1 and bf.min_extra_cost(g, 27, 0)[0] is None
