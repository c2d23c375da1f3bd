"""Hostile command lines (issue 24, "a hostile review"): every ``memopt`` sub-command with bad
option values (5,000-digit integers, ``1e999999``, ``1e-999999``, nan, inf, -1, empty, words),
unwritable outputs (``/dev/full``, a missing folder, a directory, an input file) and truncated
or corrupt input files ends in exit 2 with exactly one ``memopt: error:`` line on stderr and
no traceback, or in exit 0 where the input is valid; never in an internal error (exit 3).

Mostly ``memopt.cli.main([...])`` in-process with capsys, on tiny inputs; real subprocesses
where the process matters (onnxruntime's native log, stdout on ``/dev/full``, bare ``memopt``).
Subprocess timeouts are hang detectors only, far above what the cases take.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import REPO
from test_cli import _env
from memopt.cache import dump_attention, dump_requests, make_attention_trace, make_trace
from memopt.cli import main
from memopt.cli import _options as opt
from memopt.errors import OptionError

sys.path.insert(0, str(Path(__file__).resolve().parent / "dtr"))
from _synthetic import LINES  # noqa: E402

MLP = REPO / "instances" / "mlp_train.json"
B5000 = "9" * 5000
HANG = 120  # seconds: a hang detector for subprocesses, not a timing assertion
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
HAS_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))

ATT = [[[[8, 0, 0, 0, 0, 0], [6, 2, 0, 0, 0, 0], [5, 1, 2, 0, 0, 0], [1, 0, 6, 1, 0, 0],
         [1, 0, 1, 5, 1, 0], [0, 0, 4, 1, 2, 1]]]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny valid inputs of every kind: requests trace, attention trace, DTR log, graph."""
    d = tmp_path_factory.mktemp("hostile")
    req, att, log = d / "req.jsonl", d / "att.jsonl", d / "syn.log"
    dump_requests(make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1]), req)
    dump_attention(make_attention_trace(ATT, [True, False, True, True, False, True], scale=8, name="hand"), att)
    log.write_text("\n".join(LINES) + "\n")
    graph = d / "mlp_train.json"            # a copy: no output option may ever point into the checkout
    graph.write_bytes(MLP.read_bytes())
    return {"req": str(req), "att": str(att), "log": str(log), "graph": str(graph), "dir": d}


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    return code, out, err


def _refused(capsys, *argv, needle: str | None = None, stdout_ok: bool = False) -> str:
    """Exit 2 with exactly one ``memopt: error:`` line (containing ``needle``); no stdout."""
    code, out, err = _run(capsys, *argv)
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.startswith("memopt: error: "), err
    assert stdout_ok or out == "", out
    if needle is not None:
        assert needle in err, err
    return err


def _proc(*argv, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "memopt", *map(str, argv)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=_env(), timeout=HANG)


# ------------------------------------------------------------- the review's findings, one by one
def test_cache_kv_budget_of_5000_digits_is_refused_naming_the_option(files, capsys):
    err = _refused(capsys, "cache", "kv", files["att"], "--policy", "h2o", "--budget", B5000, needle="--budget")
    assert "5000 characters" in err and len(err) < 300


def test_cache_kv_lag_of_5000_digits_is_refused_naming_the_option(files, capsys):
    _refused(capsys, "cache", "kv", files["att"], "--policy", "rmm", "--budget", "2", "--lag", B5000,
             needle="--lag")


@pytest.mark.parametrize("flag, value", [("--budgets", B5000), ("--lags", B5000), ("--budgets", f"{B5000}%"),
                                         ("--budgets", "1e-999999"), ("--lags", "1e999999")],
                         ids=["budgets-5000-digits", "lags-5000-digits", "budgets-5000-digit-percent",
                              "budgets-1e-999999", "lags-1e999999"])
def test_cache_sweep_budgets_and_lags_of_5000_digits_are_refused(files, capsys, flag, value):
    argv = {"--budgets": "2", flag: value}
    _refused(capsys, "cache", "sweep", files["att"], "--policies", "rmm",
             *[x for kv in argv.items() for x in kv], needle=flag.strip("-")[:-1])


@pytest.mark.parametrize("step", ["1e-999999", "1e-9999999999", "1e-31"])
def test_dtr_sweep_grid_step_1e_minus_999999_is_refused_before_the_trace_is_read(tmp_path, capsys, step):
    # the trace does not exist: the grid is refused first, so no point was ever built
    _refused(capsys, "dtr", "sweep", tmp_path / "absent.log", "--grid", f"0.1:1:{step}", "--jobs", "1",
             needle="too small")


def test_dtr_sweep_grid_of_a_billion_points_names_the_maximum(tmp_path, capsys):
    _refused(capsys, "dtr", "sweep", tmp_path / "absent.log", "--grid", "0.1:1:1e-9", "--jobs", "1",
             needle="900000001 points (at most 1,000,000)")


def test_dtr_sweep_grid_1e_minus_999999_as_a_process_finishes_with_one_line(tmp_path):
    p = _proc("dtr", "sweep", tmp_path / "absent.log", "--grid", "0.1:1:1e-999999", "--jobs", "1")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("memopt: error: bad grid"), p.stderr


@pytest.mark.parametrize("command", ["experts", "certify", "verify", "sweep"])
@pytest.mark.parametrize("flag", [["--per-layer"], ["--drop-warmup"], ["--object-bytes", "7"],
                                  ["--skip-passes", "1"]])
def test_cache_commands_on_a_requests_trace_refuse_routing_options(files, capsys, command, flag):
    extra = {"experts": ["--capacity", "2"], "certify": ["--envelope", "d=2"], "verify": [],
             "sweep": ["--policies", "lru", "--capacities", "1:3:1"]}[command]
    head = ["cache", command] + ([files["req"]] if command == "verify" else []) + [files["req"]]
    _refused(capsys, *head, *extra, *flag, needle=f"{flag[0]} applies to routing logs")


def test_cache_experts_on_a_requests_trace_without_routing_options_still_runs(files, capsys):
    code, out, _ = _run(capsys, "cache", "experts", files["req"], "--capacity", "2", "--json")
    assert code == 0 and [r["misses"] for r in json.loads(out)["results"]] == [7]


def test_executor_port_of_5000_digits_is_refused_naming_the_option(files, capsys):
    _refused(capsys, "cache", "sweep", files["req"], "--policies", "lru", "--capacities", "1:3:1",
             "--executor", f"dask://h:{B5000}", needle="--executor")


@pytest.mark.parametrize("argv", [["schedule", "DEV"], ["verify", str(MLP), "DEV"],
                                  ["dtr", "replay", "DEV", "--ratio", "0.5"],
                                  ["cache", "experts", "DEV", "--capacity", "2"],
                                  ["cache", "kv", "DEV", "--policy", "h2o", "--budget", "2"],
                                  ["cache", "kv-eval", "--text", "DEV", "--tokens", "3", "--policy", "h2o",
                                   "--budget", "2", "--tiny"],
                                  ["onnx", "import", "DEV", "-o", "OUT"]], ids=lambda a: "-".join(a[:2]))
def test_a_device_as_input_is_refused_not_read_forever(tmp_path, argv):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    p = _proc(*[{"DEV": "/dev/zero", "OUT": str(tmp_path / "o.json")}.get(a, a) for a in argv])
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == "memopt: error: /dev/zero is a device, not a file (reading it would never end)\n"


# ------------------------------------------------------------- unwritable outputs
def _sweeps(files, out):
    return {
        "cache-routes": ["cache", "sweep", files["req"], "--policies", "lru", "--capacities", "1:3:1", "--plot", out],
        "cache-kv": ["cache", "sweep", files["att"], "--policies", "rmm", "--budgets", "2", "--lags", "0,1",
                     "--plot", out],
        "dtr": ["dtr", "sweep", files["log"], "--grid", "0.5:1:0.5", "--jobs", "1", "--plot", out],
    }


@pytest.mark.skipif(not HAS_MPL, reason="--plot needs matplotlib")
@pytest.mark.parametrize("sweep", ["cache-routes", "cache-kv", "dtr"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_plot_to_dev_full_is_refused_naming_the_file(files, capsys, sweep, json_flag):
    # nothing on stdout either: the plot is written before the report, so no report claims success
    _refused(capsys, *_sweeps(files, "/dev/full")[sweep], *json_flag, needle="--plot /dev/full: cannot write")


@pytest.mark.skipif(not HAS_MPL, reason="--plot needs matplotlib")
def test_plot_to_a_read_only_folder_is_refused_naming_the_file(files, capsys, tmp_path):
    if os.geteuid() == 0:
        folder = Path("/proc/self")        # root writes anywhere else; no one creates files here
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
    _refused(capsys, *_sweeps(files, folder / "p.png")["cache-routes"], needle="--plot")


@pytest.mark.parametrize("sweep", ["cache-routes", "cache-kv", "dtr"])
@pytest.mark.parametrize("where, needle", [("missing/p.png", "does not exist"), ("p.xyz", "cannot write .xyz"),
                                           (".", "is a directory")])
def test_plot_to_a_missing_folder_a_directory_or_an_unknown_format_is_refused_before_the_sweep(
        files, capsys, tmp_path, sweep, where, needle):
    out = tmp_path if where == "." else tmp_path / where
    _refused(capsys, *_sweeps(files, out)[sweep], needle=needle)


@pytest.mark.skipif(not HAS_MPL, reason="--plot needs matplotlib")
def test_plot_format_follows_the_extension(files, capsys, tmp_path):
    out = tmp_path / "p.svg"
    code, _, _ = _run(capsys, *_sweeps(files, out)["cache-routes"])
    assert code == 0 and out.read_bytes().startswith(b"<?xml")


@pytest.mark.parametrize("argv, needle", [
    (["schedule", MLP, "--time-limit", "1", "-o", "/dev/full"], "-o /dev/full: cannot write"),
    (["schedule", MLP, "--time-limit", "1", "--certificate", "/dev/full"], "--certificate /dev/full: cannot write"),
    (["cache", "certify", "REQ", "--envelope", "d=2", "-o", "/dev/full"], "-o /dev/full: cannot write"),
])
def test_output_file_on_dev_full_is_refused_naming_the_option(files, capsys, argv, needle):
    _refused(capsys, *[files["req"] if a == "REQ" else a for a in argv], needle=needle)


def test_stdout_on_dev_full_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        p = _proc("schedule", MLP, "--time-limit", "1", "--json", stdout=full)
    assert p.returncode == 2 and p.stderr == "memopt: error: stdout: cannot write: No space left on device\n"


# ------------------------------------------------------------- onnxruntime's own log
@pytest.mark.skipif(not HAS_ONNX, reason="needs onnx and onnxruntime")
def test_onnx_unsupported_op_gives_exactly_memopts_one_line(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("FooBarOp", ["x"], ["y"], domain="custom.memopt")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("custom.memopt", 1)])
    onnx.save(model, tmp_path / "unk.onnx")
    p = _proc("onnx", "reorder", tmp_path / "unk.onnx", "-o", tmp_path / "out.onnx", "--time-limit", "1")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1, p.stderr            # onnxruntime's coloured line is gone
    assert p.stderr.startswith("memopt: error: ") and "FooBarOp" in p.stderr and "\x1b[" not in p.stderr


# ------------------------------------------------------------- bare memopt, verify --json
def test_bare_memopt_prints_the_help_and_exits_0(capsys):
    code, out, err = _run(capsys)
    assert code == 0 and err == "" and out.startswith("usage: memopt") and "schedule" in out and "cache" in out


def test_bare_memopt_as_a_process_prints_the_help():
    p = _proc()
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("usage: memopt")


def test_verify_json_prints_a_verdict_when_the_plan_is_refused(files, capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["schedule", str(MLP), "--time-limit", "1", "-o", str(plan)]) == 0
    capsys.readouterr()
    doc = json.loads(plan.read_text())
    doc["peak"] = doc["peak"] - 1                          # a false claim
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["verify", str(MLP), str(bad), "--json"]) == 2
    out, err = capsys.readouterr()
    verdict = json.loads(out)
    assert out.count("\n") == 1 and err.count("\n") == 1 and err.startswith("memopt: error: ")
    assert verdict["ok"] is False and verdict["plan"] == str(bad) and verdict["file"] == str(MLP)
    assert verdict["reason"] and verdict["reason"] in err and verdict["error"] == "CertificateError"
    # and when it passes: the same object with ok true
    assert main(["verify", str(MLP), str(plan), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_verify_json_prints_a_verdict_for_an_unreadable_plan(files, capsys):
    assert main(["verify", str(MLP), files["req"], "--json"]) == 2
    out, err = capsys.readouterr()
    verdict = json.loads(out)
    assert verdict == {"ok": False, "file": str(MLP), "plan": files["req"], "reason": verdict["reason"],
                       "error": "FormatError"}
    assert err.count("\n") == 1 and verdict["reason"] in err


def test_cache_verify_json_prints_a_verdict_either_way(files, capsys, tmp_path):
    cert = tmp_path / "cert.json"
    assert main(["cache", "certify", files["req"], "--envelope", "dev=2", "-o", str(cert)]) == 0
    capsys.readouterr()
    assert main(["cache", "verify", str(cert), files["req"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    doc = json.loads(cert.read_text())
    doc["semantic_demand"] = 3
    cert.write_text(json.dumps(doc))
    assert main(["cache", "verify", str(cert), files["req"], "--json"]) == 2
    out, err = capsys.readouterr()
    verdict = json.loads(out)
    assert verdict["ok"] is False and "semantic_demand" in verdict["reason"] and err.count("\n") == 1


# ------------------------------------------------------------- the shared option parser
@pytest.mark.parametrize("text, expected", [("0", 0), (" 42 ", 42), ("+7", 7), ("0009", 9),
                                            (str(2**63 - 1), 2**63 - 1)])
def test_whole_accepts_whole_numbers_exactly(text, expected):
    assert opt.whole(text, "--n") == expected


@pytest.mark.parametrize("text, needle", [(B5000, "out of range"), ("-" + B5000, "out of range"),
                                          (str(2**63), str(2**63 - 1)), ("-1", "between 0"), ("1.0", "whole"),
                                          ("1e3", "whole"), ("", "whole"), ("inf", "whole"), ("x", "whole")],
                         ids=lambda v: v if len(v) < 30 else f"{len(v)}-chars")
def test_whole_refuses_without_converting_huge_text(text, needle):
    with pytest.raises(OptionError, match="--n") as err:
        opt.whole(text, "--n")
    assert needle in str(err.value) and len(str(err.value)) < 200


def test_whole_or_inf_takes_inf():
    assert opt.whole_or_inf("inf", "--lag") == float("inf") and opt.whole_or_inf("3", "--lag") == 3


@pytest.mark.parametrize("text, needle", [("1e-999999", "too small"), ("1e-31", "too small"),
                                          ("1e999999", "too large"), (B5000, "too large"), ("nan", "finite"),
                                          ("-inf", "finite"), ("", "not a number"), ("1/2", "not a number"),
                                          ("0.1234567890123456789012345678901", "significant digits")],
                         ids=lambda v: v if len(v) < 40 else f"{len(v)}-chars")
def test_decimal_refuses_extreme_values_by_their_size(text, needle):
    with pytest.raises(OptionError, match="--r") as err:
        opt.decimal(text, "--r", high=10**6)
    assert needle in str(err.value) and len(str(err.value)) < 200


def test_decimal_keeps_exact_values():
    assert opt.decimal("0.1", "--r") == Decimal("0.1") and opt.decimal("1e-30", "--r") == Decimal("1e-30")
    assert opt.decimal("0", "--r") == 0


def test_arithmetic_grid_counts_before_it_builds():
    # 10**36 points: refused by the count alone (building them would never finish)
    with pytest.raises(OptionError, match=r"at most 1,000,000"):
        opt.arithmetic_grid(Decimal("1e-30"), Decimal(10**6), Decimal("1e-30"), "grid", 10**6)
    with pytest.raises(OptionError, match=r"at most 100,000"):
        opt.arithmetic_grid(0, 2**62 - 1, 1, "caps", 100_000)
    assert opt.arithmetic_grid(Decimal("0.1"), Decimal("0.25"), Decimal("0.1"), "g", 10) == (Decimal("0.1"),
                                                                                            Decimal("0.2"))
    assert opt.arithmetic_grid(4, 16, 4, "c", 4) == (4, 8, 12, 16)


def test_grid_points_beyond_28_digits_are_exact():
    # decimal's default 28 digits would round the third point down to 1 and drop it
    grid = opt.arithmetic_grid(Decimal("0.9999999999999999999999999999"), Decimal("1.0000000000000000000000000001"),
                               Decimal("1e-28"), "g", 10)
    assert grid == (Decimal("0.9999999999999999999999999999"), Decimal(1), Decimal("1.0000000000000000000000000001"))


def test_long_words_in_error_lines_are_shortened(files, capsys):
    err = _refused(capsys, "dtr", "sweep", files["log"], "--grid", f"0.5:{B5000}:0.1", "--jobs", "1")
    assert len(err) < 400 and "characters" in err


# ------------------------------------------------------------- the adversary's battery
BAD_VALUES = [B5000, "-" + B5000, "1e999999", "nan", "inf", "-1", "", "x", str(2**64)]


def _numeric_options(f):
    """``(argv with {} where the bad value goes, values that are valid there)``."""
    log, req, att, g = f["log"], f["req"], f["att"], f["graph"]
    return [
        (["schedule", g, "--time-limit", "{}"], ()), (["schedule", g, "--seed", "{}"], ()),
        (["bound", g, "--time-limit", "{}"], ()),
        (["dtr", "replay", log, "--ratio", "{}"], ()),
        (["dtr", "replay", log, "--ratio", "0.5", "--overhead-limit", "{}"], (str(2**64),)),
        (["dtr", "sweep", log, "--grid", "0.5:1:{}", "--jobs", "1"], ()),
        (["dtr", "sweep", log, "--grid", "{}:1:0.1", "--jobs", "1"], ()),
        (["dtr", "sweep", log, "--grid", "0.5:{}:0.1", "--jobs", "1"], ()),
        (["dtr", "sweep", log, "--grid", "0.5:1:0.5", "--jobs", "{}"], ()),
        (["dtr", "sweep", log, "--grid", "0.5:1:0.5", "--jobs", "1", "--timeout", "{}"], ()),
        (["dtr", "sweep", log, "--grid", "0.5:1:0.5", "--jobs", "1", "--repeats", "{}"], ()),
        (["dtr", "explain", log, "--fail", "{}", "--pass", "1"], ()),
        (["dtr", "explain", log, "--fail", "0.5", "--pass", "1", "--singles", "{}"], ()),
        (["cache", "experts", req, "--capacity", "{}"], ()),
        (["cache", "experts", req, "--capacity", "2", "--policy", "lru-k", "--k", "{}"], ()),
        (["cache", "experts", req, "--capacity", "2", "--policy", "opt", "--time-limit", "{}"], ()),
        (["cache", "certify", req, "--envelope", "d={}"], ()),
        (["cache", "certify", req, "--envelope", "d=2", "--capacity", "{}"], ()),
        (["cache", "verify", req, req, "--time-limit", "{}"], ()),
        (["cache", "sweep", req, "--policies", "lru", "--capacities", "1:{}:1"], ()),
        (["cache", "sweep", req, "--policies", "lru", "--capacities", "1:3:{}"], ()),
        (["cache", "sweep", req, "--policies", "lru", "--capacities", "{},2"], ()),
        (["cache", "sweep", req, "--policies", "lru", "--capacities", "1:3:1", "--jobs", "{}"], ()),
        (["cache", "sweep", req, "--policies", "lru", "--capacities", "1:3:1", "--executor", "dask://h:{}"], ()),
        (["dtr", "sweep", log, "--grid", "0.5:1:0.5", "--executor", "dask://h:{}"], ()),
        (["cache", "sweep", att, "--policies", "rmm", "--budgets", "{}"], ()),
        (["cache", "sweep", att, "--policies", "rmm", "--budgets", "2", "--lags", "{}"], ("inf",)),
        (["cache", "sweep", att, "--policies", "rmm", "--budgets", "2", "--prefill", "{}"], ()),
        (["cache", "kv", att, "--policy", "h2o", "--budget", "{}"], ()),
        (["cache", "kv", att, "--policy", "h2o", "--budget", "{}%"], ()),
        (["cache", "kv", att, "--policy", "rmm", "--budget", "2", "--lag", "{}"], ("inf",)),
        (["cache", "kv", att, "--policy", "h2o", "--budget", "2", "--prefill", "{}"], ()),
        (["cache", "record-attention", "--text", g, "--tokens", "{}", "-o", str(f["dir"] / "o.jsonl"), "--tiny"], ()),
        (["cache", "kv-eval", "--text", g, "--tokens", "{}", "--policy", "h2o", "--budget", "2", "--tiny"], ()),
        (["onnx", "reorder", g, "-o", str(f["dir"] / "o.onnx"), "--time-limit", "{}"], ()),
    ]


def test_every_numeric_option_refuses_every_hostile_value(files, capsys):
    cases = 0
    for template, valid in _numeric_options(files):
        for value in BAD_VALUES:
            argv = [a.replace("{}", value) for a in template]
            code, out, err = _run(capsys, *argv)
            if value in valid:
                assert code in (0, 2), (argv[:4], err)
            else:
                assert code == 2, (argv[:4], value[:20], err)
                assert err.count("\n") == 1 and err.startswith("memopt: error: "), (argv[:4], err)
                assert len(err) < 600, err
            cases += 1
    assert cases == len(BAD_VALUES) * len(_numeric_options(files))


@pytest.mark.parametrize("out", ["/dev/full", "missing/x.json", ".", "INPUT"])
def test_every_output_option_refuses_an_unwritable_path(files, capsys, tmp_path, out):
    path = {"missing/x.json": str(tmp_path / "missing" / "x.json"), ".": str(tmp_path)}.get(out, out)
    g, req = files["graph"], files["req"]
    commands = [(g, ["schedule", g, "--time-limit", "1", "-o"]),
                (g, ["schedule", g, "--time-limit", "1", "--certificate"]),
                (req, ["cache", "certify", req, "--envelope", "d=2", "-o"]),
                (g, ["cache", "record-attention", "--text", g, "--tokens", "4", "--tiny", "-o"]),
                (g, ["onnx", "import", g, "-o"])]
    before = {p: Path(p).read_bytes() for p in (g, req)}
    for source, argv in commands:
        code, stdout, err = _run(capsys, *argv, path if out != "INPUT" else source)
        assert code == 2 and stdout == "", (argv, err)
        assert err.count("\n") == 1 and err.startswith("memopt: error: "), (argv, err)
    assert {p: Path(p).read_bytes() for p in (g, req)} == before


def _damaged(data: bytes):
    """Truncations, binary junk and a 5000-digit number in place of the first digit."""
    cuts = sorted({0, 1, len(data) // 3, len(data) // 2, max(len(data) - 2, 0)})
    yield from (data[:c] for c in cuts)
    yield b"\xff\xfe\x00garbage" + data[5:50]
    digit = next((i for i, ch in enumerate(data) if chr(ch).isdigit()), None)
    if digit is not None:
        yield data[:digit] + B5000.encode() + data[digit + 1:]


def test_every_reader_refuses_damaged_files_with_one_line(files, capsys, tmp_path):
    commands = {
        "graph": lambda p: [["schedule", p, "--time-limit", "1"], ["bound", p, "--time-limit", "1"],
                            ["verify", files["graph"], p, "--json"]],
        "log": lambda p: [["dtr", "replay", p, "--ratio", "0.5"],
                          ["dtr", "sweep", p, "--grid", "0.5:1:0.5", "--jobs", "1"]],
        "req": lambda p: [["cache", "experts", p, "--capacity", "2"],
                          ["cache", "sweep", p, "--policies", "lru", "--capacities", "1,2"],
                          ["cache", "certify", p, "--envelope", "d=2"]],
        "att": lambda p: [["cache", "kv", p, "--policy", "h2o", "--budget", "2"],
                          ["cache", "sweep", p, "--policies", "h2o", "--budgets", "2"]],
    }
    runs = 0
    for kind, make in commands.items():
        for n, data in enumerate(_damaged(Path(files[kind]).read_bytes())):
            path = tmp_path / f"{kind}-{n}"
            path.write_bytes(data)
            for argv in make(str(path)):
                code, out, err = _run(capsys, *argv)
                assert code in (0, 2), (argv, err)      # a damaged file may still be valid (a cut at a line end)
                assert code == 0 or (err.count("\n") == 1 and err.startswith("memopt: error: ")), (argv, err)
                runs += 1
    assert runs >= 4 * 7


def test_no_hostile_case_ends_in_an_internal_error_as_a_process(files):
    # a few as real processes: exit status, stderr and termination as a user sees them
    for argv in (["cache", "kv", files["att"], "--policy", "h2o", "--budget", B5000],
                 ["cache", "sweep", files["att"], "--policies", "rmm", "--budgets", "2", "--lags", B5000],
                 ["cache", "experts", files["req"], "--capacity", "2", "--per-layer"],
                 ["schedule", MLP, "--seed", B5000]):
        p = _proc(*argv)
        assert p.returncode == 2 and p.stdout == "", (argv[:3], p.stderr)
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("memopt: error: "), p.stderr
