"""KV-cache eviction: the memopt-attention format, every policy by hand and against its
reference's scoring rule (written in the reference's own form: re-select the kept set each
step), the RMM -> H2O reduction, the offline optimum against exhaustive search and against
every policy, and recording on a tiny random Llama through transformers."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memopt.cache.kv_optimum import kv_optimum
from memopt.cache.kv_policies import KV_POLICIES, arrivals, schedule_retained, simulate_kv
from memopt.cache.kv_trace import (dump_attention, load_attention, make_attention_trace,
                                   parse_attention)
from memopt.errors import FormatError, OptionError

# one head, scale 10; rows t = 0..4
ROWS = [[10], [7, 3], [5, 1, 4], [2, 6, 1, 1], [3, 1, 4, 1, 1]]


def hand_trace(correct=(True,) * 5):
    a = np.zeros((1, 1, 5, 5), dtype=np.int64)
    for t, r in enumerate(ROWS):
        a[0, 0, t, :t + 1] = r
    return make_attention_trace(a, list(correct), scale=10)


def random_trace(seed, T, L=1, H=1, hi=50, group=1):
    rng = np.random.default_rng(seed)
    a = np.tril(rng.integers(0, hi + 1, (L, H, T, T)))
    return make_attention_trace(a, rng.random(T) < 0.6, scale=hi, group=group)


traces = st.builds(random_trace, st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 2),
                   st.integers(1, 2))


# ---------------------------------------------------------------------------- by hand

def run(policy, B=2, **kw):
    r = simulate_kv(hand_trace(kw.pop("correct", (True,) * 5)), policy, B, **kw)
    return r.retained, r.last_step[0].tolist()


def test_total_by_hand():
    # decode-step attention to past positions: 7 + 6 + 9 + 9
    assert simulate_kv(hand_trace(), "lru", 2).total == 31
    assert simulate_kv(hand_trace(), "lru", 2, prefill=3).total == 18


def test_streaming_llm_by_hand():
    # sink {0} + the newest position: t2 evicts 1, t3 evicts 2; retained 7 + 6 + 3 + 4
    assert run("streaming-llm", sinks=1) == (20, [4, 2, 3, 4, 4])


def test_h2o_by_hand():
    # no recent window: after t2 scores 0:22, 1:4, 2:4 -> tie, the older (1) goes; after t3
    # 0:24, 2:5, 3:1 -> 3 goes; t4 sees {0, 2}: 3 + 4
    assert run("h2o", recent=0) == (23, [4, 2, 4, 3, 4])
    # recent window of one: the newest is protected -> 1 goes at t2, 2 at t3
    assert run("h2o", recent=1) == (20, [4, 2, 3, 4, 4])


def test_tova_by_hand():
    # current row decides, current token protected: t2 [5, 1 | 4] -> 1; t3 [2, 1 | 1] over {0, 2} -> 2
    assert run("tova") == (20, [4, 2, 3, 4, 4])


def test_snapkv_by_hand():
    # window 1 (the newest kept), kernel 3: t2 candidates [0, 1] vals [5, 1] pooled [6, 6] ->
    # tie, 0 goes; t3 candidates [1, 2] vals [6, 1] pooled [7, 7] -> 1 goes
    assert run("snapkv", window=1, kernel=3) == (25, [2, 3, 4, 4, 4])
    # kernel 1 is no pooling: the same as TOVA on one head
    assert run("snapkv", window=1, kernel=1) == run("tova")


def test_lru_by_hand():
    # used = at least the uniform share: t2 0 used, 1 not -> 1 goes; t3 0 used (2*3 >= 4), 2 not -> 2 goes
    assert run("lru") == (20, [4, 2, 3, 4, 4])


def test_rmm_by_hand():
    # uniform weights, lag 1, no recent window: after t2 the scores through row 3 are
    # 0:24, 1:10, 2:5 -> 2 goes; after t3 (rows <= 4) 0:27, 1:11, 3:2 -> 3 goes; 7+6+8+4
    assert run("rmm", lag=1, recent=0, weighting="uniform") == (25, [4, 4, 2, 3, 4])
    # demonstrated utility: steps 1 and 3 mispredicted, lag 0: scores 0:15, 1:1, 2:4 at t2
    assert run("rmm", lag=0, recent=0, correct=(True, False, True, False, True)) == (23, [4, 2, 4, 3, 4])
    # the optimum of this trace is 25: lag 1 reaches it
    assert kv_optimum(hand_trace(), 2).retained == 25


def test_prefill_compression_by_hand():
    # prefill 3: nothing evicted before the end of step 2, then 3 -> 2 at once
    r, last = run("h2o", recent=0, prefill=3)
    # after t2 scores 0:22, 1:4, 2:4: 1 goes; t3 retains 2+1; after t3 0:24, 2:5, 3:1 -> 3; t4: 3+4
    assert (r, last) == (10, [4, 2, 4, 3, 4])
    assert kv_optimum(hand_trace(), 2, prefill=3).retained >= r


# ---------------------------------------------------------------------------- references

def ref_run(trace, B, P, select):
    """Plain-Python replay in the references' form: after every step the kept set is
    *re-selected* from the whole cache (``select(t, cache) -> kept positions``)."""
    A = trace.heads()
    K, T = A.shape[0], trace.steps
    out, lasts = [], []
    for k in range(K):
        cache, ret, last = [], 0, [T - 1] * T
        for t in range(T):
            if t >= P:
                ret += sum(int(A[k, t, j]) for j in cache)
            cache.append(t)
            if t + 1 >= P and len(cache) > B and t < T - 1:
                keep = sorted(select(k, t, cache))
                assert len(keep) == B and set(keep) <= set(cache)
                for j in set(cache) - set(keep):
                    last[j] = t
                cache = keep
        out.append(ret)
        lasts.append(last)
    return out, lasts


def top(cands, score, n):
    """The n best by score; ties keep the newer position (the simulator evicts the older)."""
    return sorted(cands, key=lambda j: (score(j), j), reverse=True)[:n] if n > 0 else []


def check_against(trace, policy, B, P, select, **kw):
    r = simulate_kv(trace, policy, B, prefill=P, **kw)
    ret, last = ref_run(trace, B, P, select)
    assert r.per_head.tolist() == ret
    assert r.last_step.tolist() == last


@given(traces, st.integers(0, 6), st.integers(0, 4), st.integers(0, 9))
def test_streaming_llm_matches_start_recent_kv_cache(trace, B, sinks, P):
    # streaming_llm/kv_cache.py StartRecentKVCache: cache[:start_size] + cache[seq_len - recent_size:]
    P = min(P, trace.steps)
    s = min(sinks, B)
    check_against(trace, "streaming-llm", B, P,
                  lambda k, t, c: c[:s] + (c[len(c) - (B - s):] if B - s else []), sinks=sinks)


@given(traces, st.integers(0, 6), st.integers(0, 6), st.integers(0, 9))
def test_h2o_matches_h2o_kv_cache_layerwise(trace, B, recent, P):
    # h2o_hf/utils_real_drop/modify_llama.py: hh_score = attention summed over every query since
    # the position entered (prompt included); keep topk(hh_score[:seq_len - recent]) + recent
    P, r = min(P, trace.steps), min(recent, B)
    A = trace.heads()

    def select(k, t, c):
        def hh(j):   # positions in the cache have been in it since they arrived
            return sum(int(A[k, s, j]) for s in range(j, t + 1))
        recent_part = c[len(c) - r:] if r else []
        return top(c[:len(c) - r], hh, B - r) + recent_part
    check_against(trace, "h2o", B, P, select, recent=r)


@given(traces, st.integers(1, 6), st.integers(1, 6), st.sampled_from([1, 3, 5]), st.integers(0, 9))
def test_snapkv_matches_snapkv_cluster(trace, B, w, kernel, P):
    # snapkv/monkeypatch/snapkv_utils.py SnapKVCluster.update_kv: attention of the last
    # window_size queries summed over the window, avg_pool1d(kernel, padding=kernel//2, stride=1)
    # (zero padding counted), topk(capacity - window) + the window
    P, w = min(P, trace.steps), min(w, B)
    A = trace.heads()

    def select(k, t, c):
        cand = c[:len(c) - w]
        vals = [sum(int(A[k, s, j]) for s in range(max(0, t - w + 1), t + 1)) for j in cand]
        p = kernel // 2
        padded = [0] * p + vals + [0] * p
        pooled = [sum(padded[i:i + kernel]) / kernel for i in range(len(cand))]
        score = dict(zip(cand, pooled))
        return top(cand, score.get, B - w) + c[len(c) - w:]
    check_against(trace, "snapkv", B, P, select, window=w, kernel=kernel)


@given(traces, st.integers(1, 6), st.integers(0, 9))
def test_tova_matches_tova_press(trace, B, P):
    # kvpress/presses/tova_press.py: scores = attention of the last query averaged over the
    # layer's heads (the same for every head), the last token kept (padded with the max)
    P = min(P, trace.steps)
    A = trace.heads()
    H = trace.kv_heads

    def select(k, t, c):
        layer = k // H
        def sc(j):
            return sum(int(A[layer * H + h, t, j]) for h in range(H))
        return top(c[:-1], sc, B - 1) + [t]
    check_against(trace, "tova", B, P, select)


@given(traces, st.integers(0, 6), st.integers(0, 6), st.integers(0, 9))
def test_rmm_uniform_lag0_is_h2o(trace, B, recent, P):
    P, r = min(P, trace.steps), min(recent, B)
    h2o = simulate_kv(trace, "h2o", B, prefill=P, recent=r)
    rmm = simulate_kv(trace, "rmm", B, prefill=P, recent=r, lag=0, weighting="uniform")
    assert rmm.retained == h2o.retained
    assert np.array_equal(rmm.last_step, h2o.last_step)


@given(traces, st.integers(0, 6), st.sampled_from([0, 1, 2, 5, math.inf]), st.integers(0, 9))
def test_rmm_matches_lagged_utility(trace, B, lag, P):
    # the decision after step t ranks by sum_{s = j}^{t + lag} w_s a_s[j], w_s = correct[s]
    P = min(P, trace.steps)
    A = trace.heads()
    T = trace.steps
    r = B // 2

    def select(k, t, c):
        end = T - 1 if math.isinf(lag) else min(T - 1, t + lag)
        def u(j):
            return sum(int(A[k, s, j]) * bool(trace.correct[s]) for s in range(j, end + 1))
        return top(c[:len(c) - r], u, B - r) + (c[len(c) - r:] if r else [])
    check_against(trace, "rmm", B, P, select, lag=lag)


# ---------------------------------------------------------------------------- optimum

def brute_optimum(A, B, P):
    T = A.shape[0]
    arr = arrivals(T, P)
    best = 0
    for es in itertools.product(*[range(arr[j] - 1, T) for j in range(T)]):
        val = 0
        for t in range(P, T):
            held = [j for j in range(t) if arr[j] <= t <= es[j]]
            if len(held) > B:
                break
            val += sum(int(A[t, j]) for j in held)
        else:
            best = max(best, val)
    return best


@settings(max_examples=40)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(0, 4), st.integers(0, 6))
def test_optimum_equals_brute_force(seed, T, B, P):
    P = min(P, T)
    tr = random_trace(seed, T)
    opt = kv_optimum(tr, B, prefill=P)
    assert opt.retained == brute_optimum(tr.heads()[0], B, P)
    assert schedule_retained(tr, opt.last_step, B, P).tolist() == opt.per_head.tolist()


@given(st.builds(random_trace, st.integers(0, 2**32 - 1), st.integers(1, 24), st.integers(1, 2),
                 st.integers(1, 2)), st.integers(0, 12), st.integers(0, 24))
def test_optimum_dominates_every_policy(trace, B, P):
    P = min(P, trace.steps)
    opt = kv_optimum(trace, B, prefill=P)
    for policy in KV_POLICIES:
        kw = {"window": max(1, min(3, B))} if policy == "snapkv" else {}
        r = simulate_kv(trace, policy, B, prefill=P, **kw)
        assert (r.per_head <= opt.per_head).all(), policy
        assert r.total == opt.total
    full = simulate_kv(trace, "lru", trace.steps, prefill=P)
    assert full.retained == full.total == kv_optimum(trace, trace.steps, prefill=P).retained


def test_budget_errors():
    tr = hand_trace()
    with pytest.raises(OptionError):
        simulate_kv(tr, "h2o", -1)
    with pytest.raises(OptionError):
        simulate_kv(tr, "nope", 2)
    with pytest.raises(OptionError):
        simulate_kv(tr, "rmm", 2, lag=-1)
    with pytest.raises(OptionError):
        simulate_kv(tr, "snapkv", 2, window=3)
    with pytest.raises(OptionError):
        kv_optimum(tr, 1.5)
    assert simulate_kv(tr, "h2o", 0.4).budget == 2


# ---------------------------------------------------------------------------- format

def test_round_trip(tmp_path):
    tr = random_trace(7, 6, L=2, H=3, group=3)
    p = tmp_path / "a.jsonl"
    dump_attention(tr, p)
    back = load_attention(p)
    assert np.array_equal(back.attention, tr.attention)
    assert np.array_equal(back.correct, tr.correct) and back.group == 3 and back.scale == tr.scale


def lines_of(tr, tmp_path):
    p = tmp_path / "a.jsonl"
    dump_attention(tr, p)
    return p.read_text().splitlines()


@pytest.mark.parametrize("lineno, edit, needle", [
    (1, lambda r: r.update(version=2), "version"),
    (1, lambda r: r.update(format="x"), "not a memopt-attention"),
    (1, lambda r: r.update(extra=1), "unknown header field"),
    (1, lambda r: r.update(combine="mean"), "combine"),
    (3, lambda r: r.update(step=5), "expected step 1"),
    (3, lambda r: r.update(correct=1), "correct"),
    (4, lambda r: r["attention"][0][0].__setitem__(0, 1.5), "integers"),
    (4, lambda r: r["attention"][0][0].__setitem__(0, True), "integers"),
    (4, lambda r: r["attention"][0][0].__setitem__(0, -1), "lie in"),
    (4, lambda r: r["attention"][0][0].append(0), "expected 3 attention values"),
    (4, lambda r: r["attention"].pop(), "list of 1 layers"),
    (2, lambda r: r.update(token=-3), "token"),
    (2, lambda r: r.update(foo=0), "unknown field"),
])
def test_bad_lines_name_the_line(tmp_path, lineno, edit, needle):
    lines = lines_of(random_trace(3, 4), tmp_path)
    rec = json.loads(lines[lineno - 1])
    edit(rec)
    lines[lineno - 1] = json.dumps(rec)
    with pytest.raises(FormatError, match=rf"line {lineno}: .*{needle}"):
        parse_attention(lines, "t.jsonl")


def test_broken_files_name_the_line(tmp_path):
    lines = lines_of(random_trace(3, 4), tmp_path)
    with pytest.raises(FormatError, match="line 3: invalid JSON"):
        parse_attention(lines[:2] + [lines[2][:-5]] + lines[3:], "t.jsonl")
    with pytest.raises(FormatError, match="line 5: .*announces 4 steps.*truncated"):
        parse_attention(lines[:4], "t.jsonl")
    with pytest.raises(FormatError, match="line 3: empty line"):
        parse_attention(lines[:2] + [""] + lines[3:], "t.jsonl")
    with pytest.raises(FormatError, match="line 2: invalid JSON"):
        parse_attention(lines[:1] + [lines[1].replace("true", "NaN").replace("false", "NaN")] + lines[2:],
                        "t.jsonl")
    with pytest.raises(FormatError, match="empty file"):
        parse_attention([], "t.jsonl")


# ---------------------------------------------------------------------------- recording

class ByteTokenizer:
    def encode(self, text):
        return list(text.encode("utf-8"))




TEXT = "The quick brown fox jumps over the lazy dog; attention is all you need. " * 2


def test_attention_pass_rows_sum_to_one(tiny_llama):
    from memopt.cache.kv_record import attention_pass

    att, pred = attention_pass(tiny_llama, ByteTokenizer().encode(TEXT)[:40])
    assert att.shape == (2, 6, 40, 40) and pred.shape == (40,)
    assert np.allclose(att.sum(axis=-1), 1.0, atol=1e-5)
    assert np.abs(np.triu(att, 1)).max() == 0.0


def test_quantised_pass_needs_attention_weights(tiny_llama):
    # a fused kernel returns no weights: the layer-by-layer recorder says so instead of
    # writing zeros
    from memopt.cache.kv_record import quantised_attention_pass

    cfg = tiny_llama.config
    before = cfg._attn_implementation
    cfg._attn_implementation = "sdpa"
    try:
        with pytest.raises(OptionError, match="eager"):
            quantised_attention_pass(tiny_llama, ByteTokenizer().encode(TEXT)[:16])
    finally:
        cfg._attn_implementation = before
    q, pred, group = quantised_attention_pass(tiny_llama, ByteTokenizer().encode(TEXT)[:16])
    assert q.dtype == np.int32 and q.shape == (2, 2, 16, 16) and group == 3 and pred.shape == (16,)


def test_record_tiny_llama(tiny_llama, tmp_path):
    from memopt.cache.kv_record import attention_pass, record_attention

    tr = record_attention(tiny_llama, ByteTokenizer(), TEXT, 40, name="tiny")
    assert (tr.layers, tr.kv_heads, tr.steps, tr.group) == (2, 2, 40, 3)
    ids = ByteTokenizer().encode(TEXT)
    att, pred = attention_pass(tiny_llama, ids[:40])
    # GQA: query heads 3h .. 3h+2 share KV head h (transformers' repeat_kv); rounded, then summed
    q = np.rint(att * tr.scale).astype(np.int64)
    assert np.array_equal(tr.attention, np.tril(q.reshape(2, 2, 3, 40, 40).sum(axis=2)))
    rows = tr.attention.sum(axis=-1)
    t = np.arange(40)
    assert (np.abs(rows - 3 * tr.scale) <= 3 * (t + 1)).all()
    assert np.array_equal(tr.correct, pred == np.asarray(ids[1:41]))
    assert tr.tokens.tolist() == ids[:40]
    p = tmp_path / "tiny.jsonl"
    dump_attention(tr, p)
    back = load_attention(p)
    assert np.array_equal(back.attention, tr.attention)
    r = simulate_kv(back, "h2o", 8, prefill=4)
    assert r.retained <= kv_optimum(back, 8, prefill=4).retained
    with pytest.raises(OptionError, match="needs 1001"):
        record_attention(tiny_llama, ByteTokenizer(), TEXT, 1000)


def test_full_pass_reproduces_cached_decoding(tiny_llama):
    # the recording's premise: row t of one causal pass is step t of decoding with a KV cache
    import torch
    from transformers import DynamicCache

    from memopt.cache.kv_record import attention_pass

    ids = ByteTokenizer().encode(TEXT)[:24]
    full, _ = attention_pass(tiny_llama, ids)
    import inspect

    # transformers 5.x renames ``past_key_values`` to ``cache``; the DynamicCache fills in place
    arg = "cache" if "cache" in inspect.signature(tiny_llama.forward).parameters else "past_key_values"
    cache = DynamicCache()
    with torch.no_grad():
        for t, tok in enumerate(ids):
            out = tiny_llama(input_ids=torch.tensor([[tok]]), use_cache=True, output_attentions=True,
                             **{arg: cache})
            for layer, a in enumerate(out.attentions):
                assert np.allclose(a[0, :, 0, :].numpy(), full[layer, :, t, :t + 1], atol=1e-5)


# ---------------------------------------------------------------------------- per-layer budgets

@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 9), st.sampled_from(KV_POLICIES), st.data())
def test_per_layer_budgets_are_each_layer_alone(seed, T, policy, data):
    tr = random_trace(seed, T, L=2, H=2)
    b = [data.draw(st.integers(0, T)), data.draw(st.integers(0, T))]
    P = data.draw(st.integers(0, T))
    kw = {"window": 1} if policy == "snapkv" else {"lag": 2} if policy == "rmm" else {}
    r = simulate_kv(tr, policy, b, prefill=P, **kw)
    assert r.budget == b
    for layer in range(2):
        alone = make_attention_trace(tr.attention[layer:layer + 1], tr.correct, scale=tr.scale)
        s = simulate_kv(alone, policy, b[layer], prefill=P, **kw)
        assert np.array_equal(r.last_step[2 * layer:2 * layer + 2], s.last_step)
    same = simulate_kv(tr, policy, [b[0], b[0]], prefill=P, **kw)
    assert np.array_equal(same.last_step, simulate_kv(tr, policy, b[0], prefill=P, **kw).last_step)


@settings(max_examples=40, deadline=None)
@given(traces, st.sampled_from(KV_POLICIES), st.data())
def test_layer_sharing_with_one_kv_head_is_per_head(trace, policy, data):
    if trace.kv_heads != 1:
        trace = make_attention_trace(trace.attention[:, :1], trace.correct, scale=trace.scale)
    B = data.draw(st.integers(1, max(1, trace.steps)))
    P = data.draw(st.integers(0, trace.steps))
    a = simulate_kv(trace, policy, B, prefill=P)
    b = simulate_kv(trace, policy, B, prefill=P, share="layer")
    assert np.array_equal(a.last_step, b.last_step) and a.retained == b.retained
    assert b.params["share"] == "layer"


def test_layer_sharing_lets_a_head_borrow_by_hand():
    # h2o, recent 0, 2 positions per head = 4 per layer; at step 2 the layer holds 6, evicts the
    # two smallest accumulated scores over both heads: head 0's positions 1 (5) and 2 (6) --
    # head 1 (scores 8, 8, 8) keeps 3 positions, more than its per-head share
    a = np.zeros((1, 2, 4, 4), dtype=np.int64)
    for h, rows in enumerate([[[8], [4, 4], [1, 1, 6], [2, 2, 2, 2]], [[8], [0, 8], [0, 0, 8], [2, 2, 2, 2]]]):
        for t, row in enumerate(rows):
            a[0, h, t, :t + 1] = row
    tr = make_attention_trace(a, [True] * 4, scale=8)
    shared = simulate_kv(tr, "h2o", 2, recent=0, share="layer")
    assert shared.last_step.tolist() == [[3, 2, 2, 3], [3, 3, 3, 3]]
    assert shared.per_head.tolist() == [4 + 2 + 2, 6]
    per_head = simulate_kv(tr, "h2o", 2, recent=0)
    assert per_head.last_step.tolist() == [[3, 2, 3, 3], [2, 3, 3, 3]]
    # the per-head checker rejects the shared schedule; the layer checker accepts it
    from memopt.errors import InternalError

    with pytest.raises(InternalError, match="budget"):
        schedule_retained(tr, shared.last_step, 2, 0)
    assert schedule_retained(tr, shared.last_step, 2, 0, share="layer").tolist() == [8, 6]


def test_per_layer_budget_errors():
    tr = random_trace(0, 6, L=2)
    with pytest.raises(OptionError, match="2 values"):
        simulate_kv(tr, "h2o", [1, 2, 3])
    with pytest.raises(OptionError, match="budget of layer 1"):
        simulate_kv(tr, "h2o", [1, -1])
    with pytest.raises(OptionError, match="sharing"):
        simulate_kv(tr, "h2o", 2, share="model")


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.sampled_from(["rmm", "h2o", *sorted(KV_POLICIES)]), st.data())
def test_a_block_of_rows_is_observed_as_row_by_row(seed, T, policy, data):
    """KVPolicy.observe_block (the prefill presses' fast path) leaves the policy in the state
    observe row by row leaves it in, and returns the same evictions, for any block, policy,
    prefill, lag and weighting (it sums the block only where that is the same)."""
    from memopt.cache.kv_policies import KVPolicy

    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 3))
    rows = rng.integers(0, 50, size=(K, T, T)).astype(np.int64)   # entries past each row's step are noise
    correct = rng.random(T) < 0.7
    B = data.draw(st.integers(1, T))
    # a prefill press's case (prefill T, the block up to the last rows) half the time
    kw = dict(steps=T, layers=1, kv_heads=K, budget=B, prefill=data.draw(st.one_of(st.just(T), st.integers(0, T))))
    lag = 0
    if policy == "rmm":
        lag = data.draw(st.integers(0, 3))
        kw.update(lag=lag, weighting=data.draw(st.sampled_from(["correct", "uniform"])))
    if policy == "snapkv":
        kw.update(window=min(B, 2))
    one, block = KVPolicy(policy, **kw), KVPolicy(policy, **kw)
    cut = data.draw(st.one_of(st.just(max(0, min(T, kw["prefill"] + lag - 1))), st.integers(0, T)))
    got_one = [one.observe(rows[:, t, :t + 1], bool(correct[t])) for t in range(T)]
    got_block = [block.observe_block(rows[:, :cut, :], correct[:cut])]
    got_block += [block.observe(rows[:, t, :t + 1], bool(correct[t])) for t in range(cut, T)]
    flat = lambda calls: [(d, h.tolist(), p.tolist()) for call in calls for d, h, p in call]  # noqa: E731
    assert flat(got_one) + flat([one.finish()]) == flat(got_block) + flat([block.finish()])
    assert np.array_equal(one.last_step, block.last_step) and np.array_equal(one.cached, block.cached)
    if policy in ("h2o", "rmm"):
        assert np.array_equal(one.score, block.score)
