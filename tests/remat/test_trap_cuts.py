"""Trap cuts (memopt.remat.trap_cuts, proofs/remat_cost_bounds.md §7) against brute force and
against plans built at random.

Theorem 7: for every valid plan ``P``, every set ``S0`` and every op ``v``, the memory of ``P``
at the first run of ``v`` is at least ``T_{S0}(v) - sum over w in RR(P) minus S0 of A_w(v)``.
The tests check that inequality run by run on many plans (exhaustive optima at several limits
and caps, and random valid plans with arbitrary frees and re-runs), so a coefficient that is
too small (an unsound row) fails them; they check each coefficient against the order model it
comes from (Lemma 7a, and the order where it is reached), the rows of ``trap_cuts`` against
every plan within their limit, the cost bound with the rows against the exhaustive least cost,
and the hitting set with rows against exhaustive search."""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memopt.bounds.trap import node_trap_values, traps_above
from memopt.core import Op, Tensor, TensorGraph
from memopt.core.signed_dag import graph_to_dag
from memopt.remat import brute_force as bf
from memopt.remat import evaluate_plan, plan_from_order
from memopt.remat.lower_bounds import (
    _known_cost,
    cost_lower_bound,
    min_hitting_set,
    relaxed_graph,
)
from memopt.remat.plan import FREE, RUN, RematPlan
from memopt.remat.trap_cuts import (CUT_SCALE_ABOVE, TrapCut, budget_peak_bound, cut_met, last_run_cuts, scaled_row,
                                   trap_cuts,
                                   uncovered_bytes)
from memopt.schedule.brute_force import random_tensor_graph

from conftest import assert_cost_bound_sound, odd_tensor_graph, random_topological_order, rerun_set, shared_graph

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 10**9


# ---------------------------------------------------------------------------- helpers


def _training_graph(rng, n: int) -> TensorGraph:
    """A small training graph (the shape where trap cuts matter): forward ops ``f1..fm``
    (``m = (n - 1) // 2``) making activations, some with a second tensor kept for the backward
    pass only, a loss, and backward ops ``bm..b1`` reading the gradient and the activations
    around their layer; ``g0`` is the graph output. At the turn every activation is held."""
    m = max(1, (n - 1) // 2)
    tensors, ops = [], []
    prev = None
    if rng.random() < 0.5:
        tensors.append(Tensor("x", int(rng.integers(0, 20))))
        prev = "x"
    acts, stash = [prev], set()

    def ws():
        return int(rng.integers(0, 20)) if rng.random() < 0.3 else 0

    for i in range(1, m + 1):
        tensors.append(Tensor(f"a{i}", int(rng.integers(1, 30))))
        outs = (f"a{i}",)
        if rng.random() < 0.4:
            tensors.append(Tensor(f"s{i}", int(rng.integers(1, 30))))
            outs += (f"s{i}",)
            stash.add(f"s{i}")
        reads = ((prev,) if prev else ()) + tuple(a for a in acts[:-1] if a and rng.random() < 0.2)
        ops.append(Op(f"f{i}", reads, outs, workspace=ws(), cost=float(rng.integers(1, 10))))
        prev = f"a{i}"
        acts.append(prev)
    tensors.append(Tensor(f"g{m}", int(rng.integers(1, 30))))
    ops.append(Op("loss", (prev,), (f"g{m}",), cost=float(rng.integers(1, 10))))
    for i in range(m, 0, -1):
        tensors.append(Tensor(f"g{i - 1}", int(rng.integers(1, 30)), output=i == 1))
        reads = [f"g{i}"] + [a for a in (acts[i - 1], acts[i]) if a and rng.random() < 0.8]
        reads += [f"s{i}"] if f"s{i}" in stash else []
        ops.append(Op(f"b{i}", tuple(dict.fromkeys(reads)), (f"g{i - 1}",), workspace=ws(),
                      cost=float(rng.integers(1, 10))))
    return TensorGraph.build(tensors, ops)


#: graph kinds: random_tensor_graph, conftest.odd_tensor_graph, _training_graph
KINDS = st.integers(0, 2)


def _graph(seed: int, n: int, kind: int) -> TensorGraph:
    rng = np.random.default_rng(seed)
    if kind == 1:
        return odd_tensor_graph(rng, n, random_costs=True)
    if kind == 2:
        return _training_graph(rng, max(n, 5))
    return random_tensor_graph(rng, n, max_size=30, edge_prob=0.35)


def _random_plan(g: TensorGraph, rng) -> RematPlan:
    """A random valid plan (no caps): first runs in a random topological order; after each
    run, each live produced tensor is freed with a random probability (graph outputs too),
    and now and then a useless re-run of an op whose inputs are live; a freed tensor needed
    later is re-made by re-running its producer (and, recursively, what that needs). Not
    canonical: tensors are held longer or freed earlier than any optimum would."""
    T = g.num_tensors
    prod = [int(p) for p in g.tensor_producer]
    resident = [bool(r) for r in g.tensor_resident]
    ins = [[int(t) for t in g.inputs_of(v)] for v in range(g.num_ops)]
    outs = [[int(t) for t in g.outputs_of(v)] for v in range(g.num_ops)]
    live = {t for t in range(T) if prod[t] < 0 and not resident[t]}
    steps: list[tuple[int, int]] = []
    p_free, p_noise = float(rng.choice([0.1, 0.3, 0.6, 0.9])), float(rng.choice([0.0, 0.1, 0.3]))

    def run(u: int) -> None:
        for t in outs[u]:
            if t in live:
                steps.append((FREE, t))
                live.discard(t)
        steps.append((RUN, u))
        live.update(outs[u])

    def ensure(t: int) -> None:
        # re-running p(t) re-makes every output it frees first, so nothing live is lost
        if resident[t] or t in live:
            return
        for y in ins[prod[t]]:
            ensure(y)
        run(prod[t])

    ran: list[int] = []
    for v in random_topological_order(g, rng):
        for y in ins[v]:
            ensure(y)
        run(v)
        ran.append(v)
        if p_noise and rng.random() < p_noise:
            u = ran[int(rng.integers(len(ran)))]
            if all(resident[y] or y in live for y in ins[u]):
                run(u)
        for t in sorted(live):
            if prod[t] >= 0 and rng.random() < p_free:
                steps.append((FREE, t))
                live.discard(t)
    for t in range(T):
        if g.tensor_output[t]:
            ensure(t)
    return RematPlan.from_pairs(steps)


def _first_runs(plan) -> dict[int, int]:
    """Step of each op's first run."""
    first: dict[int, int] = {}
    for i, (k, v) in enumerate(zip(plan.kind.tolist(), plan.index.tolist())):
        if k == RUN:
            first.setdefault(v, i)
    return first


def _traps(g: TensorGraph, base=()) -> np.ndarray:
    """``T_{S0}(v)`` of every op: the forward trap of ``v`` in ``G_{S0}`` (exact, one cut per op)."""
    return node_trap_values(graph_to_dag(relaxed_graph(g, sorted(base))).dag)[:g.num_ops]


def _assert_pointwise(g: TensorGraph, plan, A: dict, traps: np.ndarray, base=()) -> None:
    """Theorem 7, run by run: memory at the first run of ``v`` >= ``T_{S0}(v) - sum A_w(v)``."""
    ev = evaluate_plan(g, plan)
    first = _first_runs(plan)
    rr = sorted(rerun_set(plan) - set(base))
    for v in range(g.num_ops):
        uncovered = int(sum(int(A[v][w]) for w in rr))
        mem = int(ev.profile[first[v] + 1])
        assert mem >= int(traps[v]) - uncovered, (v, mem, int(traps[v]), uncovered, rr, plan.to_doc(g))


def _limits(g: TensorGraph, least: int) -> list[int]:
    """The least peak, the limits just below the traps above it (where the rows are
    tightest: the rows at ``T(v) - 1`` need one byte each), and the no-recomputation peak
    of ``G``'s topological order."""
    top = evaluate_plan(g, plan_from_order(g, g.topological_order())).peak
    traps = sorted({int(t) - 1 for t in _traps(g) if least < t <= top})
    return sorted({least, top} | set(traps[:2]) | set(traps[-2:]))


def _plans(g: TensorGraph, k: int, seed: int, count: int = 6):
    """Exhaustive optima (cap ``k``) at :func:`_limits`, and ``count`` random plans."""
    least, _, plan = bf.min_peak(g, BIG, k)
    out = [plan]
    for limit in _limits(g, least)[1:]:
        _, p = bf.min_extra_cost(g, limit, k)
        assert p is not None
        out.append(p)
    rng = np.random.default_rng(seed)
    out += [_random_plan(g, rng) for _ in range(count)]
    return least, out


# ---------------------------------------------------------------------------- 1. the pointwise inequality

GRAPHS = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 2**20),
                   KINDS)


@SETTINGS
@given(GRAPHS)
def test_memory_at_each_first_run_is_at_least_the_trap_minus_what_the_reruns_uncover(args):
    """Theorem 7 pointwise, with ``S0`` empty and with a random ``S0``: on every plan (optimal
    plans of the exhaustive search at several limits, cap 1 or 2, and random valid plans that
    re-run anything any number of times), the memory while ``v`` first runs is at least the
    trap of ``v`` in ``G_{S0}`` minus the coefficients of the plan's re-run ops outside ``S0``.
    A coefficient too small for some plan fails here (the inequality holds for every limit,
    so no limit has to be guessed)."""
    seed, n, k, pick, kind = args
    g = _graph(seed, n, kind)
    A = uncovered_bytes(g, range(g.num_ops))
    _, plans = _plans(g, k, seed)
    base = [v for v in range(g.num_ops) if pick >> v & 1]
    plain, relaxed = _traps(g), _traps(g, base)
    # T_{S0} only falls as S0 grows (§7: "T_{S0} only falls")
    assert (relaxed <= plain).all()
    for plan in plans:
        evaluate_plan(g, plan)          # valid
        _assert_pointwise(g, plan, A, plain)
        _assert_pointwise(g, plan, A, relaxed, base)


def test_random_plans_do_rerun_and_are_valid():
    """The generator of random plans makes valid plans, with re-runs in most of them (else
    the pointwise test above would test the forward trap only)."""
    with_reruns = 0
    for seed in range(40):
        g = _graph(seed, 6, seed % 3)
        plan = _random_plan(g, np.random.default_rng(seed))
        evaluate_plan(g, plan)
        with_reruns += bool(rerun_set(plan))
    assert with_reruns >= 20


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 2**20), st.integers(0, 2**20),
                 KINDS))
def test_each_coefficient_is_the_most_its_op_uncovers_in_some_order(args):
    """Lemma 7a in the order model, against the evaluator: for random orders and sets
    ``S0 <= S``, the memory of ``G_S`` at ``v`` is at least that of ``G_{S0}`` minus the sum of
    ``A_w(v)`` over ``S \\ S0``; and for each ``w`` that is neither ``v`` nor a descendant of it
    the order "the ancestors of ``v`` and of ``w``, ``w``, then ``v``" loses exactly ``A_w(v)``
    from ``G`` to ``G_{w}`` (so ``A_w(v)`` is neither too small nor larger than needed)."""
    seed, n, pick, sub, kind = args
    g = _graph(seed, n, kind)
    N = g.num_ops
    rng = np.random.default_rng(seed)
    A = uncovered_bytes(g, range(N))
    anc = [set() for _ in range(N)]                # proper ancestors
    for v in g.topological_order().tolist():
        for t in g.inputs_of(v).tolist():
            p = int(g.tensor_producer[t])
            if p >= 0:
                anc[v] |= anc[p] | {p}

    def at_runs(h: TensorGraph, order) -> dict[int, int]:
        plan = plan_from_order(h, order)
        prof = evaluate_plan(h, plan).profile
        return {v: int(prof[i + 1]) for v, i in _first_runs(plan).items()}

    S = {v for v in range(N) if pick >> v & 1}
    S0 = {v for v in S if sub >> v & 1}
    for _ in range(4):
        order = random_topological_order(g, rng)
        big, small = at_runs(relaxed_graph(g, sorted(S)), order), at_runs(relaxed_graph(g, sorted(S0)), order)
        for v in range(N):
            assert big[v] >= small[v] - sum(int(A[v][w]) for w in S - S0)
    for v in range(N):
        for w in range(N):
            if w == v or v in anc[w]:
                assert A[v][w] == 0
                continue
            head = anc[v] | anc[w] | {w}
            topo = g.topological_order().tolist()
            order = [u for u in topo if u in head] + [v] + [u for u in topo if u not in head and u != v]
            assert at_runs(g, order)[v] - at_runs(relaxed_graph(g, [w]), order)[v] == A[v][w]


# ---------------------------------------------------------------------------- 2. the rows of trap_cuts


def _assert_rows_are_the_definition(g: TensorGraph, M: int, caps, base=()) -> list[TrapCut]:
    """The rows of ``trap_cuts``: one per op whose trap in ``G_{S0}`` exceeds ``M``, ``need``
    the excess, each coefficient ``min(A_w(v), need)`` over the ops with cap > 0 outside
    ``S0`` whose ``A_w(v) > 0``."""
    cuts = trap_cuts(g, M, caps, base=base)
    traps = _traps(g, base)
    assert [c.op for c in cuts] == [v for v in range(g.num_ops) if traps[v] > M]
    assert traps_above(graph_to_dag(relaxed_graph(g, sorted(base))).dag, M, np.arange(g.num_ops)) == \
        {c.op: c.need + M for c in cuts}
    A = uncovered_bytes(g, range(g.num_ops))
    for c in cuts:
        assert c.need == traps[c.op] - M and c.base == tuple(sorted(set(base)))
        expect = [(w, min(int(A[c.op][w]), c.need)) for w in range(g.num_ops)
                  if caps[w] > 0 and w not in base and A[c.op][w] > 0]
        assert list(zip(c.ops, c.bytes)) == expect
    return cuts


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 3**7 - 1), st.integers(0, 2**20),
                 KINDS))
def test_every_plan_within_the_limit_meets_every_row(args):
    """Per-op caps 0-2: the exhaustive optimum at each limit from the least peak up meets
    every row of ``trap_cuts`` at that limit and at every higher one (a plan within ``M`` is
    within every higher limit), with ``S0`` empty and random; a random plan meets the rows at
    its own peak, with its run counts as caps. Where the exhaustive search finds no plan, a
    row unmet by every op that may re-run is allowed, and only there."""
    seed, n, capcode, pick, kind = args
    g = _graph(seed, n, kind)
    N = g.num_ops
    caps = [capcode // 3**v % 3 for v in range(N)]
    base = [v for v in range(N) if pick >> v & 1]
    least, _, _ = bf.min_peak(g, BIG, caps)
    top = evaluate_plan(g, plan_from_order(g, g.topological_order())).peak
    limits = sorted(set(_limits(g, least)) | {least - 1, least + 1, top + 1})
    rows = {(M, b): _assert_rows_are_the_definition(g, M, caps, b) for M in limits for b in ((), tuple(base))}
    may = [v for v in range(N) if caps[v] > 0]
    for M in limits:
        _, plan = bf.min_extra_cost(g, M, caps)
        if plan is None:
            continue
        rr = rerun_set(plan)
        assert rr <= set(may)
        for (L, b), cuts in rows.items():
            if L >= M:
                for c in cuts:
                    assert cut_met(c, rr), (M, L, b, c, plan.to_doc(g))
    # no row at the no-recomputation peak of an order, and none above it
    assert rows[(top, ())] == [] and rows[(top + 1, ())] == []
    # below the least peak: a row no op meets is a proof of infeasibility, so only there
    for (L, b), cuts in rows.items():
        if any(not cut_met(c, may) for c in cuts):
            assert L < least
    rng = np.random.default_rng(seed)
    for _ in range(4):
        plan = _random_plan(g, rng)
        runs = Counter(plan.runs().tolist())
        own = [runs[v] - 1 for v in range(N)]
        peak = evaluate_plan(g, plan, own).peak
        for c in trap_cuts(g, peak, own) + trap_cuts(g, peak, own, base=base):
            assert cut_met(c, rerun_set(plan)), (c, plan.to_doc(g))


# ---------------------------------------------------------------------------- 3. the cost bound with rows


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(1, 2), st.integers(0, 6),
                 st.sampled_from([0, 1, 2, 2, 2])))
def test_cost_bound_with_rows_never_exceeds_the_least_extra_cost(args):
    """Corollary 7: the cost bound with the rows (default levels, and the rows alone with
    every other level off) is at most the exhaustive least extra cost, and ``infeasible``
    only where the exhaustive search finds no plan. Limits: one below the least peak, and
    from the least peak up to one below the largest forward trap of ``G`` (the rows exist
    there); mostly training graphs, where the traps are above the least peak."""
    seed, n, k, above, kind = args
    g = _graph(seed, n, kind)
    least, _, _ = bf.min_peak(g, BIG, k)
    top = int(_traps(g).max(initial=0))
    limit = least - 1 if above == 0 else least + (max(0, top - 1 - least) * (above - 1)) // 5
    cost, plan = bf.min_extra_cost(g, limit, k)
    for cb in (cost_lower_bound(g, limit, k, time_limit=5),
               cost_lower_bound(g, limit, k, time_limit=5, trap_cuts=True, held_inputs=False, last_runs=False,
                                spikes=False, pair_time=0, exact_time=0)):
        assert_cost_bound_sound(cb, cost, plan)
        for c in cb.cuts:
            # a row of a hitting set (S_0 = H) excludes H itself: its left side is empty there
            assert not c.base or not cut_met(c, c.base)


def test_the_rows_of_a_hitting_set_exclude_it_and_every_plan_meets_them():
    """Theorem 7 holds for every ``S_0``: where a hitting set ``H`` leaves a forward trap
    above the limit in ``G_H``, the bound adds the rows at ``S_0 = H`` (here the first
    hitting set of a 7-op graph at limit 117, cap 2). Each is unmet by its own ``H`` and met
    by the exhaustive optimum, and the bound reaches that optimum (8)."""
    g = _graph(5, 7, 0)
    cost, plan = bf.min_extra_cost(g, 117, 2)
    cb = cost_lower_bound(g, 117, 2, time_limit=30)
    based = [c for c in cb.cuts if c.base]
    assert based and cb.complete
    for c in based:
        assert c.need > 0 and not cut_met(c, c.base)
        assert cut_met(c, rerun_set(plan))
    assert cost == cb.value == 8
    # without the rows the bound is the same: they change how soon it gets there, not where (§7 (b))
    assert cost_lower_bound(g, 117, 2, time_limit=30, trap_cuts=False).value == 8


# ---------------------------------------------------------------------------- 4. the hitting set with rows


def _exhaustive(n: int, costs, cuts):
    best = None
    for mask in range(1 << n):
        chosen = {v for v in range(n) if mask >> v & 1}
        if all(cut_met(c, chosen) for c in cuts):
            c = sum(costs[v] for v in chosen)
            best = c if best is None else min(best, c)
    return best


def _random_rows(rng, n: int, top: int) -> list[TrapCut]:
    rows = []
    for _ in range(int(rng.integers(1, 4))):
        ops = sorted({int(v) for v in rng.integers(0, n, int(rng.integers(0, n + 1)))})
        need = int(rng.integers(1, top + 1))
        rows.append(TrapCut(int(rng.integers(0, n)), need, tuple(ops),
                            tuple(int(rng.integers(1, need + 1)) for _ in ops)))
    return rows


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([3, 20, 1000])))
def test_min_hitting_set_with_rows_equals_exhaustive_search(args):
    """Rows only (no core): the least cost of a set meeting every row, against all subsets;
    ``None`` exactly when no set meets them (a row whose bytes sum below its need). The
    upper bound of ``_known_cost`` is the cost of such a set, and with it the value holds."""
    seed, n, top = args
    rng = np.random.default_rng(seed)
    costs = [int(c) for c in rng.integers(0, 9, n)]
    cuts = _random_rows(rng, n, top)
    best = _exhaustive(n, costs, cuts)
    value, hs, optimal = min_hitting_set([], costs, time.perf_counter() + 20, cuts=cuts)
    assert optimal and value == best
    known = _known_cost((), [], [], costs, cuts)
    if best is None:
        assert hs == () and known is None
        return
    assert all(cut_met(c, hs) for c in cuts) and sum(costs[v] for v in hs) == best
    if known is not None:
        assert known >= best
        value, hs, optimal = min_hitting_set([], costs, time.perf_counter() + 20, upper=known, cuts=cuts)
        assert optimal and value == best and all(cut_met(c, hs) for c in cuts)


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6)))
def test_min_hitting_set_with_huge_rows_stays_a_lower_bound(args):
    """Rows whose need is above ``2**40`` are scaled: the value may fall, never rise above the
    exhaustive least cost, and ``None`` (no set) only when there is none."""
    seed, n = args
    rng = np.random.default_rng(seed)
    costs = [int(c) for c in rng.integers(0, 9, n)]
    cuts = [c._replace(need=c.need * 2**41 + int(rng.integers(0, 2**41)),
                       bytes=tuple(b * 2**41 + int(rng.integers(0, 2**41)) for b in c.bytes))
            for c in _random_rows(rng, n, 20)]
    cuts = [c._replace(bytes=tuple(min(b, c.need) for b in c.bytes)) for c in cuts]   # capped as trap_cuts does
    best = _exhaustive(n, costs, cuts)
    value, hs, optimal = min_hitting_set([], costs, time.perf_counter() + 20, cuts=cuts)
    if value is None:
        assert best is None
        return
    assert optimal and sum(costs[v] for v in hs) == value
    for c in cuts:                      # the set found meets every scaled row
        coefs, need = scaled_row(c.bytes, c.need)
        assert sum(b for w, b in zip(c.ops, coefs) if w in hs) >= need
    if best is not None:
        assert value <= best


@SETTINGS
@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=6), st.integers(1, 2**62), st.integers(0, 63))
@example([2**40, 2**40 + 1, 1], 2**41 + 1, 3)
@example([2**62, 2**62 - 1, 2**61 + 1], 2**62, 6)
def testscaled_row_never_makes_a_met_row_unmet(coefs, need, mask):
    """``scaled_row`` rounds coefficients and need up so that every subset meeting the row
    meets the scaled one, and leaves a row whose need is at most ``2**40`` as it is. The
    scaled need is at most ``2**40 + 1`` (``f`` stops once ``need // f <= 2**40``, and the
    rounding up may add one)."""
    scaled, s_need = scaled_row(coefs, need)
    assert len(scaled) == len(coefs) and s_need <= CUT_SCALE_ABOVE
    if need <= CUT_SCALE_ABOVE:
        assert (scaled, s_need) == (list(coefs), need)
    chosen = [i for i in range(len(coefs)) if mask >> i & 1]
    if sum(coefs[i] for i in chosen) >= need:
        assert sum(scaled[i] for i in chosen) >= s_need
    # every subset at all (the hypothesis mask is one of them)
    for r in range(len(coefs) + 1):
        for sub in itertools.combinations(range(len(coefs)), r):
            if sum(coefs[i] for i in sub) >= need:
                assert sum(scaled[i] for i in sub) >= s_need


# ---------------------------------------------------------------------------- 5. a knapsack cover


def _knapsack_case() -> TensorGraph:
    """``A1..A4`` make ``a1..a4`` (5, 4, 3, 2 bytes; cost 4, 3, 3, 1), all read by ``M`` and
    again by ``Z`` after the big ``B`` (10 bytes) and ``C``. While ``B`` and ``C`` run every
    ``a_i`` is held (25 bytes) unless it is freed and re-made after ``C``."""
    sizes, costs = (5, 4, 3, 2), (4, 3, 3, 1)
    a = [f"a{i}" for i in range(1, 5)]
    return TensorGraph.build(
        [Tensor(x, s) for x, s in zip(a, sizes)] + [Tensor("m", 1), Tensor("b", 10), Tensor("c", 1),
                                                    Tensor("z", 1, output=True)],
        [Op(f"A{i}", (), (x,), cost=c) for i, (x, c) in enumerate(zip(a, costs), 1)]
        + [Op("M", tuple(a), ("m",), cost=1), Op("B", ("m",), ("b",), cost=1), Op("C", ("b",), ("c",), cost=1),
           Op("Z", (*a, "c"), ("z",), cost=1)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 2), st.integers(0, 2),
                 st.sampled_from([0, 1, 3, 6])))
def test_budget_peak_bound_never_exceeds_the_least_peak_under_the_budget(args):
    """Corollary 7': under an extra-cost budget B the least peak is at least the best the
    re-run sets of cost <= B can uncover at every trap; exact brute force on small graphs
    (training-shaped ones too, where the bound is usually tight)."""
    seed, n, cap, kind, budget = args
    g = _graph(seed, n, kind)
    least, extra, _ = bf.min_peak(g, budget, cap)
    got = budget_peak_bound(g, budget, cap)
    assert got <= least and Fraction(extra) <= budget
    assert budget_peak_bound(g, budget, cap, floor=least) == least   # a floor is kept, never passed


def test_budget_peak_bound_on_a_chain_is_the_least_peak_for_each_budget():
    """The value held across the peak (A makes ``a``, 6 bytes, read again by Z after B): with
    budget 5 re-running A takes ``a`` off B's and C's traps (12 -> 8 at most, here the footprint
    of Z); below 5 nothing can re-run and the bound is the no-recomputation peak 12."""
    g = TensorGraph.build([Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1),
                           Tensor("z", 1, output=True)],
                          [Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1),
                           Op("B", ("m",), ("b",), cost=1), Op("C", ("b",), ("c",), cost=1),
                           Op("Z", ("a", "c"), ("z",), cost=1)])
    for budget in (0, 4, 5, 6):
        least = bf.min_peak(g, budget, 1)[0]
        assert budget_peak_bound(g, budget, 1) <= least
    assert budget_peak_bound(g, 4, 1) == bf.min_peak(g, 4, 1)[0] == 12


def test_knapsack_cover_needs_two_reruns_at_one_trap():
    """At 18 bytes ``B`` and ``C`` need 7 bytes uncovered: one re-run is not enough (the
    largest ``a`` is 5), the cheapest cover is ``A1 + A4`` (5 + 2 bytes, cost 5), the
    exhaustive optimum. The rows say it at once (no core); the cores alone reach 5 only
    after learning several excluded combinations, one core each."""
    g = _knapsack_case()
    names = g.op_names
    assert bf.min_extra_cost(g, 18, 1)[0] == 5
    _, plan = bf.min_extra_cost(g, 18, 1)
    assert {names[v] for v in rerun_set(plan)} == {"A1", "A4"}
    cuts = trap_cuts(g, 18, 1)
    assert [(names[c.op], c.need, {names[w]: b for w, b in zip(c.ops, c.bytes)}) for c in cuts] == \
        [(x, 7, {"A1": 5, "A2": 4, "A3": 3, "A4": 2}) for x in ("B", "C")]
    cb = cost_lower_bound(g, 18, 1, time_limit=20)
    assert (cb.value, cb.complete, cb.infeasible, cb.cores) == (5, True, False, ())
    assert sorted(names[v] for v in cb.hitting_set) == ["A1", "A4"]
    alone = cost_lower_bound(g, 18, 1, time_limit=20, trap_cuts=False)
    assert (alone.value, alone.complete) == (5, True)
    assert len(alone.cores) >= 2 and alone.evaluations > cb.evaluations
    # the rows alone, every other level off, give the optimum too
    rows = cost_lower_bound(g, 18, 1, time_limit=20, held_inputs=False, last_runs=False, spikes=False,
                            pair_time=0, exact_time=0)
    assert (rows.value, rows.cores) == (5, ())
    # no plan at 15 (M alone holds all a_i and m); the rows need more than every re-run gives
    assert bf.min_extra_cost(g, 15, 1) == (None, None)
    assert cost_lower_bound(g, 15, 1).infeasible
    # at 25 no re-run is needed: no row
    assert trap_cuts(g, 25, 1) == [] and cost_lower_bound(g, 25, 1).value == 0


# ---------------------------------------------------------------------------- 6. MobileNet at 0.8


def test_on_mobilenet_at_0_8_the_rows_give_the_optimum():
    """MobileNet (training graph) at 0.8 of its optimal no-recomputation peak (34,701,056,000
    bytes, also its largest forward trap), cap 2: the rows alone (no core) prove 600 and the
    scheme completes; the heuristic's plan has extra cost 600 within the limit (checked by the
    independent checker), so 600 is optimal. Its re-run set meets every row and every first
    run obeys Theorem 7 on this real graph (the cores alone had reached 405 after 120 s:
    benchmarks/README.md)."""
    from memopt.io import load_instance
    from memopt.remat import check_plan, remat

    g = load_instance(shared_graph("MobileNet_512_224_224_3_train_nx.json")).graph
    M = math.floor(0.8 * 34701056000)
    cb = cost_lower_bound(g, M, 2, time_limit=60)
    assert (cb.value, cb.complete, cb.infeasible, cb.cores) == (600, True, False, ())
    res = remat(g, memory_limit=M, cap=2, method="heuristic", time_limit=30, jobs=1)
    assert res.extra_cost == 600
    peak, extra = check_plan(g, res.plan, 2)
    assert peak <= M and extra == 600
    rr = rerun_set(res.plan)
    cuts = trap_cuts(g, M, 2)
    assert cuts and list(cb.cuts) == cuts and all(cut_met(c, rr) for c in cuts)
    traps = _traps(g)
    assert int(traps.max()) == 34701056000
    _assert_pointwise(g, res.plan, uncovered_bytes(g, range(g.num_ops)), traps)


# ---------------------------------------------------------------------------- 6. rows of the last-run traps (Theorem 7F)


def _proper_ancestors(g: TensorGraph) -> list[set]:
    anc = [set() for _ in range(g.num_ops)]
    for v in g.topological_order().tolist():
        for t in g.inputs_of(v).tolist():
            p = int(g.tensor_producer[t])
            if p >= 0:
                anc[v] |= anc[p] | {p}
    return anc


def _last_run_coefficient(g: TensorGraph, anc, base: set, v: int, w: int, last_of_base: bool) -> int:
    """``C_w(e)`` of Theorem 7F from its definition, for the event ``e`` of op ``v``
    (``last_of_base``: the last run of an op of ``S_0``)."""
    if w in base or w == v or (not last_of_base and v in anc[w]):
        return 0
    reads = set(g.inputs_of(v).tolist())
    total = 0
    for t in g.outputs_of(w).tolist():
        if g.tensor_resident[t] or g.tensor_size[t] <= 0 or t in reads:
            continue
        if g.tensor_output[t] or any(c not in anc[v] or c in base for c in g.consumers_of(t).tolist()):
            total += int(g.tensor_size[t])
    return total


def _events(g: TensorGraph, base) -> list[tuple[int, bool, int]]:
    """``(op, first, trap)`` of every event of the last-run traps of ``base`` (first runs too)."""
    from memopt.remat.last_runs import _runner

    r = _runner(g, sorted(base), True)
    vals = r.run(np.arange(r.events.shape[0]), -1)
    return [(int(r.events[i, 1]), i >= g.num_ops, int(vals[i])) for i in range(r.events.shape[0])]


def _run_steps(plan) -> tuple[dict, dict]:
    first, last = {}, {}
    for i, (k, v) in enumerate(zip(plan.kind.tolist(), plan.index.tolist())):
        if k == RUN:
            first.setdefault(v, i)
            last[v] = i
    return first, last


@SETTINGS
@given(GRAPHS)
def test_memory_at_each_event_is_at_least_the_last_run_trap_minus_what_the_reruns_uncover(args):
    """Theorem 7F pointwise: on every plan (exhaustive optima at several limits, random plans
    that re-run anything any number of times) and a random ``S_0``, the memory at the step of
    each event of the last-run traps of ``S_0`` (the first run of ``v`` for a first-run node
    and for an op outside ``S_0``; the last run of an op of ``S_0``) is at least its trap minus
    ``C_w(e)`` over the plan's re-run ops outside ``S_0``. A coefficient too small fails here,
    at every limit at once."""
    seed, n, k, pick, kind = args
    g = _graph(seed, n, kind)
    anc = _proper_ancestors(g)
    base = {v for v in range(g.num_ops) if pick >> v & 1}
    events = _events(g, base)
    _, plans = _plans(g, k, seed)
    for plan in plans:
        ev = evaluate_plan(g, plan)
        first, last = _run_steps(plan)
        rr = rerun_set(plan) - base
        for v, is_first, trap in events:
            last_of_base = not is_first and v in base
            step = last[v] if last_of_base else first[v]
            uncovered = sum(_last_run_coefficient(g, anc, base, v, w, last_of_base) for w in rr)
            mem = int(ev.profile[step + 1])
            assert mem >= trap - uncovered, (v, is_first, mem, trap, uncovered, sorted(base), plan.to_doc(g))


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 3**7 - 1), st.integers(0, 2**20),
                 KINDS))
def test_every_plan_within_the_limit_meets_every_last_run_row(args):
    """The rows of ``last_run_cuts`` are the definition (one per event above the limit, each
    coefficient ``min(C_w(e), need)`` over the ops with cap > 0 outside ``S_0``), and the
    exhaustive optimum at each limit (per-op caps 0-2) meets every row at that limit and above;
    a row that no op may meet appears only below the least peak."""
    seed, n, capcode, pick, kind = args
    g = _graph(seed, n, kind)
    N = g.num_ops
    caps = [capcode // 3**v % 3 for v in range(N)]
    base = {v for v in range(N) if pick >> v & 1}
    anc = _proper_ancestors(g)
    events = _events(g, base)
    least, _, _ = bf.min_peak(g, BIG, caps)
    limits = sorted({least - 1, least, least + 1} | {t - 1 for _, _, t in events if t > least})
    rows = {}
    for M in limits:
        cuts = last_run_cuts(g, M, caps, base=sorted(base))
        expect = []
        for v, is_first, trap in events:
            if trap > M:
                need = trap - M
                coef = [(w, min(_last_run_coefficient(g, anc, base, v, w, not is_first and v in base), need))
                        for w in range(N) if caps[w] > 0]
                expect.append((v, "first run" if is_first else "last run", need,
                               [(w, b) for w, b in coef if b > 0]))
        assert [(c.op, c.kind, c.need, list(zip(c.ops, c.bytes))) for c in cuts] == expect
        assert all(c.base == tuple(sorted(base)) for c in cuts)
        rows[M] = cuts
    may = {v for v in range(N) if caps[v] > 0}
    for M in limits:
        _, plan = bf.min_extra_cost(g, M, caps)
        if plan is None:
            assert M < least
            continue
        for L, cuts in rows.items():
            if L >= M:
                for c in cuts:
                    assert cut_met(c, rerun_set(plan)), (M, L, c, plan.to_doc(g))
    for L, cuts in rows.items():
        if any(not cut_met(c, may) for c in cuts):
            assert L < least


def test_a_descendant_that_reruns_counts_at_the_last_run_of_an_op_of_the_base():
    """Theorem 7F needs the descendants of ``v`` at the last run of an op ``v`` of ``S_0``: ``V``
    (in ``S_0``) runs, ``W`` reads its output, ``U`` reads ``W``'s ``t`` and frees ``y``; then
    ``V`` runs again (its last run, 50 bytes of workspace) while ``t`` is freed, to be made again
    by ``W`` for ``C``. The trap of ``V``'s last run (63) counts ``t`` (``U`` before it releases
    ``y`` and needs ``W``); the plan holds 53 bytes there, exactly the trap minus ``C_W = 10``."""
    g = TensorGraph.build(
        [Tensor("y", 20), Tensor("y2", 1), Tensor("a", 1), Tensor("t", 10), Tensor("u1", 1), Tensor("c1", 30),
         Tensor("z", 100, output=True)],
        [Op("Y", (), ("y", "y2")), Op("V", ("y2",), ("a",), workspace=50), Op("W", ("a",), ("t",)),
         Op("U", ("t", "y"), ("u1",)), Op("C", ("t",), ("c1",)), Op("Z", ("a", "c1", "u1", "y2"), ("z",))])
    op = {n: i for i, n in enumerate(g.op_names)}
    ten = {n: i for i, n in enumerate(g.tensor_names)}
    plan = RematPlan.from_pairs([(RUN, op["Y"]), (RUN, op["V"]), (RUN, op["W"]), (RUN, op["U"]), (FREE, ten["y"]),
                                 (FREE, ten["t"]), (FREE, ten["a"]), (RUN, op["V"]), (RUN, op["W"]), (RUN, op["C"]),
                                 (FREE, ten["t"]), (RUN, op["Z"])])
    base = {op["V"]}
    trap = next(t for v, first, t in _events(g, base) if v == op["V"] and not first)
    _, last = _run_steps(plan)
    mem = int(evaluate_plan(g, plan).profile[last[op["V"]] + 1])
    coef = _last_run_coefficient(g, _proper_ancestors(g), base, op["V"], op["W"], True)
    assert (trap, mem, coef) == (63, 53, 10)
    assert rerun_set(plan) - base == {op["W"]}
    # the row at a limit the plan's moment meets counts W (a descendant of V) for its 10 bytes
    row = next(c for c in last_run_cuts(g, 53, 1, base=sorted(base)) if c.op == op["V"] and c.kind == "last run")
    assert dict(zip(row.ops, row.bytes))[op["W"]] == 10


@SETTINGS
@given(st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 2**20), KINDS))
def test_last_run_traps_above_a_limit_are_the_events_above_it(args):
    """``last_run_traps_above`` (screened, one cut at a time) returns exactly the events whose
    trap exceeds the limit, at limits from below 0 (every event) to above the largest trap."""
    from memopt.remat.last_runs import last_run_traps_above

    seed, n, pick, kind = args
    g = _graph(seed, n, kind)
    base = {v for v in range(g.num_ops) if pick >> v & 1}
    events = _events(g, base)
    top = max(t for _, _, t in events)
    for limit in sorted({-1, 0, top // 2, top - 1, top} | {t for _, _, t in events[:3]}):
        assert last_run_traps_above(g, sorted(base), limit) == [e for e in events if e[2] > limit]
