"""A conversation streamed through a prefill press (``PressedStream``), on a tiny random Llama
(no download): the first chunk keeps what kvpress's pipeline keeps, every later chunk
compresses the carried cache to the budget, the slots name the positions they hold, the full
stream equals one prefill of the whole conversation, an answer leaves the cache as it was, and
the stream's oracle retains at least as much of the question turns' attention as any press."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _kvpress_env import require_kvpress

torch, transformers, kvpress = require_kvpress()

from kvpress import (KnormPress, KVPressTextGenerationPipeline, ObservedAttentionPress,  # noqa: E402
                     SnapKVPress, StreamingLLMPress, TOVAPress)
from transformers import DynamicCache  # noqa: E402

from memopt.cache.kvpress import (PolicyPress, PressedStream, StreamOracle, kept_positions,  # noqa: E402
                                  retained_attention, span_attention, tiny_model)

TURNS = ["User: my dog is Rex. ", "Assistant: noted, Rex. ", "User: the sky is blue today. ",
         "Assistant: it is. ", "User: what is my dog? "]


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_model(layers=2, heads=4, kv_heads=2, hidden=32)
    pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok)
    chunks = [tok.encode(t, add_special_tokens=False) for t in TURNS]
    return model, tok, pipe, chunks


def presses():
    return {"snapkv": lambda r: SnapKVPress(r, window_size=4), "streaming": StreamingLLMPress,
            "tova": TOVAPress, "observed": ObservedAttentionPress, "knorm": KnormPress,
            "rmm4": lambda r: PolicyPress(r, policy="rmm", options={"lag": 4, "weighting": "correct"}),
            "h2o": lambda r: PolicyPress(r, policy="h2o")}


@pytest.mark.parametrize("label", sorted(presses()))
def test_the_first_chunk_keeps_what_the_pipeline_keeps(tiny, label):
    model, _, _, chunks = tiny
    ids = chunks[0] + chunks[1]
    ratio = 0.5
    n_kept = max(1, int(len(ids) * (1 - ratio)))
    stream = PressedStream(model, presses()[label](0.0))
    stream.feed(torch.tensor([ids]), n_kept=n_kept)
    assert (stream.kept() == kept_positions(model, ids, presses()[label](ratio))).all()


@settings(max_examples=5, deadline=None)
@given(label=st.sampled_from(sorted(presses())), keep=st.floats(0.2, 0.9))
def test_every_chunk_compresses_the_carried_cache_to_the_budget(tiny, label, keep):
    model, _, _, chunks = tiny
    stream = PressedStream(model, presses()[label](0.0))
    for ids in chunks:
        n_kept = max(1, int((stream.position + len(ids)) * keep))
        before = stream.cache.get_seq_length()
        stream.feed(torch.tensor([ids]), n_kept=n_kept)
        want = min(n_kept, before + len(ids))
        kept = stream.kept()
        assert (kept.sum(axis=2) == want).all(), label
        assert stream.cache.get_seq_length() == want
        # the slots hold distinct positions, in cache order as the press left them
        for pos in stream.slots:
            assert all(len(set(row.tolist())) == want for row in pos)
            assert pos.max() < stream.position


def test_the_full_stream_is_one_prefill_of_the_conversation(tiny):
    model, _, _, chunks = tiny
    stream = PressedStream(model)
    for ids in chunks:
        stream.feed(torch.tensor([ids]))
    whole = DynamicCache()
    with torch.no_grad():
        model.model(input_ids=torch.tensor([sum(chunks, [])]), past_key_values=whole)
    assert stream.kept().all()
    for li in range(len(whole.layers)):
        assert torch.allclose(stream.cache.layers[li].keys, whole.layers[li].keys, atol=1e-5)


def test_an_answer_leaves_the_cache_as_it_was(tiny):
    model, tok, pipe, chunks = tiny
    stream = PressedStream(model, PolicyPress(0.0, policy="h2o"))
    for ids in chunks[:-1]:
        stream.feed(torch.tensor([ids]), n_kept=12)
    keys = [layer.keys.clone() for layer in stream.cache.layers]
    out = stream.answer(pipe, torch.tensor([chunks[-1]]), 4)
    assert isinstance(out, str)
    assert all(torch.equal(a, layer.keys) for a, layer in zip(keys, stream.cache.layers))
    assert stream.position == sum(len(c) for c in chunks[:-1])


# the conversation of the oracle test: questions after turns 2, 4 and 5 (their whole turn scored)
ASKED = (2, 4, 5)


def _stream_retained(model, chunks, press, budgets) -> int:
    """The question turns' full-cache attention on what the stream kept before each, summed."""
    starts = [sum(len(c) for c in chunks[:k]) for k in range(len(chunks) + 1)]
    future = span_attention(model, sum(chunks, []), [(starts[k], starts[k + 1]) for k in ASKED])
    stream, got = PressedStream(model, press), 0
    for k, ids in enumerate(chunks):
        if k in ASKED:
            got += retained_attention(stream.kept(), future[ASKED.index(k)])[0]
        stream.feed(torch.tensor([ids]), n_kept=budgets[k])
    return got


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_the_stream_oracle_retains_at_least_every_press(tiny, ratio):
    model, tok, _, chunks = tiny
    chunks = chunks + [tok.encode("Assistant: Rex. User: and the sky? ", add_special_tokens=False)]
    starts = [sum(len(c) for c in chunks[:k]) for k in range(len(chunks) + 1)]
    budgets = [max(1, int((1 - ratio) * starts[k + 1])) for k in range(len(chunks))]
    future = span_attention(model, sum(chunks, []), [(starts[k], starts[k + 1]) for k in ASKED])
    oracle = StreamOracle(starts[1:], budgets, {k - 1: f for k, f in zip(ASKED, future)})
    assert oracle.retained == oracle.bound
    # what the stream measures on the oracle's cache is the optimum it computed
    assert _stream_retained(model, chunks, oracle, budgets) == oracle.retained
    for label, make in sorted(presses().items()):
        got = _stream_retained(model, chunks, make(0.0), budgets)
        assert got <= oracle.retained, label


# --- SnapKV's observation window in the benchmark's stream --------------------------------------

def _benchmark():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kvpress_table.py"
    spec = importlib.util.spec_from_file_location("kvpress_table", path)
    kt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kt)
    return kt


def test_a_snapkv_window_as_large_as_the_budget_keeps_only_the_window(tiny):
    """SnapKV keeps its window unconditionally: a first chunk compressed to its window's size
    loses every earlier position, position 0 (the attention sink) included, for good."""
    model, _, _, chunks = tiny
    ids = chunks[0]
    n_kept = len(ids) // 2
    stream = PressedStream(model, SnapKVPress(0.0, window_size=n_kept))
    stream.feed(torch.tensor([ids]), n_kept=n_kept)
    kept = stream.kept()
    assert kept[:, :, len(ids) - n_kept:].all() and not kept[:, :, :len(ids) - n_kept].any()


def test_the_benchmark_leaves_snapkv_half_of_every_turns_budget_to_score(tmp_path, monkeypatch):
    kt = _benchmark()
    real, seen = PressedStream.feed, []

    def spy(self, ids, n_kept=None):
        window = getattr(self.press, "window_size", None)
        real(self, ids, n_kept)
        if window is not None and n_kept is not None:
            seen.append((getattr(self.press, "window_size"), n_kept, int(ids.shape[1]), self.kept()))
    monkeypatch.setattr(PressedStream, "feed", spy)
    out = tmp_path / "snap.json"
    assert kt.main(["--tiny", "--stream", "--tasks", "", "--tokens", "1200", "--ratios", "0.5,0.75",
                    "--presses", "snapkv", "--samples", "1", "--keep-all", "--json", str(out)]) == 0
    assert seen
    for window, n_kept, q, kept in seen:
        assert 1 <= window <= max(1, n_kept // 2) and window <= max(1, q // 2)
        # at least half the budget is chosen by score, not by the window
        position = kept.shape[2]
        assert (kept[:, :, :position - window].sum(axis=2) >= n_kept - window).all()
