"""memopt._jit: pure-Python twins of the numba kernels give bit-identical results.

Every kernel-using entry point of the scheduling path runs on random small graphs once in
``pure`` and once in ``compiled`` mode, each time on a graph built from scratch in that
mode (graphs and DAGs cache derived arrays), and the results must be identical. No
timings here: those are in ``benchmarks/latency.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from memopt import _jit
from memopt.bounds import trap
from memopt.core import graph_to_dag
from memopt.core.evaluate import memory_profile
from memopt.core.signed_dag import complete_order, dag_order_from_op_order, op_order_from_dag_order
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import InternalError, OptionError
from memopt.schedule.brute_force import random_tensor_graph
from memopt.schedule.greedy import greedy_dag_order
from memopt.schedule.ideal_search import ideal_search
from memopt.schedule.local_search import local_search_dag

SEEDS = range(12)


def _spec(seed: int) -> int:
    return 1000 + seed


def _build(spec) -> TensorGraph:
    """A fresh random graph (built in the current mode: construction uses kernels too)."""
    rng = np.random.default_rng(spec)
    return random_tensor_graph(rng, int(rng.integers(3, 16)))


def _bound(b):
    return (int(b.value), b.name, tuple(int(x) for x in b.critical), b.witness, b.complete)


def _exact(r):
    stats = {k: v for k, v in r.stats.items() if k not in ("timed_out",)}
    return (np.asarray(r.order).tolist(), int(r.peak), int(r.lower_bound), bool(r.optimal), stats)


def _pipeline(spec, m: str):
    """Every kernel-using entry point on a fresh graph, in mode ``m``."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no numpy wrap-around warnings in pure mode
        with _jit.mode(m):
            g = _build(spec)
            out["topo"] = g.topological_order().tolist()
            out["op_succ"] = [a.tolist() for a in g.op_successors()]
            out["op_pred"] = [a.tolist() for a in g.op_predecessors()]
            gd = graph_to_dag(g)
            dag = gd.dag
            out["dag_topo"] = dag.topological_order().tolist()
            prof = memory_profile(g, out["topo"])
            out["profile"] = (int(prof.start), prof.during.tolist(), int(prof.peak), int(prof.peak_step))
            node_order = dag_order_from_op_order(gd, np.asarray(out["topo"], np.int64))
            out["dag_order"] = node_order.tolist()
            out["op_back"] = op_order_from_dag_order(gd, node_order).tolist()
            out["complete"] = complete_order(dag, node_order[~dag.is_release[node_order]]).tolist()
            greedy = greedy_dag_order(dag)
            out["greedy"] = greedy.tolist()
            for rule in ("net", "peak", "ref"):
                out["greedy_" + rule] = greedy_dag_order(dag, rules=(rule,)).tolist()
            order, pk = local_search_dag(dag, greedy, time_limit=1e6, seed=3, max_rounds=6)
            out["local"] = (order.tolist(), int(pk))
            order, pk = local_search_dag(dag, greedy, time_limit=1e6, seed=5, max_rounds=4, closure=False)
            out["local_block"] = (order.tolist(), int(pk))
            out["forward"] = _bound(trap.forward_trap_bound(dag))
            out["reverse"] = _bound(trap.reverse_trap_bound(dag))
            out["pair"] = _bound(trap.pair_trap_bound(dag, time_limit=1e6))
            out["simple"] = [_bound(b) for b in trap.simple_bounds(g)]
            out["simple_dag"] = [_bound(b) for b in trap.simple_dag_bounds(dag)]
            out["nodes"] = np.asarray(trap.node_trap_values(dag)).tolist()
            out["ideal"] = _exact(ideal_search(dag, time_limit=1e6))
            out["ideal_warm"] = _exact(ideal_search(dag, time_limit=1e6, initial_order=greedy,
                                                    lower_bound=out["forward"][0]))
            out["ideal_nolb"] = _exact(ideal_search(dag, time_limit=1e6, state_bound=False, state_traps=0))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_pure_and_compiled_agree(seed):
    spec = _spec(seed)
    pure = _pipeline(spec, "pure")
    compiled = _pipeline(spec, "compiled")
    for key in compiled:
        assert pure[key] == compiled[key], key


def test_auto_agrees_with_compiled():
    spec = _spec(99)
    assert _pipeline(spec, "auto") == _pipeline(spec, "compiled")


def test_hash_twin_is_exact():
    from memopt.schedule.ideal_search import _hash

    rng = np.random.default_rng(0)
    twin = _jit.pure(_hash)
    for w in (1, 2, 5):
        for _ in range(20):
            key = rng.integers(0, 2 ** 63, size=w, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = twin(key)
            assert type(got) is np.uint64 and got == _hash(key)


def test_twins_replace_dispatchers_recursively():
    from memopt.core import _kernels
    from memopt.schedule import local_search

    twin = _jit.pure(local_search._ils)
    assert twin is _jit.pure(local_search._ils)                      # cached
    assert not _jit._is_dispatcher(twin)
    env = twin.__globals__
    assert env["_normalize"] is _jit.pure(local_search._normalize)
    # a kernel imported from another module: its twin runs over that module's globals
    inner = _jit.pure(local_search._normalize).__globals__["complete_with_releases"]
    assert inner is _jit.pure(_kernels.complete_with_releases)
    assert inner.__globals__["np"] is not np and inner.__globals__["np"].random is not np.random
    assert local_search.__dict__["_ils"] is local_search._ils           # the module itself is untouched
    assert _jit.pure(len) is len                                        # not a kernel: unchanged


def test_pure_local_search_leaves_numpy_global_rng_alone():
    np.random.seed(123)
    expected = np.random.random(3)
    np.random.seed(123)
    g = _build(_spec(4))
    dag = graph_to_dag(g).dag
    with _jit.mode("pure"):
        local_search_dag(dag, time_limit=1e6, seed=9, max_rounds=3)
    assert np.array_equal(np.random.random(3), expected)


def test_modes_and_env(monkeypatch):
    from memopt.schedule.greedy import _greedy_kernel

    monkeypatch.delenv("MEMOPT_JIT", raising=False)
    with _jit.mode("pure"):
        assert _jit.choose(_greedy_kernel, 10 ** 9) is _jit.pure(_greedy_kernel)
        with _jit.mode("compiled"):
            assert _jit.choose(_greedy_kernel, 1) is _greedy_kernel
        assert _jit.current_mode() == ("pure", None)
    with _jit.mode("auto", size=5):
        # the block's size is small: the timed pure twin while its budget lasts, unless compiled
        acc = _jit._account(_greedy_kernel)
        saved, acc[1] = acc[1], 0.0
        with monkeypatch.context() as m:
            m.setattr(_jit, "is_compiled", lambda d: False)
            assert _jit.choose(_greedy_kernel) is acc[2] and acc[2].__wrapped__ is _jit.pure(_greedy_kernel)
            m.setattr(_jit, "is_compiled", lambda d: True)
            assert _jit.choose(_greedy_kernel) is _greedy_kernel
        acc[1] = saved
        assert _jit.choose(_greedy_kernel, 10 ** 9) is _greedy_kernel           # large: compiled
    monkeypatch.setenv("MEMOPT_JIT", "pure")
    assert _jit.choose(_greedy_kernel, 10 ** 9) is _jit.pure(_greedy_kernel)
    with _jit.mode("auto", size=10 ** 9):
        assert _jit.current_mode()[0] == "pure"                               # env overrides auto
    with _jit.mode("compiled"):
        assert _jit.choose(_greedy_kernel, 1) is _greedy_kernel               # an explicit block wins
    monkeypatch.setenv("MEMOPT_JIT", "compiled")
    assert _jit.choose(_greedy_kernel, 1) is _greedy_kernel
    with pytest.raises(OptionError):
        with _jit.mode("fast"):
            pass


def test_auto_policy_prefers_compiled_once_compiled(monkeypatch):
    from memopt.core._kernels import segment_max

    monkeypatch.delenv("MEMOPT_JIT", raising=False)
    segment_max(np.zeros(1, np.int64), np.array([0, 1], np.int64), np.int64(-1))   # compile / load
    assert _jit.is_compiled(segment_max)
    assert _jit.choose(segment_max, 1) is segment_max


def test_auto_switches_to_compiled_after_its_pure_budget(monkeypatch):
    from memopt.core._kernels import segment_max

    monkeypatch.delenv("MEMOPT_JIT", raising=False)
    monkeypatch.setattr(_jit, "is_compiled", lambda d: False)
    args = (np.arange(4, dtype=np.int64), np.array([0, 2, 4], np.int64), np.int64(-1))
    acc = _jit._account(segment_max)
    saved = acc[1]
    acc[1] = 0.0
    with _jit.mode("pure"):
        a = _jit.Adaptive(segment_max, 1)
        assert a(*args).tolist() == [1, 3] and a.fn is _jit.pure(segment_max)
    with _jit.mode("auto"):
        a = _jit.Adaptive(segment_max, 1)
        assert a.fn is acc[2] and a(*args).tolist() == [1, 3]        # pure, timed
        acc[1] = 1e9                                                 # its pure budget is spent
        assert a(*args).tolist() == [1, 3] and a.fn is segment_max   # switched mid-way
        assert _jit.choose(segment_max, 1) is segment_max
    acc[1] = saved


def test_note_compiling_once(monkeypatch, capsys):
    from memopt.core._kernels import kahn_order

    calls = []
    monkeypatch.setitem(_jit._NOTE, "done", False)
    monkeypatch.setitem(_jit._NOTE, "enabled", False)
    monkeypatch.setitem(_jit._ON_DISK, id(kahn_order), False)          # pretend the disk cache is cold
    monkeypatch.setattr(_jit, "is_compiled", lambda d: False)
    _jit._maybe_note(kahn_order)
    assert capsys.readouterr().err == ""                                # off by default
    _jit.note_compiling(True)
    _jit._maybe_note(kahn_order)
    _jit._maybe_note(kahn_order)
    err = capsys.readouterr().err
    assert err.count("compiling kernels (first run only, cached afterwards)") == 1
    monkeypatch.setitem(_jit._NOTE, "done", False)
    _jit.set_compile_hook(calls.append)
    try:
        _jit._maybe_note(kahn_order)
    finally:
        _jit.set_compile_hook(None)
        _jit.note_compiling(False)
    assert calls == ["kahn_order"] and capsys.readouterr().err == ""


def test_greedy_errors():
    g = _build(_spec(1))
    dag = graph_to_dag(g).dag
    with pytest.raises(OptionError):
        greedy_dag_order(dag, rules=("fastest",))
    assert issubclass(InternalError, Exception) and not issubclass(InternalError, ValueError)


def test_import_memopt_does_not_import_numba():
    code = "import sys, memopt; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.stdout.strip() == "False"
