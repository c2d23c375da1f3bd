"""The counted extra FLOPs of a training-step plan and memopt's lower bound on them
(``TrainingPlan.extra_flops``, ``TrainingPlan.lower_bound``), and which ops may run again (an
attention kernel without dropout may, dropout may not). Real PyTorch steps (CPU).

Checked: the graph the solver gets costs each op its FLOPs times the objective's weight, or
its tie-break without a formula; the counted FLOPs are the FLOP formulas of the ops the plan
runs again; the bound never exceeds them, nor the counted FLOPs of any seed plan within the
same limit (each is a plan of the realizable model); a plan whose FLOPs meet the bound is
``optimal``; a cost budget is a budget of counted FLOPs; an attention call without dropout
re-run in the backward keeps the loss and every gradient bitwise and the measured peak equal
to the modelled one.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402
from memopt.adapters.training import op_flop_counts  # noqa: E402
from memopt.adapters.training_plan import BARRIER, FlopObjective, realizable_graph  # noqa: E402
from memopt.adapters.training_seeds import runs_with_recomputation, seed_runs  # noqa: E402
from memopt.remat import check_plan, plan_from_runs  # noqa: E402
from memopt.remat.result import RematResult  # noqa: E402
from _torch_models import ResidualMLP, assert_step_is_eager  # noqa: E402


class Attention(torch.nn.Module):
    """Linear to q, k, v; scaled dot-product attention (``dropout``); Linear; mean over tokens."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 10)
        self.dropout = dropout

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(x.shape[0], x.shape[1], 16)).mean(1)


def _step(model_cls, shape, **kw):
    torch.manual_seed(0)
    model = model_cls(**kw).train()
    x = torch.randn(*shape)
    labels = torch.randint(0, 10, (shape[0],))
    tg = training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)
    return model, x, labels, tg.with_workspace(training.measure(tg).transients)


@pytest.fixture(scope="module")
def residual():
    return _step(ResidualMLP, (64, 32))


def _counted(tg, graph, runs) -> int:
    flops = op_flop_counts(tg)
    return sum(flops.get(graph.op_names[v], 0) * (k - 1) for v, k in Counter(runs).items())


def test_the_solved_graph_costs_each_op_its_flops_times_the_weight_or_its_tie_break(residual):
    _, _, _, tg = residual
    graph, caps = realizable_graph(tg)
    ob = FlopObjective.of(tg, graph, caps)
    solved = ob.graph(graph)
    flops = op_flop_counts(tg)
    assert solved.op_names == graph.op_names and list(solved.tensor_size) == list(graph.tensor_size)
    assert flops and any(n not in flops for n in solved.op_names)
    assert ob.weight == ob.tie_total + 1 > 1
    assert ob.tie_total == sum(ob.ties[n] * caps[n] for n in ob.ties)
    elements = {o.name: o.cost for o in tg._ops}
    for name, cost in zip(solved.op_names, solved.op_cost_exact):
        if name == BARRIER:
            assert cost == 0
        elif name in flops:
            assert cost == flops[name] * ob.weight, name
        else:
            assert cost == max(1, int(elements[name]).bit_length()), name


def test_the_flop_bound_never_exceeds_the_counted_flops_of_the_plan_or_of_any_seed(residual):
    model, x, labels, tg = residual
    graph, caps = realizable_graph(tg)
    cap = [caps[n] for n in graph.op_names]
    seeds = [(check_plan(graph, plan_from_runs(graph, [graph.op_names[v] for v in s]), cap=cap)[0], _counted(tg, graph, s))
             for s in seed_runs(tg, graph, caps)]
    limits = sorted({pk for pk, _ in seeds})
    assert any(f > 0 for _, f in seeds) and any(f == 0 for _, f in seeds)
    for limit in (limits[0], limits[len(limits) // 2]):
        rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels,
                            memory_limit=limit - graph.resident_bytes, time_limit=3, captured=tg, measure_step=False)
        assert rep.status in ("optimal", "feasible")
        runs = [graph.op_index[n] for n in rep.runs]
        assert rep.extra_flops == _counted(tg, graph, runs)
        assert rep.reruns_without_flops == sum(k - 1 for v, k in Counter(runs).items()
                                               if graph.op_names[v] not in op_flop_counts(tg))
        assert rep.lower_bound is not None and 0 <= rep.lower_bound <= rep.extra_flops
        assert all(rep.lower_bound <= f for pk, f in seeds if pk <= limit)
        assert (rep.status == "optimal") == (rep.lower_bound == rep.extra_flops)
        assert rep.to_dict()["lower_bound"] == rep.lower_bound
        assert rep.to_dict()["reruns_without_flops"] == rep.reruns_without_flops


def test_a_cost_budget_is_a_budget_of_counted_flops(residual):
    model, x, labels, tg = residual
    graph, caps = realizable_graph(tg)
    for budget in (0, 40_000):
        rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, cost_budget=budget,
                            time_limit=3, captured=tg, measure_step=False)
        assert rep.status in ("optimal", "feasible") and rep.extra_flops <= budget
        assert rep.extra_flops == _counted(tg, graph, [graph.op_index[n] for n in rep.runs])
        assert rep.lower_bound is not None and rep.lower_bound <= rep.modelled_peak + graph.resident_bytes


def test_an_attention_call_may_run_again_only_without_dropout():
    _, _, _, tg = _step(Attention, (4, 6, 16))
    _, caps = realizable_graph(tg)
    attention = [o.name for o in tg._ops if "scaled_dot_product" in o.name and tg.phase[o.name] == "forward"]
    assert len(attention) == 1 and caps[attention[0]] == 1
    # with dropout the attention's random draw (whichever op makes it) never runs again
    _, _, _, tg = _step(Attention, (4, 6, 16), dropout=0.25)
    _, caps = realizable_graph(tg)
    random = [o.name for o in tg._ops if tg.phase[o.name] == "forward"
              and torch.Tag.nondeterministic_seeded in getattr(tg.nodes[o.name].target, "tags", ())]
    assert random and all(caps[n] == 0 for n in random)


def test_an_attention_run_again_in_the_backward_is_bitwise_and_measured_to_the_byte():
    model, x, labels, tg = _step(Attention, (4, 6, 16))
    graph, caps = realizable_graph(tg)
    attention = next(graph.op_index[o.name] for o in tg._ops
                     if "scaled_dot_product" in o.name and tg.phase[o.name] == "forward")
    runs = runs_with_recomputation(graph, {attention})
    names = [graph.op_names[v] for v in runs]
    assert names.count(graph.op_names[attention]) == 2 and names.index(BARRIER) < len(names) - 1
    pk, _ = check_plan(graph, plan_from_runs(graph, names), cap=[caps[n] for n in graph.op_names])

    def fixed(problem, *, question, memory_limit=None, cost_budget=None, cap, time_limit, incumbent=None, seed=0):
        # the solver's graph is costed by the FLOP objective: the plan's cost is read there
        plan = plan_from_runs(problem.graph, names)
        cost = check_plan(problem.graph, plan, cap=list(cap))[1]
        return RematResult(plan=plan, peak=pk, extra_cost=cost, status="feasible",
                           question=question, memory_limit=memory_limit, cap=list(cap), method="fixed")

    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels,
                        memory_limit=pk - graph.resident_bytes, time_limit=5, captured=tg, method=fixed, seeds=False)
    assert rep.recomputed == (graph.op_names[attention],)
    assert rep.extra_flops == op_flop_counts(tg)[graph.op_names[attention]] > 0
    assert rep.peak == rep.modelled_peak
    assert_step_is_eager(rep, model, x, labels)
