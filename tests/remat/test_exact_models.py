"""The exactness argument of ``proofs/remat_exact_models.md``, tested where it could break.

``tests/remat/test_solvers.py`` compares the models with the exhaustive search on random
graphs. These tests aim at the places where a slot model could silently lose plans: the
completeness direction on random *non-canonical* plans (late frees, useless re-runs, which
CP-SAT's dominance rules exclude), plans that need every run slot, re-runs of multi-output
ops whose other output is still live, size-0 outputs, freed graph inputs, and the meaning of
``infeasible`` under caps.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memopt.core import Op, Tensor, TensorGraph, peak
from memopt.remat import check_plan
from memopt.remat.brute_force import min_extra_cost, min_peak
from memopt.remat.cpsat import solve_cpsat
from memopt.remat.mip import solve_mip
from memopt.remat.model_common import RematProblem, plan_from_runs
from memopt.remat.plan import FREE, RUN, RematPlan

from conftest import random_topological_order

from conftest import held_value_graph

SOLVERS = (solve_cpsat, solve_mip)
#: sizes with many zeros (size-0 outputs, aliases) and a few large values (what is worth re-running)
SIZES = (0, 0, 1, 2, 5, 9, 16)


def mixed_graph(rng: np.random.Generator, n_ops: int) -> TensorGraph:
    """A random DAG with multi-output ops, many size-0 tensors, workspaces, graph inputs
    (resident, freeable, and input-outputs) and integer costs."""
    tensors, ops, produced, inputs = [], [], [], []
    for k in range(int(rng.integers(0, 3))):
        tensors.append(Tensor(f"in{k}", int(rng.choice(SIZES)), resident=bool(rng.random() < 0.2),
                              output=bool(rng.random() < 0.2)))
        inputs.append(f"in{k}")
    for v in range(n_ops):
        reads = [t for t in produced + inputs if rng.random() < 0.4]
        outs = [f"t{v}_{k}" for k in range(1 + int(rng.random() < 0.5))]
        tensors.extend(Tensor(o, int(rng.choice(SIZES)), output=bool(rng.random() < 0.15)) for o in outs)
        ws = int(rng.choice(SIZES)) if rng.random() < 0.3 else 0
        ops.append(Op(f"op{v}", tuple(reads), tuple(outs), workspace=ws, cost=float(rng.integers(0, 6))))
        produced.extend(outs)
    return TensorGraph.build(tensors, ops, name="mixed")


def random_plan(g: TensorGraph, caps: list[int], rng: np.random.Generator) -> RematPlan:
    """A random valid plan that is generally *not* canonical: a random topological order
    with re-runs inserted at random places after the op's first run (some of them useless),
    every tensor freed as early as possible, then frees delayed at random (never past the
    next production of the tensor, so the multi-output rule still holds)."""
    p = RematProblem.of(g, caps)
    runs = random_topological_order(g, rng)
    for _ in range(int(rng.integers(0, 2 * g.num_ops + 1))):
        v = int(rng.integers(g.num_ops))
        if runs.count(v) < 1 + caps[v]:
            first = runs.index(v)
            runs.insert(int(rng.integers(first + 1, len(runs) + 1)), v)
    steps = list(zip(plan_from_runs(p, runs).kind.tolist(), plan_from_runs(p, runs).index.tolist()))
    keyed = []
    for i, (kind, x) in enumerate(steps):
        if kind == FREE and rng.random() < 0.5:
            prod = int(g.tensor_producer[x])
            nxt = next((j for j in range(i + 1, len(steps)) if steps[j] == (RUN, prod)), len(steps))
            keyed.append(((int(rng.integers(i + 1, nxt + 1)), 0, i), (kind, x)))
        else:
            keyed.append(((i, 1, i), (kind, x)))
    return RematPlan.from_pairs([s for _, s in sorted(keyed)])


def assert_answer(g, r, cap, *, cost=None, peak_=None):
    assert r.status == "optimal", r.stats
    pk, c = check_plan(g, r.plan, cap=cap, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)
    if cost is not None:
        assert Fraction(c) == Fraction(cost)
    if peak_ is not None:
        assert pk == peak_


# ---------------------------------------------------------------------------- completeness
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6))
def test_every_random_plan_is_matched_or_beaten_by_both_models(seed):
    """Completeness (proof §3, §4): for any valid plan P, the model under P's peak has an
    optimum of at most P's extra cost, and under P's cost a peak of at most P's — also when
    P has late frees and useless re-runs, and also with P as the incumbent (cut caps)."""
    rng = np.random.default_rng(seed)
    g = mixed_graph(rng, int(rng.integers(2, 6)))
    caps = [int(rng.integers(0, 3)) for _ in range(g.num_ops)]
    plan = random_plan(g, caps, rng)
    pk, cost = check_plan(g, plan, cap=caps)
    best_cost, _ = min_extra_cost(g, pk, caps)
    best_peak, _, _ = min_peak(g, cost, caps)
    assert best_cost is not None and Fraction(best_cost) <= Fraction(cost)
    for solve in SOLVERS:
        for inc in (None, plan):
            r = solve(g, "min_cost", memory_limit=pk, cap=caps, time_limit=30, incumbent=inc)
            assert_answer(g, r, caps, cost=best_cost)
            assert r.peak <= pk
        r = solve(g, "min_peak", cost_budget=cost, cap=caps, time_limit=30, incumbent=plan)
        assert_answer(g, r, caps, peak_=best_peak)
        assert Fraction(r.extra_cost) <= Fraction(cost)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 4))
def test_models_equal_brute_force_on_graphs_with_size_zero_outputs_and_inputs(seed, below):
    """Size-0 outputs are outside CP-SAT's second dominance rule (a re-run needs a used
    *positive-size* output) and graph inputs are freed at their last read (first rule): the
    optimum and the infeasibility verdict must still be the exhaustive search's."""
    rng = np.random.default_rng(seed)
    g = mixed_graph(rng, int(rng.integers(1, 6)))
    caps = [int(rng.integers(0, 3)) for _ in range(g.num_ops)]
    top = peak(g, g.topological_order())
    limit = max(0, top - below * max(1, top // 6))
    cost, _ = min_extra_cost(g, limit, caps)
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=limit, cap=caps, time_limit=30)
        if cost is None:
            assert (r.status, r.plan) == ("infeasible", None), solve.__name__
        else:
            assert_answer(g, r, caps, cost=cost)
            assert r.peak <= limit


# ---------------------------------------------------------------------------- every slot used
@pytest.mark.parametrize("m", (2, 3, 4))
def test_a_plan_that_fills_every_slot_is_found_and_one_cap_less_is_infeasible(m):
    """With ``A``'s cap ``m - 1`` and every other cap 0 the only plans use all
    ``T = sum (1 + k)`` slots (proof §2.1: T bounds the runs of every capped plan, nothing
    smaller is assumed); with cap ``m - 2`` the models must prove infeasibility, as the
    exhaustive search does — infeasibility under the full slot count is a proof."""
    g = held_value_graph(m)
    for k_a, expected in ((m - 1, m - 1), (m - 2, None)):
        caps = [k_a if name == "A" else 0 for name in g.op_names]
        assert min_extra_cost(g, 22, caps)[0] == expected
        assert RematProblem.of(g, caps).slots == g.num_ops + k_a
        for solve in SOLVERS:
            r = solve(g, "min_cost", memory_limit=22, cap=caps, time_limit=30)
            if expected is None:
                assert (r.status, r.plan) == ("infeasible", None), solve.__name__
            else:
                assert_answer(g, r, caps, cost=expected)
                assert len(r.plan.runs()) == RematProblem.of(g, caps).slots


@pytest.mark.parametrize("m", (2, 3))
def test_caps_cut_by_an_optimal_incumbent_keep_exactly_the_runs_it_needs(m):
    """With a generous global cap and the optimum as incumbent (extra cost ``U = m - 1``),
    the cut caps (proof §1, Lemma 4) leave ``A`` exactly ``floor(U / c(A)) = m - 1`` re-runs
    and every other op (cost 50 > U) none: the optimum needs all of them, and is kept."""
    g = held_value_graph(m)
    cost, plan = min_extra_cost(g, 22, m + 1)
    assert cost == m - 1
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=22, cap=m + 1, time_limit=30, incumbent=plan)
        assert_answer(g, r, m + 1, cost=m - 1)
        # and within the budget m - 1 the least peak is the exhaustive search's (<= 22)
        r = solve(g, "min_peak", cost_budget=m - 1, cap=m + 1, time_limit=30)
        assert_answer(g, r, m + 1, peak_=min_peak(g, m - 1, m + 1)[0])
        assert r.peak <= 22


# ---------------------------------------------------------------------------- multi-output re-runs
def two_output_graph(b_is_output: bool) -> TensorGraph:
    """``V`` makes ``a`` (10 bytes) and ``b`` (1 byte); ``b`` is read by every later op, ``a``
    only by the first and the last. Under 23 bytes ``a`` cannot be held across ``H``
    (workspace 20), so ``V`` re-runs before ``Z`` — and since ``b`` is still live, the plan must
    free ``b`` first and read the re-run's ``b`` afterwards (the "no output live" rule)."""
    return TensorGraph.build(
        [Tensor("a", 10), Tensor("b", 1, output=b_is_output), Tensor("x", 1), Tensor("h", 1),
         Tensor("z", 1, output=True)],
        [Op("V", (), ("a", "b"), cost=3), Op("X", ("a", "b"), ("x",), cost=40),
         Op("H", ("x", "b"), ("h",), workspace=20, cost=40), Op("Z", ("a", "h", "b"), ("z",), cost=40)])


@pytest.mark.parametrize("b_is_output", (False, True))
def test_a_multi_output_op_re_runs_after_its_live_output_is_freed(b_is_output):
    g = two_output_graph(b_is_output)
    assert min_extra_cost(g, 23, 1)[0] == 3
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=23, cap=1, time_limit=30)
        assert_answer(g, r, 1, cost=3)
        steps = r.plan.to_doc(g)
        second_v = [i for i, s in enumerate(steps) if s == {"run": "V"}][1]
        frees_b = [i for i, s in enumerate(steps) if s == {"free": "b"}]
        assert any(i < second_v for i in frees_b)
        # without the re-run the limit cannot be met: the cap-0 question is infeasible
        assert solve(g, "min_cost", memory_limit=23, cap=0, time_limit=30).status == "infeasible"


def test_a_size_zero_output_is_kept_instead_of_re_running_its_producer():
    """``V``'s size-0 output ``z`` is read at the end, its 10-byte output ``a`` only early. A
    re-run of ``V`` only to re-make ``z`` is never needed (proof §4.2, Lemma 2): ``z`` can stay
    live at no cost, so the optimum under the limit is 0 — and CP-SAT, which forbids re-runs
    without a used positive-size output, must find it."""
    g = TensorGraph.build(
        [Tensor("a", 10), Tensor("z", 0), Tensor("x", 1), Tensor("h", 1), Tensor("out", 1, output=True)],
        [Op("V", (), ("a", "z"), cost=1), Op("X", ("a",), ("x",), cost=9),
         Op("H", ("x",), ("h",), workspace=20, cost=9), Op("Z", ("z", "h"), ("out",), cost=9)])
    assert min_extra_cost(g, 22, 2)[0] == 0
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=22, cap=2, time_limit=30)
        assert_answer(g, r, 2, cost=0)


@pytest.mark.parametrize("late_read", (False, True))
def test_graph_inputs_are_freed_after_their_last_read_and_never_brought_back(late_read):
    """A graph input ``w`` read only by the first op must be freed right after it to fit 22
    bytes (CP-SAT's first dominance rule ends its interval there). Read again at the end, it
    cannot be freed in between (it has no producer): below 32 bytes both models prove
    infeasibility, at 32 they hold it."""
    g = TensorGraph.build(
        [Tensor("w", 10), Tensor("x", 1), Tensor("h", 1), Tensor("z", 1, output=True)],
        [Op("X", ("w",), ("x",), cost=1), Op("H", ("x",), ("h",), workspace=20, cost=1),
         Op("Z", ("w", "h") if late_read else ("h",), ("z",), cost=1)])
    for limit in (22, 31, 32):
        expected = (0 if limit == 32 else None) if late_read else 0
        assert min_extra_cost(g, limit, 2)[0] == expected
        for solve in SOLVERS:
            r = solve(g, "min_cost", memory_limit=limit, cap=2, time_limit=30)
            if expected is None:
                assert (r.status, r.plan) == ("infeasible", None)
            else:
                assert_answer(g, r, 2, cost=0)


def test_a_graph_output_is_re_made_at_the_end_instead_of_held():
    """``O`` makes ``o`` (10 bytes, a graph output nobody reads) and ``k``, which ``H``
    (workspace 20) reads, so ``O`` runs before ``H``. Holding ``o`` across ``H`` breaks 22
    bytes, so the optimum drops it after ``O``'s first run and re-runs ``O`` at the end. That
    re-run's only use is being live at the end — the "final" literal of CP-SAT's second
    dominance rule."""
    g = TensorGraph.build(
        [Tensor("o", 10, output=True), Tensor("k", 1), Tensor("h", 1, output=True)],
        [Op("O", (), ("o", "k"), cost=1), Op("H", ("k",), ("h",), workspace=20, cost=1)])
    assert min_extra_cost(g, 22, 1)[0] == 1
    for solve in SOLVERS:
        r = solve(g, "min_cost", memory_limit=22, cap=1, time_limit=30)
        assert_answer(g, r, 1, cost=1)
        assert [s for s in r.plan.to_doc(g) if "run" in s][-1] == {"run": "O"}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_first_runs_follow_the_edges_in_every_random_plan(seed):
    """Lemma 8, the redundant precedences of the CP-SAT model: in any valid plan the first run
    of a producer precedes the first run of each consumer, and at least as many runs as the
    op has descendants follow its first run."""
    from memopt.remat.model_common import ancestor_counts

    rng = np.random.default_rng(seed)
    g = mixed_graph(rng, int(rng.integers(1, 8)))
    caps = [int(rng.integers(0, 3)) for _ in range(g.num_ops)]
    p = RematProblem.of(g, caps)
    runs = random_plan(g, caps, rng).runs().tolist()
    first = {v: runs.index(v) for v in range(g.num_ops)}
    for a, b in zip(*(x.tolist() for x in g.op_edges())):
        assert first[a] < first[b]
    desc = ancestor_counts(p, descendants=True)
    anc = ancestor_counts(p)
    for v in range(g.num_ops):
        assert len(runs) - 1 - first[v] >= desc[v]
        assert first[v] >= anc[v]
    # on a chain the counts are exact: n - 1 - i descendants, i ancestors
    chain = TensorGraph.build([Tensor(f"t{i}", 1, output=i == 3) for i in range(4)],
                              [Op(f"o{i}", (f"t{i - 1}",) if i else (), (f"t{i}",)) for i in range(4)])
    q = RematProblem.of(chain, 0)
    assert ancestor_counts(q, descendants=True) == [3, 2, 1, 0] and ancestor_counts(q) == [0, 1, 2, 3]
