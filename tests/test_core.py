"""The core models and the one peak evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from memopt.core import (Op, Program, Statement, Tensor, TensorGraph, complete_order, dag_order_from_op_order,
                         dag_peak, graph_to_dag, memory_profile, peak, program_from_graph, validate_order)
from memopt.errors import GraphError, ScheduleError
from memopt.schedule.brute_force import (all_topological_orders, brute_force_dag_optimum, brute_force_schedule,
                                         naive_peak, random_tensor_graph)


def diamond() -> TensorGraph:
    return TensorGraph.build(
        tensors=[Tensor("x", 10), Tensor("a", 5), Tensor("b", 7), Tensor("y", 3, output=True), Tensor("w", 100, resident=True)],
        ops=[Op("fa", ("x", "w"), ("a",)), Op("fb", ("x",), ("b",), workspace=2), Op("join", ("a", "b"), ("y",))],
        name="diamond")


def test_diamond_profile_by_hand():
    g = diamond()
    prof = memory_profile(g, ["fa", "fb", "join"])
    # start: x + resident w; fa: x+a; fb: x+a+b+ws (x dies after fb); join: a+b+y
    assert prof.start == 110
    assert prof.during.tolist() == [115, 124, 115]
    assert prof.peak == 124 and prof.peak_step == 1
    # fb first: x+b+ws = 19, then fa: x+b+a = 22, then join: a+b+y = 15 (plus resident 100)
    assert peak(g, ["fb", "fa", "join"]) == 122
    assert peak(g, np.array([1, 0, 2])) == 122


def random_graphs():
    return st.builds(lambda seed, n: random_tensor_graph(np.random.default_rng(seed), n),
                     st.integers(0, 2**32 - 1), st.integers(0, 8))


@given(random_graphs(), st.randoms(use_true_random=False))
def test_evaluator_agrees_with_naive_simulation(g, rnd):
    orders = list(all_topological_orders(g))
    for order in rnd.sample(orders, min(len(orders), 10)):
        assert peak(g, order) == naive_peak(g, order)


@given(random_graphs(), st.randoms(use_true_random=False))
def test_signed_dag_and_program_agree_with_graph(g, rnd):
    gd = graph_to_dag(g)
    orders = list(all_topological_orders(g))
    for order in rnd.sample(orders, min(len(orders), 5)):
        full = dag_order_from_op_order(gd, order)
        assert dag_peak(gd.dag, full) == peak(g, order)
        assert program_from_graph(g, order).peak() == peak(g, order)
    # releases-as-early-as-possible never loses: the DAG optimum is the graph optimum
    if gd.dag.n <= 14:
        assert brute_force_dag_optimum(gd.dag) == brute_force_schedule(g)[1]


@given(random_graphs())
def test_complete_order_keeps_alloc_order_and_never_raises_peak(g):
    gd = graph_to_dag(g)
    order = g.topological_order()
    full = complete_order(gd.dag, order)
    assert sorted(full.tolist()) == list(range(gd.dag.n))
    assert dag_peak(gd.dag, full) <= peak(g, order)


def test_validation_errors_name_the_item():
    T, O = Tensor, Op
    cases = [
        (dict(tensors=[T("a", 1), T("b", 1)], ops=[O("f", ("a",), ("b",)), O("g", ("b",), ("a",))]), "cycle among ops"),
        (dict(tensors=[T("a", 1)], ops=[O("f", ("a",), ("zz",))]), "'zz'"),
        (dict(tensors=[T("a", 1)], ops=[O("f", ("nope",), ("a",))]), "reads unknown tensor 'nope'"),
        (dict(tensors=[T("a", -3)], ops=[O("f", (), ("a",))]), "size of 'a' is negative"),
        (dict(tensors=[T("a", 1)], ops=[O("f", (), ("a",)), O("g", (), ("a",))]), "tensor 'a' has two producers: 'f' and 'g'"),
        (dict(tensors=[T("a", 1)], ops=[O("f", (), ("a",), workspace=-1)]), "workspace of 'f' is negative"),
        (dict(tensors=[T("a", 1)], ops=[O("f", ("a",), ("a",))]), "reads its own output 'a'"),
        (dict(tensors=[T("a", 1), T("a", 2)], ops=[]), "tensor 'a' is declared twice"),
        (dict(tensors=[T("a", 1)], ops=[O("f", (), ("a",)), O("f", (), ())]), "op 'f' is declared twice"),
        (dict(tensors=[T("a", 1, resident=True)], ops=[O("f", (), ("a",))]), "'a' is resident but has a producer"),
    ]
    for kwargs, message in cases:
        with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
            TensorGraph.build(**kwargs)


def test_order_errors_name_the_op():
    g = diamond()
    with pytest.raises(ScheduleError, match="not topological: op 'join' runs before its producer"):
        validate_order(g, ["join", "fa", "fb"])
    with pytest.raises(ScheduleError, match="misses op 'fb'"):
        validate_order(g, ["fa", "join"])
    with pytest.raises(ScheduleError, match="runs op 'fa' 2 times"):
        validate_order(g, ["fa", "fa", "fb", "join"])
    with pytest.raises(ScheduleError, match="unknown op 'zz'"):
        validate_order(g, ["fa", "zz", "join"])


def test_program_dependencies_and_peak():
    p = Program([
        Statement("alloc_x", allocs=(("x", 8),), writes=("x",)),
        Statement("read1", reads=("x",), allocs=(("y", 4),), writes=("y",)),
        Statement("read2", reads=("x",), allocs=(("z", 2),), writes=("z",), transient=5),
        Statement("free_x", frees=("x",)),
        Statement("free_y", frees=("y",)),
    ], name="p")
    edges = {tuple(e) for e in p.dependency_edges().tolist()}
    assert (1, 2) not in edges and (2, 1) not in edges          # read/read commute
    assert {(0, 1), (0, 2), (1, 3), (2, 3), (1, 4)} <= edges
    assert p.peak() == 8 + 4 + 2 + 5
    assert p.reorder([0, 2, 1, 3, 4]).peak() == 8 + 2 + 5
    with pytest.raises(ScheduleError):
        p.reorder([0, 3, 1, 2, 4])


def test_program_validation():
    with pytest.raises(GraphError, match="frees buffer 'q', which is not live"):
        Program([Statement("s", frees=("q",))])
    with pytest.raises(GraphError, match="allocates buffer 'x', which is already live"):
        Program([Statement("a", allocs=(("x", 1),)), Statement("b", allocs=(("x", 1),))])
    with pytest.raises(GraphError, match="uses buffer 'x' after it was freed"):
        Program([Statement("a", allocs=(("x", 1),)), Statement("b", frees=("x",)), Statement("c", reads=("x",))])
    with pytest.raises(GraphError, match="negative"):
        Program([Statement("a", transient=-1)])


def test_large_graph_from_arrays():
    rng = np.random.default_rng(0)
    n, m = 20000, 60000
    src = rng.integers(0, n - 1, m)
    dst = src + 1 + rng.integers(0, 50, m) % np.maximum(1, n - 1 - src)
    g = TensorGraph.from_arrays(tensor_size=rng.integers(0, 1000, n), tensor_producer=np.arange(n),
                                op_inputs=(dst, src), num_ops=n)
    order = g.topological_order()
    assert peak(g, order) == naive_peak(g, order)


def test_program_reallocated_buffer_frees_its_own_size():
    # 'b' is allocated with 10 bytes, freed, then allocated again with 1 byte
    p = Program([Statement("a", allocs=(("b", 10),), writes=("b",)), Statement("f1", frees=("b",)),
                 Statement("c", allocs=(("b", 1),), writes=("b",)), Statement("k", allocs=(("z", 5),))])
    assert p.to_dag().delta.tolist() == [10, -10, 1, 5]
    assert p.peak() == 10
    import memopt

    r = memopt.schedule(p, time_limit=2)
    assert r.peak == 10 and r.lower_bound == 10 and r.status == "certified"  # 'a' alone holds 10
