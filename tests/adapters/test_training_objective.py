"""The objective of a training step's recomputation (``training_plan.FlopObjective``) against
brute force on small graphs: counted FLOPs first, then tie-breaks, in one integer cost.

Checked on random series-parallel graphs whose ops are split at random into ops with a FLOP
count and ops without one: a cheapest plan of the objective's graph has the fewest FLOPs of
any plan within the limit; the FLOP bound of the exact cost optimum is exactly that fewest
number, and the FLOP bound of memopt's cost lower bound never exceeds it; the cost budget of a
FLOP budget admits the same plans (the same least peak); with ``weight`` 1 (the fallback past
2**53) the bound still never exceeds the brute-force optimum. No torch needed.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("torch")

from memopt.adapters.training_plan import FlopObjective  # noqa: E402
from memopt.core import Op, Tensor, TensorGraph  # noqa: E402
from memopt.remat import brute_force  # noqa: E402
from memopt.remat.lower_bounds import cost_lower_bound  # noqa: E402


def _instance(seed: int):
    """A random series-parallel graph, its objective (about half the ops with FLOPs), and the
    same graph costed by FLOPs alone (ops without a count cost 0)."""
    rng = np.random.default_rng(seed)
    g = brute_force.random_sp_graph(rng, int(rng.integers(3, 7)))
    names = g.op_names
    counted = {n for n in names if rng.random() < 0.5}
    flops = {n: int(rng.integers(0, 40)) for n in counted}
    ties = {n: int(rng.integers(1, 6)) for n in names if n not in counted}
    tie_total = sum(ties.values())  # cap 1: each op re-runs at most once
    ob = FlopObjective(flops=flops, ties=ties, weight=tie_total + 1, tie_total=tie_total)
    flop_only = _recosted(g, lambda n: flops.get(n, 0))
    return g, ob, flop_only


def _recosted(g: TensorGraph, cost) -> TensorGraph:
    tn, size = g.tensor_names, g.tensor_size.tolist()
    tensors = [Tensor(tn[t], size[t], output=bool(g.tensor_output[t]), resident=bool(g.tensor_resident[t]))
               for t in range(g.num_tensors)]
    ops = [Op(g.op_names[v], tuple(tn[t] for t in g.inputs_of(v).tolist()),
              tuple(tn[t] for t in g.outputs_of(v).tolist()), workspace=int(g.op_workspace[v]),
              cost=cost(g.op_names[v])) for v in range(g.num_ops)]
    return TensorGraph.build(tensors, ops)


def _limits(g: TensorGraph) -> list[int]:
    """Limits from the no-recomputation optimum down to where plans need re-runs."""
    top = brute_force.min_peak(g, 0, 1)[0]
    return sorted({max(0, top - d) for d in (0, 1, 2, 4, 7, 11)}, reverse=True)


@pytest.mark.parametrize("seed", range(40))
def test_the_cheapest_plan_has_the_fewest_flops_and_the_bound_is_exact_at_the_optimum(seed):
    g, ob, flop_only = _instance(seed)
    solved = ob.graph(g)
    assert solved.op_names == g.op_names
    assert [solved.op_cost_exact[v] for v in range(g.num_ops)] == [ob.cost(n) for n in g.op_names]
    assert ob.weight > ob.tie_total
    for limit in _limits(g):
        cost, plan = brute_force.min_extra_cost(solved, limit, 1)
        fewest, _ = brute_force.min_extra_cost(flop_only, limit, 1)
        if cost is None:
            assert fewest is None
            continue
        runs = [g.op_names[v] for v in plan.runs().tolist()]
        assert ob.extra_flops(runs) == fewest
        assert cost == ob.extra_flops(runs) * ob.weight + sum(ob.ties[n] * (k - 1) for n, k in Counter(runs).items()
                                                             if n in ob.ties)
        assert ob.flop_bound(cost) == fewest
        bound = cost_lower_bound(solved, limit, 1, time_limit=5).value
        assert bound is not None and ob.flop_bound(bound) <= fewest


@pytest.mark.parametrize("seed", range(40, 60))
def test_the_cost_budget_of_a_flop_budget_admits_the_same_plans(seed):
    g, ob, flop_only = _instance(seed)
    solved = ob.graph(g)
    for budget in (0, 10, 40):
        cost_budget, exact = ob.cost_budget(budget)
        assert exact
        assert brute_force.min_peak(solved, cost_budget, 1)[0] == brute_force.min_peak(flop_only, budget, 1)[0]


@pytest.mark.parametrize("seed", range(60, 80))
def test_with_weight_one_the_bound_still_never_exceeds_the_fewest_flops(seed):
    g, ob, flop_only = _instance(seed)
    ob = FlopObjective(flops=ob.flops, ties=ob.ties, weight=1, tie_total=ob.tie_total)
    solved = ob.graph(g)
    assert ob.cost_budget(7) == (7, False)
    for limit in _limits(g):
        cost, _ = brute_force.min_extra_cost(solved, limit, 1)
        fewest, _ = brute_force.min_extra_cost(flop_only, limit, 1)
        if cost is not None:
            assert ob.flop_bound(cost) <= fewest


def test_the_weight_falls_back_to_one_where_costs_would_pass_2_to_the_53(monkeypatch):
    import memopt.adapters.training as training

    # the graph's costs are its element counts; a capture is read only for its FLOP counts
    g = TensorGraph.build([Tensor("a", 4), Tensor("b", 4, output=True)],
                          [Op("big", (), ("a",), cost=5), Op("relu", ("a",), ("b",), cost=100)])
    monkeypatch.setattr(training, "op_flop_counts", lambda tg: {"big": 2 ** 50})
    ob = FlopObjective.of(None, g, {"big": 1, "relu": 1})
    assert (ob.weight, ob.ties, ob.tie_total) == (1, {"relu": 7}, 7)
    monkeypatch.setattr(training, "op_flop_counts", lambda tg: {"big": 2 ** 20})
    ob = FlopObjective.of(None, g, {"big": 1, "relu": 1})
    assert (ob.weight, ob.cost("big"), ob.cost("relu")) == (8, 8 * 2 ** 20, 7)
