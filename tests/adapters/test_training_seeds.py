"""The min-cut and segment seeds of a training step (memopt.adapters.training_seeds), on real
PyTorch steps (CPU, no mocks).

Checked: the cut is a minimum one (brute force over every sink-side set of the allowed ops,
on a small captured step); every seed is a valid plan within the realizable caps (independent
checker) whose recomputations run after the barrier, each op at most once more; realized as
the step's two programs, a seed is measured to the byte and its loss and gradients are those
of the plain eager step; ``plan()`` starting from the seeds answers no worse than the best seed
within its limit.
"""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402
from memopt.adapters.training import op_flop_counts  # noqa: E402
from memopt.adapters.training_plan import BARRIER, realizable_graph  # noqa: E402
from memopt.adapters.training_seeds import PRICES, mincut_recomputed, runs_with_recomputation, seed_runs  # noqa: E402
from memopt.remat import check_plan, plan_from_runs  # noqa: E402
from memopt.remat.result import RematResult  # noqa: E402
from _torch_models import MLP, ResidualMLP, assert_step_is_eager  # noqa: E402


def _step(model_cls, shape):
    torch.manual_seed(0)
    model = model_cls().train()
    x = torch.randn(*shape)
    labels = torch.randint(0, 10, (shape[0],))
    tg = training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)
    return model, x, labels, tg


@pytest.fixture(scope="module")
def residual():
    return _step(ResidualMLP, (64, 32))


@pytest.fixture(scope="module")
def mlp():
    return _step(MLP, (64, 32))


def _cut_value(graph, sink_side: set, price=None) -> int:
    """Saved bytes (of the non-resident tensors made on the source side that the sink side
    reads), plus with ``price`` the priced cost of the sink-side ops the forward needs: the
    cut's value, scaled by the price's denominator."""
    from memopt.adapters.training_seeds import _forward_needed

    num, den = (0, 1) if price is None else (price.numerator, price.denominator)
    ins = [graph.inputs_of(v).tolist() for v in range(graph.num_ops)]
    needed = _forward_needed(graph, graph.op_index[BARRIER], ins)
    charged = sum(-(-Fraction(graph.op_cost_exact[v]) * num // 1) for v in sink_side & needed)
    return _saved_bytes(graph, sink_side) * den + charged


def _saved_bytes(graph, sink_side: set) -> int:
    """Bytes of the non-resident tensors made on the source side that the sink side reads."""
    bar_t = graph.tensor_index[BARRIER]
    backward = {v for v in range(graph.num_ops) if bar_t in graph.inputs_of(v).tolist()}
    side = sink_side | backward
    out = set()
    for v in side:
        for t in graph.inputs_of(v).tolist():
            if graph.tensor_producer[t] not in side and not graph.tensor_resident[t]:
                out.add(t)
    return sum(int(graph.tensor_size[t]) for t in out)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.data())
def test_the_cut_is_the_least_of_every_choice_of_the_allowed_ops(mlp, data):
    _, _, _, tg = mlp
    graph, caps = realizable_graph(tg)
    ops = [n for n in graph.op_names if caps[n] >= 1]
    allowed = set(data.draw(st.lists(st.sampled_from(ops), unique=True, max_size=10)))
    price = data.draw(st.sampled_from([None, *PRICES]))
    got = mincut_recomputed(graph, allowed, price)
    assert {graph.op_names[v] for v in got} <= allowed
    ids = [graph.op_index[n] for n in sorted(allowed)]
    best = min(_cut_value(graph, set(s), price) for k in range(len(ids) + 1) for s in itertools.combinations(ids, k))
    assert _cut_value(graph, got, price) == best


def _counted(tg, names) -> int:
    """Counted extra FLOPs of a run sequence (op names)."""
    flops = op_flop_counts(tg)
    return sum(flops.get(n, 0) * (k - 1) for n, k in Counter(names).items())


def _fixed(graph, runs):
    """A ``memopt.remat`` method that answers with the plan ``runs`` (to realize one seed)."""
    def fixed(problem, *, question, memory_limit=None, cost_budget=None, cap, time_limit, incumbent=None, seed=0):
        # read on the solver's graph (costed by the FLOP objective; same ops as graph)
        plan = plan_from_runs(problem.graph, [graph.op_names[v] for v in runs])
        pk, c = check_plan(problem.graph, plan, cap=cap)
        return RematResult(plan=plan, peak=pk, extra_cost=c, status="feasible", question=question,
                           memory_limit=memory_limit, cap=list(cap), method="fixed")
    return fixed


@pytest.mark.parametrize("case", [pytest.param("residual", marks=pytest.mark.slow), "mlp"])
def test_every_seed_is_a_realizable_plan_measured_to_the_byte_with_eager_gradients(case, request):
    model, x, labels, tg = request.getfixturevalue(case)
    tg = tg.with_workspace(training.measure(tg).transients)
    graph, caps = realizable_graph(tg)
    cap = [caps[n] for n in graph.op_names]
    seeds = seed_runs(tg, graph, caps)
    assert seeds and len({tuple(s) for s in seeds}) == len(seeds)
    assert any(len(s) > graph.num_ops for s in seeds)  # some seed recomputes
    phase = tg.phase
    for runs in seeds:
        names = [graph.op_names[v] for v in runs]
        pk, extra = check_plan(graph, plan_from_runs(graph, names), cap=cap)
        counts, barrier = Counter(names), names.index(BARRIER)
        assert all(counts[n] == 1 for n in phase if phase[n] == "backward")
        assert all(i > barrier for i, n in enumerate(names) if n in phase and phase[n] == "backward")
        # a second run of an op is after the barrier
        seen = set()
        assert all(i > barrier for i, n in enumerate(names) if n in seen or seen.add(n))
        rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_limit=pk - graph.resident_bytes,
                            time_limit=5, captured=tg, method=_fixed(graph, runs), seeds=False, measure_step=False)
        assert list(rep.runs) == names and rep.extra_flops == _counted(tg, names)
        assert rep.measure(x, labels) == rep.modelled_peak == pk - graph.resident_bytes
        assert_step_is_eager(rep, model, x, labels)


def test_the_recomputed_ops_run_right_before_their_first_backward_use(residual):
    _, _, _, tg = residual
    graph, caps = realizable_graph(tg)
    again = mincut_recomputed(graph, {n for n in graph.op_names if caps[n] >= 1})
    runs = runs_with_recomputation(graph, again)
    barrier = runs.index(graph.op_index[BARRIER])
    reruns = [i for i in range(barrier + 1, len(runs)) if runs[i] in again]
    assert reruns
    for i in reruns:
        outs = set(graph.outputs_of(runs[i]).tolist())
        first = next((j for j in range(i + 1, len(runs)) if outs & set(graph.inputs_of(runs[j]).tolist())), None)
        if first is None:  # an op the forward does not need and nothing reads: run once, last
            assert runs.count(runs[i]) == 1 and all(runs.count(v) == 1 for v in runs[i:])
            continue
        # nothing but other recomputations between a recomputation and its first reader
        assert all(runs[k] in again for k in range(i + 1, first))


def test_plan_from_the_seeds_is_no_worse_than_the_best_seed_within_the_limit(residual):
    model, x, labels, tg = residual
    tgw = tg.with_workspace(training.measure(tg).transients)
    graph, caps = realizable_graph(tgw)
    cap = [caps[n] for n in graph.op_names]
    checked = [check_plan(graph, plan_from_runs(graph, [graph.op_names[v] for v in s]), cap=cap)
               for s in seed_runs(tgw, graph, caps)]
    pk, _ = min(checked, key=lambda pc: (pc[0], Fraction(pc[1])))
    limit = pk - graph.resident_bytes
    # the search minimizes counted FLOPs first: never more than the fewest of a seed within the limit
    best = min(_counted(tg, [graph.op_names[v] for v in s]) for s, (p, _) in zip(seed_runs(tgw, graph, caps), checked)
               if p <= pk)
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_limit=limit,
                        time_limit=0, captured=tg, measure_step=False)
    assert rep.status in ("optimal", "feasible")
    assert rep.modelled_peak <= limit and rep.extra_flops <= best


def test_the_cheap_caps_let_only_ops_without_a_flop_formula_run_again(residual):
    from memopt.adapters.training import _meta_args, op_flops
    from memopt.adapters.training_seeds import cheap_caps, within

    _, _, _, tg = residual
    graph, caps = realizable_graph(tg)
    cheap = cheap_caps(tg, graph, caps)
    assert set(cheap) == set(caps) and any(cheap.values())
    for name, k in cheap.items():
        assert k <= caps[name]
        if k:
            node = tg.nodes[name]
            assert op_flops(node.target, *_meta_args(node), node.meta.get("val")) is None, name
    seeds = seed_runs(tg, graph, caps)
    for runs in seeds:
        again = {graph.op_names[v] for v, k in Counter(runs).items() if k > 1}
        assert within(graph, runs, cheap) == all(cheap[n] >= 1 for n in again)
    assert any(within(graph, r, cheap) for r in seeds) and not all(within(graph, r, cheap) for r in seeds)


@pytest.mark.parametrize("where", ["end", "nll_loss_backward"])
def test_a_loss_op_run_again_in_the_backward_is_measured_to_the_byte(residual, where):
    """The loss is a view of nll_loss_forward's output; re-running that op after the barrier
    makes the new copy the step's loss (the model frees the forward's at the barrier)."""
    model, x, labels, tg = residual
    tgw = tg.with_workspace(training.measure(tg).transients)
    graph, caps = realizable_graph(tgw)
    names = list(graph.op_names)
    loss_op = next(o.name for o in tg._ops if o.name.startswith("nll_loss_forward"))
    names.insert(names.index(where) if where != "end" else len(names), loss_op)
    runs = [graph.op_index[n] for n in names]
    pk, _ = check_plan(graph, plan_from_runs(graph, names), cap=[caps[n] for n in graph.op_names])
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels,
                        memory_limit=pk - graph.resident_bytes, time_limit=5, captured=tg,
                        method=_fixed(graph, runs), seeds=False)
    assert rep.recomputed == (loss_op,)
    assert rep.peak == rep.modelled_peak
    assert_step_is_eager(rep, model, x, labels)
