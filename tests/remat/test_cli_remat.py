"""``memopt remat``, ``memopt verify`` on remat plans, ``memopt reduce``: happy paths, the
``--json`` fields, and bad options (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from memopt.cli import main
from memopt.core import Op, Tensor, TensorGraph
from memopt.io import load_graph, save_graph
from memopt.reductions.knapsack import KnapsackInstance, knapsack_optimum
from memopt.reductions.three_partition import ThreePartitionInstance, partition_to_plan, solve_three_partition, \
    three_partition_to_remat
from memopt.remat import check_plan
from memopt.remat.brute_force import min_extra_cost

from conftest import shared_graph


@pytest.fixture
def graph_file(tmp_path):
    g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
                          [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
                           Op("h", ("a", "d"), ("c",))], name="late")
    path = tmp_path / "late.json"
    save_graph(g, path)
    return path


def run_json(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_remat_json_fields_and_plan_in_the_files_names(graph_file, capsys):
    d = run_json(capsys, ["remat", str(graph_file), "--memory-limit", "12", "--json"])
    for key in ("plan", "peak", "extra_cost", "cost_lower_bound", "lower_bound", "status", "seconds"):
        assert key in d
    assert (d["peak"], d["extra_cost"], d["status"]) == (12, 3, "optimal")
    assert d["plan"][0] == {"run": "f"} and {"free": "a"} in d["plan"]
    d = run_json(capsys, ["remat", str(graph_file), "--cost-budget", "0", "--json"])
    assert (d["peak"], d["status"], d["extra_cost"]) == (14, "optimal", 0)
    d = run_json(capsys, ["remat", str(graph_file), "--memory-ratio", "0.5", "--json"])
    assert d["status"] == "infeasible" and d["plan"] is None
    d = run_json(capsys, ["remat", str(graph_file), "--pareto", "--json"])
    assert [(p["extra_cost"], p["peak"]) for p in d["points"]] == [(0, 14), (3, 12)]


def test_remat_text_output_and_plan_file_verifies(graph_file, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["remat", str(graph_file), "--memory-limit", "12", "--method", "cpsat", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "optimal" in out and "plan written" in out
    doc = json.loads(plan.read_text())
    assert doc["format"] == "memopt-remat-plan" and doc["peak"] == 12
    d = run_json(capsys, ["verify", str(graph_file), str(plan), "--json"])
    assert d["ok"] and d["peak"] == 12 and d["extra_cost"] == 3
    # a false claim is refused, one line, exit 2
    doc["peak"] = 11
    plan.write_text(json.dumps(doc))
    assert main(["verify", str(graph_file), str(plan)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "peak" in err
    doc["peak"] = 12
    doc["plan"] = [s for s in doc["plan"] if s != {"run": "h"}]
    plan.write_text(json.dumps(doc))
    assert main(["verify", str(graph_file), str(plan)]) == 2
    assert "never" in capsys.readouterr().err


def test_remat_on_a_published_graph(capsys):
    path = shared_graph("VGG16_256_224_224_3_train_nx.json")
    d = run_json(capsys, ["remat", str(path), "--memory-ratio", "1", "--json", "--time-limit", "20"])
    assert d["status"] == "optimal" and d["extra_cost"] == 0
    assert isinstance(d["plan"][0]["run"], int)  # Checkmate's own integer node ids


@pytest.mark.parametrize("argv", [
    ["remat", "{f}"],
    ["remat", "{f}", "--memory-limit", "5", "--cost-budget", "1"],
    ["remat", "{f}", "--memory-limit", "-5"],
    ["remat", "{f}", "--memory-limit", "1.5"],
    ["remat", "{f}", "--memory-ratio", "abc"],
    ["remat", "{f}", "--memory-ratio", "-1"],
    ["remat", "{f}", "--cost-budget", "x"],
    ["remat", "{f}", "--memory-limit", "5", "--cap", "-1"],
    ["remat", "{f}", "--memory-limit", "5", "--method", "nope"],
    ["remat", "{f}", "--memory-limit", "5", "--time-limit", "inf"],
    ["remat", "{f}", "--pareto", "-o", "{tmp}/x.json"],
    ["remat", "{f}", "--memory-limit", "5", "-o", "{f}"],
    ["remat", "{tmp}/missing.json", "--memory-limit", "5"],
    ["reduce", "knapsack", "--weights", "1,2", "--values", "1", "--capacity", "2", "-o", "{tmp}/k.json"],
    ["reduce", "3partition", "--numbers", "1,2", "-o", "{tmp}/t.json"],
    ["reduce", "3partition", "--numbers", "3,3,3,3,3,3", "--cap", "0", "-o", "{tmp}/t.json"],
])
def test_bad_options_exit_2_with_one_line(argv, graph_file, tmp_path, capsys):
    argv = [a.format(f=graph_file, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("memopt: error:")


def test_reduce_knapsack_writes_a_value_preserving_instance(tmp_path, capsys):
    out = tmp_path / "k.json"
    d = run_json(capsys, ["reduce", "knapsack", "--weights", "3,4,5", "--values", "4,5,6", "--capacity", "7",
                          "-o", str(out), "--json"])
    g = load_graph(out)
    best, _ = knapsack_optimum(KnapsackInstance((3, 4, 5), (4, 5, 6), 7))
    assert min_extra_cost(g, d["memory_limit"], 1)[0] == d["cost_offset"] - best
    r = run_json(capsys, ["remat", str(out), "--memory-limit", str(d["memory_limit"]), "--json"])
    assert r["status"] == "optimal" and r["extra_cost"] == d["cost_offset"] - best


def test_reduce_3partition_writes_the_decision_instance(tmp_path, capsys):
    out = tmp_path / "t.json"
    d = run_json(capsys, ["reduce", "3partition", "--numbers", "5,5,6,5,5,6", "--cap", "1", "-o", str(out),
                          "--json"])
    g = load_graph(out)
    # m = 2, B = 16, A = 32, k = 1: N = 2 humps, T = 14 clocks of A + 1 = 33 bytes, M = 14 * 33 + 32
    assert d["memory_limit"] == 494 and d["cost_budget"] == 6 and d["cap"] == 1 and g.num_ops == d["ops"] == 20
    # the written instance is a yes-instance: the plan of the partition meets limit and budget on it
    inst = ThreePartitionInstance((5, 5, 6, 5, 5, 6))
    red = three_partition_to_remat(inst, cap=1)
    steps = partition_to_plan(inst, red, solve_three_partition(inst)).to_doc(red.graph)
    assert check_plan(g, steps, cap=1) == (d["memory_limit"], d["cost_budget"])
    # the variant without graph inputs: one more op, same limit and budget
    d2 = run_json(capsys, ["reduce", "3partition", "--numbers", "5,5,6,5,5,6", "--clocks", "source", "-o",
                           str(out), "--json"])
    assert d2["clocks"] == "source" and d2["ops"] == 21 and load_graph(out).num_ops == 21
    assert (d2["memory_limit"], d2["cost_budget"]) == (d["memory_limit"], d["cost_budget"])
