"""``memopt cache experts|certify|verify`` through ``memopt.cli.main``."""

from __future__ import annotations

import json

import pytest

from conftest import SHARED
from memopt.cache import dump_requests, make_trace
from memopt.cli import main

ROUTES = SHARED / "data" / "moe-routes"


@pytest.fixture
def trace_file(tmp_path):
    # the hand-worked trace of the policy tests: LRU misses 7, Belady 5 at capacity 2
    path = tmp_path / "t.jsonl"
    dump_requests(make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1]), path)
    return path


def test_experts_json(trace_file, capsys):
    assert main(["cache", "experts", str(trace_file), "--capacity", "2", "--policy", "lru", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["misses"] for r in out["results"]] == [7]
    assert main(["cache", "experts", str(trace_file), "--capacity", "2", "--capacity", "3",
                 "--policy", "belady", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"]
    assert res[0]["misses"] == 5 and res[0]["optimal"] and res[0]["requests"] == 7


def test_experts_table_and_opt(trace_file, capsys):
    assert main(["cache", "experts", str(trace_file), "--capacity", "2", "--policy", "opt"]) == 0
    out = capsys.readouterr().out
    assert "lower bound" in out and "optimal" in out


@pytest.mark.parametrize("args", [["--capacity", "-1"], ["--capacity", "x"], ["--capacity", "2", "--k", "0"],
                                  ["--capacity", "2", "--time-limit", "inf"]])
def test_experts_bad_options_exit_2(trace_file, capsys, args):
    assert main(["cache", "experts", str(trace_file)] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memopt: error:")


def test_certify_and_verify_round_trip(trace_file, tmp_path, capsys):
    cert = tmp_path / "cert.json"
    assert main(["cache", "certify", str(trace_file), "--envelope", "dev=2", "--envelope", "host=8",
                 "-o", str(cert), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["semantic_demand"] == 4
    assert [e["fits"] for e in doc["envelopes"]] == [False, True]
    assert main(["cache", "verify", str(cert), str(trace_file)]) == 0
    capsys.readouterr()
    doc["semantic_demand"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["cache", "verify", str(bad), str(trace_file)]) == 2
    assert "semantic_demand" in capsys.readouterr().err


def test_certify_refuses_to_overwrite_its_trace(trace_file, capsys):
    assert main(["cache", "certify", str(trace_file), "--envelope", "dev=2", "-o", str(trace_file)]) == 2
    assert "input" in capsys.readouterr().err


def test_experts_on_a_real_route_file(capsys):
    path = ROUTES / "olmoe_layer0.jsonl"
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    assert main(["cache", "experts", str(path), "--capacity", "8", "--policy", "belady", "--drop-warmup",
                 "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["results"][0]
    # the warm-up passes dropped as MANIFEST.md says; Belady is exact for one expert size
    assert (r["requests"], r["misses"], r["optimal"]) == (35768, 20078, True)
