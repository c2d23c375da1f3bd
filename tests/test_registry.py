"""The registry of scheduling methods and the portfolios built on it."""

from __future__ import annotations

import inspect
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.core import Op, SchedulingProblem, Tensor, TensorGraph, peak
from memopt.errors import InternalError, MemoptError, OptionError, ScheduleError
from memopt.io import load_instance
from memopt.schedule import registry
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph
from memopt.schedule.result import MethodResult, ScheduleResult

from conftest import REPO, shared_graph

SIGNATURE = ["problem", "time_limit", "incumbent", "lower_bound", "seed"]


@pytest.mark.parametrize("name", registry.method_names())
def test_every_method_has_the_one_signature(name):
    fn = registry.get_method(name).load()
    params = list(inspect.signature(fn).parameters)
    assert params[:5] == SIGNATURE
    for p in SIGNATURE[1:]:
        assert inspect.signature(fn).parameters[p].kind == inspect.Parameter.KEYWORD_ONLY


def test_reading_the_registry_imports_no_solver():
    code = ("import sys; from memopt.schedule import registry as r; r.method_names(); "
            "bad = [m for m in ('numpy', 'numba', 'ortools', 'pyscipopt', 'memopt.core', 'memopt.schedule.cpsat') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_method_is_an_option_error():
    with pytest.raises(OptionError, match="unknown method 'nope'"):
        memopt.schedule(_tiny(), method="nope")


@pytest.mark.parametrize("limit", [math.inf, math.nan, -1, True, "soon", 1e7])
def test_time_limits_must_be_finite_and_sane(limit):
    with pytest.raises(OptionError, match="time limit"):
        memopt.schedule(_tiny(), time_limit=limit)


def _tiny():
    return TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])


def test_a_new_method_is_one_function_and_one_registry_line():
    def reverse_topological(problem, *, time_limit, incumbent=None, lower_bound=None, seed=0):
        # a valid (if poor) order: the input order, a method written by a user
        return MethodResult(order=problem.baseline_order(), peak=None)

    import types

    mod = types.ModuleType("memopt_test_plugin")
    mod.method = reverse_topological
    sys.modules["memopt_test_plugin"] = mod
    registry.register(registry.Method("user-method", "memopt_test_plugin:method", "heuristic", "a plug-in"))
    try:
        g = random_tensor_graph(np.random.default_rng(3), 7)
        r = memopt.schedule(g, method="user-method", time_limit=2)
        assert r.method == "user-method" and r.verified
        assert r.peak == peak(g, r.order)  # memopt evaluates the plug-in's order itself
    finally:
        del registry.REGISTRY["user-method"]
        del sys.modules["memopt_test_plugin"]


@settings(max_examples=20)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_every_method_is_valid_and_exact_methods_are_optimal(seed, n):
    g = random_tensor_graph(np.random.default_rng(seed), n)
    _, opt = brute_force_schedule(g)
    problem = SchedulingProblem(g)
    for m in registry.methods():
        if m.kind == "portfolio":
            continue
        try:
            res = m.load()(problem, time_limit=5.0, incumbent=None, lower_bound=None, seed=0)
        except registry.NotApplicable:
            assert m.kind in ("class",)
            continue
        assert res.order is not None, m.name
        assert peak(g, res.order) == res.peak >= opt, m.name
        if res.lower_bound is not None:
            assert res.lower_bound <= opt, m.name
        if m.kind == "exact":
            assert res.optimal and res.peak == opt, m.name


@settings(max_examples=20)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.sampled_from(["auto", "exact"]))
def test_portfolios_are_optimal_on_small_graphs(seed, n, method):
    g = random_tensor_graph(np.random.default_rng(seed), n)
    _, opt = brute_force_schedule(g)
    r = memopt.schedule(g, method=method, time_limit=5)
    assert r.peak == opt == r.lower_bound and r.status in ("certified", "optimal")


def test_auto_stops_as_soon_as_it_is_proved():
    # the 18-op MLP: the trap bound leaves a gap, the exact search closes it; no local search
    inst = load_instance(REPO / "instances" / "mlp_train.json")
    r = memopt.schedule(inst, time_limit=10)
    assert r.status == "optimal" and r.peak == 208748548 == r.lower_bound
    ran = set(r.stats["methods"])
    assert "ideal-search" in ran and "local-search" not in ran


def test_auto_certified_by_the_first_bound_runs_no_search():
    inst = load_instance(shared_graph("VGG16_256_224_224_3_train_nx.json"))
    r = memopt.schedule(inst, time_limit=10)
    assert r.status == "certified" and r.peak == r.lower_bound == 15825108992
    assert not {"ideal-search", "local-search"} & set(r.stats["methods"])


def test_class_methods_report_not_applicable():
    inst = load_instance(REPO / "instances" / "mlp_train.json")
    with pytest.raises(ScheduleError, match="does not apply"):
        memopt.schedule(inst, method="liu", time_limit=1)


def _chain(n: int) -> TensorGraph:
    tensors = [Tensor("t0", 1)] + [Tensor(f"t{i + 1}", 1 + (i % 3), output=(i == n - 1)) for i in range(n)]
    ops = [Op(f"op{i}", (f"t{i}",), (f"t{i + 1}",)) for i in range(n)]
    return TensorGraph.build(tensors, ops)


@pytest.mark.parametrize("name", ["liu", "series-parallel"])
def test_class_algorithms_keep_the_time_limit(name):
    # with no time at all they stop at their first clock check and return no order
    problem = SchedulingProblem(_chain(5000))
    res = registry.get_method(name).load()(problem, time_limit=0.0)
    assert res.order is None and res.stats["timed_out"]
    # with time they solve the chain (linear, not quadratic, in its length)
    res = registry.get_method(name).load()(problem, time_limit=60.0)
    assert res.order is not None and res.peak == peak(problem.graph, np.arange(5000))


def test_local_search_stops_when_its_neighbourhood_is_exhausted():
    from memopt.schedule.local_search import local_search_method

    inst = load_instance(REPO / "instances" / "mlp_train.json")
    problem = SchedulingProblem(inst.graph, inst.input_order)
    # the bound given is below the optimum, so only exhaustion (not the bound) can stop it
    res = local_search_method(problem, time_limit=600.0, lower_bound=0)
    assert res.peak == 208748548


def test_schedule_result_round_trips_through_a_dict():
    inst = load_instance(REPO / "instances" / "mlp_train.json")
    r = memopt.schedule(inst, time_limit=5)
    doc = r.to_dict(labels=inst.labels)
    assert doc["order"] == [inst.labels[i] for i in r.order]
    back = ScheduleResult.from_dict(doc, labels=inst.labels)
    assert np.array_equal(back.order, r.order)
    assert (back.peak, back.lower_bound, back.status, back.method) == (r.peak, r.lower_bound, r.status, r.method)
    import json

    json.dumps(doc)  # plain JSON data


def test_a_broken_invariant_is_an_internal_error_not_bad_input(monkeypatch):
    from memopt.bounds import checker

    real = checker.verify_certificate

    def lying_checker(cert, **kw):
        rep = real(cert, **kw)
        object.__setattr__(rep, "peak", rep.peak + 1) if hasattr(rep, "__dataclass_fields__") else None
        return rep

    monkeypatch.setattr(checker, "verify_certificate", lying_checker)
    with pytest.raises(InternalError) as info:
        memopt.schedule(random_tensor_graph(np.random.default_rng(1), 6), time_limit=2)
    assert not isinstance(info.value, MemoptError)
    assert info.value.check == "verified-peak"
