"""Heuristic and class-optimal schedulers: Inductor's baselines, greedy, local search,
Liu's tree algorithm and the series-parallel algorithm."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from memopt.core import (Op, Tensor, TensorGraph, dag_peak, graph_to_dag, peak,
                         program_from_graph, validate_node_order, validate_order)
from memopt.errors import ScheduleError
from memopt import _jit
from memopt.schedule import local_search as _local_search
from memopt.schedule.brute_force import brute_force_dag_optimum, brute_force_schedule, random_sp_edges, random_tensor_graph
from memopt.schedule.greedy import RULES, greedy_dag_order, greedy_order
from memopt.schedule.inductor import (bfs_order, dfs_order, inductor_best_order, inductor_estimate,
                                      inductor_orders, lpmf_order)
from memopt.schedule.local_search import local_search_dag, local_search_order
from memopt.schedule.series_parallel import is_series_parallel, series_parallel_order
from memopt.schedule.trees import NotApplicable, is_in_tree, is_out_tree, liu_tree_order


def random_graphs(max_ops: int = 8, **kw):
    return st.builds(lambda seed, n: random_tensor_graph(np.random.default_rng(seed), n, **kw),
                     st.integers(0, 2**32 - 1), st.integers(0, max_ops))


# ----------------------------------------------------------------- Inductor, by hand
def two_branches(workspace: int = 0) -> TensorGraph:
    """A -> a(10) -> A2 -> a2(1) -> R;  B -> b(2) -> B2 -> b2(6) -> R;  R -> r(1), output."""
    return TensorGraph.build(
        tensors=[Tensor("a", 10), Tensor("a2", 1), Tensor("b", 2), Tensor("b2", 6), Tensor("r", 1, output=True)],
        ops=[Op("A", (), ("a",)), Op("A2", ("a",), ("a2",), workspace=workspace), Op("B", (), ("b",)),
             Op("B2", ("b",), ("b2",)), Op("R", ("a2", "b2"), ("r",))])


def test_inductor_heuristics_by_hand():
    g = two_branches()
    # lpmf: max so far starts at the output bytes (1). Ready A (10) and B (2): B is lower.
    # Then B2 (live 2 + 6 = 8, frees b) beats A (12); then A (16), A2 (17), R.
    assert lpmf_order(g).tolist() == [2, 3, 0, 1, 4]
    assert peak(g, lpmf_order(g)) == 17
    # bfs: A and B have empty priorities, A has the smaller index; B (()) beats A2 ((0,));
    # A2 ((0,)) beats B2 ((1,)); R last: A 10, B 12, A2 13 -> 3, B2 9 -> 7, R 8
    assert bfs_order(g).tolist() == [0, 2, 1, 3, 4]
    assert peak(g, bfs_order(g)) == 13
    # dfs: sizes with reads A 10, A2 11, B 2, B2 8, R 8 -> roots B, B2, R (visits B2 then A2 <- A)
    assert dfs_order(g).tolist() == [2, 3, 0, 1, 4]
    assert peak(g, dfs_order(g)) == 17
    res = inductor_orders(g)
    assert {k: v[1] for k, v in res.items()} == {"baseline": 11, "lpmf": 17, "bfs": 13, "dfs": 17}
    assert inductor_best_order(g).tolist() == [0, 1, 2, 3, 4]


def test_inductor_tie_break_follows_the_input_order():
    g = two_branches()
    base = [2, 3, 0, 1, 4]
    # now B has index 0 and A index 2: bfs runs B, A (empty priority), B2 ((0,)), A2 ((1,)), R
    assert bfs_order(g, base).tolist() == [2, 0, 3, 1, 4]
    assert peak(g, bfs_order(g, base)) == 18  # B 2, A 12, B2 18
    assert inductor_best_order(g, base).tolist() == base  # baseline ties lpmf and dfs at 17, and comes first


def _lpmf_by_scan(view):
    """Inductor's ``topological_sort_lpmf`` as written there: a scan of the ready set per op."""
    n = view.n
    indegree = [len(view.pred_nodes[v]) for v in range(n)]
    ready = {v for v in range(n) if indegree[v] == 0}
    outdegree = {t: len(view.consumers[t]) + view.is_output[t] for t in range(len(view.size)) if view.tracked[t]}
    live = sum(view.size[t] for t in view.freeable_inputs)
    max_memory = max(live, sum(view.size[t] for t in range(len(view.size)) if view.is_output[t] and view.tracked[t]))
    to_free = [sum(view.size[t] for t in view.pred_buffers[v] if outdegree[t] == 1)
               + sum(view.size[t] for t in view.outputs[v] if outdegree[t] == 0) for v in range(n)]
    order = []
    while ready:
        sel = min(ready, key=lambda v: (max(live + view.node_size[v], max_memory),
                                        view.node_size[v] - to_free[v], view.index[v]))
        ready.remove(sel)
        order.append(sel)
        live += view.node_size[sel]
        max_memory = max(max_memory, live)
        live -= to_free[sel]
        for s in view.succ_nodes[sel]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.add(s)
        for t in view.pred_buffers[sel]:
            outdegree[t] -= 1
            if outdegree[t] == 1:
                for c in view.consumers[t]:
                    to_free[c] += view.size[t]
    return order


@settings(max_examples=150)
@given(random_graphs(max_ops=14), st.integers(0, 2**32 - 1))
def test_lpmf_selects_as_the_scan_of_the_ready_set(g, seed):
    from memopt.schedule.inductor import _InductorView, _lpmf

    base = g.topological_order() if seed % 2 else None
    view = _InductorView(g, base)
    assert _lpmf(view) == _lpmf_by_scan(view)


def test_inductor_baselines_stop_at_their_deadline():
    import time

    import memopt
    from memopt.schedule.inductor import OutOfTime
    from memopt.schedule.registry import get_method
    from memopt.core.problem import SchedulingProblem

    for fn in (lpmf_order, bfs_order, dfs_order, inductor_best_order):
        g = random_tensor_graph(np.random.default_rng(3), 600)   # a new graph: no order computed on it yet
        with pytest.raises(OutOfTime):
            fn(g, deadline=time.perf_counter() - 1.0)
        assert len(fn(g, deadline=time.perf_counter() + 3600)) == g.num_ops
    g = random_tensor_graph(np.random.default_rng(3), 600)
    problem = SchedulingProblem(g)
    for name in ("lpmf", "bfs", "dfs", "inductor"):
        res = get_method(name).load()(problem, time_limit=0.0)
        assert res.order is None and res.stats["timed_out"] is True
    # a named baseline out of time is skipped, never the call's deadline
    r = memopt.schedule(g, time_limit=0)
    assert r.order is not None


def test_inductor_estimate_ignores_workspace_like_inductor():
    g = two_branches(workspace=100)
    order = [0, 1, 2, 3, 4]
    assert inductor_estimate(g, order) == 11
    assert peak(g, order) == 111  # A2 runs with a, a2 and its workspace
    assert inductor_best_order(g).tolist() == order


@given(random_graphs(with_inputs=False, with_workspace=False))
def test_inductor_estimate_is_exact_without_workspace_and_inputs(g):
    order = g.topological_order()
    assert inductor_estimate(g, order) == peak(g, order)


# ----------------------------------------------------------------- heuristics vs brute force
@settings(max_examples=60)
@given(random_graphs())
def test_every_heuristic_is_a_valid_order_no_better_than_the_optimum(g):
    _, best = brute_force_schedule(g)
    orders = {
        "lpmf": lpmf_order(g), "bfs": bfs_order(g), "dfs": dfs_order(g),
        "inductor": inductor_best_order(g, g.topological_order()),
        "greedy": greedy_order(g),
    }
    for rule in RULES:
        orders["greedy-" + rule] = greedy_order(g, (rule,))
    ls_order, ls_peak = local_search_order(g, orders["greedy"], time_limit=10, seed=1, max_rounds=20)
    orders["local-search"] = ls_order
    for name, order in orders.items():
        validate_order(g, order)
        assert peak(g, order) >= best, name
    assert ls_peak == peak(g, ls_order)
    assert ls_peak <= peak(g, orders["greedy"])


@settings(max_examples=25)
@given(random_graphs(max_ops=5), st.integers(0, 2**32 - 1))
def test_greedy_and_local_search_on_program_dags(g, seed):
    rng = np.random.default_rng(seed)
    order = g.topological_order()
    dag = program_from_graph(g, order).to_dag()
    assume(dag.n <= 14)
    opt = brute_force_dag_optimum(dag)
    for rule in RULES:
        o = greedy_dag_order(dag, (rule,))
        validate_node_order(dag, o)
        assert dag_peak(dag, o) >= opt
    init = greedy_dag_order(dag)
    o, pk = local_search_dag(dag, init, time_limit=10, seed=int(rng.integers(100)), max_rounds=10)
    validate_node_order(dag, o)
    assert pk == dag_peak(dag, o) >= opt
    assert pk <= dag_peak(dag, init)


def test_local_search_reaches_the_optimum_on_small_graphs():
    rng = np.random.default_rng(7)
    for _ in range(60):
        g = random_tensor_graph(rng, int(rng.integers(1, 9)))
        _, best = brute_force_schedule(g)
        _, pk = local_search_order(g, time_limit=10, seed=0, max_rounds=30)
        assert pk == best


def test_local_search_is_deterministic_for_a_seed():
    g = random_tensor_graph(np.random.default_rng(3), 40, edge_prob=0.1)
    a = local_search_order(g, time_limit=60, seed=5, max_rounds=15)
    b = local_search_order(g, time_limit=60, seed=5, max_rounds=15)
    assert a[0].tolist() == b[0].tolist() and a[1] == b[1]


def test_local_search_stops_at_the_lower_bound_and_at_the_time_limit():
    g = random_tensor_graph(np.random.default_rng(4), 60, edge_prob=0.08)
    o, pk = local_search_order(g, time_limit=0.0, seed=0)
    validate_order(g, o)
    o2, pk2 = local_search_order(g, time_limit=30, seed=0, lower_bound=10**15)
    assert pk2 <= peak(g, greedy_order(g))


class _Twins:
    """A module's kernels as their pure twins (attribute access)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return _jit.pure(getattr(self._module, name))


@settings(max_examples=40)
@given(random_graphs(max_ops=8), st.integers(0, 2**32 - 1))
def test_local_search_move_evaluation_agrees_with_a_rebuild(g, seed):
    """The O(1)-per-target evaluation of block and closure moves predicts the new peak and,
    when the peak stays, the new number of steps at the peak. (The move kernels are inner
    kernels, callable from Python as their pure twins, which compute what they compute.)"""
    ls = _Twins(_local_search)
    dag = graph_to_dag(g).dag
    n = dag.n
    assume(n > 0)
    rng = np.random.default_rng(seed)
    order = np.array(greedy_dag_order(dag), dtype=np.int64)
    # scramble with random valid closure moves
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    mark = np.zeros(n, np.int64)
    tmp = np.empty(n, np.int64)
    is_rel = dag.is_release
    for stamp in range(1, 6):
        i = int(rng.integers(n))
        j = int(rng.integers(n))
        if i <= j < i + 1:
            continue
        ls._mark_closure(i, 1, j, order, dag.pred_ptr, dag.pred_idx, dag.succ_ptr, dag.succ_idx, pos, mark, stamp)
        ls._apply_closure(i, 1, j, order, pos, mark, stamp, tmp)
        validate_node_order(dag, order)
    arrays = [np.empty(n + 1, np.int64), np.empty(n, np.int64)] + [np.empty(n + 1, np.int64) for _ in range(4)]
    peak0, cnt0, thr = ls._rebuild(order, dag.delta, dag.transient, np.int64(dag.base), *arrays, 0)
    assert peak0 == dag_peak(dag, order)
    inner = np.empty(n, np.int64)
    stamp = 100
    for i in range(n):
        if is_rel[order[i]]:
            continue
        b = ls._block_len(order, i, is_rel, n)
        lo, hi = ls._block_window(i, b, order, pos, dag.pred_ptr, dag.pred_idx, dag.succ_ptr, dag.succ_idx, n)
        pk, c, j = ls._best_block_move(i, b, lo, hi, order, dag.delta, dag.transient, np.int64(dag.base), *arrays,
                                       peak0, cnt0, inner, thr)
        if j >= 0:
            o2, p2 = order.copy(), pos.copy()
            ls._move_block(o2, p2, i, b, j, tmp)
            validate_node_order(dag, o2)
            arr2 = [a.copy() for a in arrays]
            got = ls._rebuild(o2, dag.delta, dag.transient, np.int64(dag.base), *arr2, 0)[:2]
            # a move that lowers the peak is not charged a count (any such move beats the rest)
            assert got == (pk, c) if pk == peak0 else got[0] == pk
        pk, c, j, st_, stamp = ls._best_closure_move(i, b, order, dag.delta, dag.transient, np.int64(dag.base),
                                                     *arrays, peak0, cnt0, inner, dag.pred_ptr, dag.pred_idx,
                                                     dag.succ_ptr, dag.succ_idx, mark, stamp, thr, n)
        if j >= 0:
            o2, p2 = order.copy(), pos.copy()
            stamp += 1
            ls._mark_closure(i, b, j, o2, dag.pred_ptr, dag.pred_idx, dag.succ_ptr, dag.succ_idx, p2, mark, stamp)
            ls._apply_closure(i, b, j, o2, p2, mark, stamp, tmp)
            validate_node_order(dag, o2)
            arr2 = [a.copy() for a in arrays]
            got = ls._rebuild(o2, dag.delta, dag.transient, np.int64(dag.base), *arr2, 0)[:2]
            # a move that lowers the peak is not charged a count (any such move beats the rest)
            assert got == (pk, c) if pk == peak0 else got[0] == pk


def test_greedy_on_a_larger_random_dag_is_valid():
    g = random_tensor_graph(np.random.default_rng(0), 3000, edge_prob=0.002, max_size=1000)
    for rule in RULES:
        o = greedy_order(g, (rule,))
        validate_order(g, o)
    # "ref" never loses to its reference order
    assert peak(g, greedy_order(g, ("ref",))) <= peak(g, g.topological_order())


# ----------------------------------------------------------------- trees (Liu)
def random_tree(rng: np.random.Generator, n: int, out_tree: bool) -> TensorGraph:
    """Random in-tree (each op feeds one later op) or out-tree (each op reads one earlier op,
    one tensor per child), with extra outputs, freeable/resident inputs and workspace."""
    tensors, ins, outs = [], [[] for _ in range(n)], [[] for _ in range(n)]
    for v in range(n):
        if out_tree and v > 0:
            p = int(rng.integers(0, v))
            t = f"e{p}_{v}"
            tensors.append(Tensor(t, int(rng.integers(0, 12)), output=bool(rng.random() < 0.1)))
            outs[p].append(t)
            ins[v].append(t)
        if not out_tree and v < n - 1 and rng.random() < 0.9:
            p = int(rng.integers(v + 1, n))
            t = f"e{v}"
            tensors.append(Tensor(t, int(rng.integers(0, 12)), output=bool(rng.random() < 0.1)))
            outs[v].append(t)
            ins[p].append(t)
    for v in range(n):
        if rng.random() < 0.3:
            t = f"x{v}"
            tensors.append(Tensor(t, int(rng.integers(0, 12)), output=bool(rng.random() < 0.5)))
            outs[v].append(t)
        if rng.random() < 0.25:
            t = f"in{v}"
            tensors.append(Tensor(t, int(rng.integers(0, 12)), resident=bool(rng.random() < 0.2)))
            ins[v].append(t)
        if not outs[v]:
            t = f"o{v}"
            tensors.append(Tensor(t, int(rng.integers(0, 12)), output=True))
            outs[v].append(t)
    ops = [Op(f"op{v}", tuple(ins[v]), tuple(outs[v]),
              workspace=int(rng.integers(0, 8)) if rng.random() < 0.3 else 0) for v in range(n)]
    return TensorGraph.build(tensors, ops)


@settings(max_examples=150)
@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.booleans())
def test_liu_is_optimal_on_random_trees(seed, n, out_tree):
    g = random_tree(np.random.default_rng(seed), n, out_tree)
    assert is_out_tree(g) if out_tree else is_in_tree(g)
    order = liu_tree_order(g)
    validate_order(g, order)
    assert peak(g, order) == brute_force_schedule(g)[1]


def test_liu_rejects_graphs_outside_its_class():
    broadcast = TensorGraph.build(
        tensors=[Tensor("x", 5), Tensor("y", 1, output=True), Tensor("z", 1, output=True)],
        ops=[Op("P", (), ("x",)), Op("C1", ("x",), ("y",)), Op("C2", ("x",), ("z",))])
    assert not is_out_tree(broadcast)
    with pytest.raises(NotApplicable):
        liu_tree_order(broadcast)
    assert issubclass(NotApplicable, ScheduleError)
    # one tensor per child: an out-tree (not an in-tree), accepted and optimal
    fork = TensorGraph.build(
        tensors=[Tensor("a", 1), Tensor("b", 1), Tensor("c", 1), Tensor("d", 1, output=True)],
        ops=[Op("A", (), ("a", "b")), Op("B", ("a",), ("c",)), Op("C", ("b",), ()), Op("D", ("c",), ("d",))])
    assert is_out_tree(fork) and not is_in_tree(fork)
    assert peak(fork, liu_tree_order(fork)) == brute_force_schedule(fork)[1]
    diamond = TensorGraph.build(
        tensors=[Tensor("a", 1), Tensor("b", 1), Tensor("c", 1), Tensor("e", 1), Tensor("d", 1, output=True)],
        ops=[Op("A", (), ("a", "b")), Op("B", ("a",), ("c",)), Op("C", ("b",), ("e",)), Op("D", ("c", "e"), ("d",))])
    assert not is_in_tree(diamond) and not is_out_tree(diamond)
    with pytest.raises(NotApplicable):
        liu_tree_order(diamond)


def test_liu_interleaves_subtrees_when_that_is_better():
    # in-tree: two chains into R; chain 1 frees a lot late (hill 10, ends at 1), chain 2
    # ends high (6). Liu runs chain 1 first: peak 9 (a 8 + a2 1); chain 2 first would hold b2 (6)
    # under chain 1's hill: 6 + 9 = 15.
    g = TensorGraph.build(
        tensors=[Tensor("a", 8), Tensor("a2", 1), Tensor("b", 2), Tensor("b2", 6), Tensor("r", 1, output=True)],
        ops=[Op("A", (), ("a",)), Op("A2", ("a",), ("a2",)), Op("B", (), ("b",)),
             Op("B2", ("b",), ("b2",)), Op("R", ("a2", "b2"), ("r",))])
    assert liu_tree_order(g).tolist() == [0, 1, 2, 3, 4]
    assert peak(g, liu_tree_order(g)) == 9


# ----------------------------------------------------------------- series-parallel
def random_sp(rng: np.random.Generator, n_ops: int, extras: bool) -> TensorGraph:
    """Random TTSP op graph (edge subdivisions and parallel paths); one tensor per edge."""
    edges, n = random_sp_edges(rng, n_ops)
    tensors, ins, outs = [], [[] for _ in range(n)], [[] for _ in range(n)]
    for i, (u, w) in enumerate(edges):
        tensors.append(Tensor(f"e{i}", int(rng.integers(0, 12)), output=bool(extras and rng.random() < 0.1)))
        outs[u].append(f"e{i}")
        ins[w].append(f"e{i}")
    for v in range(n):
        if extras and rng.random() < 0.25:
            tensors.append(Tensor(f"x{v}", int(rng.integers(0, 12)), output=bool(rng.random() < 0.5)))
            outs[v].append(f"x{v}")
        if extras and rng.random() < 0.25:
            tensors.append(Tensor(f"in{v}", int(rng.integers(0, 12)), resident=bool(rng.random() < 0.2)))
            ins[v].append(f"in{v}")
        if not outs[v]:
            tensors.append(Tensor(f"o{v}", int(rng.integers(0, 12)), output=True))
            outs[v].append(f"o{v}")
    perm = rng.permutation(n)
    ops = [None] * n
    for v in range(n):
        ops[int(perm[v])] = Op(f"op{v}", tuple(ins[v]), tuple(outs[v]),
                               workspace=int(rng.integers(0, 8)) if extras and rng.random() < 0.3 else 0)
    return TensorGraph.build(tensors, ops)


@settings(max_examples=200)
@given(st.integers(0, 2**32 - 1), st.integers(2, 9), st.booleans())
def test_series_parallel_is_optimal_on_random_sp_graphs(seed, n, extras):
    g = random_sp(np.random.default_rng(seed), n, extras)
    assert is_series_parallel(g)
    order = series_parallel_order(g)
    validate_order(g, order)
    assert peak(g, order) == brute_force_schedule(g)[1]


def test_series_parallel_by_hand():
    # S feeds A (x1 = 4) and B (x2 = 4); A makes y1 = 6, B makes y2 = 1; T joins.
    # B first: S 8, B 9 -> 5, A 11 -> 7, T 8. A first: A runs at 8 + 6 = 14.
    g = TensorGraph.build(
        tensors=[Tensor("x1", 4), Tensor("x2", 4), Tensor("y1", 6), Tensor("y2", 1), Tensor("z", 1, output=True)],
        ops=[Op("S", (), ("x1", "x2")), Op("A", ("x1",), ("y1",)), Op("B", ("x2",), ("y2",)),
             Op("T", ("y1", "y2"), ("z",))])
    assert series_parallel_order(g).tolist() == [0, 2, 1, 3]
    assert peak(g, [0, 2, 1, 3]) == 11 and peak(g, [0, 1, 2, 3]) == 14


def test_series_parallel_rejects_n_graphs_and_shared_tensors():
    n_graph = TensorGraph.build(
        tensors=[Tensor("a", 1), Tensor("a2", 1), Tensor("b", 1), Tensor("c", 1, output=True),
                 Tensor("d", 1, output=True)],
        ops=[Op("A", (), ("a", "a2")), Op("B", (), ("b",)), Op("C", ("a",), ("c",)), Op("D", ("a2", "b"), ("d",))])
    assert not is_series_parallel(n_graph)
    with pytest.raises(NotApplicable):
        series_parallel_order(n_graph)
    shared = TensorGraph.build(
        tensors=[Tensor("x", 5), Tensor("y", 1), Tensor("z", 1), Tensor("r", 1, output=True)],
        ops=[Op("P", (), ("x",)), Op("C1", ("x",), ("y",)), Op("C2", ("x",), ("z",)), Op("R", ("y", "z"), ("r",))])
    assert is_series_parallel(shared)
    with pytest.raises(NotApplicable):
        series_parallel_order(shared)


def test_trees_are_series_parallel_and_agree_with_liu():
    rng = np.random.default_rng(2)
    for _ in range(30):
        g = random_tree(rng, int(rng.integers(1, 9)), bool(rng.integers(2)))
        assert peak(g, series_parallel_order(g)) == peak(g, liu_tree_order(g))
