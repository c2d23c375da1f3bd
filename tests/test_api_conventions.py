"""The public API's conventions (issue 24, item 7): plain functions with real signatures,
``method=`` as a name or a callable with the registry's signature, ``from_networkx``."""

from __future__ import annotations

import inspect
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import memopt
from memopt.core import Op, Tensor, TensorGraph, from_networkx, memory_profile, peak
from memopt.errors import GraphError, OptionError, ScheduleError
from memopt.io.checkmate import instance_from_node_link
from memopt.remat import RematPlan, RematResult, plan_from_order
from memopt.schedule import api as schedule_api
from memopt.remat import api as remat_api
from memopt.schedule.brute_force import random_tensor_graph
from memopt.schedule.result import MethodResult

from conftest import REPO


def _diamond() -> TensorGraph:
    return TensorGraph.build(
        [Tensor("x", 4), Tensor("a", 8), Tensor("b", 3), Tensor("y", 1, output=True)],
        [Op("A", ("x",), ("a",), cost=2), Op("B", ("x",), ("b",), cost=1), Op("C", ("a", "b"), ("y",))])


def _recompute_graph() -> TensorGraph:
    """``a`` (cost 3) held across ``g``/``k``: 12 bytes needs one re-run of ``f`` (docs example)."""
    return TensorGraph.build(
        [Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
        [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)), Op("h", ("a", "d"), ("c",))])


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------ plain functions
def test_schedule_and_remat_are_plain_functions_with_the_implementations_signatures():
    assert inspect.isfunction(memopt.schedule) and inspect.isfunction(memopt.remat)
    assert inspect.signature(memopt.schedule) == inspect.signature(schedule_api.schedule)
    assert inspect.signature(memopt.remat) == inspect.signature(remat_api.remat)
    assert list(inspect.signature(memopt.schedule).parameters) == [
        "model", "method", "time_limit", "input_order", "seed", "progress"]
    assert list(inspect.signature(memopt.remat).parameters) == [
        "graph", "memory_limit", "memory_ratio", "cost_budget", "pareto", "cap", "method", "time_limit", "seed",
        "jobs", "initial"]


def test_the_functions_stay_bound_after_every_style_of_subpackage_import():
    out = _run("import inspect, sys, memopt\n"
               "before = 'numpy' in sys.modules\n"
               "sig = str(inspect.signature(memopt.schedule))\n"
               "import memopt.schedule.registry, memopt.remat.plan\n"
               "from memopt.schedule import registry as r\n"
               "from memopt.remat import check_plan\n"
               "import memopt.schedule, memopt.remat\n"
               "from memopt import schedule, remat\n"
               "print(before, sig.startswith('(model, method='), inspect.isfunction(memopt.schedule),\n"
               "      inspect.isfunction(memopt.remat), schedule is memopt.schedule, remat is memopt.remat,\n"
               "      'auto' in r.method_names(), callable(check_plan),\n"
               "      type(sys.modules['memopt.schedule']).__name__)")
    assert out == "False True True True True True True True module"


def test_import_memopt_and_its_signatures_import_no_numpy():
    out = _run("import inspect, sys, memopt\n"
               "inspect.signature(memopt.schedule); inspect.signature(memopt.remat); memopt.schedule.__doc__\n"
               "print([m for m in ('numpy', 'numba', 'networkx', 'memopt.core') if m in sys.modules])")
    assert out == "[]"


def test_every_public_name_of_memopt_resolves():
    for name in memopt.__all__:
        assert getattr(memopt, name) is not None, name
    assert memopt.from_networkx is from_networkx
    assert memopt.RematResult is RematResult


# ------------------------------------------------------------------ method= as a callable
def input_order_method(problem, *, time_limit, incumbent=None, lower_bound=None, seed=0):
    """The input order, with false claims (peak, bound, optimality) that must not be used."""
    return MethodResult(order=problem.baseline_order(), peak=-1, lower_bound=10**9, optimal=True)


def test_a_callable_method_returning_the_input_order_is_scheduled_and_verified():
    g = _diamond()
    r = memopt.schedule(g, method=input_order_method, time_limit=2)
    assert r.method == "input_order_method" and r.verified
    assert r.order.tolist() == g.topological_order().tolist()
    assert r.peak == peak(g, r.order) == 15            # B runs beside x and a: 4 + 8 + 3
    assert r.lower_bound <= r.peak and r.lower_bound != 10**9


def test_a_callable_named_like_a_registered_method_does_not_shadow_it():
    def greedy(problem, **kw):
        return MethodResult(order=problem.baseline_order(), peak=None)

    r = memopt.schedule(_diamond(), method=greedy, time_limit=2)
    assert r.method == "greedy (callable)"


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(4, 7), st.integers(0, 6))
def test_a_callable_returning_an_invalid_order_is_refused_never_reported(seed, n, shift):
    g = random_tensor_graph(np.random.default_rng(seed), n, multi_output=False)
    src, dst = g.op_edges()
    assume(src.size > 0)
    # the consumer of one edge moved before its producer: never topological
    k = shift % src.size
    topo = g.topological_order().tolist()
    topo.remove(int(dst[k]))
    order = np.array([int(dst[k])] + topo)

    def broken(problem, **kw):
        return MethodResult(order=order, peak=0, lower_bound=0, optimal=True)

    with pytest.raises(ScheduleError, match="method 'broken' returned an invalid order: order is not topological"):
        memopt.schedule(g, method=broken, time_limit=2)


@pytest.mark.parametrize("order, message", [
    ([0, 1], "order misses op 'C'"),
    ([0, 1, 2, 2], "runs op 'C' 2 times"),
    ([0.0, 1.0, 2.0], "not a flat list of integer ids"),
    ([0, 1, 7], "order names op id 7"),
])
def test_a_callable_returning_a_malformed_order_is_refused(order, message):
    with pytest.raises(ScheduleError, match=message):
        memopt.schedule(_diamond(), method=lambda problem, **kw: MethodResult(order=order, peak=None), time_limit=2)


def test_a_callable_returning_no_method_result_is_an_option_error():
    with pytest.raises(OptionError, match=r"method '<lambda>' returned list, not a MethodResult"):
        memopt.schedule(_diamond(), method=lambda problem, **kw: [0, 1, 2], time_limit=2)
    with pytest.raises(OptionError, match="a registered name or a callable, got int"):
        memopt.schedule(_diamond(), method=3, time_limit=2)


def test_an_exception_inside_a_callable_method_propagates_unchanged():
    class Mine(Exception):
        pass

    def raising(problem, **kw):
        raise Mine("the user's bug")

    with pytest.raises(Mine, match="the user's bug"):
        memopt.schedule(_diamond(), method=raising, time_limit=2)


def no_recomputation(problem, *, question, memory_limit=None, cost_budget=None, cap, time_limit, incumbent=None,
                     seed=0):
    """The plan of the topological order, claiming to be optimal and a bound it did not prove."""
    g = problem.graph
    plan = plan_from_order(g, g.topological_order())
    return RematResult(plan=plan, peak=None, extra_cost=None, status="optimal", question=question,
                       lower_bound=10**9, cost_lower_bound=10**9)


def test_a_callable_remat_method_is_checked_and_its_claims_are_not_used():
    g = _recompute_graph()
    r = memopt.remat(g, cost_budget=0, method=no_recomputation, time_limit=5)
    assert (r.method, r.peak, r.extra_cost) == ("no_recomputation", 14, 0)
    assert r.lower_bound <= 14 and r.lower_bound != 10**9
    r = memopt.remat(g, memory_limit=20, method=no_recomputation, time_limit=5)
    assert (r.status, r.peak, r.extra_cost, r.cost_lower_bound) == ("optimal", 14, 0, 0)


def test_a_callable_remat_plan_above_the_limit_is_refused():
    with pytest.raises(ScheduleError, match="'no_recomputation' returned a plan of peak 14, above the memory limit 12"):
        memopt.remat(_recompute_graph(), memory_limit=12, method=no_recomputation, time_limit=5)


@pytest.mark.parametrize("steps, claim, message", [
    ([{"run": "f"}, {"run": "g"}], None, "op 'k' is never run"),
    ([{"run": "g"}], None, "input 'a' of op 'g' is not live"),
    ([{"run": "f"}, {"run": "g"}, {"run": "k"}, {"free": "b"}, {"run": "h"}], 99, "claimed peak 99"),
])
def test_a_callable_remat_method_returning_an_invalid_plan_is_refused(steps, claim, message):
    g = _recompute_graph()

    def bad(problem, *, question, **kw):
        return RematResult(plan=RematPlan.from_steps(g, steps), peak=claim, extra_cost=None, status="feasible",
                           question=question)

    with pytest.raises(ScheduleError, match=f"method 'bad' returned an invalid plan: .*{message}"):
        memopt.remat(g, memory_limit=100, method=bad, time_limit=5)


def test_a_callable_remat_method_claiming_infeasible_is_not_believed():
    def claims_infeasible(problem, *, question, **kw):
        return RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", question=question,
                           stats={"proof": "trust me"})

    r = memopt.remat(_recompute_graph(), memory_limit=12, method=claims_infeasible, time_limit=5)
    assert r.status == "unknown" and r.plan is None


def test_a_callable_remat_method_returning_another_type_is_an_option_error():
    with pytest.raises(OptionError, match="returned dict, not a RematResult"):
        memopt.remat(_recompute_graph(), memory_limit=12, method=lambda problem, **kw: {}, time_limit=5)


# ------------------------------------------------------------------ networkx
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_from_networkx_of_to_networkx_has_the_same_evaluation_for_every_order(seed, n):
    g = random_tensor_graph(np.random.default_rng(seed), n)
    h = from_networkx(g.to_networkx())
    assert h.op_names == g.op_names and h.name == g.name
    assert sorted(zip(g.tensor_names, g.tensor_size.tolist(), g.tensor_output.tolist(), g.tensor_resident.tolist())) \
        == sorted(zip(h.tensor_names, h.tensor_size.tolist(), h.tensor_output.tolist(), h.tensor_resident.tolist()))
    assert h.op_workspace.tolist() == g.op_workspace.tolist() and h.op_cost.tolist() == g.op_cost.tolist()
    orders = list(nx.all_topological_sorts(g.to_networkx()))
    assert len(orders) == len(list(nx.all_topological_sorts(h.to_networkx())))
    for names in orders:
        a, b = memory_profile(g, names), memory_profile(h, names)
        assert (a.start, a.during.tolist(), a.peak) == (b.start, b.during.tolist(), b.peak)


def _checkmate_doc(G: nx.DiGraph) -> dict:
    return {"nodes": [{"id": v, "cost_ram": G.nodes[v]["output_bytes"], "cost_cpu": G.nodes[v].get("cost", 0)}
                      for v in G], "links": [{"source": u, "target": v} for u, v in G.edges]}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 7))
def test_the_op_level_form_is_the_published_node_link_model(seed, n):
    """A DiGraph with only ``output_bytes`` per node means what a Checkmate node-link file with
    the same ``cost_ram`` means: the same peak for every order."""
    rng = np.random.default_rng(seed)
    G = nx.DiGraph()
    for v in range(n):
        G.add_node(v, output_bytes=int(rng.integers(0, 50)), cost=int(rng.integers(0, 5)))
    G.add_edges_from((u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.4)
    g = from_networkx(G)
    h = instance_from_node_link(_checkmate_doc(G)).graph
    for order in nx.all_topological_sorts(G):
        assert peak(g, [str(v) for v in order]) == peak(h, [str(v) for v in order])


def test_schedule_remat_and_bounds_accept_a_networkx_digraph():
    G = _diamond().to_networkx()
    r, s = memopt.schedule(G, time_limit=2), memopt.schedule(_diamond(), time_limit=2)
    assert (r.peak, r.status, r.order.tolist()) == (s.peak, s.status, s.order.tolist()) and r.peak == 15
    assert memopt.compute_bounds(G, time_limit=2) == memopt.compute_bounds(_diamond(), time_limit=2)
    q = memopt.remat(_recompute_graph().to_networkx(), memory_limit=12, time_limit=10)
    assert (q.status, q.peak, q.extra_cost) == ("optimal", 12, 3)


def _op_level(*edges, **sizes) -> nx.DiGraph:
    G = nx.DiGraph()
    for v, s in sizes.items():
        G.add_node(v, output_bytes=s)
    G.add_edges_from(edges)
    return G


def test_from_networkx_cycle_is_a_graph_error_naming_the_nodes():
    with pytest.raises(GraphError, match=r"cycle among ops: 'b' <- 'a' <- 'b'|cycle among ops: 'a' <- 'b' <- 'a'"):
        from_networkx(_op_level(("a", "b"), ("b", "a"), a=1, b=2))
    with pytest.raises(GraphError, match="cycle"):
        memopt.schedule(_op_level(("a", "b"), ("b", "a"), a=1, b=2), time_limit=1)
    with pytest.raises(GraphError, match="cycle: op 'a' reads its own output 'a'"):
        from_networkx(_op_level(("a", "a"), a=1))


@pytest.mark.parametrize("attrs, message", [
    ({}, "node 'b' has no attribute 'output_bytes'"),
    ({"output_bytes": -3}, "node 'b': attribute 'output_bytes' is negative: -3"),
    ({"output_bytes": 2.5}, "node 'b': attribute 'output_bytes' must be a whole number of bytes"),
    ({"output_bytes": True}, "node 'b': attribute 'output_bytes' must be a whole number of bytes"),
    ({"output_bytes": 1, "workspace": -1}, "node 'b': attribute 'workspace' is negative: -1"),
    ({"output_bytes": 1, "cost": "cheap"}, "node 'b': attribute 'cost' must be a number"),
    ({"outputs": {"u": 1, "v": 2}, "output_bytes": 4}, "node 'b': attribute 'output_bytes' \\(4\\) is not the sum"),
    ({"output_bytes": 1, "reads": ["w"]}, "node 'b' reads 'w', which is not in the graph attribute 'inputs'"),
])
def test_from_networkx_bad_node_is_a_graph_error_naming_it(attrs, message):
    G = nx.DiGraph()
    G.add_node("a", output_bytes=1)
    G.add_node("b", **attrs)
    G.add_edge("a", "b")
    with pytest.raises(GraphError, match=message):
        from_networkx(G)


def test_from_networkx_bad_edges_and_graph_attributes_are_graph_errors():
    G = _op_level(("a", "b"), a=1, b=1)
    G.edges["a", "b"]["tensors"] = ["zz"]
    with pytest.raises(GraphError, match="edge 'a' -> 'b' carries 'zz', which is not an output of 'a'"):
        from_networkx(G)
    G.edges["a", "b"]["tensors"] = []
    with pytest.raises(GraphError, match="edge 'a' -> 'b' carries no tensor"):
        from_networkx(G)
    G = _op_level(("a", "b"), a=1, b=1)
    G.graph["graph_outputs"] = ["nope"]
    with pytest.raises(GraphError, match="graph attribute 'graph_outputs' names unknown tensor 'nope'"):
        from_networkx(G)
    G.graph.pop("graph_outputs")
    G.graph["inputs"] = {"w": -1}
    with pytest.raises(GraphError, match=r"graph attribute 'inputs'\['w'\] is negative"):
        from_networkx(G)
    G = nx.DiGraph()
    G.add_node(1, output_bytes=1)
    G.add_node("1", output_bytes=1)
    with pytest.raises(GraphError, match="nodes 1 and '1' have the same name '1' as text"):
        from_networkx(G)


@pytest.mark.parametrize("make", [nx.Graph, nx.MultiDiGraph, list])
def test_from_networkx_refuses_what_is_not_a_digraph(make):
    with pytest.raises(GraphError, match="from_networkx needs a networkx.DiGraph"):
        from_networkx(make())


def test_from_networkx_node_order_gives_the_op_ids():
    G = _op_level((3, 1), (1, 2), **{})
    for v, s in ((3, 5), (1, 7), (2, 1)):
        G.nodes[v]["output_bytes"] = s
    g = from_networkx(G)
    assert g.op_names == ("3", "1", "2")
    r = memopt.schedule(G, time_limit=2)
    assert [list(G)[i] for i in r.order.tolist()] == [3, 1, 2] and r.peak == 12
    assert g.tensor_output.tolist() == [False, False, True]   # the sink's output lives to the end
