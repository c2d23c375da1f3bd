"""Recomputation plans: the evaluator, the independent checker, the no-recomputation
special case (= the scheduling core's peak), the stated rules (multi-output, aliases,
graph inputs, resident tensors, exact costs), and the exhaustive solvers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memopt.core import Op, Tensor, TensorGraph, peak
from memopt.errors import CertificateError, GraphError, OptionError, ScheduleError
from memopt.remat import (FREE, RUN, RematPlan, check_plan, evaluate_plan, plan_from_order)
from memopt.remat.brute_force import min_extra_cost, min_peak
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph


# ---------------------------------------------------------------------------- helpers
def random_order(graph: TensorGraph, rng: np.random.Generator) -> list[int]:
    """A uniformly-seeded random topological order (Kahn with random choices)."""
    n = graph.num_ops
    preds = [set() for _ in range(n)]
    for a, b in zip(*graph.op_edges()):
        preds[int(b)].add(int(a))
    done: list[int] = []
    placed: set[int] = set()
    while len(done) < n:
        ready = [v for v in range(n) if v not in placed and preds[v] <= placed]
        v = ready[int(rng.integers(len(ready)))]
        placed.add(v)
        done.append(v)
    return done


def random_valid_plan(graph: TensorGraph, rng: np.random.Generator, p_free: float = 0.4,
                      p_rerun: float = 0.3) -> RematPlan:
    """A random valid plan: a random order with random early frees of produced tensors
    and random re-runs; a missing input is rebuilt by re-running its producer
    (recursively). Graph inputs are never freed, so everything can always be rebuilt."""
    live = {t for t in range(graph.num_tensors)
            if graph.tensor_producer[t] < 0 and not graph.tensor_resident[t]}
    steps: list[tuple[int, int]] = []

    def ensure(t: int) -> None:
        if t in live or graph.tensor_resident[t]:
            return
        run(int(graph.tensor_producer[t]))

    def run(v: int) -> None:
        for t in graph.inputs_of(v):
            ensure(int(t))
        for t in graph.outputs_of(v):
            if int(t) in live:
                steps.append((FREE, int(t)))
                live.discard(int(t))
        steps.append((RUN, v))
        live.update(int(t) for t in graph.outputs_of(v))

    order = random_order(graph, rng)
    for k, v in enumerate(order):
        run(v)
        if k and rng.random() < p_rerun:
            run(order[int(rng.integers(k))])
        for t in sorted(live):
            if graph.tensor_producer[t] >= 0 and rng.random() < p_free:
                steps.append((FREE, t))
                live.discard(t)
    for t in np.flatnonzero(graph.tensor_output).tolist():
        ensure(t)
    return RematPlan.from_pairs(steps)


def run_counts(graph, plan) -> np.ndarray:
    return np.bincount(plan.runs(), minlength=graph.num_ops)


graphs = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7))


def make_graph(seed_n, **kw):
    seed, n = seed_n
    rng = np.random.default_rng(seed)
    return random_tensor_graph(rng, n, **kw), rng


# ---------------------------------------------------------------------------- core equality
@given(graphs)
def test_plan_from_order_has_the_core_peak(seed_n):
    g, rng = make_graph(seed_n)
    order = random_order(g, rng)
    plan = plan_from_order(g, order)
    ev = evaluate_plan(g, plan, cap=0)
    assert ev.peak == peak(g, order)
    assert ev.extra_cost == 0
    assert check_plan(g, plan, cap=0) == (ev.peak, 0)
    assert int(ev.profile.max()) == ev.peak
    # op names give the same plan
    names = [g.op_names[v] for v in order]
    assert plan_from_order(g, names) == plan


@given(graphs)
def test_evaluator_equals_checker_on_random_valid_plans(seed_n):
    g, rng = make_graph(seed_n)
    plan = random_valid_plan(g, rng)
    counts = run_counts(g, plan)
    cap = int(counts.max()) - 1
    ev = evaluate_plan(g, plan, cap=cap)
    assert check_plan(g, plan, cap=cap) == (ev.peak, ev.extra_cost)
    assert check_plan(g, plan.to_doc(g), cap=cap, claimed_peak=ev.peak, claimed_extra_cost=ev.extra_cost)
    expected = sum(int(g.op_cost[v]) * (int(c) - 1) for v, c in enumerate(counts))
    assert ev.extra_cost == expected
    assert int(ev.profile.max()) == ev.peak and int(ev.profile[0]) <= ev.peak
    # per-op caps: exactly the used counts pass, one less on an op that re-ran fails
    assert evaluate_plan(g, plan, cap=[int(c) - 1 for c in counts]).peak == ev.peak
    if cap >= 1:
        v = int(np.argmax(counts))
        tight = [int(c) - 1 for c in counts]
        tight[v] -= 1
        with pytest.raises(ScheduleError, match="cap"):
            evaluate_plan(g, plan, cap=tight)
        with pytest.raises(ScheduleError, match="cap"):
            check_plan(g, plan, cap=tight)


@given(graphs)
def test_json_round_trip(seed_n):
    g, rng = make_graph(seed_n)
    plan = random_valid_plan(g, rng)
    doc = plan.to_doc(g)
    assert all(len(s) == 1 and set(s) <= {"run", "free"} for s in doc)
    assert RematPlan.from_steps(g, doc) == plan
    ids = [{k: (g.op_index[v] if k == "run" else g.tensor_index[v])} for s in doc for k, v in s.items()]
    assert RematPlan.from_steps(g, ids) == plan


# ---------------------------------------------------------------------------- invalid plans
def small_graph() -> TensorGraph:
    """in (input, 5) -> f -> a (4), b (2) ; g(a) -> c (3, output) ; w (resident, 7) read by g."""
    return TensorGraph.build(
        tensors=[Tensor("in", 5), Tensor("w", 7, resident=True), Tensor("a", 4), Tensor("b", 2),
                 Tensor("c", 3, output=True)],
        ops=[Op("f", ("in",), ("a", "b"), workspace=1, cost=2), Op("g", ("a", "w"), ("c",), cost=5)])


GOOD = [{"run": "f"}, {"free": "in"}, {"free": "b"}, {"run": "g"}, {"free": "a"}]

INVALID = {
    "input not live": ([{"run": "g"}], "step 0"),
    "freed graph input": ([{"run": "f"}, {"free": "in"}, {"free": "a"}, {"free": "b"}, {"run": "f"}], "step 4"),
    "cap": ([{"run": "f"}, {"free": "a"}, {"free": "b"}, {"run": "f"}, {"free": "a"}, {"free": "b"},
             {"run": "f"}, {"run": "g"}], "step 6"),
    "output live at re-run": ([{"run": "f"}, {"free": "a"}, {"run": "f"}, {"run": "g"}], "step 2"),
    "output not live at end": ([{"run": "f"}, {"run": "g"}, {"free": "c"}], "'c'"),
    "double free": ([{"run": "f"}, {"free": "b"}, {"free": "b"}, {"run": "g"}], "step 2"),
    "free never allocated": ([{"free": "a"}, {"run": "f"}, {"run": "g"}], "step 0"),
    "resident freed": ([{"run": "f"}, {"run": "g"}, {"free": "w"}], "step 2"),
    "op never runs": ([{"run": "f"}], "'g'"),
    "unknown op": ([{"run": "nope"}], "step 0"),
    "unknown tensor": ([{"run": "f"}, {"free": "zz"}], "step 1"),
    "malformed step": ([{"run": "f", "free": "a"}], "step 0"),
}


def test_good_plan_values():
    g = small_graph()
    # start: in(5) + w(7); f: 12 + a + b + ws 1 = 19; g: w + a + c = 14
    assert evaluate_plan(g, GOOD, cap=0)[:2] == (19, 0)
    assert check_plan(g, GOOD, cap=0) == (19, 0)
    ev = evaluate_plan(g, GOOD)
    assert ev.profile.tolist() == [12, 19, 13, 11, 14, 10]


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_plans_are_rejected_by_both(name):
    g = small_graph()
    steps, where = INVALID[name]
    with pytest.raises(ScheduleError) as e1:
        evaluate_plan(g, steps, cap=1)
    with pytest.raises(ScheduleError) as e2:
        check_plan(g, steps, cap=1)
    assert where in str(e1.value) and where in str(e2.value)


def test_wrong_claims_are_rejected():
    g = small_graph()
    with pytest.raises(CertificateError):
        check_plan(g, GOOD, claimed_peak=18)
    with pytest.raises(CertificateError):
        check_plan(g, GOOD, claimed_extra_cost=1)


def test_bad_caps_are_option_errors():
    g = small_graph()
    for cap in (-1, 1.5, [0], {"nope": 1}):
        with pytest.raises(OptionError):
            evaluate_plan(g, GOOD, cap=cap)
    assert evaluate_plan(g, GOOD, cap={"f": 0}).peak == 19


# ---------------------------------------------------------------------------- stated rules
def test_multi_output_rerun_reallocates_every_output():
    g = small_graph()
    # free only b, re-run f: refused (a is live); free both, re-run: both counted again
    with pytest.raises(ScheduleError, match="output 'a' is live"):
        evaluate_plan(g, [{"run": "f"}, {"free": "b"}, {"run": "f"}, {"run": "g"}])
    steps = [{"run": "f"}, {"free": "a"}, {"free": "b"}, {"run": "f"}, {"free": "in"}, {"free": "b"},
             {"run": "g"}]
    ev = evaluate_plan(g, steps, cap=1)
    assert ev.profile.tolist() == [12, 19, 14, 12, 19, 13, 11, 14]
    assert (ev.peak, ev.extra_cost) == (19, 2)
    assert check_plan(g, steps, cap=1) == (19, 2)


def alias_graph() -> TensorGraph:
    """p -> base (8); view(base) -> v (alias, size 0); use(v, base) -> out (1, output)."""
    return TensorGraph.build(
        tensors=[Tensor("base", 8), Tensor("v", 0), Tensor("out", 1, output=True)],
        ops=[Op("p", (), ("base",), cost=1), Op("view", ("base",), ("v",)),
             Op("use", ("v", "base"), ("out",))])


def test_alias_rule():
    g = alias_graph()
    aliases = {"v": "base"}
    bad = [{"run": "p"}, {"run": "view"}, {"free": "base"}, {"run": "p"}, {"run": "use"}]
    # without the declaration the memory is the same and the plan is accepted ...
    assert evaluate_plan(g, bad).peak == check_plan(g, bad)[0] == 9
    # ... with it, freeing a base under a live alias is refused by both
    with pytest.raises(ScheduleError, match="alias 'v'"):
        evaluate_plan(g, bad, aliases=aliases)
    with pytest.raises(ScheduleError, match="alias 'v'"):
        check_plan(g, bad, aliases=aliases)
    order = ["p", "view", "use"]
    plan = plan_from_order(g, order, aliases=aliases)
    assert plan.to_doc(g)[-2:] == [{"free": "v"}, {"free": "base"}]
    assert evaluate_plan(g, plan, aliases=aliases).peak == peak(g, order) == 9
    assert check_plan(g, plan, aliases=aliases)[0] == 9


def test_alias_declarations_are_validated():
    g = alias_graph()
    with pytest.raises(GraphError, match="size"):
        evaluate_plan(g, [], aliases={"base": "v"})
    g2 = TensorGraph.build(
        tensors=[Tensor("base", 8), Tensor("v", 0), Tensor("out", 1, output=True)],
        ops=[Op("p", (), ("base",)), Op("view", ("base",), ("v",)), Op("use", ("v",), ("out",))])
    with pytest.raises(GraphError, match="does not read the base"):
        evaluate_plan(g2, [], aliases={"v": "base"})


def test_fractional_costs_are_exact():
    g = TensorGraph.build(tensors=[Tensor("a", 1), Tensor("b", 1, output=True)],
                          ops=[Op("f", (), ("a",), cost=0.1), Op("g", ("a",), ("b",))])
    steps = [{"run": "f"}, {"free": "a"}, {"run": "f"}, {"free": "a"}, {"run": "f"}, {"run": "g"}]
    ev = evaluate_plan(g, steps)
    assert ev.extra_cost == 2 * Fraction(0.1) and isinstance(ev.extra_cost, Fraction)
    assert check_plan(g, steps)[1] == ev.extra_cost


def test_graph_output_input_and_unread_input():
    g = TensorGraph.build(tensors=[Tensor("i", 3, output=True), Tensor("u", 4), Tensor("o", 1, output=True)],
                          ops=[Op("f", ("i",), ("o",))])
    plan = plan_from_order(g, [0])
    assert plan.to_doc(g) == [{"free": "u"}, {"run": "f"}]
    assert evaluate_plan(g, plan).peak == peak(g, [0]) == 7 == check_plan(g, plan)[0]
    with pytest.raises(ScheduleError, match="graph output 'i'"):
        evaluate_plan(g, [{"run": "f"}, {"free": "i"}])


# ---------------------------------------------------------------------------- brute force
@settings(max_examples=25)
@given(graphs.map(lambda s: (s[0], min(s[1], 5))))
def test_brute_force_budget_zero_is_the_optimal_order(seed_n):
    g, _ = make_graph(seed_n)
    _, best = brute_force_schedule(g)
    pk, cost, plan = min_peak(g, 0, cap=2)
    assert (pk, cost) == (best, 0)
    assert check_plan(g, plan, cap=0) == (best, 0)


@settings(max_examples=25)
@given(graphs.map(lambda s: (s[0], min(s[1], 5))), st.integers(1, 2))
def test_brute_force_beats_every_random_plan(seed_n, cap):
    g, rng = make_graph(seed_n)
    plan = random_valid_plan(g, rng, p_rerun=0.5)
    if int(run_counts(g, plan).max()) - 1 > cap:
        plan = plan_from_order(g, random_order(g, rng))
    p, c = check_plan(g, plan, cap=cap)
    best_c, best_plan = min_extra_cost(g, p, cap)
    assert best_c is not None and best_c <= c
    bp, bc = check_plan(g, best_plan, cap=cap)
    assert bp <= p and bc == best_c
    pk, pc, pplan = min_peak(g, c, cap)
    assert pk <= p and pc <= c
    assert check_plan(g, pplan, cap=cap) == (pk, pc)
    # one byte below the least peak is infeasible at that budget
    below, _ = min_extra_cost(g, pk - 1, cap)
    assert below is None or below > c


def test_recomputation_lowers_the_peak():
    """A cheap early value held for a late reuse: recomputing it beats every order."""
    g = TensorGraph.build(
        tensors=[Tensor("x", 10), Tensor("a", 1), Tensor("b", 1), Tensor("y", 1, output=True)],
        ops=[Op("cheap", (), ("x",), cost=1), Op("f", ("x",), ("a",)), Op("big", ("a",), ("b",), workspace=20),
             Op("late", ("x", "b"), ("y",))])
    _, no_remat = brute_force_schedule(g)
    assert no_remat == 32
    pk, cost, plan = min_peak(g, 1, cap=1)
    assert (pk, cost) == (22, 1)
    assert check_plan(g, plan, cap=1) == (22, 1)
    assert min_extra_cost(g, 21, cap=1) == (None, None)


def _all_plans_pareto(graph: TensorGraph, cap: int) -> dict[int, object]:
    """Minimum extra cost for each reachable peak, over *all* plans (any free at any time,
    no canonical form): an independent check of the brute force's canonicalisation."""
    n, T = graph.num_ops, graph.num_tensors
    size = [int(s) for s in graph.tensor_size]
    res = [bool(r) for r in graph.tensor_resident]
    const = sum(size[t] for t in range(T) if res[t])
    live0 = frozenset(t for t in range(T) if graph.tensor_producer[t] < 0 and not res[t])
    start = (live0, (0,) * n, const + sum(size[t] for t in live0))
    best = {start: 0}
    frontier = [start]
    goals: dict[int, object] = {}
    while frontier:
        nxt = []
        for state in frontier:
            live, counts, pk = state
            c = best[state]
            if all(counts) and all(t in live or res[t] for t in np.flatnonzero(graph.tensor_output).tolist()):
                goals[pk] = min(goals.get(pk, c), c)
            succ = []
            for t in live:
                succ.append(((live - {t}, counts, pk), c))
            for v in range(n):
                if counts[v] > cap:
                    continue
                ins = [int(t) for t in graph.inputs_of(v)]
                outs = [int(t) for t in graph.outputs_of(v)]
                if any(t not in live and not res[t] for t in ins) or any(t in live for t in outs):
                    continue
                nl = live | set(outs)
                mem = const + sum(size[t] for t in nl) + int(graph.op_workspace[v])
                nc = c + int(graph.op_cost[v]) if counts[v] else c
                succ.append(((frozenset(nl), counts[:v] + (counts[v] + 1,) + counts[v + 1:], max(pk, mem)), nc))
            for s, sc in succ:
                if s not in best or sc < best[s]:
                    best[s] = sc
                    nxt.append(s)
        frontier = nxt
    return goals


@settings(max_examples=30)
@given(graphs.map(lambda s: (s[0], min(s[1], 3))), st.integers(0, 1))
def test_brute_force_equals_unrestricted_enumeration(seed_n, cap):
    g, _ = make_graph(seed_n, max_size=6)
    goals = _all_plans_pareto(g, cap)
    peaks = sorted(goals)
    for M in range(peaks[0] - 1, peaks[-1] + 1):
        feasible = [c for p, c in goals.items() if p <= M]
        expected = min(feasible) if feasible else None
        assert min_extra_cost(g, M, cap)[0] == expected
