"""KV-cache policies evaluated **inside the real model**: closed-loop, teacher-forced decoding
with each policy's cache applied, reporting perplexity, agreement with the full cache and the
retained attention of the same run.

**Model.** A causal LM reads ``T + 1`` tokens of real text. Steps ``t < prefill`` are the
prompt, one full causal pass (every policy sees its rows). From ``prefill`` on, step ``t`` is one
decoding step of a batch with one sequence per policy setting plus one with the full cache
(row 0), all fed the same token ``t`` (teacher forcing). Each setting's
:class:`memopt.cache.kv_policies.KVPolicy` — the same object :func:`simulate_kv` drives on a
trace — observes the attention its own sequence produced at step ``t`` (quantised exactly as
the trace recorder does: :func:`memopt.cache.kv_record.quantise_heads`) and whether its own
prediction was token ``t + 1`` (for ``rmm``), and its evictions apply from step ``t + 1`` on.
The prompt pass runs on every sequence of the batch (identical inputs, no eviction yet).
Scored: the ``T - prefill`` predictions of steps ``prefill .. T - 1``: perplexity
``exp(mean NLL of token t + 1)``, agreement of the argmax with the full cache's, accuracy.

**Why it is exact.** Nothing is physically dropped: every K/V stays in a ``StaticCache`` and the
attention function (registered with ``transformers``' ``AttentionInterface`` as
``memopt_kv_masked``; eager math: ``softmax(q k^T * scaling + mask) v`` in float32, query head
``q`` reading KV head ``q // group`` as ``repeat_kv`` does) adds ``-inf`` at the positions a
(sequence, layer, KV head) has evicted. ``exp(-inf) = 0``: the softmax runs over the kept
positions only, which is what dropping their K/V and re-running computes (a test checks it
against explicit cache surgery). Positions keep their RoPE rotation (keys are cached rotated).

**Retained attention of the same run.** ``retained`` is the committed schedule scored on the
full-cache rows of this very run (:func:`memopt.cache.kv_policies.schedule_retained`; the trace
is :attr:`KVEvaluation.trace`); ``replay_retained`` is the open-loop replay of the same setting
on that trace (what ``memopt cache kv`` computes), to show how well the trace predicts the
model. ``peak_held``: the most past positions any head attended at a decode step — the budget,
except for ``rmm`` with lag ``H > 0``, whose undecided positions stay attended for ``H`` steps.

Example (tiny random Llama, no weights)::

    res = evaluate_kv(model, ids, [KVSetting("h2o", 0.2), KVSetting("rmm", 0.2, {"lag": 4})],
                      prefill=16)
    res.results[0].perplexity, res.results[0].agreement, res.results[0].retained_fraction

References: the policies' (``memopt.cache.kv_policies``); cache surgery as in
``NVIDIA/kvpress`` (presses prune the ``DynamicCache`` per layer and head).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import numpy as np

from memopt.errors import InternalError, OptionError
from memopt.cache.kv_policies import KVPolicy, policy_result, simulate_kv
from memopt.cache.kv_record import kv_groups, quantise_heads
from memopt.cache.kv_trace import DEFAULT_SCALE, AttentionTrace, make_attention_trace

__all__ = ["KVSetting", "KVEvalResult", "KVEvaluation", "evaluate_kv", "masked_attention",
           "ATTENTION_NAME"]

ATTENTION_NAME = "memopt_kv_masked"


@dataclass(frozen=True)
class KVSetting:
    """One policy setting: ``policy`` and ``budget`` (as :class:`KVPolicy`), ``options`` (its
    other keyword arguments: ``lag``, ``weighting``, ``recent``, ``sinks``, ``window``,
    ``kernel``, ``share``) and a ``label`` for tables."""

    policy: str
    budget: object
    options: dict = field(default_factory=dict)
    label: str | None = None

    def name(self) -> str:
        return self.label or self.policy


@dataclass(frozen=True)
class KVEvalResult:
    """One sequence of an :func:`evaluate_kv` run (module doc). ``nll``: summed natural-log
    loss of the ``scored`` predictions; ``agree`` / ``correct``: how many of them equal the
    full cache's argmax / the next token. ``last_step`` (not in :meth:`to_dict`): the
    committed schedule."""

    label: str
    policy: str
    budget: object
    params: dict
    prefill: int
    scored: int
    nll: float
    agree: int
    correct: int
    retained: int
    replay_retained: int
    total: int
    peak_held: int
    last_step: np.ndarray = None

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.scored) if self.scored else float("nan")

    @property
    def agreement(self) -> float:
        return self.agree / self.scored if self.scored else float("nan")

    @property
    def accuracy(self) -> float:
        return self.correct / self.scored if self.scored else float("nan")

    @property
    def retained_fraction(self) -> float:
        return self.retained / self.total if self.total else 1.0

    @property
    def replay_fraction(self) -> float:
        return self.replay_retained / self.total if self.total else 1.0

    def to_dict(self) -> dict:
        return {"label": self.label, "policy": self.policy, "budget": self.budget, "params": self.params,
                "prefill": self.prefill, "scored": self.scored, "nll": self.nll,
                "perplexity": self.perplexity, "agree": self.agree, "agreement": self.agreement,
                "correct": self.correct, "accuracy": self.accuracy, "retained": self.retained,
                "replay_retained": self.replay_retained, "total": self.total,
                "retained_fraction": self.retained_fraction, "replay_fraction": self.replay_fraction,
                "peak_held": self.peak_held}


@dataclass(frozen=True)
class KVEvaluation:
    """``full``: the full-cache sequence (its ``retained`` = ``total``); ``results``: one per
    setting, in order; ``trace``: the full-cache attention of this run; ``logits``
    (``return_logits=True``): float32 ``(1 + settings, T - prefill, vocab)``, row 0 the full
    cache."""

    full: KVEvalResult
    results: list
    trace: AttentionTrace
    logits: np.ndarray | None = None


# ---------------------------------------------------------------------------- attention

class _Masks:
    """What :func:`masked_attention` reads while :func:`evaluate_kv` runs: the additive masks
    ``(batch, layers, kv_heads, T)`` and the captured weights per layer."""

    def __init__(self, mask):
        self.mask = mask
        self.weights: dict = {}
        self.kv_len: int | None = None      # the filled length of a static cache


_ACTIVE: _Masks | None = None


def masked_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention (``transformers``' ``eager_attention_forward``: query head ``h`` reads KV
    head ``h // group``) plus the evicted positions of the running evaluation set to ``-inf`` per
    (sequence, layer, KV head); captures the weights. Outside an evaluation it is plain eager
    attention. The query heads are grouped by reshaping rather than by copying K/V per query
    head (``repeat_kv``): the same products, without copying the cache at every step."""
    import torch

    state = _ACTIVE
    layer = getattr(module, "layer_idx", None)
    if state is not None and state.kv_len is not None:     # a static cache: only the filled part
        key, value = key[:, :, :state.kv_len], value[:, :, :state.kv_len]
    batch, n_heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[-2]
    group = n_heads // kv_heads
    qg = query.reshape(batch, kv_heads, group, q_len, dim)
    w = torch.matmul(qg, key.unsqueeze(2).transpose(-1, -2)) * scaling    # (batch, kv, group, q, kv_len)
    if attention_mask is not None:
        am = attention_mask[:, :, :, :kv_len].unsqueeze(1)
        w = w + am if am.dtype != torch.bool else w.masked_fill(~am, float("-inf"))
    elif q_len > 1:      # no mask given (sdpa-style "is causal"): query i sits at kv_len - q_len + i
        causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=w.device).triu(kv_len - q_len + 1)
        w = w.masked_fill(causal, float("-inf"))
    if state is not None and layer is not None:
        # (batch, kv_heads, kv_len); the prompt pass may run once, as sequence 0 (the full cache)
        m = state.mask[:batch, layer, :, :kv_len]
        w = w + m[:, :, None, None, :]
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout and module.training:
        w = torch.nn.functional.dropout(w, p=dropout, training=True)
    out = torch.matmul(w, value.unsqueeze(2)).reshape(batch, n_heads, q_len, dim)
    w = w.reshape(batch, n_heads, q_len, kv_len)
    if state is not None and layer is not None:
        state.weights[layer] = w
    return out.transpose(1, 2).contiguous(), w


def _register() -> None:
    from memopt._torchvision import allow_import

    allow_import()
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, masked_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)
    except ImportError:       # older transformers: no mask interface; the function masks itself
        pass


def _cache_kw(model) -> str:
    """``transformers`` 5.x renames ``past_key_values`` to ``cache``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


# ---------------------------------------------------------------------------- evaluation

def _check_ids(input_ids) -> list:
    try:
        ids = [int(i) for i in input_ids]
    except (TypeError, ValueError):
        raise OptionError("input_ids must be a sequence of integer token ids") from None
    if len(ids) < 2:
        raise OptionError(f"in-model evaluation needs at least 2 tokens (one step and its next token), "
                          f"got {len(ids)}")
    return ids


def evaluate_kv(model, input_ids, settings, *, prefill: int = 0, scale: int = DEFAULT_SCALE,
                return_logits: bool = False, name: str = "kv-eval", progress=None) -> KVEvaluation:
    """Run ``model`` over ``input_ids`` (``T + 1`` token ids: ``T`` steps, each scored on the
    next token) once with the full cache and once per :class:`KVSetting`, closed loop (module
    doc). ``progress(t, T)`` is called after each decode step if given."""
    import torch

    ids = _check_ids(input_ids)
    T = len(ids) - 1
    settings = list(settings)
    if not all(isinstance(s, KVSetting) for s in settings):
        raise OptionError("settings must be KVSetting objects")
    cfg = model.config
    L = int(cfg.num_hidden_layers)
    kv, group = kv_groups(model, int(cfg.num_attention_heads))
    if isinstance(prefill, bool) or not isinstance(prefill, (int, np.integer)) or not 0 <= prefill < T:
        raise OptionError(f"prefill must be an integer in [0, {T - 1}] (at least one scored step), "
                          f"got {prefill!r}")
    P = int(prefill)
    policies = [KVPolicy(s.policy, steps=T, layers=L, kv_heads=kv, budget=s.budget, prefill=P, **s.options)
                for s in settings]
    N, K = 1 + len(settings), L * kv
    _register()
    global _ACTIVE
    state = _Masks(torch.zeros(N, L, kv, T, dtype=torch.float32))
    evicted = np.zeros((N, K), dtype=np.int64)      # positions evicted so far per sequence and head
    rows_full = np.zeros((L, kv, T, T), dtype=np.int32)
    pred_full = np.zeros(T, dtype=np.int64)
    nll = np.zeros(N, dtype=np.float64)
    agree = np.zeros(N, dtype=np.int64)
    correct = np.zeros(N, dtype=np.int64)
    peak = np.zeros(N, dtype=np.int64)
    logits_steps: list = []
    target = np.asarray(ids[1:], dtype=np.int64)

    def apply(n: int, decisions) -> None:
        for _, heads, positions in decisions:
            state.mask[n].view(K, T)[torch.as_tensor(heads), torch.as_tensor(positions)] = float("-inf")
            np.add.at(evicted[n], heads, 1)

    def weights(lead: int, q_len: int, kv_len: int) -> np.ndarray:
        w = [state.weights.get(i) for i in range(L)]
        if any(x is None for x in w):
            raise InternalError("kv-eval-capture", f"{ATTENTION_NAME} did not run on every layer (is the "
                                                   "model a transformers model using AttentionInterface?)")
        arr = torch.stack(w, dim=1).to(torch.float32).cpu().numpy()    # (lead, L, Hq, q_len, kv_len)
        return quantise_heads(arr.reshape(lead * L, -1, q_len, kv_len), kv, scale).reshape(
            lead, L, kv, q_len, kv_len)

    saved = cfg._attn_implementation
    cache_kw = _cache_kw(model)
    try:
        _ACTIVE = state
        cfg._attn_implementation = ATTENTION_NAME
        from transformers import StaticCache

        # preallocated: a growing cache would copy every K/V of every sequence at every step
        cache = StaticCache(config=cfg, max_cache_len=T)
        with torch.no_grad():
            if P:
                state.kv_len = P
                out = model(input_ids=torch.tensor([ids[:P]] * N), use_cache=True, **{cache_kw: cache})
                q = weights(N, P, P)
                rows_full[:, :, :P, :P] = np.tril(q[0])
                pred = out.logits[:, :P].argmax(dim=-1).cpu().numpy()
                pred_full[:P] = pred[0]
                for t in range(P):
                    for n, pol in enumerate(policies, 1):
                        row = q[n, :, :, t, :t + 1].reshape(K, t + 1)
                        apply(n, pol.observe(row, pred[n, t] == target[t]))
            for t in range(P, T):
                state.weights.clear()
                state.kv_len = t + 1
                out = model(input_ids=torch.full((N, 1), ids[t], dtype=torch.long), use_cache=True,
                            **{cache_kw: cache})
                q = weights(N, 1, t + 1)[:, :, :, 0, :].reshape(N, K, t + 1)
                logp = torch.log_softmax(out.logits[:, -1].to(torch.float64), dim=-1)
                pred = logp.argmax(dim=-1).cpu().numpy()
                nll -= logp[:, target[t]].cpu().numpy()
                agree += pred == pred[0]
                correct += pred == target[t]
                peak = np.maximum(peak, t - evicted.min(axis=1))
                if return_logits:
                    logits_steps.append(out.logits[:, -1].to(torch.float32).cpu().numpy())
                rows_full[:, :, t, :t + 1] = q[0].reshape(L, kv, t + 1)
                pred_full[t] = pred[0]
                for n, pol in enumerate(policies, 1):
                    apply(n, pol.observe(q[n], pred[n] == target[t]))
                if progress is not None:
                    progress(t, T)
    finally:
        _ACTIVE = None
        cfg._attn_implementation = saved
    for pol in policies:
        pol.finish()
    trace = make_attention_trace(rows_full, pred_full == target, ids[:T], scale=scale, group=group,
                                 name=name)
    results = []
    for n, (s, pol) in enumerate(zip(settings, policies), 1):
        committed = policy_result(pol, trace)
        replay = simulate_kv(trace, s.policy, s.budget, prefill=P, **s.options)
        results.append(KVEvalResult(s.name(), pol.name, pol.budget, dict(pol.params), P, T - P,
                                    float(nll[n]), int(agree[n]), int(correct[n]), committed.retained,
                                    replay.retained, committed.total, int(peak[n]), pol.last_step.copy()))
    total = results[0].total if results else int(simulate_kv(trace, "lru", T, prefill=P).total)
    full = KVEvalResult("full", "full", T, {}, P, T - P, float(nll[0]), int(agree[0]), int(correct[0]),
                        total, total, total, int(peak[0]), None)
    logits = np.stack(logits_steps, axis=1) if return_logits else None
    return KVEvaluation(full, results, trace, logits)
