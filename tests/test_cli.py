"""The ``memopt`` command: every command family, ``--json``, exit codes and one-line errors,
the shared output helpers, and a parser that imports nothing heavy.

Mostly ``memopt.cli.main([...])`` with capsys; real subprocesses where the process matters
(``python -m``, ``--help`` imports, the console script).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

import memopt
from memopt.cli import build_parser, main
from memopt.cli._output import fmt_bytes, fmt_count, format_table, jsonable, write_json
from memopt.errors import InternalError

from conftest import REPO, shared_graph

MLP = REPO / "instances" / "mlp_train.json"
SCHEDULE_FIELDS = {"instance", "file", "ops", "order", "peak", "lower_bound", "gap", "status", "method",
                   "seconds", "baselines", "bounds", "verified", "stats"}


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str, prefix: str = "memopt: error: ") -> str:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(prefix), err
    assert "Traceback" not in err
    return err


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env.pop("MEMOPT_DEBUG", None)
    return env


def _proc(*argv, module="memopt.cli"):
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], capture_output=True, text=True,
                          env=_env(), timeout=300)


# ------------------------------------------------------------------------------ start-up

def test_version(capsys):
    code, out, err = _run(capsys, "--version")
    assert code == 0 and out == f"memopt {memopt.__version__}\n" == "memopt 0.1.0\n" and err == ""


def test_python_dash_m_memopt_and_memopt_cli():
    for module in ("memopt", "memopt.cli"):
        proc = _proc("--version", module=module)
        assert proc.returncode == 0 and proc.stdout == "memopt 0.1.0\n", proc.stderr


def test_building_the_parser_imports_nothing_heavy():
    code = ("import sys; from memopt.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('numba', 'numpy', 'memopt.core', 'memopt.dtr', 'memopt.dtr.simulator', "
            "'memopt.schedule.api', 'memopt.bounds', 'ortools', 'scipy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_imports_nothing_heavy_either():
    code = ("import sys\nfrom memopt.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "main(['schedule', '--help']); main(['dtr', 'sweep', '--help'])\n"
            "print('RESULT', 'numba' in sys.modules, 'numpy' in sys.modules, 'memopt.core' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "RESULT False False False" in proc.stdout


def test_lazy_package_keeps_every_public_name():
    code = ("import sys, memopt; assert 'numpy' not in sys.modules; "
            "assert memopt.__version__ == '0.1.0'; "
            "names = [getattr(memopt, n) for n in memopt.__all__]; "
            "assert callable(memopt.schedule); "
            "from memopt import *; print('ok', len(names))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ok {len(memopt.__all__)}"
    with pytest.raises(AttributeError):
        memopt.no_such_name  # noqa: B018


def test_schedule_help_lists_methods_with_summaries(capsys):
    from memopt.schedule.registry import methods

    code, out, _ = _run(capsys, "schedule", "--help")
    assert code == 0
    for m in methods():
        assert re.search(rf"^\s+{re.escape(m.name)}\s+{re.escape(m.summary)}$", out, re.M), m.name


# ------------------------------------------------------------------------------ output helpers

def test_fmt_bytes_is_the_one_byte_format():
    assert fmt_bytes(12345) == "12345 B (12.06 KiB)"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(0) == "0 B"
    assert fmt_bytes(3 * 2**30) == f"{3 * 2**30} B (3.00 GiB)"
    assert fmt_bytes(np.int64(2048)) == "2048 B (2.00 KiB)"
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(2**70).startswith(f"{2**70} B (")
    assert fmt_count(1234567) == "1,234,567"


def test_format_table_aligns_columns_whatever_the_widths():
    rows = [("max_op_footprint", 184590336), ("graph_outputs", 5), ("x", 12345678901234)]
    text = format_table(rows, header=("lower bound", "bytes"), align="lr", indent=2)
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1  # right-aligned last column: equal widths
    starts = {line.index(str(v)) + len(str(v)) for line, (_, v) in zip(lines[1:], rows)}
    assert len(starts) == 1
    assert all(line.startswith("  ") for line in lines)
    # left-aligned key/value: every value starts in the same column
    kv = format_table([("a", "1"), ("much longer key", "2")]).splitlines()
    assert kv[0].index("1") == kv[1].index("2") == len("much longer key") + 2
    assert format_table([]) == ""


def test_write_json_is_one_strict_line(capsys):
    write_json({"a": np.int64(3), "b": np.arange(3), "c": float("nan"), "d": Decimal("0.43"),
                "e": (1, 2), "f": np.float64(math.inf), "g": Path("x/y"), "h": {np.int32(1): True}})
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out) == {"a": 3, "b": [0, 1, 2], "c": None, "d": 0.43, "e": [1, 2], "f": None,
                               "g": "x/y", "h": {"1": True}}
    assert "NaN" not in out and "Infinity" not in out
    with pytest.raises(TypeError):
        jsonable(object())


# ------------------------------------------------------------------------------ schedule / bound / verify

def test_schedule_json_has_the_library_fields(capsys):
    code, out, err = _run(capsys, "schedule", MLP, "--json", "--time-limit", "5")
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    obj = json.loads(out)
    assert set(obj) == SCHEDULE_FIELDS
    assert obj["instance"] == "mlp_train" and obj["ops"] == 18 and obj["file"] == str(MLP)
    assert obj["verified"] is True and obj["gap"] == obj["peak"] - obj["lower_bound"] >= 0
    # the same fields a library user sees, and they read back
    from memopt.io import load_instance
    from memopt.schedule.result import ScheduleResult

    inst = load_instance(MLP)
    lib = memopt.schedule(inst, time_limit=5).to_dict(labels=inst.labels)
    assert set(lib) == SCHEDULE_FIELDS - {"instance", "file", "ops"}
    back = ScheduleResult.from_dict(obj, labels=inst.labels)
    assert back.peak == obj["peak"] and [inst.labels[i] for i in back.order] == obj["order"]


def test_schedule_human_output_is_aligned(capsys):
    code, out, _ = _run(capsys, "schedule", MLP, "--time-limit", "5")
    assert code == 0
    assert "peak" in out and "lower bound" in out and "status" in out and "lpmf" in out
    blocks = out.split("\n\n")
    assert len(blocks) >= 3
    # summary: every value starts in the same column
    summary = blocks[0].splitlines()
    assert len({re.match(r"\S+(?: \S+)*\s{2,}", line).end() for line in summary}) == 1
    # baselines and bounds: the numbers (right-aligned) end in the same column, including
    # the long max_op_footprint row
    for block in blocks[1:3]:
        lines = [line for line in block.splitlines() if not line.startswith("order:")]
        ends = {m.end() for line in lines for m in [re.search(r"(\d+|bytes|\(bytes\))(?=\s{2,}\S|$)", line)] if m}
        assert len(ends) == 1, block
    assert "max_op_footprint" in blocks[2]
    # the numbers are exact byte counts formatted by the one helper
    obj_peak = re.search(r"^peak\s+(\d+) B", out, re.M).group(1)
    assert fmt_bytes(int(obj_peak)) in out


def test_bound_json_and_text(capsys):
    code, out, _ = _run(capsys, "bound", MLP, "--json", "--time-limit", "5")
    assert code == 0
    obj = json.loads(out)
    assert set(obj) == {"instance", "file", "ops", "lower_bound", "bounds", "seconds"}
    assert obj["lower_bound"] == max(obj["bounds"].values()) > 0
    code, out, _ = _run(capsys, "bound", MLP, "--time-limit", "2")
    assert code == 0 and "lower bound" in out and fmt_bytes(obj["lower_bound"]) in out


def test_schedule_writes_plans_that_verify(tmp_path, capsys):
    plan, cert = tmp_path / "plan.json", tmp_path / "cert.json"
    code, out, _ = _run(capsys, "schedule", MLP, "--json", "-o", plan, "--certificate", cert, "--time-limit", "5")
    assert code == 0
    peak = json.loads(out)["peak"]
    code, out, err = _run(capsys, "verify", MLP, plan, "--json")
    assert code == 0 and err == "", err
    report = json.loads(out)
    assert report["ok"] is True and report["peak"] == peak
    code, out, _ = _run(capsys, "verify", MLP, cert, "--json")
    assert code == 0 and json.loads(out)["kind"] == "certificate"
    code, out, _ = _run(capsys, "verify", MLP, plan)
    assert code == 0 and re.search(r"^peak\s+" + re.escape(fmt_bytes(peak)) + "$", out, re.M)


def test_verify_rejections_are_one_line_exit_2(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert _run(capsys, "schedule", MLP, "--method", "input", "-o", plan, "--json")[0] == 0
    good = json.loads(plan.read_text())
    bad_docs = [
        dict(good, peak=good["peak"] - 1),
        dict(good, peak=good["peak"] + 0.5),
        dict(good, lower_bound=good["peak"] + 1),
        dict(good, status="banana"),
        dict(good, order=list(reversed(good["order"]))),
        {"format": "something-else"},
        [1, 2, 3],
    ]
    for doc in bad_docs:
        plan.write_text(json.dumps(doc))
        code, out, err = _run(capsys, "verify", MLP, plan)
        assert code == 2 and out == "", (doc if isinstance(doc, list) else doc.get("peak"), err)
        _one_error_line(err)


def test_published_graph_is_certified(tmp_path, capsys):
    graph = shared_graph("VGG16_256_224_224_3_train_nx.json")
    plan = tmp_path / "plan.json"
    code, out, _ = _run(capsys, "schedule", graph, "--json", "-o", plan)
    assert code == 0
    obj = json.loads(out)
    assert obj["peak"] == obj["lower_bound"] == 15825108992 and obj["status"] == "certified"
    assert set(obj["baselines"]) >= {"input", "lpmf", "bfs", "dfs", "inductor"}
    assert sorted(obj["order"]) == list(range(45))
    code, out, _ = _run(capsys, "verify", graph, plan, "--json")
    assert code == 0 and json.loads(out)["peak"] == 15825108992


# ------------------------------------------------------------------------------ errors and exit codes

def test_bad_graph_is_one_line_exit_2_as_a_process(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "memopt-graph", "version": 1, "tensors": [{"name": "a", "size": 1}], '
                   '"ops": [{"name": "f", "inputs": ["a"], "outputs": ["b"]}]}')
    proc = _proc("schedule", bad)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "memopt: error: op 'f' writes unknown tensor 'b'" or \
        (proc.stderr.count("\n") == 1 and "'b'" in proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content, needle", [
    (None, "no such file"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b'{"format": "memopt-graph", "version": 1, "tensors": [', "truncated"),
    (b"", "empty"),
])
def test_unreadable_inputs_name_the_file(tmp_path, capsys, content, needle):
    path = tmp_path / "graph.json"
    if content is not None:
        path.write_bytes(content)
    for command in ("schedule", "bound"):
        code, out, err = _run(capsys, command, path)
        assert code == 2 and out == ""
        _one_error_line(err)
        assert str(path) in err and needle in err, err


def test_a_directory_as_input(tmp_path, capsys):
    code, _, err = _run(capsys, "schedule", tmp_path)
    assert code == 2 and str(tmp_path) in _one_error_line(err)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e9", "1e400"])
@pytest.mark.parametrize("command", ["schedule", "bound"])
def test_time_limit_must_be_finite_and_sane(capsys, command, value):
    code, out, err = _run(capsys, command, MLP, "--time-limit", value)
    assert code == 2 and out == ""
    assert "--time-limit" in _one_error_line(err)


def test_time_limit_zero_is_allowed(capsys):
    code, out, _ = _run(capsys, "bound", MLP, "--time-limit", "0", "--json")
    assert code == 0 and json.loads(out)["lower_bound"] > 0


@pytest.mark.parametrize("argv, needle", [
    (["schedule", MLP, "--method", "nope"], "invalid choice: 'nope'"),
    (["schedule", MLP, "--time-limit", "abc"], "invalid float value: 'abc'"),
    (["schedule", MLP, "--seed", "-1"], "--seed"),
    (["schedule"], "required"),
    (["frobnicate"], "invalid choice"),
    (["dtr"], "required"),
])
def test_usage_errors_are_one_line_exit_2(capsys, argv, needle):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert needle in _one_error_line(err)


def test_output_must_not_overwrite_an_input(tmp_path, capsys):
    graph = tmp_path / "g.json"
    graph.write_bytes(MLP.read_bytes())
    before = graph.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(graph)
    for argv in (["-o", graph], ["--certificate", graph], ["-o", link],
                 ["-o", tmp_path / "sub" / ".." / "g.json"], ["-o", tmp_path / "p.json", "--certificate",
                                                              tmp_path / "p.json"]):
        code, out, err = _run(capsys, "schedule", graph, *argv)
        assert code == 2 and out == ""
        _one_error_line(err)
    assert graph.read_bytes() == before
    code, _, err = _run(capsys, "schedule", graph, "-o", tmp_path / "missing-dir" / "p.json")
    assert code == 2 and "does not exist" in _one_error_line(err)


def test_internal_error_exit_3_please_report(capsys, monkeypatch):
    from memopt.schedule import api

    def broken(*a, **k):
        raise InternalError("bound-above-peak", "lower bound 7 above verified peak 5")

    monkeypatch.setattr(api, "schedule_instance", broken)
    code, out, err = _run(capsys, "schedule", MLP)
    assert code == 3 and out == ""
    _one_error_line(err, "memopt: internal error: ")
    assert "please report" in err and "bound-above-peak" in err and "MEMOPT_DEBUG=1" in err

    def buggy(*a, **k):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(api, "schedule_instance", buggy)
    code, out, err = _run(capsys, "schedule", MLP)
    assert code == 3 and "ZeroDivisionError" in _one_error_line(err, "memopt: internal error: ")
    assert "please report" in err

    monkeypatch.setenv("MEMOPT_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["schedule", str(MLP)])


def test_interrupt_and_broken_pipe(capsys, monkeypatch):
    from memopt.schedule import api

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "compute_bounds", interrupted)
    code, _, err = _run(capsys, "bound", MLP)
    assert code == 130 and err == "memopt: interrupted\n"

    def pipe(*a, **k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(api, "compute_bounds", pipe)
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # capsys' stdout has no real descriptor to redirect
    code, _, err = _run(capsys, "bound", MLP)
    assert code == 0 and err == ""


def test_broken_pipe_is_quiet_as_a_process():
    proc = subprocess.run(f"{sys.executable} -m memopt schedule --help | head -c 10", shell=True,
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr


def test_progress_stays_off_stdout_and_json(capsys):
    code, out, err = _run(capsys, "schedule", MLP, "--json", "--time-limit", "2")
    assert code == 0 and err == "" and out.count("\n") == 1


# ------------------------------------------------------------------------------ dtr

_SYNTH = importlib.util.spec_from_file_location("_dtr_synthetic", REPO / "tests" / "dtr" / "_synthetic.py")
synthetic = importlib.util.module_from_spec(_SYNTH)
_SYNTH.loader.exec_module(synthetic)


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "synthetic.log"
    path.write_text("\n".join(synthetic.LINES) + "\n")
    return path


def test_dtr_replay_json_round_trips(capsys, trace):
    from memopt.dtr.simulator import ReplayResult

    code, out, err = _run(capsys, "dtr", "replay", trace, "--ratio", "1", "--json")
    assert code == 0 and err == "" and out.count("\n") == 1
    obj = json.loads(out)
    assert obj["status"] == "pass" and obj["baseline_peak"] == synthetic.BASELINE_PEAK
    assert obj["baseline_compute"] == synthetic.BASELINE_COMPUTE
    assert obj["trace"] == trace.name and obj["ratio"] == 1.0 and obj["heuristic"] == "dtr"
    result = ReplayResult.from_dict(obj)
    assert {k: v for k, v in result.to_dict().items()} == {k: obj[k] for k in result.to_dict()}
    assert set(obj) == set(result.to_dict()) | {"trace", "seconds"}


def test_dtr_library_results_round_trip(trace):
    from memopt.dtr import baseline, load_trace, replay
    from memopt.dtr.simulator import Baseline, ReplayResult
    from memopt.dtr.sweep import SweepResult, run_sweep

    t = load_trace(trace)
    base = baseline(t)
    assert Baseline.from_dict(base.to_dict()) == base
    r = replay(t, 300, "dtr", ratio=0.88)
    assert ReplayResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    sweep = run_sweep(trace, "0.5:1.0:0.1", jobs=1)
    doc = json.loads(json.dumps(sweep.to_dict()))
    back = SweepResult.from_dict(doc)
    assert back.to_dict() == doc and back.holes == sweep.holes
    from memopt.errors import FormatError

    for cls in (Baseline, ReplayResult, SweepResult):
        with pytest.raises(FormatError):
            cls.from_dict({"nonsense": 1})


def test_dtr_replay_text_is_aligned(capsys, trace):
    code, out, _ = _run(capsys, "dtr", "replay", trace, "--ratio", "0.9")
    assert code == 0
    lines = out.splitlines()
    assert len({re.match(r"\S+(?: \S+)*\s{2,}", line).end() for line in lines}) == 1
    assert re.search(r"^baseline peak\s+340 B$", out, re.M)


def test_dtr_sweep_json_and_text(capsys, trace):
    code, out, _ = _run(capsys, "dtr", "sweep", trace, "--grid", "0.5:1.0:0.1", "--jobs", "1", "--json")
    assert code == 0 and out.count("\n") == 1
    obj = json.loads(out)
    assert [p["ratio"] for p in obj["points"]] == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert {"holes", "nondeterministic", "failing", "min_passing_ratio", "timeouts"} <= set(obj)
    code, out, _ = _run(capsys, "dtr", "sweep", trace, "--grid", "0.5:1.0:0.1", "--jobs", "1")
    assert code == 0 and re.search(r"^holes {6}\S", out, re.M) and re.search(r"^failing {4}\d+ of 6", out, re.M)
    table = [line for line in out.splitlines() if re.match(r"^\s*(ratio|[0-9.]+)\s", line)]
    assert len(table) == 7 and len({len(line) for line in table}) == 1  # right-aligned columns


@pytest.mark.parametrize("argv, needle", [
    (["replay", "--ratio", "inf"], "--ratio"),
    (["replay", "--ratio", "nan"], "--ratio"),
    (["replay", "--ratio", "0"], "positive"),
    (["replay", "--ratio", "1e30"], "too large"),
    (["replay", "--ratio", "1e-400"], "too small"),
    (["replay", "--ratio", "0.5", "--overhead-limit", "nan"], "--overhead-limit"),
    (["replay", "--ratio", "0.5", "--overhead-limit", "0.5"], "--overhead-limit"),
    (["sweep", "--grid", "0.5:1:0.1", "--timeout", "inf"], "--timeout"),
    (["sweep", "--grid", "0.5:1:0.1", "--timeout", "0"], "--timeout"),
    (["sweep", "--grid", "0.5:1:0.1", "--timeout", "-1"], "--timeout"),
    (["sweep", "--grid", "0.5:1:0.1", "--jobs", "0"], "--jobs"),
    (["sweep", "--grid", "0.5:1:0.1", "--repeats", "0"], "--repeats"),
    (["sweep", "--grid", "0.5:inf:0.1"], "bad grid"),
    (["sweep", "--grid", "0.5:1e30:1e29"], "bad grid"),
    (["sweep", "--grid", "0:1:1e-9"], "bad grid"),
    (["explain", "--fail", "nan", "--pass", "1"], "--fail"),
    (["explain", "--fail", "0.5", "--pass", "1", "--singles", "-1"], "--singles"),
])
def test_dtr_option_errors_are_one_line(capsys, trace, argv, needle):
    code, out, err = _run(capsys, "dtr", argv[0], trace, *argv[1:])
    assert code == 2 and out == ""
    assert needle in _one_error_line(err), err


def test_dtr_plot_must_not_overwrite_the_trace(capsys, trace):
    before = trace.read_bytes()
    code, _, err = _run(capsys, "dtr", "sweep", trace, "--grid", "0.5:1:0.1", "--jobs", "1", "--plot", trace)
    assert code == 2 and "input file" in _one_error_line(err)
    assert trace.read_bytes() == before


def test_dtr_ratio_checked_against_the_baseline(capsys, tmp_path):
    # a trace whose baseline peak is just above 2**61 (which the parser accepts): a ratio of 5
    # would wrap int64
    path = tmp_path / "huge.log"
    records = [{"INSTRUCTION": "CONSTANT", "NAME": "w"}, {"INSTRUCTION": "MEMORY", "NAME": "w", "MEMORY": "8"},
               {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["w"], "RESULT": ["a"], "TIME": "1"},
               {"INSTRUCTION": "MEMORY", "NAME": "a", "MEMORY": str(2**61)},
               {"INSTRUCTION": "ALIAS", "NAME": "a", "ALIAS": "-1"}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    for argv in (["replay", path, "--ratio", "5"], ["sweep", path, "--grid", "1:5:1", "--jobs", "1"],
                 ["explain", path, "--fail", "0.5", "--pass", "5"]):
        code, out, err = _run(capsys, "dtr", *argv)
        assert code == 2 and out == ""
        assert "does not fit in a 64-bit integer" in _one_error_line(err)
    code, out, _ = _run(capsys, "dtr", "replay", path, "--ratio", "1.5", "--json")
    assert code == 0 and json.loads(out)["budget"] == int(1.5 * (2**61 + 8))


def test_dtr_parser_does_not_import_the_simulator():
    code = ("import sys; from memopt.cli import main\ntry:\n    main(['dtr', 'replay', '--help'])\n"
            "except SystemExit:\n    pass\nprint('RESULT', 'memopt.dtr.simulator' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert "RESULT False" in proc.stdout, proc.stderr


def test_build_parser_is_reusable():
    a, b = build_parser(), build_parser()
    assert a.parse_args(["bound", "x.json"]).time_limit == b.parse_args(["bound", "y.json"]).time_limit == 10.0
