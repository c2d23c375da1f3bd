"""memopt's KV policies and offline optimum as NVIDIA KVPress presses (extra ``memopt[kvpress]``).

``kvpress`` and ``torch`` are imported lazily: the press classes are built on first access
(``from memopt.cache.kvpress import PolicyPress``), so importing this module needs neither.

**Presses** (each runs unmodified in ``kvpress.KVPressTextGenerationPipeline`` beside kvpress's
own presses; the model must use eager attention, as kvpress's ``ObservedAttentionPress``):

* :class:`PolicyPress` (a ``ScorerPress``): one memopt policy of
  :data:`memopt.cache.kv_policies.KV_POLICIES` applied **once, at prefill**, with kvpress's
  ``compression_ratio`` semantics: every (layer, KV head) keeps
  ``n_kept = max(1, int(n * (1 - compression_ratio)))`` of the ``n`` context keys, the last
  one included. The press drives memopt's own :class:`~memopt.cache.kv_policies.KVPolicy`
  with the context's attention rows (quantised as the trace recorder does), so the scoring
  rule is the one of :func:`~memopt.cache.kv_policies.simulate_kv`. For ``rmm`` with lag
  ``H``: the decision about the context prefix ``[0, n - H)`` is committed with the rows
  through ``n - 1`` (the ``H`` later context queries are its lag), the last ``H`` positions
  are the staging buffer and **count in** ``n_kept`` (at most half of it: ``min(H, n_kept //
  2)`` positions are staged, so a budget under ``2 H`` still decides half its slots, the
  attention sink among them); ``weighting="correct"`` takes the
  model's own next-token predictions on the context (one extra forward pass of the context;
  the last context row, whose next token the press cannot see, counts as correct).
  ``PolicyPress(policy="rmm", lag=0, weighting="uniform")`` keeps exactly what
  ``PolicyPress(policy="h2o")`` keeps.
* :class:`OraclePress` (a ``ScorerPress``): the **offline optimum** of compress-once-at-prefill
  for a known continuation (the question and answer tokens that follow the context): it keeps
  the ``n_kept`` context positions of each (layer, KV head) that the continuation's queries
  attend most (their full-cache attention, summed over the continuation and the head's query
  group; ties to the newest position). Retained attention is additive over positions, so no
  press that keeps ``n_kept`` positions per head retains more of the continuation's attention.
  It sees the future: **an upper bound, not a deployable policy**.
* :class:`PolicyDecodingPress` (a ``DecodingPress``): memopt's **per-step** variant: after
  every forward pass the policy observes the new attention rows and evicts down to
  ``target_size`` past positions (memopt's budget ``B``: a decoding step attends ``B`` cached
  positions plus itself; ``rmm``'s ``H`` undecided positions are held beyond it, as in
  :mod:`memopt.cache.kv_eval`). In kvpress's pipeline a ``DecodingPress`` is not called at
  prefill; wrap it as ``PrefillDecodingPress(decoding_press=...)`` so that it observes the
  context rows too and compresses at the end of the prefill (memopt's model), otherwise the
  context rows count as zero attention and the first compression happens after the question.
* :class:`OracleDecodingPress`: the per-step offline optimum
  (:func:`memopt.cache.kv_optimum.kv_optimum` on the full-cache trace of context plus
  continuation, prompt = context, budget ``target_size``), replayed step by step. Again an
  upper bound that sees the future.

:func:`kept_positions` tells which context positions a prefill press kept (any press, kvpress's
included; :func:`kept_in_cache` reads it from a cache the pipeline filled) and
:func:`retained_attention` scores them on the continuation's full-cache attention
(:func:`continuation_attention`), the measure the oracle maximises. :func:`compress_many` runs
one prefill for many prefill presses, each press's own hook compressing its own cache.
:class:`PressedStream` streams a conversation through a prefill press, compressing the carried
cache at every turn (kvpress itself compresses only a prefill that starts from an empty
cache), and :func:`span_attention` scores each turn's needs in one full-cache pass;
:class:`StreamOracle` is the stream's offline optimum (an upper bound, like the oracles above).
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import field

import numpy as np

from memopt.errors import InternalError, OptionError
from memopt.cache.kv_policies import KVPolicy
from memopt.cache.kv_record import _attention_modules, kv_groups, quantise_heads
from memopt.cache.kv_trace import DEFAULT_SCALE, make_attention_trace

__all__ = ["PolicyPress", "OraclePress", "PolicyDecodingPress", "OracleDecodingPress", "kept_positions", "kept_in_cache", "compress_many",
           "continuation_attention", "span_attention", "retained_attention",
           "answer_on_cache", "PressedStream", "StreamOracle", "keep_top", "tiny_model", "KVPRESS_PIN"]

KVPRESS_PIN = "kvpress==0.5.5"
_CLASSES: dict = {}
_LAZY = ("PolicyPress", "OraclePress", "PolicyDecodingPress", "OracleDecodingPress")


def __getattr__(name):
    if name in _LAZY:
        if not _CLASSES:
            _build()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _import_kvpress():
    from memopt._torchvision import allow_import
    allow_import()
    try:
        import kvpress
    except ImportError as exc:
        raise OptionError(f"the kvpress presses need {KVPRESS_PIN} (pip install 'memopt[kvpress]'): {exc}") from None
    return kvpress


def keep_top(key: np.ndarray, n_kept: int) -> np.ndarray:
    """Positions kept per row of ``key`` (``(heads, n)``, integers): the ``n_kept`` largest
    keys, ties to the **newest** position (memopt evicts the oldest of equal scores), sorted.

    Parameters
    ----------
    key : array of int, ``(heads, n)``
    n_kept : int

    Returns
    -------
    numpy.ndarray
        ``(heads, n_kept)`` positions.

    Examples
    --------
    >>> keep_top(np.array([[3, 1, 3, 2]]), 2).tolist()
    [[0, 2]]
    >>> keep_top(np.array([[1, 1, 1, 1]]), 2).tolist()
    [[2, 3]]
    """
    key = np.asarray(key)
    n = key.shape[1]
    rev = key[:, ::-1]
    order = np.argsort(-rev, axis=1, kind="stable")[:, :n_kept]
    return np.sort(n - 1 - order, axis=1)


def _int_attention(attn, kv_heads: int, scale: int) -> np.ndarray:
    """``(1, n_heads, q, k)`` float attention -> int64 ``(kv_heads, q, k)``: the recorder's
    quantisation (:func:`memopt.cache.kv_record.quantise_heads`), done in torch because a
    prefill quantises ``layers x n_heads x n^2`` values per press; float32 clamp, product
    with ``scale`` and round-half-to-even are the same IEEE operations as numpy's
    ``clip``, ``*`` and ``rint``, so the integers are identical (tested). The last result is
    kept (read-only) for the same tensor, unchanged since: the presses of one prefill
    (:func:`compress_many`) see the same weights at every layer and quantise them once."""
    import torch
    if attn is None:
        raise OptionError("the model returned no attention weights: load it with attn_implementation=\"eager\"")
    if attn.shape[0] != 1:
        raise OptionError(f"memopt's presses take one sequence at a time, got a batch of {attn.shape[0]}")
    import time
    # the tensor itself is held, so its identity and version name its contents
    key = (attn._version, kv_heads, scale)
    if _QUANTISED[0] is attn and _QUANTISED[1] == key:
        _REUSED_SECONDS[0] += _QUANTISED[3]
        return _QUANTISED[2]
    t0 = time.process_time()
    q = torch.round(attn[0].detach().to(torch.float32).clamp(0.0, 1.0) * scale).to(torch.int64)
    out = q.reshape(kv_heads, q.shape[0] // kv_heads, *q.shape[1:]).sum(dim=1).cpu().numpy()
    out.setflags(write=False)
    _QUANTISED[:] = [attn, key, out, time.process_time() - t0]
    return out


_QUANTISED: list = [None, None, None, 0.0]       # the last (attention tensor, key, integers, CPU s)
_REUSED_SECONDS = [0.0]      # CPU s the reused quantisations took when computed: a press's cost alone


class _LastContext:
    """One-entry memo of a full-cache pass over one sample: the presses of a table (several
    ratios and lags) run on the same context, so the model's predictions and the
    continuation's attention are computed once per sample instead of once per press. The
    entry is tied to the model object (a weak reference) and to the exact token ids."""

    def __init__(self):
        self._model, self._key, self._value = None, None, None

    def get(self, model, key, compute):
        if self._model is None or self._model() is not model or self._key != key:
            value = compute()
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
            self._model, self._key, self._value = weakref.ref(model), key, value
        return self._value


_PREDICTIONS, _FUTURE = _LastContext(), _LastContext()


def _predictions_correct(model, ids) -> np.ndarray:
    """Whether the model's argmax at each context position is the next context token (the
    last position, whose next token the press cannot see, counts as correct). Free after
    :func:`continuation_attention` on the same context: its pass computes them."""
    import torch
    tok = ids[0].cpu().numpy()

    def compute():
        with torch.no_grad():
            pred = model(input_ids=ids, use_cache=False).logits[0].argmax(-1).cpu().numpy()
        return _correct(pred, tok)

    return _PREDICTIONS.get(model, tuple(tok.tolist()), compute)


def _correct(pred: np.ndarray, tok: np.ndarray) -> np.ndarray:
    return np.append(pred[:-1] == tok[1:], True)


def _language_model(model):
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


class _Guard:
    """The inner full-cache passes a press runs itself must not trigger its own hooks."""

    def __init__(self):
        self.inside = False

    @contextmanager
    def inner(self):
        self.inside, old = True, self.inside
        try:
            yield
        finally:
            self.inside = old


def _policy_for(policy: str, options: dict, *, steps: int, kv_heads: int, budget: int, prefill: int) -> KVPolicy:
    return KVPolicy(policy, steps=steps, layers=1, kv_heads=kv_heads, budget=budget, prefill=prefill, **options)


def _gather(keys, values, keep: np.ndarray):
    import torch
    idx = torch.as_tensor(keep, dtype=torch.long, device=keys.device)[None, :, :, None]
    idx = idx.expand(keys.shape[0], -1, -1, keys.shape[-1])
    return keys.gather(2, idx).contiguous(), values.gather(2, idx).contiguous()


def _build() -> None:
    import torch
    kvpress = _import_kvpress()
    from dataclasses import dataclass
    from kvpress.presses.base_press import is_prefilling
    from kvpress.utils import compute_n_kept, extract_keys_and_values

    class _ContextHook:
        """Sees the context ids before the prefill (a pre-hook on the language model, registered
        by ``post_init_from_model``, which kvpress calls on entering a press, also through
        ``PrefillDecodingPress``) and runs :meth:`_prepare` once per prefill, outside the press's
        own hooks. The pre-hook goes on leaving the press (``__call__``) or at ``reset``."""

        def _prepare(self, model, ids) -> None:
            pass

        def _drop_pre_hook(self) -> None:
            handle = getattr(self, "_pre_handle", None)
            if handle is not None:
                handle.remove()
            self._pre_handle = None

        def post_init_from_model(self, model):
            # not delegated: a DecodingPress would hand the model to its base press, whose
            # pre-hook would then run (and stay) for nothing
            self._drop_pre_hook()

            def pre(mod, args, kwargs):
                cache = kwargs.get("past_key_values")
                ids = kwargs.get("input_ids")
                if self._guard.inside or ids is None or (cache is not None and cache.get_seq_length() > 0):
                    return None
                with self._guard.inner(), torch.no_grad():
                    self._prepare(model, ids)
                return None

            self._pre_handle = _language_model(model).register_forward_pre_hook(pre, with_kwargs=True)

        def forward_hook(self, module, input, kwargs, output):
            if self._guard.inside:
                return output
            return super().forward_hook(module, input, kwargs, output)

        @contextmanager
        def __call__(self, model):
            try:
                with super().__call__(model):
                    yield
            finally:
                self._drop_pre_hook()

    @dataclass
    class PolicyPress(_ContextHook, kvpress.ScorerPress):
        """One memopt policy applied once at prefill (module doc). ``options``: the policy's
        own parameters (``lag``, ``weighting``, ``recent``, ``sinks``, ``window``, ``kernel``)."""

        compression_ratio: float = 0.0
        policy: str = "rmm"
        options: dict = field(default_factory=dict)
        scale: int = DEFAULT_SCALE

        def __post_init__(self):
            super().__post_init__()
            _policy_for(self.policy, self.options, steps=4096, kv_heads=1, budget=2048, prefill=1)   # validates
            self._guard = _Guard()
            self._correct = None

        def _prepare(self, model, ids) -> None:
            self._correct = None
            if self.options.get("weighting", "correct") == "correct" and self.policy == "rmm":
                self._correct = _predictions_correct(model, ids)

        def score(self, module, hidden_states, keys, values, attentions, kwargs):
            """Float view of the kept set (kept positions 1, others 0): the decisions are made
            in :meth:`compress` on exact integer scores."""
            keep = torch.as_tensor(self.kept(module, keys, attentions), device=keys.device)[None]
            s = torch.zeros(keys.shape[:3], dtype=torch.float32, device=keys.device)
            return s.scatter(2, keep, 1.0)

        def kept(self, module, keys, attentions) -> np.ndarray:
            """Context positions kept per KV head, ``(kv_heads, n_kept)``, sorted."""
            kv, n = keys.shape[1], keys.shape[2]
            n_kept = compute_n_kept(n, self.compression_ratio)
            A = _int_attention(attentions, kv, self.scale)
            first = n - A.shape[1]       # slots carried in the cache (press_chunk): no rows of theirs here
            pol = _policy_for(self.policy, self.options, steps=n + 1, kv_heads=kv, budget=n_kept, prefill=n)
            if pol.lag:      # staging buffer: the last H positions wait, inside n_kept
                # at most half the budget: a buffer that filled it (a short first turn under
                # H) would decide nothing and drop the attention sink for the whole stream
                h = min(pol.lag, n_kept // 2, n)
                pol = _policy_for(self.policy, dict(self.options, lag=h), steps=n + 1, kv_heads=kv,
                                  budget=n_kept - h, prefill=n - h)
            ok = self._correct is not None and first == 0 and len(self._correct) == n
            correct = self._correct if ok else np.ones(n, bool)      # a carried cache: uniform rows
            # the rows whose decisions all come before the prefill, as one block (their scores
            # are sums: KVPolicy.observe_block); the last ones row by row
            m = max(0, min(n, pol.prefill + pol.lag - 1))
            if m:
                block = A[:, :m, :n]
                if first:     # carried slots have no rows here: zeros in their place
                    block = np.zeros((kv, m, n), dtype=np.int64)
                    block[:, first:m, :] = A[:, :max(0, m - first), :n]
                pol.observe_block(block, correct[:m])
            for t in range(m, n):
                row = A[:, t - first, :t + 1] if t >= first else np.zeros((kv, t + 1), dtype=np.int64)
                pol.observe(row, bool(correct[t]))
            held = pol.last_step[:, :n] == pol.steps - 1
            counts = held.sum(axis=1)
            if (counts != n_kept).any():
                raise InternalError("kvpress-kept", f"{self.policy}: kept {counts.tolist()} positions, expected {n_kept}")
            return np.nonzero(held)[1].reshape(kv, n_kept)

        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            if self.compression_ratio == 0:
                return keys, values
            return _gather(keys, values, self.kept(module, keys, attentions))

    @dataclass
    class OraclePress(_ContextHook, kvpress.ScorerPress):
        """The offline optimum of compress-once for a known ``continuation`` (module doc):
        an upper bound that sees the future, not a deployable policy."""

        compression_ratio: float = 0.0
        continuation: tuple = ()
        scale: int = DEFAULT_SCALE

        def __post_init__(self):
            super().__post_init__()
            self.continuation = tuple(int(i) for i in self.continuation)
            if not self.continuation:
                raise OptionError("OraclePress needs the continuation's token ids (it sees the future)")
            self._guard = _Guard()
            self._future = None

        def _prepare(self, model, ids) -> None:
            ctx = [int(i) for i in ids[0].tolist()]
            self._future = continuation_attention(model, ctx, self.continuation, self.scale)

        def score(self, module, hidden_states, keys, values, attentions, kwargs):
            return torch.as_tensor(self._mass(module, keys), dtype=torch.float64)[None]

        def _mass(self, module, keys) -> np.ndarray:
            if self._future is None or self._future.shape[2] != keys.shape[2]:
                raise OptionError("OraclePress: the continuation's attention was not recorded for this context "
                                  "(the press must be applied to the prefill of the context)")
            return self._future[module.layer_idx]

        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            if self.compression_ratio == 0:
                return keys, values
            n_kept = compute_n_kept(keys.shape[2], self.compression_ratio)
            return _gather(keys, values, keep_top(self._mass(module, keys), n_kept))

    @dataclass
    class PolicyDecodingPress(_ContextHook, kvpress.DecodingPress):
        """memopt's per-step policy as a ``DecodingPress`` (module doc): ``base_press`` is a
        :class:`PolicyPress` naming the policy and its options, ``target_size`` the budget
        ``B`` of past positions, ``max_steps`` a bound on context plus generated tokens."""

        base_press: object = None
        compression_interval: int = 1
        target_size: int = 2048
        hidden_states_buffer_size: int = 0
        max_steps: int = 4096

        def __post_init__(self):
            super().__post_init__()
            if self.compression_interval != 1:
                raise OptionError("memopt's per-step policies evict at every step (compression_interval=1)")
            self._guard = _Guard()
            self._state, self._cache_ref, self.peak_held = {}, None, 0
            self.reset()

        def reset(self):
            super().reset()
            self._drop_pre_hook()

        def _bind(self, cache) -> None:
            """Per-layer state belongs to one cache: the pipeline leaves and re-enters the press
            between prefill and decoding (kvpress resets it there), a new run brings a new cache."""
            ref = getattr(self, "_cache_ref", None)
            if ref is None or ref() is not cache:
                self._state, self._cache_ref, self.peak_held = {}, weakref.ref(cache), 0

        def _new_policy(self, kv: int, prefill: int):
            bp = self.base_press
            return _policy_for(bp.policy, bp.options, steps=self.max_steps, kv_heads=kv, budget=self.target_size,
                               prefill=prefill)

        def forward_hook(self, module, input, kwargs, output):
            if self._guard.inside:
                return output
            hidden = kwargs["hidden_states"]
            q = hidden.shape[1]
            cache = kwargs["past_key_values"]
            self._bind(cache)
            li = module.layer_idx
            keys, values = extract_keys_and_values(cache, li)
            kv, n_slots = keys.shape[1], keys.shape[2]
            A = _int_attention(output[1], kv, self.base_press.scale)
            if li not in self._state:
                first = n_slots - q          # positions the press never saw (a DecodingPress outside
                prefill = n_slots if is_prefilling(kwargs["cache_position"], q) else first   # PrefillDecodingPress)
                pol = self._new_policy(kv, prefill)
                for t in range(first):
                    pol.observe(np.zeros((kv, t + 1), dtype=np.int64))
                self._state[li] = [pol, np.tile(np.arange(first, dtype=np.int64), (kv, 1))]
            pol, pos = self._state[li]
            start = pol.t
            if start + q > pol.steps:
                raise OptionError(f"more than max_steps={pol.steps} tokens: raise max_steps")
            pos = np.concatenate([pos, np.tile(np.arange(start, start + q, dtype=np.int64), (kv, 1))], axis=1)
            heads = np.arange(kv)[:, None]
            for i in range(q):
                t = start + i
                row = np.zeros((kv, t + 1), dtype=np.int64)
                vis = n_slots - q + i + 1
                row[heads, pos[:, :vis]] = A[:, i, :vis]
                pol.observe(row, True)
            t = pol.t - 1
            self._apply(cache, li, keys, values, pos, pol.last_step, t)
            return output

        def _apply(self, cache, li, keys, values, pos, last_step, t):
            held = np.take_along_axis(last_step, pos, axis=1) > t
            counts = held.sum(axis=1)
            if (counts != counts[0]).any():
                raise InternalError("kvpress-held", f"heads hold different numbers of positions: {counts.tolist()}")
            keep = np.nonzero(held)[1].reshape(held.shape[0], int(counts[0]))
            self.peak_held = max(self.peak_held, int(counts[0]))
            layer = cache.layers[li]
            layer.keys, layer.values = _gather(keys, values, keep)
            self._state[li][1] = np.take_along_axis(pos, keep, axis=1)

    @dataclass
    class OracleDecodingPress(PolicyDecodingPress):
        """The per-step offline optimum (module doc), replayed: ``continuation`` = the token
        ids after the context. An upper bound that sees the future."""

        continuation: tuple = ()

        def __post_init__(self):
            if self.base_press is None:
                self.base_press = PolicyPress(policy="h2o")       # only its scale is used
            super().__post_init__()
            self.continuation = tuple(int(i) for i in self.continuation)
            if not self.continuation:
                raise OptionError("OracleDecodingPress needs the continuation's token ids (it sees the future)")
            self._schedule = None

        def _prepare(self, model, ids) -> None:
            from memopt.cache.kv_optimum import kv_optimum
            ctx = [int(i) for i in ids[0].tolist()]
            full = ctx + list(self.continuation)
            from memopt.cache.kv_record import quantised_attention_pass
            A, pred, group = quantised_attention_pass(model, full, self.base_press.scale)
            tr = make_attention_trace(A, np.ones(len(full), bool), full, scale=self.base_press.scale, group=group)
            opt = kv_optimum(tr, self.target_size, prefill=len(ctx))
            self._schedule = opt.last_step.reshape(A.shape[0], A.shape[1], len(full))

        def _new_policy(self, kv: int, prefill: int):
            raise InternalError("kvpress-oracle", "unused")

        def forward_hook(self, module, input, kwargs, output):
            if self._guard.inside:
                return output
            if self._schedule is None:
                raise OptionError("OracleDecodingPress must see the prefill: wrap it in PrefillDecodingPress")
            q = kwargs["hidden_states"].shape[1]
            cache = kwargs["past_key_values"]
            self._bind(cache)
            li = module.layer_idx
            keys, values = extract_keys_and_values(cache, li)
            kv = keys.shape[1]
            T = self._schedule.shape[2]
            if li not in self._state:
                self._state[li] = [0, np.zeros((kv, 0), dtype=np.int64)]
            start, pos = self._state[li]
            pos = np.concatenate([pos, np.tile(np.arange(start, start + q, dtype=np.int64), (kv, 1))], axis=1)
            t = start + q - 1
            self._state[li][0] = t + 1
            if t >= T - 1:       # past the evaluated continuation: the schedule keeps everything
                self._state[li][1] = pos
                return output
            self._apply(cache, li, keys, values, pos, self._schedule[li], t)
            return output

    _CLASSES.update(PolicyPress=PolicyPress, OraclePress=OraclePress, PolicyDecodingPress=PolicyDecodingPress,
                    OracleDecodingPress=OracleDecodingPress)


def continuation_attention(model, context, continuation, scale: int = DEFAULT_SCALE) -> np.ndarray:
    """Full-cache attention of the ``continuation``'s queries to the ``context`` positions,
    summed over the continuation: int64 ``(layers, kv_heads, len(context))`` (quantised as the
    trace recorder does, query heads of a KV head summed). One forward pass over context plus
    continuation, keeping one layer's float attention at a time; the last sample's result is
    kept, so the oracle presses of several ratios and the table's scoring share one pass.

    Parameters
    ----------
    model : transformers causal LM (eager attention)
    context, continuation : sequence of int
        Token ids.
    scale : int
        Units per 1.0 of attention.

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> continuation_attention(model, [1, 5, 7], [9, 4]).shape      # doctest: +SKIP
    (2, 2, 3)
    """
    ctx, cont = [int(i) for i in context], [int(i) for i in continuation]
    return _FUTURE.get(model, (tuple(ctx), tuple(cont), int(scale)),
                       lambda: _continuation_attention(model, ctx, cont, scale))


def _continuation_attention(model, ctx: list, cont: list, scale: int) -> np.ndarray:
    n = len(ctx)
    (future,), pred = _span_pass(model, ctx + cont, [(n, n + len(cont))], scale, predict=n)
    # the pass over context plus continuation also gives the model's predictions on the
    # context (causal: the context's logits do not see the continuation): rmm's weighting
    # then needs no pass of its own
    tok = np.asarray(ctx, dtype=np.int64)
    _PREDICTIONS.get(model, tuple(ctx), lambda: _correct(pred, tok))
    return future


def span_attention(model, ids, spans, scale: int = DEFAULT_SCALE) -> list:
    """For each span ``(start, end)`` of the token ids ``ids``: the full-cache attention of its
    queries to the positions before it, summed over the span: int64 ``(layers, kv_heads,
    start)`` (quantised as the trace recorder does, query heads of a KV head summed). One
    forward pass over ``ids`` for all spans: a streamed conversation scores every question
    turn on what the cache kept before it (:class:`PressedStream`).

    Parameters
    ----------
    model : transformers causal LM (eager attention)
    ids : sequence of int
    spans : sequence of (int, int)
        ``0 < start < end <= len(ids)``.
    scale : int
        Units per 1.0 of attention.

    Returns
    -------
    list of numpy.ndarray

    Examples
    --------
    >>> [a.shape for a in span_attention(model, [1, 5, 7, 9, 4], [(3, 5)])]   # doctest: +SKIP
    [(2, 2, 3)]
    """
    return _span_pass(model, ids, spans, scale)[0]


def _span_pass(model, ids, spans, scale: int = DEFAULT_SCALE, predict: int = 0) -> tuple:
    """:func:`span_attention`'s pass; with ``predict > 0`` also the model's argmax prediction at
    positions ``[0, predict)`` (the output embedding on those positions' final hidden states),
    else ``None``: ``(attention per span, predictions)``."""
    import torch
    ids = [int(i) for i in ids]
    spans = [(int(a), int(b)) for a, b in spans]
    if any(not 0 < a < b <= len(ids) for a, b in spans):
        raise OptionError(f"spans must satisfy 0 < start < end <= {len(ids)}, got {spans}")
    mods = _attention_modules(model)
    kv, _ = kv_groups(model, int(model.config.num_attention_heads))
    out = [np.zeros((len(mods), kv, a), dtype=np.int64) for a, _ in spans]

    def hook_for(li):
        def hook(module, args, output):
            w = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if w is None:
                raise OptionError("the model returned no attention weights: load it with attn_implementation=\"eager\"")
            for k, (a, b) in enumerate(spans):
                out[k][li] = quantise_heads(w[0:1, :, a:b, :a].to(torch.float32).cpu().numpy(), kv, scale)[0].sum(axis=1)
            return (output[0], None) + tuple(output[2:])
        return hook

    handles = [m.register_forward_hook(hook_for(li)) for li, m in enumerate(mods)]
    try:
        with torch.no_grad():
            hidden = _language_model(model)(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state
            pred = None
            if predict:
                pred = model.get_output_embeddings()(hidden[:, :predict])[0].argmax(-1).cpu().numpy()
    finally:
        for h in handles:
            h.remove()
    return out, pred


def kept_positions(model, context, press) -> np.ndarray:
    """Context positions that a prefill ``press`` (memopt's or kvpress's) keeps, per layer and
    KV head: bool ``(layers, kv_heads, len(context))``. Runs the prefill twice (without and
    with the press) and finds each kept key among the full cache's keys (a press gathers
    keys, so the kept ones are bit-identical).

    Parameters
    ----------
    model : transformers causal LM (eager attention)
    context : sequence of int
        The token ids the pipeline prefills.
    press : kvpress press
        Any prefill press (a context manager over ``model``).

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> kept_positions(model, ids, SnapKVPress(0.5, window_size=8)).sum(axis=2)   # doctest: +SKIP
    """
    import torch
    from transformers import DynamicCache
    ids = torch.tensor([[int(i) for i in context]])
    lm = _language_model(model)
    full, comp = DynamicCache(), DynamicCache()
    with torch.no_grad():
        lm(input_ids=ids, past_key_values=full)
        with press(model):
            lm(input_ids=ids, past_key_values=comp)
    return kept_in_cache(full, comp)


def compress_many(model, context_ids, presses: dict) -> tuple:
    """One prefill of ``context_ids`` for many prefill presses (kvpress's or memopt's): after
    each attention layer, every press's own ``forward_hook`` compresses **its own** cache,
    which holds the layer's full keys and values at that moment, exactly as in
    ``KVPressTextGenerationPipeline`` (a prefill press changes the cache only, never the
    prefill's hidden states, so one pass serves them all; tested against the pipeline).
    Answer each with ``pipe.generate_answer(question_ids, cache, len(context), max_new_tokens)``,
    kvpress's own greedy decoding.

    Parameters
    ----------
    model : transformers causal LM (eager attention)
    context_ids : torch.Tensor
        ``(1, n)`` token ids (``pipe.preprocess(...)["context_ids"]``).
    presses : dict
        Label -> prefill press (not a ``DecodingPress``).

    Returns
    -------
    tuple
        ``(full, caches, seconds)``: the uncompressed ``DynamicCache``, label -> the press's
        compressed ``DynamicCache``, label -> CPU seconds of the press's hook alone (a layer's
        quantised attention, computed once for all of memopt's presses, counts in each).

    Examples
    --------
    >>> full, caches, _ = compress_many(model, ids, {"snapkv": SnapKVPress(0.5)})   # doctest: +SKIP
    """
    import time

    import torch
    from transformers import DynamicCache

    kvpress = _import_kvpress()
    for label, press in presses.items():
        if isinstance(press, (kvpress.DecodingPress, kvpress.PrefillDecodingPress)):
            raise OptionError(f"compress_many takes prefill presses; {label!r} is a {type(press).__name__}")
    full = DynamicCache()
    caches = {label: DynamicCache() for label in presses}
    seconds = dict.fromkeys(presses, 0.0)

    def hook_for(li):
        def hook(module, args, kwargs, output):
            if kwargs.get("past_key_values") is not full:      # a press's own inner pass
                return output
            keys, values = full.layers[li].keys, full.layers[li].values
            for label, press in presses.items():
                t0, r0 = time.process_time(), _REUSED_SECONDS[0]
                caches[label].update(keys, values, li)
                press.forward_hook(module, args, dict(kwargs, past_key_values=caches[label]), output)
                seconds[label] += time.process_time() - t0 + _REUSED_SECONDS[0] - r0
            return output
        return hook

    for press in presses.values():
        press.post_init_from_model(model)
    handles = [m.register_forward_hook(hook_for(li), with_kwargs=True) for li, m in enumerate(_attention_modules(model))]
    try:
        with torch.no_grad():
            _language_model(model)(input_ids=context_ids, past_key_values=full)
    finally:
        for h in handles:
            h.remove()
        for press in presses.values():
            drop = getattr(press, "_drop_pre_hook", None)
            if drop is not None:
                drop()
        _QUANTISED[:] = [None, None, None, 0.0]      # the last layer's weights: not needed past the prefill
    return full, caches, seconds


def answer_on_cache(pipe, cache, question_ids, context_length: int, max_new_tokens: int) -> str:
    """kvpress's greedy ``pipe.generate_answer`` of ``question_ids`` on ``cache`` (the context
    at positions up to ``context_length``), then the question and the answer removed from the
    cache, as the pipeline does between questions: the cache can be answered on again or
    compared (:func:`kept_in_cache`).

    Examples
    --------
    >>> full, caches, _ = compress_many(model, ids, presses)                # doctest: +SKIP
    >>> answer_on_cache(pipe, full, q_ids, ids.shape[1], 8)                 # doctest: +SKIP
    """
    lengths = [cache.get_seq_length(li) for li in range(len(cache))]
    out = pipe.generate_answer(question_ids, cache, context_length, max_new_tokens)
    pipe._remove_answer_from_cache(cache, lengths)
    return out


class PressedStream:
    """A conversation streamed through one prefill press: each chunk (a turn) is prefilled on
    the cache carried over from the earlier chunks, at its true positions, and the press then
    compresses the whole cache (carried slots and the chunk's new ones) to ``n_kept`` slots per
    (layer, KV head), as kvpress's prefill hook does for the first chunk. kvpress 0.5.5 calls a
    prefill press only when the cache starts empty (``is_prefilling``); here its ``compress``
    runs at every chunk, on the chunk's attention rows (the carried slots get only those: the
    scores are the chunk's, as in kvpress; memopt's ``rmm`` weights a carried cache's rows
    uniformly, the model's predictions being those of the first chunk only). The stream tracks
    which conversation position each cache slot holds (:meth:`kept`), so a table can score
    what was kept with :func:`retained_attention`.

    Parameters
    ----------
    model : transformers causal LM (eager attention)
    press : kvpress prefill press or None
        ``None`` keeps the full cache (the baseline).

    Examples
    --------
    >>> stream = PressedStream(model, SnapKVPress(0.5, window_size=8))   # doctest: +SKIP
    >>> stream.feed(turn_ids, n_kept=100); stream.kept().sum(axis=2)     # doctest: +SKIP
    """

    def __init__(self, model, press=None):
        from transformers import DynamicCache
        self.model, self.press = model, press
        self.cache = DynamicCache()
        self.position = 0           # conversation tokens fed so far
        self.slots = None           # per layer: (kv_heads, cached) positions, int64
        self.seconds = 0.0          # CPU seconds in the press's compress

    def feed(self, ids, n_kept=None) -> None:
        """Prefill the token ids ``ids`` (``(1, q)`` tensor) on the carried cache, then compress
        the cache to ``n_kept`` slots per head (``None``, or not fewer than the cache holds: no
        compression; the press's ``compression_ratio`` is set to reach exactly ``n_kept``)."""
        import time

        import torch
        mods = _attention_modules(self.model)
        q, start = int(ids.shape[1]), self.position
        first_chunk = self.cache.get_seq_length() == 0
        if self.slots is None:
            self.slots = [None] * len(mods)
        press = self.press
        total = self.cache.get_seq_length() + q
        squeeze = press is not None and n_kept is not None and n_kept < total
        if squeeze:
            # kvpress keeps max(1, int(n * (1 - ratio))) keys: half a key of slack makes it n_kept
            press.compression_ratio = 1.0 - (n_kept + 0.5) / total

        def hook_for(li):
            def hook(module, args, kwargs, output):
                if kwargs.get("past_key_values") is not self.cache:     # a press's own inner pass
                    return output
                layer = self.cache.layers[li]
                kv = layer.keys.shape[1]
                new = np.tile(np.arange(start, start + q, dtype=np.int64), (kv, 1))
                pos = new if self.slots[li] is None else np.concatenate([self.slots[li], new], axis=1)
                if squeeze:
                    t0 = time.process_time()
                    # the slots' positions ride along: StreamOracle reads them, kvpress's presses ignore them
                    keys, values = press.compress(module, kwargs["hidden_states"], layer.keys, layer.values,
                                                  output[1], dict(kwargs, slot_positions=pos))
                    self.seconds += time.process_time() - t0
                    pos = np.take_along_axis(pos, _slots_kept(layer.keys, keys, li), axis=1)
                    layer.keys, layer.values = keys, values
                self.slots[li] = pos
                return output
            return hook

        if press is not None and first_chunk:
            press.post_init_from_model(self.model)     # memopt's presses: the model's predictions
        handles = [m.register_forward_hook(hook_for(li), with_kwargs=True) for li, m in enumerate(mods)]
        try:
            with torch.no_grad():
                _language_model(self.model)(input_ids=ids, past_key_values=self.cache,
                                            position_ids=torch.arange(start, start + q)[None])
        finally:
            for h in handles:
                h.remove()
            drop = getattr(press, "_drop_pre_hook", None)
            if drop is not None:
                drop()
        self.position = start + q

    def answer(self, pipe, question_ids, max_new_tokens: int) -> str:
        """kvpress's greedy ``generate_answer`` on the stream's cache at its true position; the
        question and the answer are removed from the cache afterwards, as the pipeline does."""
        return answer_on_cache(pipe, self.cache, question_ids, self.position, max_new_tokens)

    def kept(self) -> np.ndarray:
        """Conversation positions in the cache: bool ``(layers, kv_heads, position)``."""
        L, kv = len(self.slots), self.slots[0].shape[0]
        out = np.zeros((L, kv, self.position), dtype=bool)
        for li, pos in enumerate(self.slots):
            np.put_along_axis(out[li], pos, True, axis=1)
        return out


class StreamOracle:
    """The offline optimum of a conversation streamed through :class:`PressedStream`: at every
    checkpoint (the compression after a chunk) it keeps the slots that maximise the attention
    the later question turns put on the cache they are asked on, summed over the conversation
    (:func:`memopt.cache.kv_optimum.stream_optimum_head` per layer and KV head, solved exactly
    with a checked matching bound). So no press streamed at the same budgets retains more of the
    question turns' summed attention. It sees every later question: **an upper bound, not a
    deployable policy**, and it runs in :class:`PressedStream` only (its ``compress`` reads the
    slots' positions the stream passes in ``kwargs["slot_positions"]``).

    Parameters
    ----------
    ends : sequence of int
        Conversation tokens fed by each checkpoint (the chunks' cumulative lengths).
    kept : sequence of int
        Slots per (layer, KV head) after each checkpoint (the ``n_kept`` given to ``feed``;
        ``>= ends[c]`` means no compression there).
    gains : dict
        Checkpoint index -> int ``(layers, kv_heads, ends[c])``: the attention of the question
        asked on the cache after that checkpoint (:func:`span_attention` of the question turn).

    Attributes
    ----------
    retained, bound : int
        The optimum (units of ``1 / scale``, summed over heads and questions) and its checked
        upper bound, equal.
    last : numpy.ndarray
        ``(layers, kv_heads, ends[-1])``: the last checkpoint after which each position is held.

    Examples
    --------
    >>> g = {0: np.array([[[5, 1]]]), 1: np.array([[[0, 2, 4, 1]]])}
    >>> StreamOracle([2, 4], [1, 2], g).retained
    10
    """

    def __init__(self, ends, kept, gains: dict):
        from memopt.cache.kv_optimum import stream_optimum_head
        self.ends = np.asarray(ends, dtype=np.int64)
        self.kept_slots = np.minimum(np.asarray(kept, dtype=np.int64), self.ends)
        m, T = len(self.ends), int(self.ends[-1]) if len(self.ends) else 0
        if not gains:
            raise OptionError("StreamOracle needs the attention of at least one question turn")
        shape = next(iter(gains.values())).shape[:2]
        G = np.zeros((*shape, m, T), dtype=np.int64)
        for c, g in gains.items():
            if not 0 <= c < m or g.shape != (*shape, self.ends[c]):
                raise OptionError(f"StreamOracle: the gains of checkpoint {c} are {g.shape}, expected "
                                  f"{(*shape, int(self.ends[c])) if 0 <= c < m else 'a checkpoint index'}")
            G[:, :, c, :g.shape[2]] = g
        self.last = np.zeros((*shape, T), dtype=np.int64)
        self.retained = self.bound = 0
        for li in range(shape[0]):
            for h in range(shape[1]):
                value, self.last[li, h], bound = stream_optimum_head(G[li, h], self.ends, self.kept_slots)
                self.retained += value
                self.bound += bound
        self.compression_ratio = 0.0         # set by PressedStream; the schedule decides
        self.seconds = 0.0

    def post_init_from_model(self, model) -> None:
        """Nothing to prepare: the schedule was solved at construction."""

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        """Keep the slots the schedule holds after this checkpoint (found by the stream's
        position count), in cache order."""
        pos = kwargs.get("slot_positions")
        if pos is None:
            raise OptionError("StreamOracle runs inside PressedStream (it needs the slots' positions)")
        c = int(np.searchsorted(self.ends, int(pos.max()) + 1))
        if c >= len(self.ends) or self.ends[c] != int(pos.max()) + 1:
            raise OptionError(f"StreamOracle: {int(pos.max()) + 1} tokens fed is no checkpoint of {self.ends.tolist()}")
        held = np.take_along_axis(self.last[module.layer_idx], pos, axis=1) >= c
        counts = held.sum(axis=1)
        if (counts != self.kept_slots[c]).any():
            raise InternalError("kvpress-stream-oracle", f"checkpoint {c}: the schedule holds {counts.tolist()} "
                                                         f"slots, the stream asks for {int(self.kept_slots[c])}")
        return _gather(keys, values, np.nonzero(held)[1].reshape(held.shape[0], int(counts[0])))


def _slots_kept(before, after, li: int) -> np.ndarray:
    """Which slots of ``before`` (``(1, kv, n, d)`` keys) the compressed ``after`` holds, in
    ``after``'s order, per head: ``(kv, m)`` (a press gathers keys, so they are bit-identical)."""
    b, a = before[0].cpu().numpy(), after[0].cpu().numpy()
    out = np.zeros((a.shape[0], a.shape[1]), dtype=np.int64)
    for h in range(a.shape[0]):
        where = {b[h, j].tobytes(): j for j in range(b.shape[1])}
        for i, row in enumerate(a[h]):
            j = where.get(row.tobytes())
            if j is None:
                raise InternalError("kvpress-kept", f"layer {li} head {h}: a kept key is not a cached key")
            out[h, i] = j
    return out


def kept_in_cache(full, compressed) -> np.ndarray:
    """Which positions of the ``full`` cache the ``compressed`` one holds, per layer and KV
    head: bool ``(layers, kv_heads, n)``. A press gathers keys, so each kept key is found
    bit-identical among the full cache's keys. Pass the pipeline a cache
    (``pipe(..., press=press, cache=DynamicCache())``): after the call it holds the compressed
    context, so a table learns what a press kept without another prefill.

    Parameters
    ----------
    full, compressed : transformers ``DynamicCache``
        The context's cache without and with the press.

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    InternalError
        A kept key that is no context key.
    """
    L = len(full.layers)
    kv, n = full.layers[0].keys.shape[1], full.layers[0].keys.shape[2]
    out = np.zeros((L, kv, n), dtype=bool)
    for li in range(L):
        np.put_along_axis(out[li], _slots_kept(full.layers[li].keys, compressed.layers[li].keys, li), True, axis=1)
    return out


def retained_attention(kept: np.ndarray, future: np.ndarray) -> tuple[int, int]:
    """``(retained, total)``: the continuation's full-cache attention (``future``, from
    :func:`continuation_attention`) on the ``kept`` positions, and on all context positions
    (exact integers, units of ``1 / scale``).

    Parameters
    ----------
    kept : array of bool, ``(layers, kv_heads, n)``
    future : array of int, same shape

    Returns
    -------
    tuple of int

    Examples
    --------
    >>> retained_attention(np.array([[[True, False]]]), np.array([[[3, 5]]]))
    (3, 8)
    """
    kept, future = np.asarray(kept, dtype=bool), np.asarray(future, dtype=np.int64)
    if kept.shape != future.shape:
        raise OptionError(f"kept positions {kept.shape} and attention {future.shape} differ in shape")
    return int(future[kept].sum()), int(future.sum())


def tiny_model(*, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 32, seed: int = 0):
    """A random tiny Llama (eager attention) and a character tokenizer built locally, for tests
    and smoke runs of the presses in kvpress's pipeline: nothing is downloaded.

    Parameters
    ----------
    layers, heads, kv_heads, hidden : int
        The ``LlamaConfig`` sizes (``heads`` query heads share ``kv_heads`` KV heads).
    seed : int
        ``torch.manual_seed`` of the weights.

    Returns
    -------
    tuple
        ``(model, tokenizer)``: ``LlamaForCausalLM`` and ``PreTrainedTokenizerFast`` (one token
        per printable character, ``<s>`` / ``</s>`` / ``<unk>``).

    Examples
    --------
    >>> model, tok = tiny_model()                  # doctest: +SKIP
    >>> tok.decode(tok.encode("key 42"))           # doctest: +SKIP
    'key 42'
    """
    import string

    from memopt._torchvision import allow_import
    allow_import()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(sorted(set(string.printable)))})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=8192, attn_implementation="eager", eos_token_id=2, bos_token_id=1)
    return LlamaForCausalLM(cfg).eval(), tok
