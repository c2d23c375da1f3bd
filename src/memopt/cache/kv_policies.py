"""KV-cache eviction policies under a per-head budget, replayed on an :class:`AttentionTrace`.

**Model** (shared with :mod:`memopt.cache.kv_optimum`). Every (layer, KV head) is an
independent cache of at most ``budget`` past positions. Steps ``t < prefill`` are the prompt:
it is processed with the full cache (nothing is evicted, nothing is counted). From step
``prefill`` on, step ``t`` attends to the cached past positions plus itself; afterwards the
policy sees the step's attention row (only the entries of its cached positions and of ``t``),
``t`` joins the cache and positions are evicted until at most ``budget`` remain — at the end of
the prompt this compresses it to ``budget`` at once. **Evicted positions never come back.**
The trace-level metric is the **retained attention**: the attention mass of the decode steps
(``t >= prefill``) that falls on cached past positions, ``sum_t sum_{j in cache_t} a_t[j]``,
out of ``sum_t sum_{j < t} a_t[j]`` (self-attention is always available and not counted).
Attention rows are those of the full-cache pass (the usual trace-level proxy: a real model
under eviction renormalises over what it kept).

Each policy evicts the candidates with the smallest integer score; ties go to the **oldest
position** (exact: scores are integer sums of the trace's integer attention). Scores, with the
reference each one follows (GQA: the trace sums the query heads of a KV head, so a score that
the reference averages over a group is the same score times ``group``: same decisions):

* ``streaming-llm`` — StreamingLLM (Xiao et al. 2023), ``mit-han-lab/streaming-llm``
  ``streaming_llm/kv_cache.py`` (``StartRecentKVCache``: keep ``[0, start_size)`` and the last
  ``recent_size`` positions) and ``NVIDIA/kvpress`` ``kvpress/presses/streaming_llm_press.py``
  (score 1 for the ``n_sink`` first positions and the recent ones, 0 in between): the first
  ``sinks`` positions (default 4, at most ``budget``) are never evicted; otherwise the oldest
  goes.
* ``h2o`` — Heavy-Hitter Oracle (Zhang et al. 2023), ``FMInference/H2O``
  ``h2o_hf/utils_real_drop/modify_llama.py`` (``H2OKVCache_LayerWise``: ``hh_score`` = the
  attention a position received, summed over all queries since it entered — prompt rows
  included — and over the batch; keep the top ``hh_size`` of the positions outside the last
  ``recent_size``, plus those). Here ``recent`` (default ``budget // 2``) newest positions are
  protected, the rest ranked by accumulated attention.
* ``snapkv`` — SnapKV (Li et al. 2024), ``FasterDecoding/SnapKV``
  ``snapkv/monkeypatch/snapkv_utils.py`` (``SnapKVCluster.update_kv``) and ``NVIDIA/kvpress``
  ``kvpress/presses/snapkv_press.py``: the last ``window`` queries (the *observation window*)
  vote: score = their attention summed over the window (kvpress: mean over the window, mean
  over the group), smoothed by ``avg_pool1d(kernel_size=kernel, padding=kernel // 2,
  stride=1)`` over the candidates in cache order (zero padding counted, so the average is the
  window sum divided by ``kernel``: a constant), the window's own positions always kept. At
  the end of the prompt this is SnapKV's prefill compression; during decoding the same rule is
  re-applied at every step over the cache as it is (kvpress ``DecodingPress`` with a
  compression interval of one step), so the budget holds throughout. ``window`` defaults to
  ``min(32, budget // 2)`` (SnapKV's default observation window is 32) and must not exceed
  ``budget``; ``kernel`` defaults to 5.
* ``tova`` — TOVA (Oren et al. 2024), ``NVIDIA/kvpress`` ``kvpress/presses/tova_press.py``:
  score = the current query's attention, averaged over all heads of the layer (here summed over
  the layer's KV heads, so every head of a layer keeps the same positions); the current token
  is never evicted (kvpress's ``F.pad(..., value=scores.max())``; the TOVA paper lets it
  compete, a difference the press notes as negligible).
* ``lru`` — least recently *used*, where position ``j`` is used at step ``t`` when it gets at
  least the uniform share of what the step attends to (``a_t[j] * n >= sum of a_t`` over the
  ``n`` visible positions); arriving counts as a use. Score = last use.
* ``rmm`` — **fixed-lag commit** with demonstrated utility: the decision to evict a position
  after step ``t`` is committed only after ``lag`` = H more steps, using the utility the
  position has demonstrated through step ``t + H``:
  ``u(j) = sum_{s = j}^{t + H} w_s a_s[j]`` with ``w_s = 1`` if the prediction at step ``s``
  was correct, else 0 (``weighting="correct"``; ``"uniform"``: every ``w_s = 1``). The
  ``recent`` newest positions are protected as in H2O. With ``weighting="uniform"`` and
  ``H = 0`` the score *is* H2O's accumulated attention, so the policy is exactly ``h2o`` (a
  test checks the eviction schedules are identical). ``lag=math.inf`` scores by the whole
  trace (a clairvoyant greedy); the end of the commit-lag axis is the offline optimum
  (:func:`memopt.cache.kv_optimum.kv_optimum`), which no policy exceeds. In deployment the
  steps between an eviction and its commit run with the uncommitted positions still held
  (a staging buffer), and correctness is known once the next token is (teacher-forced text).

:func:`simulate_kv` replays a policy on every head at once (numpy, vectorised over heads;
``O(T^2)`` per head) and checks the resulting schedule with :func:`schedule_retained`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from memopt.errors import InternalError, OptionError
from memopt.cache.kv_trace import AttentionTrace

__all__ = ["KV_POLICIES", "KVResult", "simulate_kv", "schedule_retained", "check_budget",
           "arrivals", "WEIGHTINGS"]

KV_POLICIES = ("streaming-llm", "h2o", "snapkv", "tova", "lru", "rmm")
WEIGHTINGS = ("correct", "uniform")
_BIG = np.int64(2**62)


@dataclass(frozen=True)
class KVResult:
    """Retained attention of one policy on one trace: ``retained`` out of ``total`` (integers,
    units of ``1 / scale``, summed over all heads), ``fraction = retained / total``.
    ``per_head`` (not in :meth:`to_dict`): retained per head; ``last_step`` (not in
    :meth:`to_dict`): the schedule, ``last_step[k, j]`` = last step at which position ``j`` is
    in head ``k``'s cache as a past position (``j`` itself if never; ``T - 1`` if never
    evicted)."""

    policy: str
    budget: int
    prefill: int
    steps: int
    heads: int
    retained: int
    total: int
    params: dict
    per_head: np.ndarray = None
    last_step: np.ndarray = None

    @property
    def fraction(self) -> float:
        return self.retained / self.total if self.total else 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("per_head")
        d.pop("last_step")
        d["fraction"] = self.fraction
        return d


def check_budget(budget, trace: AttentionTrace, what: str = "budget") -> int:
    """``budget`` as a number of positions per head: an integer ``>= 0``, or a fraction of the
    trace length given as a float in ``(0, 1]`` (rounded down)."""
    if isinstance(budget, (bool, np.bool_)):
        raise OptionError(f"{what} must be a number of positions, got {budget!r}")
    if isinstance(budget, (float, np.floating)):
        if not math.isfinite(budget) or not 0 < budget <= 1:
            raise OptionError(f"a fractional {what} must lie in (0, 1], got {budget!r}")
        return int(math.floor(budget * trace.steps))
    if not isinstance(budget, (int, np.integer)):
        raise OptionError(f"{what} must be an integer number of positions, got {type(budget).__name__}")
    if budget < 0:
        raise OptionError(f"{what} is negative: {budget}")
    return int(budget)


def check_prefill(prefill, trace: AttentionTrace) -> int:
    if isinstance(prefill, bool) or not isinstance(prefill, (int, np.integer)) or not 0 <= prefill <= trace.steps:
        raise OptionError(f"prefill must be an integer in [0, {trace.steps}], got {prefill!r}")
    return int(prefill)


def arrivals(T: int, prefill: int) -> np.ndarray:
    """First step at which each position can be in the cache as a past position:
    ``max(j + 1, prefill)``."""
    return np.maximum(np.arange(T, dtype=np.int64) + 1, prefill)


def schedule_retained(trace: AttentionTrace, last_step: np.ndarray, budget: int, prefill: int = 0
                      ) -> np.ndarray:
    """Check a schedule (``last_step[k, j]``, see :class:`KVResult`) against the model and
    return the retained attention per head (exact int64). ``InternalError`` if it breaks the
    budget at some decode step or is not a schedule (callers pass schedules they computed)."""
    A = trace.heads()
    K, T = A.shape[0], trace.steps
    e = np.asarray(last_step, dtype=np.int64)
    if e.shape != (K, T):
        raise InternalError("kv-schedule-shape", f"schedule of shape {e.shape}, expected {(K, T)}")
    arr = arrivals(T, prefill)
    if T and ((e < (arr - 1)[None, :]) | (e > T - 1)).any():
        raise InternalError("kv-schedule-range", "a position's last step lies outside [arrival - 1, T - 1]")
    # occupancy of step t: positions j < t with arr_j <= t <= e_j (difference array)
    occ = np.zeros((K, T + 1), dtype=np.int64)
    rows = np.repeat(np.arange(K), T)
    starts = np.tile(arr, K)
    ends = e.reshape(-1) + 1
    ok = starts < ends
    np.add.at(occ, (rows[ok], np.minimum(starts[ok], T)), 1)
    np.add.at(occ, (rows[ok], ends[ok]), -1)
    occ = np.cumsum(occ, axis=1)[:, :T]
    if T > prefill and occ[:, prefill:].max(initial=0) > budget:
        raise InternalError("kv-schedule-budget", f"a schedule holds {int(occ[:, prefill:].max())} past "
                                                  f"positions at a decode step, budget {budget}")
    t_idx = np.arange(T)[:, None]
    j_idx = np.arange(T)[None, :]
    out = np.zeros(K, dtype=np.int64)
    for k in range(K):
        held = (t_idx >= arr[None, :]) & (t_idx <= e[k][None, :]) & (j_idx < t_idx)
        out[k] = int(A[k].astype(np.int64)[held].sum())
    return out


def total_mass(trace: AttentionTrace, prefill: int) -> np.ndarray:
    A = trace.heads()
    T = trace.steps
    low = np.tril(np.ones((T, T), dtype=bool), -1)
    low[:prefill] = False
    return np.array([int(A[k].astype(np.int64)[low].sum()) for k in range(A.shape[0])], dtype=np.int64)


def _pool(vals: np.ndarray, kernel: int) -> np.ndarray:
    """Sum over a centred window of ``kernel`` along axis 1 with zero padding (``avg_pool1d``
    with ``padding=kernel // 2``, ``stride=1``, times ``kernel``)."""
    K, n = vals.shape
    p = kernel // 2
    c = np.zeros((K, n + 2 * p + 1), dtype=np.int64)
    c[:, p + 1:p + 1 + n] = vals
    c = np.cumsum(c, axis=1)
    n_out = n + 2 * p - kernel + 1
    return c[:, kernel:kernel + n_out] - c[:, :n_out]


def simulate_kv(trace: AttentionTrace, policy: str, budget, *, prefill: int = 0, sinks: int = 4,
                recent: int | None = None, window: int | None = None, kernel: int = 5,
                lag: float = 0, weighting: str = "correct") -> KVResult:
    """Replay ``policy`` (one of :data:`KV_POLICIES`) on every head of ``trace`` with at most
    ``budget`` past positions per head from step ``prefill`` on (module doc).

    >>> from memopt.cache.kv_trace import make_attention_trace
    >>> a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
    >>> tr = make_attention_trace(a, [True] * 4, scale=8)
    >>> r = simulate_kv(tr, "h2o", 1, recent=0)
    >>> r.retained, r.total, r.last_step.tolist()
    (15, 19, [[3, 1, 2, 3]])
    """
    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"simulate_kv needs an AttentionTrace, got {type(trace).__name__}")
    if not isinstance(policy, str) or policy.strip().lower() not in KV_POLICIES:
        raise OptionError(f"unknown KV policy {policy!r}; choose from {', '.join(KV_POLICIES)}")
    name = policy.strip().lower()
    B = check_budget(budget, trace)
    P = check_prefill(prefill, trace)
    T, K, Hh = trace.steps, trace.n_heads, trace.kv_heads
    params: dict = {}
    if name in ("h2o", "rmm"):
        r = B // 2 if recent is None else recent
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r <= B:
            raise OptionError(f"recent must be an integer in [0, budget = {B}], got {r!r}")
        params["recent"] = r = int(r)
    if name == "streaming-llm":
        if isinstance(sinks, bool) or not isinstance(sinks, (int, np.integer)) or sinks < 0:
            raise OptionError(f"sinks must be a non-negative integer, got {sinks!r}")
        params["sinks"] = n_sink = min(int(sinks), B)
    if name == "snapkv":
        w = min(32, max(1, B // 2)) if window is None else window
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 1 <= w <= max(B, 1):
            raise OptionError(f"window must be an integer in [1, budget = {B}], got {w!r}")
        if isinstance(kernel, bool) or not isinstance(kernel, (int, np.integer)) or kernel < 1 or kernel % 2 == 0:
            raise OptionError(f"kernel must be an odd positive integer, got {kernel!r}")
        w, kk = int(w), int(kernel)
        params["window"], params["kernel"] = w, kk
    if name == "rmm":
        if isinstance(lag, bool) or not isinstance(lag, (int, float, np.integer, np.floating)) or \
                (isinstance(lag, float) and math.isnan(lag)) or lag < 0 or \
                (isinstance(lag, float) and not lag.is_integer() and not math.isinf(lag)):
            raise OptionError(f"lag must be a non-negative integer or math.inf, got {lag!r}")
        if weighting not in WEIGHTINGS:
            raise OptionError(f"unknown weighting {weighting!r}; choose from {', '.join(WEIGHTINGS)}")
        H = T if math.isinf(lag) else int(min(lag, T))
        params["lag"] = "inf" if math.isinf(lag) else int(lag)
        params["weighting"] = weighting
        wts = trace.correct.astype(np.int64) if weighting == "correct" else np.ones(T, dtype=np.int64)

    A = trace.heads()
    cached = np.zeros((K, T), dtype=bool)          # past positions in the cache
    last = np.full((K, T), T - 1, dtype=np.int64)
    score = np.zeros((K, T), dtype=np.int64)       # h2o / rmm accumulated, lru last use
    look = np.zeros((K, T), dtype=np.int64)        # rmm: rows t+1 .. t+H
    win = np.zeros((K, T), dtype=np.int64)         # snapkv: sum of the last `window` rows
    pos = np.arange(T, dtype=np.int64)
    retained = np.zeros(K, dtype=np.int64)
    if name == "rmm":
        for s in range(1, min(H, T - 1) + 1):
            look[:, :s + 1] += wts[s] * A[:, s, :s + 1]
    for t in range(T):
        row = A[:, t, :t + 1].astype(np.int64)
        vis = cached[:, :t]
        if t >= P:
            retained += (row[:, :t] * vis).sum(axis=1)
        # --- observe the step (only what the cache shows: cached positions and t itself)
        seen = np.concatenate([vis, np.ones((K, 1), dtype=bool)], axis=1)
        if name == "h2o":
            score[:, :t + 1] += row * seen
        elif name == "rmm":
            score[:, :t + 1] += wts[t] * row * seen
            if t >= 1 and H > 0:     # look holds rows t+1 .. t+H
                look[:, :t + 1] -= wts[t] * A[:, t, :t + 1]
                if t + H < T:
                    s = t + H
                    look[:, :s + 1] += wts[s] * A[:, s, :s + 1]
        elif name == "lru":
            n_vis = seen.sum(axis=1)
            tot = (row * seen).sum(axis=1)
            used = seen & (row * n_vis[:, None] >= tot[:, None])
            score[:, :t + 1] = np.where(used, t, score[:, :t + 1])
            score[:, t] = t
        elif name == "snapkv":
            win[:, :t + 1] += row * seen
            s = t - params["window"]
            if s >= 0:      # row s leaves the window (entries of evicted positions are unused)
                win[:, :s + 1] -= A[:, s, :s + 1]
        cached[:, t] = True
        n = int(cached[0, :t + 1].sum())      # the same count on every head
        if t + 1 < P or n <= B or t == T - 1:
            continue
        excess = n - B
        # --- keys: smallest evicted first; protected = _BIG; not cached = more than _BIG
        if name == "streaming-llm":
            key = pos[None, :t + 1].repeat(K, axis=0).copy()
            key[:, :n_sink] = _BIG
        elif name in ("h2o", "rmm"):
            key = score[:, :t + 1] + (look[:, :t + 1] if name == "rmm" else 0)
            key = key.copy()
            if r:
                key[:, max(0, t + 1 - r):] = _BIG
        elif name == "tova":
            lay = row.reshape(trace.layers, Hh, t + 1).sum(axis=1)
            key = np.repeat(lay, Hh, axis=0)
            if B >= 1:
                key[:, t] = _BIG
        elif name == "lru":
            key = score[:, :t + 1].copy()
        elif name == "snapkv":
            w = min(params["window"], B)
            cand = cached[:, :t + 1].copy()
            if w:
                cand[:, t + 1 - w:] = False
            n_c = int(cand[0].sum())
            order = np.argsort(~cand, axis=1, kind="stable")[:, :n_c]
            vals = np.take_along_axis(win[:, :t + 1], order, axis=1)
            key = np.full((K, t + 1), _BIG, dtype=np.int64)
            np.put_along_axis(key, order, _pool(vals, kk), axis=1)
        key = np.where(cached[:, :t + 1], key, _BIG + 1)
        if excess == 1:
            ev = np.argmin(key, axis=1)[:, None]
        else:
            ev = np.argsort(key, axis=1, kind="stable")[:, :excess]
        chosen = np.take_along_axis(key, ev, axis=1)
        if (chosen > _BIG).any():
            raise InternalError("kv-evict", f"{name}: evicted a position that is not cached")
        if (chosen == _BIG).any():
            raise InternalError("kv-evict", f"{name}: the protected positions exceed the budget {B}")
        np.put_along_axis(cached, ev, False, axis=1)
        np.put_along_axis(last, ev, t, axis=1)
    check = schedule_retained(trace, last, B, P)
    if not np.array_equal(check, retained):
        raise InternalError("kv-retained", f"{name}: simulated retained attention disagrees with the "
                                           "schedule's")
    total = total_mass(trace, P)
    return KVResult(name, B, P, T, K, int(retained.sum()), int(total.sum()), params, retained, last)
