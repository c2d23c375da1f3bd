"""memopt's KV policies and offline optimum as KVPress presses, on a tiny random Llama (no
download): the presses run in kvpress's own pipeline beside kvpress's presses, the prefill press
keeps what the trace replay keeps, the oracle press retains at least as much of the
continuation's attention as any press at the same ratio, and fixed-lag commit at lag 0 with
uniform weights keeps exactly what H2O keeps."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memopt.cache.kvpress import keep_top

from _kvpress_env import require_kvpress

torch, transformers, kvpress = require_kvpress()

from kvpress import (DecodingPress, KnormPress, KVPressTextGenerationPipeline,  # noqa: E402
                     ObservedAttentionPress, PrefillDecodingPress, SnapKVPress, StreamingLLMPress,
                     TOVAPress)

from memopt.cache.kv_policies import simulate_kv  # noqa: E402
from memopt.cache.kv_record import quantised_attention_pass  # noqa: E402
from memopt.cache.kv_trace import make_attention_trace  # noqa: E402
from memopt.cache.kvpress import (OracleDecodingPress, OraclePress, PolicyDecodingPress,  # noqa: E402
                                  PolicyPress, continuation_attention, kept_positions,
                                  retained_attention, tiny_model)

CONTEXT = "The key for apple is 42. The key for pear is 17. Remember them well. " * 2
QUESTION = "What is the key for pear?"
RATIOS = (0.25, 0.5, 0.75)


@pytest.fixture(scope="module")
def tiny():
    """A 2-layer Llama with GQA (4 query heads on 2 KV heads), random weights, eager attention,
    and a character tokenizer built locally."""
    model, tok = tiny_model(layers=2, heads=4, kv_heads=2, hidden=32)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok)
    ids = tok.encode(tok.bos_token + CONTEXT, add_special_tokens=False)     # what the pipeline prefills
    cont = tok.encode(QUESTION + "\n", add_special_tokens=False)
    return model, tok, pipe, ids, cont


def kvpress_presses(ratio):
    return [SnapKVPress(ratio, window_size=8), StreamingLLMPress(ratio), TOVAPress(ratio),
            ObservedAttentionPress(ratio), KnormPress(ratio)]


def memopt_presses(ratio):
    return [PolicyPress(ratio, policy="rmm", options={"lag": lag, "weighting": w})
            for lag in (0, 4, 16) for w in ("uniform", "correct")] + [PolicyPress(ratio, policy="h2o")]


def test_importing_the_module_imports_neither_kvpress_nor_torch():
    code = "import sys, memopt.cache.kvpress; print('kvpress' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@given(st.lists(st.integers(0, 3), min_size=1, max_size=9), st.data())
def test_keep_top_keeps_the_largest_and_the_newest_of_ties(key, data):
    n_kept = data.draw(st.integers(0, len(key)))
    want = sorted(sorted(range(len(key)), key=lambda j: (-key[j], -j))[:n_kept])
    assert keep_top(np.array([key]), n_kept).tolist() == [want]


@pytest.mark.slow
def test_every_press_runs_in_the_kvpress_pipeline(tiny):
    model, tok, pipe, ids, cont = tiny
    later = cont + tok.encode("abcdef", add_special_tokens=False)
    presses = kvpress_presses(0.5) + memopt_presses(0.5) + [
        OraclePress(0.5, continuation=cont),
        DecodingPress(base_press=KnormPress(), compression_interval=4, target_size=40),
        PolicyDecodingPress(base_press=PolicyPress(policy="h2o"), target_size=40),
        PrefillDecodingPress(decoding_press=PolicyDecodingPress(base_press=PolicyPress(policy="rmm", options={"lag": 2}),
                                                                target_size=40)),
        PrefillDecodingPress(decoding_press=OracleDecodingPress(continuation=later, target_size=40)),
    ]
    for press in presses:
        out = pipe(CONTEXT, question=QUESTION, press=press, max_new_tokens=4)
        assert isinstance(out["answer"], str), press


@pytest.mark.parametrize("ratio", RATIOS)
def test_every_prefill_press_keeps_n_kept_per_head(tiny, ratio):
    model, _, _, ids, cont = tiny
    n_kept = max(1, int(len(ids) * (1 - ratio)))
    for press in kvpress_presses(ratio) + memopt_presses(ratio) + [OraclePress(ratio, continuation=cont)]:
        assert (kept_positions(model, ids, press).sum(axis=2) == n_kept).all(), press


@pytest.mark.parametrize("policy,options", [("h2o", {}), ("rmm", {"lag": 0, "weighting": "uniform"}),
                                            ("rmm", {"lag": 3, "weighting": "uniform"}),
                                            ("rmm", {"lag": 2, "weighting": "correct"}), ("snapkv", {"window": 4}),
                                            ("tova", {}), ("streaming-llm", {})])
def test_the_prefill_press_keeps_what_the_trace_replay_keeps(tiny, policy, options):
    """The press, driven by the pipeline's prefill, against ``simulate_kv`` on a trace recorded
    independently (one full pass without a cache)."""
    model, _, _, ids, _ = tiny
    n, ratio = len(ids), 0.5
    n_kept = int(n * 0.5)
    lag = options.get("lag", 0)
    A, pred, group = quantised_attention_pass(model, ids)
    # the model's own predictions on the context; the last row (its next token unseen) counts
    correct = np.append(pred[:-1] == np.asarray(ids[1:]), [True, True])
    # a trace of n + 1 steps whose prompt is the context (minus the staged H), budget n_kept - H
    pad = np.zeros(A.shape[:2] + (n + 1, n + 1), dtype=np.int64)
    pad[:, :, :n, :n] = A
    pad[:, :, n, n] = 1
    tr = make_attention_trace(pad, correct, scale=2**24, group=group)
    assert 0 < correct[:n].sum() < n or options.get("weighting") != "correct"
    res = simulate_kv(tr, policy, n_kept - lag, prefill=n - lag, **options)
    # kept = not evicted by the decision at the end of the prompt (later ones follow row n)
    want = (res.last_step[:, :n] > n - lag - 1).reshape(A.shape[0], A.shape[1], n)
    got = kept_positions(model, ids, PolicyPress(ratio, policy=policy, options=options))
    assert (got == want).all()


@pytest.mark.parametrize("ratio", RATIOS)
def test_the_oracle_press_retains_at_least_every_press(tiny, ratio):
    model, _, _, ids, cont = tiny
    future = continuation_attention(model, ids, cont)
    oracle = kept_positions(model, ids, OraclePress(ratio, continuation=cont))
    best, total = retained_attention(oracle, future)
    assert 0 < best < total
    gaps = []
    for press in kvpress_presses(ratio) + memopt_presses(ratio):
        kept = kept_positions(model, ids, press)
        got, tot = retained_attention(kept, future)
        assert tot == total and got <= best, press
        # per (layer, head) too: the oracle's choice is optimal head by head
        assert ((oracle * future).sum(axis=2) >= (kept * future).sum(axis=2)).all(), press
        gaps.append(best - got)
    assert max(gaps) > 0          # the presses are not all optimal on this context


@pytest.mark.parametrize("ratio", RATIOS)
def test_rmm_at_lag_0_with_uniform_weights_is_h2o(tiny, ratio):
    model, _, pipe, ids, _ = tiny
    rmm = PolicyPress(ratio, policy="rmm", options={"lag": 0, "weighting": "uniform"})
    h2o = PolicyPress(ratio, policy="h2o")
    assert (kept_positions(model, ids, rmm) == kept_positions(model, ids, h2o)).all()
    a = pipe(CONTEXT, question=QUESTION, press=rmm, max_new_tokens=6)
    b = pipe(CONTEXT, question=QUESTION, press=h2o, max_new_tokens=6)
    assert a == b
    # and the H2O-style press is not kvpress's ObservedAttentionPress (mean, no recent window)
    observed = kept_positions(model, ids, ObservedAttentionPress(ratio))
    assert (observed != kept_positions(model, ids, h2o)).any()


def test_rmm_with_a_lag_stages_the_last_positions_inside_n_kept(tiny):
    model, _, _, ids, _ = tiny
    n = len(ids)
    for lag in (4, 16):
        kept = kept_positions(model, ids, PolicyPress(0.75, policy="rmm", options={"lag": lag, "weighting": "uniform"}))
        assert kept[:, :, n - lag:].all()
        assert (kept.sum(axis=2) == int(n * 0.25)).all()
    # a budget under twice the lag (a short context or turn): half the budget is staged, the
    # other half decided (a buffer filling the budget would keep only the last 10 positions)
    short = ids[:40]
    kept = kept_positions(model, short, PolicyPress(0.75, policy="rmm", options={"lag": 16, "weighting": "uniform"}))
    assert (kept.sum(axis=2) == 10).all() and kept[:, :, 35:].all()
    assert kept[:, :, :30].any(axis=2).all()


@pytest.mark.parametrize("policy,options,extra", [("h2o", {}, 0), ("rmm", {"lag": 2, "weighting": "uniform"}, 2),
                                                  ("tova", {}, 0)])
def test_the_decoding_press_holds_the_budget_at_every_step(tiny, policy, options, extra):
    model, _, pipe, ids, _ = tiny
    press = PolicyDecodingPress(base_press=PolicyPress(policy=policy, options=options), target_size=24)
    seen = []
    orig = press.forward_hook

    def spy(module, inp, kwargs, output):
        out = orig(module, inp, kwargs, output)
        seen.append(kwargs["past_key_values"].layers[module.layer_idx].keys.shape[2])
        return out

    press.forward_hook = spy
    pipe(CONTEXT, question=QUESTION, press=PrefillDecodingPress(decoding_press=press), max_new_tokens=6)
    # after every forward pass (one per layer): the budget plus rmm's undecided positions; the
    # context is compressed at the end of the prefill, except that rmm's decision about the
    # prompt waits for H more rows (the question's)
    layers = model.config.num_hidden_layers
    assert len(seen) > layers and max(seen[layers:]) == 24 + extra
    assert max(seen[:layers]) == (24 if extra == 0 else len(ids))
    assert press.peak_held == max(seen)


def test_the_oracle_decoding_press_replays_the_offline_optimum(tiny):
    model, tok, pipe, ids, cont = tiny
    later = cont + tok.encode("xyzxyz", add_special_tokens=False)
    press = OracleDecodingPress(continuation=later, target_size=20)
    pipe(CONTEXT, question=QUESTION, press=PrefillDecodingPress(decoding_press=press), max_new_tokens=4)
    assert press.peak_held == 20


def test_the_decoding_press_tracks_which_position_each_cache_slot_holds(tiny):
    """Context keys never change: after every step, each slot the press maps to a context
    position holds that position's key of the full prefill."""
    from transformers import DynamicCache

    model, _, pipe, ids, _ = tiny
    full = DynamicCache()
    with torch.no_grad():
        model.model(input_ids=torch.tensor([ids]), past_key_values=full)
    press = PolicyDecodingPress(base_press=PolicyPress(policy="rmm", options={"lag": 1, "weighting": "uniform"}),
                                target_size=16)
    orig, checked = press.forward_hook, []

    def spy(module, inp, kwargs, output):
        out = orig(module, inp, kwargs, output)
        li = module.layer_idx
        keys = kwargs["past_key_values"].layers[li].keys[0]
        pos = press._state[li][1]
        assert pos.shape == keys.shape[:2]
        for h in range(pos.shape[0]):
            ctx = pos[h] < len(ids)
            assert torch.equal(keys[h][torch.as_tensor(ctx)], full.layers[li].keys[0, h][torch.as_tensor(pos[h][ctx])])
        checked.append(int(pos.shape[1]))
        return out

    press.forward_hook = spy
    pipe(CONTEXT, question=QUESTION, press=PrefillDecodingPress(decoding_press=press), max_new_tokens=5)
    assert len(checked) > 2 * model.config.num_hidden_layers and min(checked) < len(ids)
