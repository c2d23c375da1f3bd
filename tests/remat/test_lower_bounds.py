"""The lower bounds of memopt.remat.lower_bounds never exceed the exhaustive optimum: the bound
on the peak of any capped plan (its terms behave as proved in proofs/remat_infeasibility.md),
the relaxed-graph bound and the extra-cost bound with its cores (proofs/remat_cost_bounds.md)."""

from __future__ import annotations

import importlib
import time
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memopt.core import Op, Tensor, TensorGraph
from memopt.remat import brute_force as bf
from memopt.remat.lower_bounds import (
    cost_lower_bound,
    held_inputs_graph,
    infeasibility_witness,
    min_hitting_set,
    peak_lower_bound,
    peak_lower_bound_details,
    relaxed_graph,
    relaxed_peak_bound,
    relaxed_trap_exceeds,
    rerun_graph,
    rerun_trap_exceeds,
)
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

from conftest import assert_cost_bound_sound, rerun_set

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


# ---------------------------------------------------------------------------- relaxed graphs, cost bounds
# proofs/remat_cost_bounds.md: Theorem 1 (relaxed graph), Theorem 2 (cores, hitting sets)


def _rerun_set_case(args, **graph_kw):
    """A random graph, a set ``S`` of ops allowed to re-run (bits of ``pick``, cap ``k``, the
    others cap 0) and the least peak of every plan within those caps (brute force)."""
    seed, n, k, pick = args
    g = random_tensor_graph(np.random.default_rng(seed), n, **graph_kw)
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    least, _, _ = bf.min_peak(g, BIG, [k if v in S else 0 for v in range(g.num_ops)])
    return g, S, least


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20)))
def test_relaxed_graph_bound_is_below_every_plan_that_reruns_only_its_ops(args):
    g, S, least = _rerun_set_case(args)
    b = relaxed_peak_bound(g, S)
    assert b <= least
    assert relaxed_trap_exceeds(g, S, b - 1) and not relaxed_trap_exceeds(g, S, b)
    # no op may re-run: the relaxed graph is the graph, and the bound the order trap bound
    assert relaxed_graph(g, []) is g
    # more ops that may re-run can only lower the least peak the relaxation allows
    assert relaxed_peak_bound(g, range(g.num_ops)) <= least


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 2), st.integers(0, 6)))
def test_cost_bound_never_exceeds_the_least_extra_cost(args):
    seed, n, cap, below = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.3)
    top = peak_lower_bound(g, 0)
    limit = max(0, top - below * max(1, top // 12))
    cost, plan = bf.min_extra_cost(g, limit, cap)
    cb = cost_lower_bound(g, limit, cap, time_limit=20)
    # every core (and row) holds an op that the optimal plan re-runs; the hitting set meets every core
    if assert_cost_bound_sound(cb, cost, plan):
        for core in cb.cores:
            assert set(core) & set(cb.hitting_set)


def test_cost_bound_of_a_value_held_across_the_peak_is_its_recomputation():
    """a (6 bytes, made by A at cost 5) is read again by Z after the big op B: below 12 bytes
    a must be freed across B and rebuilt, so every plan re-runs A (one core, {A}); a second
    cheap value (cost 1) does not help."""
    g = TensorGraph.build(
        tensors=[Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1), Tensor("z", 1, output=True)],
        ops=[Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1), Op("B", ("m",), ("b",), cost=1),
             Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])
    cb = cost_lower_bound(g, 11, 1, trap_cuts=False)
    assert (cb.value, cb.cores, cb.infeasible, cb.complete) == (5, ((0,),), False, True)
    # the trap cuts say it before any core: B's trap (12) needs 1 byte that only A uncovers
    cb = cost_lower_bound(g, 11, 1)
    assert (cb.value, cb.cores, cb.infeasible, cb.complete, cb.hitting_set) == (5, (), False, True, (0,))
    assert [(c.op, c.need, c.ops) for c in cb.cuts] == [(2, 1, (0,)), (3, 1, (0,))]
    assert bf.min_extra_cost(g, 11, 1)[0] == 5
    assert cost_lower_bound(g, 12, 1).value == 0          # no re-run needed at 12
    assert cost_lower_bound(g, 7, 1).infeasible           # Z alone needs a, c, z: 8 bytes
    assert bf.min_extra_cost(g, 7, 1) == (None, None)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6)))
def test_min_hitting_set_equals_exhaustive_search(args):
    seed, n = args
    rng = np.random.default_rng(seed)
    costs = [int(c) for c in rng.integers(0, 9, n)]
    cores = [tuple(sorted({int(v) for v in rng.integers(0, n, int(rng.integers(0, n + 1)))}))
             for _ in range(int(rng.integers(1, 4)))]
    best = None
    for mask in range(1 << n):
        chosen = {v for v in range(n) if mask >> v & 1}
        if all(chosen & set(core) for core in cores):
            c = sum(costs[v] for v in chosen)
            best = c if best is None else min(best, c)
    value, hs, optimal = min_hitting_set(cores, costs, time.perf_counter() + 20)
    assert optimal and value == best
    if best is not None:
        assert all(set(hs) & set(core) for core in cores)
        assert sum(costs[v] for v in hs) == best
        # an upper bound at the optimum itself leaves out only ops no cheapest set holds
        value, hs, optimal = min_hitting_set(cores, costs, time.perf_counter() + 20, upper=best)
        assert optimal and value == best and all(set(hs) & set(core) for core in cores)


def test_the_pool_gets_the_sets_of_a_solve_only_once_it_returned(monkeypatch):
    # the solution callback runs in the solve's thread: the sets it collects reach the
    # caller's pool when the solve returned in time, never from a solve dropped at its deadline
    # (the solve is run here in full, then reported dropped)
    lb = importlib.import_module("memopt.remat.lower_bounds")   # memopt.remat is also a function

    cores, costs = [(0, 1), (1, 2)], [3, 1, 3]

    def solved(solver, model, end, callback=None):
        return solver.solve(model, callback)

    def dropped(solver, model, end, callback=None):
        solver.solve(model, callback)
        return None

    monkeypatch.setattr(lb, "solve_by", solved)
    pool = []
    assert min_hitting_set(cores, costs, time.perf_counter() + 20, pool=pool)[:2] == (1, (1,))
    assert (1,) in pool and all(set(h) & set(c) for h in pool for c in cores)
    monkeypatch.setattr(lb, "solve_by", dropped)
    pool = []
    assert min_hitting_set(cores, costs, time.perf_counter() + 20, pool=pool) == (0, (), False)
    assert pool == []


# ---------------------------------------------------------------------------- the pair trap as the oracle
# proofs/remat_cost_bounds.md §2, "Stronger oracles": any lower bound on the least
# no-recomputation peak of G_S may decide "G_S has no plan within M"; the pair trap is one


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 7), st.integers(1, 2), st.integers(0, 2**20)))
def test_relaxed_pair_trap_is_below_every_plan_that_reruns_only_its_ops(args):
    g, S, least = _rerun_set_case(args, max_size=30, edge_prob=0.3)
    assert not relaxed_trap_exceeds(g, S, least, pair_time=10)
    # the pair oracle only adds "yes" answers to the single traps
    for limit in (least - 1, least - 5, relaxed_peak_bound(g, S) - 1):
        if relaxed_trap_exceeds(g, S, limit):
            assert relaxed_trap_exceeds(g, S, limit, pair_time=10)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 7), st.integers(1, 2)))
def test_cost_bound_with_pair_oracle_never_exceeds_the_least_extra_cost(args):
    """Limits just below the pair trap of the graph: where the pair trap is above the forward
    trap these are the limits at which only the pair oracle yields cores."""
    seed, n, cap = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.3)
    from memopt.bounds.trap import pair_trap_bound

    limit = int(pair_trap_bound(g).value) - 1
    cost, plan = bf.min_extra_cost(g, limit, cap)
    cb = cost_lower_bound(g, limit, cap, time_limit=30, pair_time=10)
    weak = cost_lower_bound(g, limit, cap, time_limit=30, pair_time=0)
    if cb.infeasible:
        assert cost is None
        return
    assert Fraction(cb.value) >= Fraction(weak.value or 0)
    if cost is None:
        return
    assert Fraction(cb.value) <= Fraction(cost)
    for core in cb.cores:
        assert set(core) & rerun_set(plan)


def test_pair_oracle_finds_the_core_the_single_traps_miss():
    """A random 6-op graph (seed 58) whose forward trap (104) is below its pair trap (121):
    at the limit 120 the single traps of G see no need to re-run anything (bound 0), the pair
    trap does, and the cost bound it gives (3) is the exhaustive optimum. So does the
    scheduler's level with the pair traps off (that level was skipped then, once)."""
    from memopt.bounds.trap import forward_trap_bound, pair_trap_bound

    rng = np.random.default_rng(58)
    g = random_tensor_graph(rng, int(rng.integers(4, 8)), max_size=30, edge_prob=0.3)
    assert (forward_trap_bound(g).value, pair_trap_bound(g).value) == (104, 121)
    assert cost_lower_bound(g, 120, 1, pair_time=0, exact_time=0).value == 0
    # without pair traps the scheduler's proved bound (the last level) sees it too
    assert cost_lower_bound(g, 120, 1, pair_time=0).value == 3
    cb = cost_lower_bound(g, 120, 1, pair_time=5)
    assert cb.value == 3 and cb.cores
    assert bf.min_extra_cost(g, 120, 1)[0] == 3


# ---------------------------------------------------------------------------- held inputs (Theorem 1')


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20)))
def test_held_inputs_graph_bound_is_below_every_plan_that_reruns_only_its_ops(args):
    g, S, least = _rerun_set_case(args, max_size=30, edge_prob=0.3)
    strong = held_inputs_graph(g, S)
    from memopt.bounds.trap import forward_trap_bound

    assert forward_trap_bound(strong).value <= least
    assert not relaxed_trap_exceeds(g, S, least, held_inputs=True, pair_time=10)
    # the oracle with held inputs answers "above" wherever the plain one does
    for limit in (relaxed_peak_bound(g, S) - 1, least - 1):
        if relaxed_trap_exceeds(g, S, limit):
            assert relaxed_trap_exceeds(g, S, limit, held_inputs=True)
    assert held_inputs_graph(g, []) is g


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20)),
       st.permutations(["held", "relaxed", "last"]))
def test_the_oracle_answer_does_not_depend_on_which_test_goes_first(args, first):
    """``relaxed_trap_exceeds`` asks G_S^+, G_S and the last-run trap in the order of the one
    that said yes last (kept on the graph): whatever that order, the answer is the disjunction
    of the three, and never "yes" at the least peak of the plans it speaks for."""
    from memopt.bounds.trap import forward_trap_exceeds
    from memopt.core.signed_dag import graph_to_dag
    from memopt.remat.last_runs import last_run_trap_exceeds

    g, S, least = _rerun_set_case(args, max_size=30, edge_prob=0.3)
    for limit in sorted({least - 1, least, relaxed_peak_bound(g, S) - 1, relaxed_peak_bound(g, S)}):
        alone = [forward_trap_exceeds(graph_to_dag(held_inputs_graph(g, S)).dag, limit),
                 forward_trap_exceeds(graph_to_dag(relaxed_graph(g, S)).dag, limit),
                 last_run_trap_exceeds(g, S, limit)]
        g._cache["remat_oracle_first"] = list(first)
        assert relaxed_trap_exceeds(g, S, limit, held_inputs=True, last_runs=True) == any(alone)
        assert limit < least or not any(alone)


def test_the_remembered_answers_cover_subsets_of_yes_and_supersets_of_no():
    """``_Answers`` (proof §2 (vi)): a subset of a set found over the limit is over; the growth
    takes a superset of a set found under at the same level as under, and forgets those once
    the level rises; only the maximal yes sets and minimal no sets are kept."""
    from memopt.remat.lower_bounds import _Answers

    a = _Answers()
    b = a.bits
    a.add(b([1, 2, 3]), True, 0)
    a.add(b([1, 2]), True, 0)          # inside a kept one: nothing new
    assert a.over == [b([1, 2, 3])]
    assert a.known_over(b([2, 3])) and a.known_over(b([])) and not a.known_over(b([1, 4]))
    a.add(b([1, 2, 3, 4]), True, 0)    # replaces the smaller one
    assert a.over == [b([1, 2, 3, 4])]
    a.add(b([5, 6]), False, 1)
    a.add(b([5, 6, 7]), False, 1)      # contains a kept one: nothing new
    assert a.under == [b([5, 6])]
    assert a.known_under(b([5, 6, 9]), 1) and not a.known_under(b([5, 9]), 1)
    assert not a.known_under(b([5, 6, 9]), 2)   # another level: its own answers
    a.add(b([7]), False, 2)
    assert a.under == [b([7])] and not a.known_under(b([5, 6]), 2)


def test_held_inputs_make_the_rerun_keep_its_input():
    """x (10 bytes, made by X) is read by A (cheap) whose output a (10 bytes) is read again by
    Z after the big op B (20 bytes). Re-running A before Z needs x, so while B runs the plan
    holds a or x: 1 + 20 + 10 = 31 bytes. G_{A} lets both die there (its bound is 21); G_{A}^+
    keeps a part of x up to Z (31, the exhaustive least peak when only A may re-run). Below
    31 bytes X must re-run too: the cost bound is 9 + 1 = 10, the exhaustive optimum, where
    G_S alone proves only 1."""
    g = TensorGraph.build(
        tensors=[Tensor("x", 10), Tensor("a", 10), Tensor("m", 1), Tensor("b", 20), Tensor("c", 1),
                 Tensor("z", 1, output=True)],
        ops=[Op("X", (), ("x",), cost=9), Op("A", ("x",), ("a",), cost=1), Op("M", ("a",), ("m",), cost=1),
             Op("B", ("m",), ("b",), cost=1), Op("C", ("b",), ("c",), cost=1),
             Op("Z", ("a", "c"), ("z",), cost=1)])
    from memopt.bounds.trap import forward_trap_bound

    only_a = {"X": 0, "A": 1, "M": 0, "B": 0, "C": 0, "Z": 0}
    assert bf.min_peak(g, BIG, only_a)[0] == 31
    assert relaxed_peak_bound(g, [1]) == 21
    assert forward_trap_bound(held_inputs_graph(g, [1])).value == 31
    assert bf.min_extra_cost(g, 30, 1)[0] == 10
    assert cost_lower_bound(g, 30, 1).value == 10
    assert cost_lower_bound(g, 30, 1, held_inputs=False, last_runs=False).value == 1
    # the order of last runs sees it too: A's last run is before B (a held) or after (x held)
    assert cost_lower_bound(g, 30, 1, held_inputs=False).value == 10


# ---------------------------------------------------------------------------- re-run spikes
# proofs/remat_cost_bounds.md §5: a plan that re-runs v holds v's inputs and output together
# at its last re-run, before v's last reader; G_{S,Y} has an op for that moment


def _spike_case(seed: int, n: int):
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.3, multi_output=False,
                            with_inputs=False)
    return g, peak_lower_bound(g, 0)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 7), st.integers(1, 2), st.integers(1, 8)))
def test_cost_bound_with_spikes_never_exceeds_the_least_extra_cost(args):
    """Every clause (C, Y) holds for an optimal plan (its re-runs all cost > 0, so each is
    read: Lemma 5), and the bound with spikes is at least the one without."""
    seed, n, cap, below = args
    g, top = _spike_case(seed, n)
    limit = max(0, top - below * max(1, top // 16))
    cost, plan = bf.min_extra_cost(g, limit, cap)
    cb = cost_lower_bound(g, limit, cap, time_limit=30, pair_time=5, exact_time=5)
    weak = cost_lower_bound(g, limit, cap, time_limit=30, pair_time=5, exact_time=5, spikes=False)
    if cb.infeasible:
        assert cost is None
        return
    if cb.complete and weak.complete and not weak.infeasible:
        # the spikes start where the old scheme stops, and the best value only grows
        assert Fraction(cb.value) >= Fraction(weak.value)
    if cost is None:
        return
    assert Fraction(cb.value) <= Fraction(cost)
    rr = rerun_set(plan)
    for core, forced in cb.clauses:
        assert set(core) & rr or not set(forced) <= rr
    for core in cb.cores:
        assert set(core) & rr


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 7), st.integers(0, 2**20), st.integers(0, 2**20)))
def test_rerun_graph_adds_one_op_per_spike_and_never_lowers_the_least_peak(args):
    """G_{S,Y}: G_S plus, per op v of Y with a spike target c, a zero-cost op after v and
    before c holding v's workspace in G_S; every order of it holds at least what G_S holds
    at the original ops, so its least peak is at least that of G_S."""
    seed, n, pick, force = args
    g, _ = _spike_case(seed, n)
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    Y = [v for v in S if force >> v & 1]
    base = relaxed_graph(g, S)
    gy = rerun_graph(g, S, Y)
    added = range(g.num_ops, gy.num_ops)
    assert len(added) <= len(Y) and gy.num_tensors == g.num_tensors + 2 * len(added)
    assert np.array_equal(gy.tensor_size[:g.num_tensors], base.tensor_size)
    for vp in added:
        (v,) = {int(gy.tensor_producer[t]) for t in gy.inputs_of(vp) if t >= g.num_tensors}
        (e,) = gy.outputs_of(vp)
        (c,) = gy.consumers_of(e)
        assert v in Y and c not in S and gy.op_cost[vp] == 0
        assert c in {int(x) for t in g.outputs_of(v) for x in g.consumers_of(t)}
        assert gy.op_workspace[vp] + gy.tensor_size[e] == base.op_workspace[v]
        assert set(g.inputs_of(v).tolist()) <= set(gy.inputs_of(vp).tolist())
    assert brute_force_schedule(gy)[1] >= brute_force_schedule(base)[1]
    if not added:
        assert not rerun_trap_exceeds(g, S, Y, 0)   # nothing beyond G_S to ask


def test_spike_clause_raises_the_bound_to_the_exhaustive_optimum():
    """A random 7-op graph (seed 73) at the limit 66, cap 1: without spikes the cost bound
    stops at 4 (the relaxed graph of its cheapest hitting set {3} fits); a plan that
    re-runs op 3 must hold its inputs and output together before its reader, which does not
    fit, so the clause "re-run 0, 2 or 4, or do not re-run 3" lifts it to 5, the exhaustive
    optimum."""
    rng = np.random.default_rng(73)
    g = random_tensor_graph(rng, int(rng.integers(4, 8)), max_size=30, edge_prob=0.3, multi_output=False,
                            with_inputs=False)
    limit = 66
    assert bf.min_extra_cost(g, limit, 1)[0] == 5
    weak = cost_lower_bound(g, limit, 1, exact_time=2, spikes=False, last_runs=False)
    cb = cost_lower_bound(g, limit, 1, exact_time=2, last_runs=False)
    assert (weak.value, weak.complete, weak.clauses) == (4, True, ())
    assert (cb.value, cb.complete, cb.clauses) == (5, True, (((0, 2, 4), (3,)),))
    # the order of last runs finds it as a core: op 3's last run holds what the spike holds
    both = cost_lower_bound(g, limit, 1, exact_time=2, spikes=False)
    assert (both.value, both.complete) == (5, True)
    # the clause's spike graph: G_{S,Y} with the re-run of op 3 has no order within the limit
    from memopt.schedule import schedule

    S = [v for v in range(g.num_ops) if v not in (0, 2, 4)]
    assert schedule(relaxed_graph(g, S), time_limit=5).peak <= limit
    assert schedule(rerun_graph(g, S, [3]), time_limit=5).lower_bound > limit


# ---------------------------------------------------------------------------- the oracle's fast paths
# cost_lower_bound asks thousands of questions about relaxed graphs of one graph; their DAGs
# get their reachability from the graph's op ancestors (_relaxed_dag) and the relaxed sizes
# and workspaces are computed in bulk: both must equal the definitions they shortcut


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(0, 2**20), st.booleans()))
def test_relaxed_dag_reachability_equals_a_fresh_computation(args):
    import dataclasses

    from memopt.core.signed_dag import graph_to_dag
    from memopt.core.structure import ancestor_matrix, reachability
    from memopt.remat.lower_bounds import _op_ancestors, _relaxed_dag

    seed, n, pick, held = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.4, with_inputs=bool(seed % 2))
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    relaxed = (held_inputs_graph if held else relaxed_graph)(g, S)
    fresh = dataclasses.replace(graph_to_dag(relaxed).dag, _cache={})
    dag = _relaxed_dag(dataclasses.replace(relaxed, _cache={}), _op_ancestors(g))
    assert np.array_equal(dag._cache["reachability"], reachability(fresh))
    assert np.array_equal(dag._cache["ancestors"], ancestor_matrix(fresh))


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(0, 2**20)))
def test_relaxed_graph_moves_each_rerun_tensor_to_its_producer_and_readers(args):
    """proofs/remat_cost_bounds.md §1: s_S(t) = 0 for a non-resident t made in S, and
    w_S(u) = w(u) + the sizes of those tensors among u's inputs and outputs, each once."""
    seed, n, pick = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.4, with_inputs=bool(seed % 2))
    S = {v for v in range(g.num_ops) if pick >> v & 1}
    gs = relaxed_graph(g, sorted(S))
    moved = {t for t in range(g.num_tensors)
             if g.tensor_producer[t] in S and not g.tensor_resident[t]}
    for t in range(g.num_tensors):
        assert gs.tensor_size[t] == (0 if t in moved else g.tensor_size[t])
    for u in range(g.num_ops):
        touched = (set(g.inputs_of(u).tolist()) | set(g.outputs_of(u).tolist())) & moved
        assert gs.op_workspace[u] == g.op_workspace[u] + sum(int(g.tensor_size[t]) for t in touched)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(0, 2**20), st.integers(0, 40)))
def test_hinted_trap_oracle_answers_as_the_plain_one(args):
    """_forward_trap_above tries recent trap nodes first: the answer must be the plain
    forward_trap_exceeds answer at every limit, whatever the hints."""
    from memopt.bounds.trap import forward_trap_bound, forward_trap_exceeds
    from memopt.core.signed_dag import graph_to_dag
    from memopt.remat.lower_bounds import _forward_trap_above

    seed, n, pick, below = args
    g = random_tensor_graph(np.random.default_rng(seed), n, max_size=30, edge_prob=0.4, with_inputs=bool(seed % 2))
    S = [v for v in range(g.num_ops) if pick >> v & 1]
    dag = graph_to_dag(held_inputs_graph(g, S)).dag
    b = forward_trap_bound(dag)
    top = int(b.value)
    # the critical node among the hints: its cut decides the answer at the limits near top
    hints = sorted({v for v in range(g.num_ops) if (pick >> (v + 3)) & 1} | {v for v in b.critical if v < g.num_ops})
    for limit in (top - 1 - below, top - 1, top, top + 1):
        assert _forward_trap_above(dag, limit, float("inf"), hints, g.num_ops) == forward_trap_exceeds(dag, limit)
        assert all(0 <= v < g.num_ops for v in hints)


def _first_run_reference(graph: TensorGraph, caps) -> tuple[int, int | None, tuple]:
    """The first-run term, op by op from its definition: at the first run of ``v`` its inputs,
    its outputs, its workspace and every fixed tensor (a graph input, or made by an op of cap
    0) made strictly before ``v`` and read at or after it (or a graph output) are live."""
    n, T = graph.num_ops, graph.num_tensors
    size, prod = graph.tensor_size.tolist(), graph.tensor_producer.tolist()
    res, out = graph.tensor_resident.tolist(), graph.tensor_output.tolist()
    reach = [{v} for v in range(n)]
    edges = list(zip(*(x.tolist() for x in graph.op_edges())))
    for v in reversed(graph.topological_order().tolist()):
        for a, b in edges:
            if a == v:
                reach[v] |= reach[b]
    fixed = [t for t in range(T) if not res[t] and (prod[t] < 0 or caps[prod[t]] == 0)]
    best = (None, None, ())
    for v in range(n):
        live = {int(t) for t in graph.inputs_of(v) if not res[int(t)]}
        for t in fixed:
            made_before = prod[t] < 0 or (prod[t] != v and v in reach[prod[t]])
            needed = out[t] or any(int(c) in reach[v] for c in graph.consumers_of(t))
            if made_before and needed:
                live.add(t)
        val = (graph.resident_bytes + sum(size[t] for t in live) + sum(size[int(t)] for t in graph.outputs_of(v))
               + int(graph.op_workspace[v]))
        if best[0] is None or val > best[0]:
            best = (val, v, tuple(sorted(live)))
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 14))
def test_the_first_run_term_equals_its_definition_op_by_op(seed, n_ops):
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, n_ops)
    caps = rng.integers(0, 2, g.num_ops).tolist()
    val, v, live = _first_run_reference(g, caps)
    b = peak_lower_bound_details(g, caps, trap=False)
    assert b.value >= val
    if b.kind == "first_run":
        assert (b.value, b.op, b.tensors) == (val, v, live)
