"""KV policies evaluated inside a real (tiny, randomly initialised) Llama through transformers:
the masked attention against per-head gathering, a budget that evicts nothing against the full
cache, masked decoding against explicit cache surgery, the closed loop against the trace replay
where they must agree, and the RMM -> H2O reduction in the model."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memopt.cache.kv_eval import KVSetting, evaluate_kv, masked_attention  # noqa: E402
from memopt.cache.kv_policies import KV_POLICIES, simulate_kv  # noqa: E402
from memopt.errors import OptionError  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog; attention is all you need. " * 2
IDS = list(TEXT.encode("utf-8"))[:41]        # 40 steps, each scored on the next byte
T = 40




def cache_kw(model):
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


# ---------------------------------------------------------------------------- the attention

class _Layer:
    layer_idx = 0
    training = False


def test_masked_attention_is_softmax_over_the_kept_positions_per_head():
    from memopt.cache import kv_eval

    gen = torch.Generator().manual_seed(1)
    N, Hkv, g, n, D = 3, 2, 3, 9, 4
    q = torch.randn(N, Hkv * g, 1, D, generator=gen)
    k = torch.randn(N, Hkv, n, D, generator=gen)
    v = torch.randn(N, Hkv, n, D, generator=gen)
    keep = torch.rand(N, Hkv, n, generator=gen) < 0.5
    keep[..., -1] = True                      # the token itself
    state = kv_eval._Masks(torch.where(keep, 0.0, float("-inf"))[:, None])      # one layer
    kv_eval._ACTIVE = state
    try:
        out, w = masked_attention(_Layer(), q, k, v, None, 0.5)
    finally:
        kv_eval._ACTIVE = None
    assert out.shape == (N, 1, Hkv * g, D)
    for b in range(N):
        for h in range(Hkv * g):
            idx = keep[b, h // g].nonzero()[:, 0]          # query head h reads KV head h // g
            ref = torch.softmax((q[b, h] @ k[b, h // g, idx].T) * 0.5, dim=-1)
            assert torch.allclose(w[b, h, 0, idx], ref[0], atol=1e-6)
            assert float(w[b, h, 0, ~keep[b, h // g]].abs().sum()) == 0.0
            assert torch.allclose(out[b, 0, h], ref[0] @ v[b, h // g, idx], atol=1e-6)
    assert state.weights[0] is w


# ---------------------------------------------------------------------------- in the model

def test_budget_that_evicts_nothing_equals_the_full_cache(tiny_llama):
    sets = [KVSetting(p, T) for p in KV_POLICIES]
    r = evaluate_kv(tiny_llama, IDS, sets, prefill=5, return_logits=True)
    assert r.logits.shape == (1 + len(sets), T - 5, 256)
    for n, res in enumerate(r.results, 1):
        assert np.allclose(r.logits[n], r.logits[0], atol=1e-5), res.policy
        assert res.perplexity == pytest.approx(r.full.perplexity, rel=1e-9)
        assert res.agree == res.scored == T - 5
        assert res.retained == res.replay_retained == res.total
        assert (res.last_step == T - 1).all()
    # the full-cache sequence is the model's ordinary eager pass
    with torch.no_grad():
        logits = tiny_llama(input_ids=torch.tensor([IDS[:T]])).logits[0]
    nll = -torch.log_softmax(logits.double(), -1)[torch.arange(5, T), torch.tensor(IDS[6:T + 1])].sum()
    assert r.full.perplexity == pytest.approx(math.exp(float(nll) / (T - 5)), rel=1e-5)
    assert np.allclose(r.logits[0], logits[5:].numpy(), atol=1e-4)
    assert r.full.correct == int((logits[5:].argmax(-1).numpy() == np.array(IDS[6:T + 1])).sum())


def held_at(last_step, t, lag):
    """Positions ``j < t`` a head attends at step ``t``: not evicted by a decision applied before
    ``t`` (a decision about step ``d`` is applied after row ``d + lag``)."""
    j = np.arange(last_step.shape[1])
    return (j[None, :] < t) & ~(last_step + lag + 1 <= t)


@pytest.mark.parametrize("setting, lag", [(KVSetting("tova", 6), 0), (KVSetting("streaming-llm", 7, {"sinks": 2}), 0),
                                          (KVSetting("rmm", 6, {"lag": 3}), 3)])
def test_masked_decoding_equals_cache_surgery(tiny_llama, setting, lag):
    # the reference decodes step by step from a DynamicCache from which it physically drops the
    # evicted K/V before each step (so later K/V are computed under eviction, as in the loop)
    from transformers import DynamicCache

    P = 10
    r = evaluate_kv(tiny_llama, IDS, [setting], prefill=P, return_logits=True)
    sched = r.results[0].last_step                         # (layers * kv_heads, T)
    cache = DynamicCache()
    in_cache = [list(range(P)), list(range(P))]           # original positions held, per layer
    dropped = 0
    with torch.no_grad():
        tiny_llama(input_ids=torch.tensor([IDS[:P]]), use_cache=True, **{cache_kw(tiny_llama): cache})
        for t in range(P, T):
            held = held_at(sched, t, lag).reshape(2, 2, T)    # (layer, kv head, position)
            assert (held[:, 0] == held[:, 1]).all()           # the heads of a layer hold the same positions
            for layer in range(2):
                keep = [i for i, j in enumerate(in_cache[layer]) if held[layer, 0, j]]
                dropped += len(in_cache[layer]) - len(keep)
                idx = torch.tensor(keep, dtype=torch.long)
                cache.layers[layer].keys = cache.layers[layer].keys[:, :, idx]
                cache.layers[layer].values = cache.layers[layer].values[:, :, idx]
                in_cache[layer] = [in_cache[layer][i] for i in keep] + [t]
            out = tiny_llama(input_ids=torch.tensor([[IDS[t]]]), position_ids=torch.tensor([[t]]),
                             use_cache=True, **{cache_kw(tiny_llama): cache})
            assert np.allclose(out.logits[0, -1].numpy(), r.logits[1, t - P], atol=1e-4), t
    assert dropped > 0                                     # some positions were really dropped


@pytest.mark.parametrize("policy", KV_POLICIES)
def test_closed_loop_agrees_with_the_trace_until_rows_differ(tiny_llama, policy):
    # at budget T - 2 the only eviction is decided at step T - 2 from rows the full cache
    # produced too: the closed loop and the replay on this run's trace must be identical
    opts = {"lag": 0} if policy == "rmm" else {}
    sets = [KVSetting(policy, T - 2, opts), KVSetting(policy, 12, opts)]
    r = evaluate_kv(tiny_llama, IDS, sets, prefill=16)
    big, small = r.results
    replay = simulate_kv(r.trace, policy, T - 2, prefill=16, **opts)
    assert np.array_equal(big.last_step, replay.last_step)
    assert big.retained == big.replay_retained == replay.retained
    # with the prompt (16) over the budget (12), the first decision (compressing the prompt) sees
    # only prompt rows: it is the replay's; later ones may differ
    rep = simulate_kv(r.trace, policy, 12, prefill=16, **opts)
    first = small.last_step == 15
    assert first.any() and np.array_equal(first, rep.last_step == 15)


def test_retained_never_exceeds_the_optimum(tiny_llama):
    from memopt.cache.kv_optimum import kv_optimum

    sets = [KVSetting(p, 8) for p in KV_POLICIES] + [KVSetting("rmm", 8, {"lag": 4})]
    r = evaluate_kv(tiny_llama, IDS, sets, prefill=4)
    opt = kv_optimum(r.trace, 8, prefill=4)
    for res in r.results:
        assert res.retained <= opt.retained and res.replay_retained <= opt.retained, res.label
        assert res.total == opt.total
    assert r.trace.steps == T and np.array_equal(r.trace.tokens, IDS[:T])


def test_rmm_uniform_lag0_is_h2o_in_the_model(tiny_llama):
    sets = [KVSetting("h2o", 9, {"recent": 3}), KVSetting("rmm", 9, {"recent": 3, "lag": 0, "weighting": "uniform"}),
            KVSetting("rmm", 9, {"recent": 3, "lag": 0})]
    r = evaluate_kv(tiny_llama, IDS, sets, prefill=6, return_logits=True)
    h2o, rmm_u, rmm_c = r.results
    assert np.array_equal(h2o.last_step, rmm_u.last_step)
    assert np.array_equal(r.logits[1], r.logits[2])
    assert (h2o.nll, h2o.agree, h2o.retained) == (rmm_u.nll, rmm_u.agree, rmm_u.retained)
    assert (h2o.last_step < T - 1).any()                  # it did evict
    assert h2o.peak_held == rmm_u.peak_held == 9
    # with a lag the undecided positions stay attended: the staging buffer shows in peak_held
    lagged = evaluate_kv(tiny_llama, IDS, [KVSetting("rmm", 9, {"lag": 5})], prefill=6).results[0]
    assert lagged.peak_held == 9 + 5
    assert rmm_c.peak_held == 9


def test_per_layer_budgets_in_the_model(tiny_llama):
    sets = [KVSetting("h2o", [6, 12]), KVSetting("h2o", [6, 12], {"share": "layer"}), KVSetting("h2o", 30)]
    r = evaluate_kv(tiny_llama, IDS, sets, prefill=4)
    per_layer, shared, _ = r.results
    assert per_layer.budget == [6, 12] and shared.params["share"] == "layer"
    assert per_layer.peak_held == 12

    def occupancy(res):       # past positions held per (layer, KV head) at each decode step
        steps = np.arange(4, T)[:, None, None]
        j = np.arange(T)[None, None, :]
        held = (j < steps) & (res.last_step[None] >= steps)
        return held.sum(axis=2).reshape(T - 4, 2, 2)

    occ = occupancy(per_layer)
    assert occ[:, 0].max() == 6 and occ[:, 1].max() == 12
    occ = occupancy(shared)
    assert (occ.sum(axis=2) <= np.array([12, 24])).all() and occ.sum(axis=2).max() == 24


def test_bad_input(tiny_llama):
    with pytest.raises(OptionError, match="unknown KV policy"):
        evaluate_kv(tiny_llama, IDS, [KVSetting("fifo", 4)])
    with pytest.raises(OptionError, match="prefill"):
        evaluate_kv(tiny_llama, IDS, [KVSetting("h2o", 4)], prefill=T)
    with pytest.raises(OptionError, match="at least 2 tokens"):
        evaluate_kv(tiny_llama, IDS[:1], [])
    with pytest.raises(OptionError, match="2 values"):
        evaluate_kv(tiny_llama, IDS, [KVSetting("h2o", [4, 4, 4])])
    assert tiny_llama.config._attn_implementation == "eager"      # restored after every run
