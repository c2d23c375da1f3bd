"""memopt.schedule end to end (the command line is tested in test_cli.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.core import peak, program_from_graph
from memopt.io import load_instance
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

from conftest import REPO


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_auto_is_optimal_and_verified_on_small_graphs(seed, n):
    g = random_tensor_graph(np.random.default_rng(seed), n)
    _, opt = brute_force_schedule(g)
    r = memopt.schedule(g, time_limit=5)
    assert r.verified
    assert peak(g, r.order) == r.peak == opt
    assert r.lower_bound == opt and r.status in ("certified", "optimal")
    assert r.peak <= min(r.baselines.values())


@settings(max_examples=10)
@given(st.integers(0, 2**32 - 1), st.integers(1, 7))
def test_programs_schedule_too(seed, n):
    g = random_tensor_graph(np.random.default_rng(seed), n)
    prog = program_from_graph(g)
    r = memopt.schedule(prog, time_limit=5)
    assert r.peak == prog.peak(r.order) == brute_force_schedule(g)[1]


@pytest.mark.parametrize("method", ["input", "lpmf", "bfs", "dfs", "inductor", "greedy", "local-search"])
def test_every_method_returns_a_verified_plan(method):
    inst = load_instance(REPO / "instances" / "mlp_train.json")
    r = memopt.schedule(inst, method=method, time_limit=2)
    assert r.verified and r.peak == peak(inst.graph, r.order) and r.lower_bound <= r.peak


def test_a_named_method_returns_its_own_order():
    for seed in range(20):
        g = random_tensor_graph(np.random.default_rng(seed), 8)
        from memopt.schedule.inductor import bfs_order

        r = memopt.schedule(g, method="bfs", time_limit=1)
        assert r.method == "bfs" and r.order.tolist() == bfs_order(g, g.topological_order()).tolist()


def test_a_check_that_cannot_fit_the_time_limit_is_skipped_and_said(monkeypatch, tmp_path):
    """The certificate's independent check is linear in the DAG; where it would take the call
    more than a second past its time limit it is skipped: no certificate, ``verified`` false,
    the reason in ``stats["verification"]``, and never ``certified``."""
    from memopt.cli import main
    from memopt.io import save_graph
    from memopt.schedule import portfolio

    g = random_tensor_graph(np.random.default_rng(5), 12)
    monkeypatch.setattr(portfolio, "VERIFY_SECONDS_PER_ITEM", 10.0)   # as if the DAG were enormous
    r = memopt.schedule(g, time_limit=1)
    assert r.certificate is None and r.verified is False and r.status != "certified"
    assert r.stats["verification"].startswith("skipped: the independent check")
    assert r.peak == peak(g, r.order)
    path = tmp_path / "g.json"
    save_graph(g, str(path))
    assert main(["schedule", str(path), "--time-limit", "1", "--certificate", str(tmp_path / "c.json")]) == 2
    assert not (tmp_path / "c.json").exists()
