"""The table's fast paths, on a tiny random Llama (no download): one shared prefill for many
presses (``compress_many``) keeps and answers exactly what kvpress's pipeline does with each
press alone, the pipeline's own cache tells what a press kept, and the torch quantisation of
the presses equals the recorder's numpy one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _kvpress_env import require_kvpress

torch, transformers, kvpress = require_kvpress()

from kvpress import (KnormPress, KVPressTextGenerationPipeline, ObservedAttentionPress,  # noqa: E402
                     SnapKVPress, StreamingLLMPress, TOVAPress)
from transformers import DynamicCache  # noqa: E402

from memopt.cache.kv_record import quantise_heads  # noqa: E402
from memopt.cache import kvpress as memopt_kvpress  # noqa: E402
from memopt.cache.kvpress import (OraclePress, PolicyPress, _int_attention, _predictions_correct,  # noqa: E402
                                  _span_pass, answer_on_cache, compress_many, continuation_attention,
                                  kept_in_cache, kept_positions, tiny_model)
from memopt.errors import OptionError  # noqa: E402

CONTEXT = "The key for apple is 42. The key for pear is 17. Remember them well. " * 2
QUESTION = "What is the key for pear?"


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_model(layers=2, heads=4, kv_heads=2, hidden=32)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok)
    enc = pipe.preprocess(CONTEXT, questions=[QUESTION], answer_prefix="", max_context_length=10**9)
    cont = enc["questions_ids"][0][0].tolist()
    return model, pipe, enc, cont


def presses(ratio, cont):
    return {"snapkv": SnapKVPress(ratio, window_size=8), "streaming": StreamingLLMPress(ratio),
            "tova": TOVAPress(ratio), "observed": ObservedAttentionPress(ratio), "knorm": KnormPress(ratio),
            "rmm4": PolicyPress(ratio, policy="rmm", options={"lag": 4, "weighting": "correct"}),
            "h2o": PolicyPress(ratio, policy="h2o"), "oracle": OraclePress(ratio, continuation=cont)}


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0.25, 0.75])
def test_one_shared_prefill_keeps_and_answers_what_the_pipeline_does(tiny, ratio):
    model, pipe, enc, cont = tiny
    ids = enc["context_ids"]
    n = ids.shape[1]
    full, caches, seconds = compress_many(model, ids, presses(ratio, cont))
    assert set(seconds) == set(caches) and all(s >= 0 for s in seconds.values())
    for label, press in presses(ratio, cont).items():
        alone = DynamicCache()
        want = pipe(CONTEXT, question=QUESTION, press=press, max_new_tokens=5, cache=alone)["answer"]
        kept = kept_in_cache(full, caches[label])
        assert (kept == kept_in_cache(full, alone)).all(), label
        assert (kept.sum(axis=2) == max(1, int(n * (1 - ratio)))).all(), label
        for li in range(len(alone.layers)):      # the same tensors, in the same order
            assert torch.equal(caches[label].layers[li].keys, alone.layers[li].keys), label
        got = pipe.generate_answer(enc["questions_ids"][0], caches[label], n, 5)
        assert got == want, label


def test_the_pipelines_own_cache_tells_what_a_press_kept(tiny):
    model, pipe, enc, cont = tiny
    ids = enc["context_ids"][0].tolist()
    full, mine = DynamicCache(), DynamicCache()
    pipe(CONTEXT, question=QUESTION, max_new_tokens=3, cache=full)
    press = PolicyPress(0.5, policy="rmm", options={"lag": 4})
    pipe(CONTEXT, question=QUESTION, press=press, max_new_tokens=3, cache=mine)
    assert (kept_in_cache(full, mine) == kept_positions(model, ids, press)).all()


def test_the_continuation_pass_predicts_what_a_pass_over_the_context_alone_does(tiny):
    model, _, enc, cont = tiny
    ids = enc["context_ids"]
    n = ids.shape[1]
    with torch.no_grad():
        alone = model(input_ids=ids, use_cache=False).logits[0].argmax(-1).numpy()
    (future,), pred = _span_pass(model, ids[0].tolist() + cont, [(n, n + len(cont))], predict=n)
    assert pred.shape == (n,) and (pred == alone).all()
    assert future.shape[2] == n and (_span_pass(model, ids[0].tolist() + cont, [(n, n + 1)])[1] is None)
    # continuation_attention leaves the predictions for rmm's weighting: no pass of its own
    memopt_kvpress._PREDICTIONS.__init__()
    memopt_kvpress._FUTURE.__init__()
    continuation_attention(model, ids[0].tolist(), cont)
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        correct = _predictions_correct(model, ids)
    finally:
        handle.remove()
    tok = ids[0].numpy()
    assert not calls and (correct == np.append(alone[:-1] == tok[1:], True)).all()


def test_answer_on_cache_answers_as_the_pipeline_and_restores_the_cache(tiny):
    model, pipe, enc, _ = tiny
    ids, q_ids = enc["context_ids"], enc["questions_ids"][0]
    n = ids.shape[1]
    full, _, _ = compress_many(model, ids, {})
    before = [layer.keys.clone() for layer in full.layers]
    want = pipe(CONTEXT, question=QUESTION, max_new_tokens=5)["answer"]
    assert answer_on_cache(pipe, full, q_ids, n, 5) == want
    assert all(torch.equal(layer.keys, k) for layer, k in zip(full.layers, before))
    assert answer_on_cache(pipe, full, q_ids, n, 5) == want


def test_compress_many_refuses_a_decoding_press(tiny):
    model, _, enc, _ = tiny
    press = kvpress.DecodingPress(base_press=KnormPress(), compression_interval=2, target_size=8)
    with pytest.raises(OptionError, match="prefill presses"):
        compress_many(model, enc["context_ids"], {"knorm-decoding": press})


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 6), st.integers(0, 2**31 - 1),
       st.sampled_from([2**10, 2**24, 10**6]))
def test_the_torch_quantisation_equals_the_recorders(kv, group, q, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    att = torch.rand((1, kv * group, q, q + 1), generator=gen, dtype=torch.float32)
    att[0, 0, 0, 0] = 0.5 / scale                     # a half unit: round half to even
    att[0, -1, -1, -1] = 1.0
    want = quantise_heads(att.numpy(), kv, scale)[0]
    got = _int_attention(att, kv, scale)
    assert got.dtype == np.int64 and (got == want).all()
