"""``memopt dtr replay|sweep|explain`` through ``memopt.cli.main`` and once as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memopt.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "data" / "dtr-reference" / "reference.jsonl"
UNET = SHARED / "data" / "dtr-traces" / "unet-6-8000000000.0-2020-10-1-10-57-18-default.log"

pytestmark = pytest.mark.skipif(
    not UNET.exists() or not REFERENCE.exists(),
    reason=f"shared DTR traces/reference not found under {SHARED} (../shared from the repo root)",
)

REQUIRED = {"status", "budget", "baseline_peak", "baseline_compute", "clock", "remat_compute", "max_memory"}


def _reference(ratio, heuristic="DTR", limit=None) -> dict:
    for line in REFERENCE.read_text().splitlines():
        row = json.loads(line)
        if (row["trace"], row["heuristic"], row["overhead_limit"], row["ratio"]) == (UNET.name, heuristic, limit, ratio):
            return row
    raise AssertionError("missing reference row")


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_json_is_one_object_matching_simrd(capsys):
    code, out, err = _run(capsys, "dtr", "replay", str(UNET), "--ratio", "0.43", "--overhead-limit", "2", "--json")
    assert code == 0
    obj = json.loads(out)  # exactly one JSON document on stdout
    assert out.count("\n") == 1 and REQUIRED <= obj.keys()
    row = _reference(0.43, limit=2.0)
    for key in REQUIRED:
        assert obj[key] == row[key], key
    assert obj["heuristic"] == "dtr" and obj["ratio"] == 0.43


def test_replay_text_and_heuristic(capsys):
    code, out, _ = _run(capsys, "dtr", "replay", str(UNET), "--ratio", "0.5", "--heuristic", "msps")
    row = _reference(0.5, "MSPS")
    assert code == 0
    assert f"status            {row['status']}" in out
    assert f"{row['clock']:,}" in out


def test_sweep_json_lists_every_budget_and_holes(capsys, tmp_path):
    plot = tmp_path / "s.png"
    code, out, _ = _run(capsys, "dtr", "sweep", str(UNET), "--grid", "0.3:0.6:0.1", "--jobs", "1",
                        "--json", "--plot", str(plot))
    assert code == 0
    obj = json.loads(out)
    assert [p["ratio"] for p in obj["points"]] == [0.3, 0.4, 0.5, 0.6]
    assert obj["holes"] == [] and obj["nondeterministic"] == []
    for p in obj["points"]:
        assert p["status"] == _reference(p["ratio"])["status"]
    assert plot.stat().st_size > 0


def test_sweep_text(capsys):
    code, out, _ = _run(capsys, "dtr", "sweep", str(UNET), "--grid", "0.4:0.5:0.1", "--jobs", "1")
    assert code == 0 and "holes      none" in out and "failing    1 of 2 budgets" in out


def test_explain_json(capsys):
    code, out, _ = _run(capsys, "dtr", "explain", str(UNET), "--fail", "0.4", "--pass", "0.5", "--json")
    assert code == 0
    obj = json.loads(out)
    assert obj["fail"]["status"] == "OOM" and obj["pass"]["status"] == "pass"
    assert obj["oom"]["short"] > 0 and "counterfactual" in obj


@pytest.mark.parametrize(
    "argv, message",
    [
        (["dtr", "sweep", str(UNET), "--grid", "0.1-0.5", "--jobs", "1"], "bad grid"),
        (["dtr", "sweep", str(UNET), "--grid", "0.5:0.1:0.1", "--jobs", "1"], "bad grid"),
        (["dtr", "replay", str(UNET), "--ratio", "0.5", "--heuristic", "belady"], "unknown heuristic"),
        (["dtr", "replay", str(UNET) + ".missing", "--ratio", "0.5"], "not found"),
        (["dtr", "replay", str(UNET), "--ratio", "half"], "not a number"),
        (["dtr", "replay", str(UNET), "--ratio", "-1"], "positive"),
        (["dtr", "explain", str(UNET), "--fail", "0.6", "--pass", "0.7"], "does not fail"),
    ],
)
def test_input_errors_are_one_line(capsys, argv, message):
    code, out, err = _run(capsys, *argv)
    assert code != 0 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_as_a_process():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "memopt.cli", "dtr", "replay", str(UNET), "--ratio", "0.7", "--json"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    row = _reference(0.7)
    assert (obj["status"], obj["clock"], obj["max_memory"]) == (row["status"], row["clock"], row["max_memory"])
    bad = subprocess.run(
        [sys.executable, "-m", "memopt.cli", "dtr", "sweep", str(UNET), "--grid", "x:y:z"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "bad grid" in bad.stderr


def test_sweep_repeats_flag_nondeterminism_with_exit_status_1(capsys, monkeypatch):
    import dataclasses

    import memopt.dtr as dtr

    real = dtr.replay
    runs: dict[int, int] = {}

    def flaky(trace, budget, heuristic="dtr", **kw):
        runs[budget] = runs.get(budget, 0) + 1
        result = real(trace, budget, heuristic, **kw)
        return dataclasses.replace(result, max_memory=result.max_memory + runs[budget])

    monkeypatch.setattr(dtr, "replay", flaky)
    code, out, err = _run(capsys, "dtr", "sweep", str(UNET), "--grid", "0.5:0.6:0.1", "--jobs", "1",
                          "--repeats", "2", "--json")
    assert code == 1
    assert json.loads(out)["nondeterministic"] == [0.5, 0.6]
    assert "not deterministic at ratios 0.5, 0.6" in err
    monkeypatch.setattr(dtr, "replay", real)
    code, out, err = _run(capsys, "dtr", "sweep", str(UNET), "--grid", "0.5:0.6:0.1", "--jobs", "1",
                          "--repeats", "2", "--json")
    assert code == 0 and json.loads(out)["nondeterministic"] == [] and err == ""


@pytest.mark.parametrize("argv,message", [
    (["dtr", "replay", str(UNET), "--ratio", "1e30"], "too large"),
    (["dtr", "replay", str(UNET), "--ratio", "0.5", "--overhead-limit", "inf", "--json"], "finite slowdown factor"),
    (["dtr", "replay", str(UNET), "--ratio", "0.5", "--overhead-limit", "abc"], "invalid float value: 'abc'"),
    (["dtr", "replay", str(UNET)], "required: --ratio"),
    (["dtr", "sweep", str(UNET), "--grid", "0.5:0.6:0.05", "--plot", "/nonexistent/dir/x.png"], "not writable"),
])
def test_usage_and_value_errors_are_one_line(capsys, argv, message):
    # usage errors (argparse) and bad values (OptionError) alike: main returns 2, one line
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("memopt: error:") and message in err


def test_empty_log_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert main(["dtr", "replay", str(empty), "--ratio", "0.5"]) == 2
    assert "empty log" in capsys.readouterr().err
