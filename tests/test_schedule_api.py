"""memopt.schedule end to end, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memopt
from memopt.cli import main
from memopt.core import peak, program_from_graph
from memopt.io import load_instance
from memopt.schedule.brute_force import brute_force_schedule, random_tensor_graph

from conftest import REPO, shared_graph


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


def test_cli_json_schedule_and_verify(tmp_path, capsys):
    graph = shared_graph("VGG16_256_224_224_3_train_nx.json")
    plan, cert = tmp_path / "plan.json", tmp_path / "cert.json"
    assert main(["schedule", str(graph), "--json", "-o", str(plan), "--certificate", str(cert)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak"] == out["lower_bound"] == 15825108992
    assert out["status"] == "certified"
    assert set(out["baselines"]) >= {"input", "lpmf", "bfs", "dfs", "inductor"}
    assert sorted(out["order"]) == list(range(45))
    assert main(["verify", str(graph), str(plan), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak"] == 15825108992
    assert main(["verify", str(graph), str(cert), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["certified"] is True
    # a tampered plan is refused with one line
    doc = json.loads(plan.read_text())
    doc["peak"] -= 1
    plan.write_text(json.dumps(doc))
    assert main(["verify", str(graph), str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "claims peak" in err


def test_cli_bad_input_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": 1}], '
                   '"ops": [{"name": "f", "inputs": ["a"], "outputs": ["b"]}]}')
    proc = subprocess.run([sys.executable, "-m", "memopt.cli", "schedule", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "memopt: error: op 'f' writes unknown tensor 'b'"
    assert "Traceback" not in proc.stderr


def test_cli_human_output(capsys):
    assert main(["schedule", str(REPO / "instances" / "mlp_train.json"), "--time-limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "peak" in out and "lower bound" in out and "status" in out and "lpmf" in out


def test_a_named_method_returns_its_own_order():
    for seed in range(20):
        g = random_tensor_graph(np.random.default_rng(seed), 8)
        from memopt.schedule.inductor import bfs_order

        r = memopt.schedule(g, method="bfs", time_limit=1)
        assert r.method == "bfs" and r.order.tolist() == bfs_order(g, g.topological_order()).tolist()


def test_verify_rejects_false_claims(tmp_path, capsys):
    inst_path = REPO / "instances" / "mlp_train.json"
    plan = tmp_path / "plan.json"
    assert main(["schedule", str(inst_path), "--method", "input", "-o", str(plan), "--json"]) == 0
    capsys.readouterr()
    good = json.loads(plan.read_text())
    bad_docs = [
        (dict(good, peak=good["peak"] + 0.5), "must be a whole number"),
        (dict(good, lower_bound=good["peak"] + 1), "above its own peak"),
        (dict(good, lower_bound=good["peak"] - 1, status="certified"), "does not equal its peak"),
    ]
    for doc, message in bad_docs:
        plan.write_text(json.dumps(doc))
        assert main(["verify", str(inst_path), str(plan)]) == 2
        assert message in capsys.readouterr().err
