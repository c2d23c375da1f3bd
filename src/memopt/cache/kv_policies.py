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
  re-applied at every step over the cache as it is, so the budget holds throughout. This
  per-step variant is memopt's, not kvpress's ``SnapKVPress`` (prefill only, window 64, pooled
  over contiguous positions; a ``DecodingPress`` around it needs more buffered queries than the
  window, so it cannot run every step): ``docs/cache.md`` compares the two. ``window`` defaults to
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

**Budgets.** ``budget`` is one number of past positions per (layer, KV head), or a list of one
number per layer (``budget[l]`` for every KV head of layer ``l``); a float in ``(0, 1]`` is a
fraction of the trace length. ``share="head"`` (default): every (layer, KV head) holds at most
its budget. ``share="layer"``: the KV heads of layer ``l`` share ``kv_heads * budget[l]``
positions — each evicts by the same key as per head, and the layer's excess goes to the smallest
keys over all of its heads (ties: oldest position, then lowest head), so a head that attends
widely can hold more than another. Protected positions (sinks, recent, window, current token)
are protected per head. :func:`memopt.cache.kv_optimum.kv_optimum` solves the per-head model.

**One state machine, two drivers.** :class:`KVPolicy` is each policy as an online per-step
state machine: :meth:`KVPolicy.observe` takes step ``t``'s attention row (integer, the entries
of positions the step could not see are ignored or zero) and the step's correctness, and returns
the evictions decided now. :func:`simulate_kv` drives it with a trace's rows (open loop, the
full-cache attention); :mod:`memopt.cache.kv_eval` drives the same object inside the real model
(closed loop: the rows the model produced under the evicted cache). For ``rmm`` with lag ``H``
the decision about step ``t`` is returned when row ``t + H`` arrives (the schedule records it
at step ``t``: the retained attention is that of the committed schedule), so in the model the
undecided positions stay attended for ``H`` steps — the staging buffer, ``H`` positions beyond
the budget, which :mod:`memopt.cache.kv_eval` reports as ``peak_held``.

:func:`simulate_kv` replays a policy on every head at once (numpy, vectorised over heads;
``O(T^2)`` per head) and checks the resulting schedule with :func:`schedule_retained`.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from memopt.errors import InternalError, OptionError
from memopt.cache.kv_trace import AttentionTrace

__all__ = ["KV_POLICIES", "KVResult", "KVPolicy", "simulate_kv", "schedule_retained", "check_budget",
           "check_budgets", "check_share", "arrivals", "WEIGHTINGS", "SHARES", "policy_result", "RetainedAttention"]

KV_POLICIES = ("streaming-llm", "h2o", "snapkv", "tova", "lru", "rmm")
WEIGHTINGS = ("correct", "uniform")
SHARES = ("head", "layer")
_BIG = np.int64(2**62)


class RetainedAttention:
    """What a policy's result and the offline optimum's share: ``fraction`` and a
    :meth:`to_dict` without the per-head arrays (``per_head``, ``last_step``)."""

    @property
    def fraction(self) -> float:
        return self.retained / self.total if self.total else 1.0

    def to_dict(self, **extra) -> dict:
        d = asdict(self)
        d.pop("per_head")
        d.pop("last_step")
        d.update(extra)
        d["fraction"] = self.fraction
        return d


@dataclass(frozen=True)
class KVResult(RetainedAttention):
    """Retained attention of one policy on one trace: ``retained`` out of ``total`` (integers,
    units of ``1 / scale``, summed over all heads), ``fraction = retained / total``.
    ``budget``: an int, or the list of per-layer budgets. ``per_head`` (not in
    :meth:`to_dict`): retained per head; ``last_step`` (not in :meth:`to_dict`): the schedule,
    ``last_step[k, j]`` = last step at which position ``j`` is in head ``k``'s cache as a past
    position (``j`` itself if never; ``T - 1`` if never evicted)."""

    policy: str
    budget: int | list
    prefill: int
    steps: int
    heads: int
    retained: int
    total: int
    params: dict
    per_head: np.ndarray = None
    last_step: np.ndarray = None


def _steps_of(trace_or_steps) -> int:
    return trace_or_steps.steps if isinstance(trace_or_steps, AttentionTrace) else int(trace_or_steps)


def check_budget(budget, trace, what: str = "budget") -> int:
    """``budget`` as a number of positions per head: an integer ``>= 0``, or a fraction of the
    trace length (``trace``: an :class:`AttentionTrace` or its number of steps) given as a
    float in ``(0, 1]`` (rounded down)."""
    if isinstance(budget, (bool, np.bool_)):
        raise OptionError(f"{what} must be a number of positions, got {budget!r}")
    if isinstance(budget, (float, np.floating)):
        if not math.isfinite(budget) or not 0 < budget <= 1:
            raise OptionError(f"a fractional {what} must lie in (0, 1], got {budget!r}")
        return int(math.floor(budget * _steps_of(trace)))
    if not isinstance(budget, (int, np.integer)):
        raise OptionError(f"{what} must be an integer number of positions, got {type(budget).__name__}")
    if budget < 0:
        raise OptionError(f"{what} is negative: {budget}")
    return int(budget)


def check_budgets(budget, steps: int, layers: int, kv_heads: int) -> tuple[np.ndarray, int | list]:
    """Per-head budgets ``(layers * kv_heads,)`` from one budget or a list of one per layer
    (module doc), and the budget as it is reported (an int, or the list of per-layer ints)."""
    if isinstance(budget, (list, tuple, np.ndarray)):
        if len(budget) != layers:
            raise OptionError(f"a per-layer budget needs {layers} values (one per layer), got {len(budget)}")
        per_layer = [check_budget(b, steps, f"budget of layer {i}") for i, b in enumerate(budget)]
        return np.repeat(np.array(per_layer, dtype=np.int64), kv_heads), per_layer
    b = check_budget(budget, steps)
    return np.full(layers * kv_heads, b, dtype=np.int64), b


def check_share(share) -> str:
    """``share`` (:data:`SHARES`), or :class:`OptionError`."""
    if share not in SHARES:
        raise OptionError(f"unknown budget sharing {share!r}; choose from {', '.join(SHARES)}")
    return share


def check_prefill(prefill, trace) -> int:
    T = _steps_of(trace)
    if isinstance(prefill, bool) or not isinstance(prefill, (int, np.integer)) or not 0 <= prefill <= T:
        raise OptionError(f"prefill must be an integer in [0, {T}], got {prefill!r}")
    return int(prefill)


def arrivals(T: int, prefill: int) -> np.ndarray:
    """First step at which each position can be in the cache as a past position:
    ``max(j + 1, prefill)``."""
    return np.maximum(np.arange(T, dtype=np.int64) + 1, prefill)


def schedule_retained(trace: AttentionTrace, last_step: np.ndarray, budget, prefill: int = 0,
                      share: str = "head") -> np.ndarray:
    """Check a schedule (``last_step[k, j]``, see :class:`KVResult`) against the model and
    return the retained attention per head (exact int64). ``budget``: an int, or per-head
    budgets ``(n_heads,)``; ``share="layer"`` checks the sum over each layer's KV heads against
    the sum of their budgets. ``InternalError`` if the schedule breaks the budget at some decode
    step or is not a schedule (callers pass schedules they computed)."""
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
    caps = np.broadcast_to(np.asarray(budget, dtype=np.int64), (K,))
    if share == "layer":
        occ = occ.reshape(trace.layers, trace.kv_heads, T).sum(axis=1)
        caps = caps.reshape(trace.layers, trace.kv_heads).sum(axis=1)
    elif share != "head":
        raise InternalError("kv-schedule-share", f"unknown budget sharing {share!r}")
    if T > prefill and (occ[:, prefill:] > caps[:, None]).any():
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


def _nonneg_int(value, what: str, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0 or \
            (high is not None and value > high):
        rng = f"an integer in [0, {high}]" if high is not None else "a non-negative integer"
        raise OptionError(f"{what} must be {rng}, got {value!r}")
    return int(value)


class KVPolicy:
    """One KV policy as an online state machine over ``steps`` steps and ``layers * kv_heads``
    caches (module doc: the scores, budgets and the lag).

    Feed the rows in order with :meth:`observe` (row ``t``: int64 ``(n_heads, t + 1)``, the
    step's attention to positions ``0..t``; entries of positions a head does not hold are
    ignored where the score depends on what was visible) and call :meth:`finish` after the
    last one. Each returns the evictions decided by that call as ``(step, heads, positions)``
    triples. :attr:`last_step` is the schedule so far (``KVResult.last_step``).

    >>> import numpy as np
    >>> p = KVPolicy("h2o", steps=3, layers=1, kv_heads=1, budget=1, recent=0)
    >>> p.observe(np.array([[8]])), p.observe(np.array([[6, 2]]))
    ([], [(1, array([0]), array([1]))])
    """

    def __init__(self, policy: str, *, steps: int, layers: int, kv_heads: int, budget, prefill: int = 0,
                 share: str = "head", sinks: int = 4, recent: int | None = None,
                 window: int | None = None, kernel: int = 5, lag: float = 0, weighting: str = "correct"):
        if not isinstance(policy, str) or policy.strip().lower() not in KV_POLICIES:
            raise OptionError(f"unknown KV policy {policy!r}; choose from {', '.join(KV_POLICIES)}")
        check_share(share)
        name = self.name = policy.strip().lower()
        T = self.steps = _nonneg_int(steps, "steps")
        self.layers, self.kv_heads = int(layers), int(kv_heads)
        K = self.n_heads = self.layers * self.kv_heads
        self.budgets, self.budget = check_budgets(budget, T, self.layers, self.kv_heads)
        self.prefill = check_prefill(prefill, T)
        self.share = share
        B = self.budgets
        b_min = int(B.min()) if K else 0
        params: dict = {}
        if share == "layer":
            params["share"] = "layer"
        self.lag = 0
        self.recent = np.zeros(K, dtype=np.int64)
        if name in ("h2o", "rmm"):
            if recent is None:
                self.recent = B // 2
                params["recent"] = int(self.recent[0]) if np.ndim(self.budget) == 0 else "budget // 2"
            else:
                r = _nonneg_int(recent, f"recent (budget {b_min})", b_min)
                self.recent[:] = params["recent"] = r
        if name == "streaming-llm":
            s = _nonneg_int(sinks, "sinks")
            self.sinks = np.minimum(s, B)
            params["sinks"] = int(self.sinks[0]) if np.ndim(self.budget) == 0 else s
        if name == "snapkv":
            w = min(32, max(1, b_min // 2)) if window is None else window
            if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 1 <= w <= max(b_min, 1):
                raise OptionError(f"window must be an integer in [1, budget = {b_min}], got {w!r}")
            if isinstance(kernel, bool) or not isinstance(kernel, (int, np.integer)) or kernel < 1 or kernel % 2 == 0:
                raise OptionError(f"kernel must be an odd positive integer, got {kernel!r}")
            self.window, self.kernel = int(w), int(kernel)
            params["window"], params["kernel"] = self.window, self.kernel
            self.win_rows: deque = deque()
        if name == "rmm":
            if isinstance(lag, bool) or not isinstance(lag, (int, float, np.integer, np.floating)) or \
                    (isinstance(lag, float) and math.isnan(lag)) or lag < 0 or \
                    (isinstance(lag, float) and not lag.is_integer() and not math.isinf(lag)):
                raise OptionError(f"lag must be a non-negative integer or math.inf, got {lag!r}")
            if weighting not in WEIGHTINGS:
                raise OptionError(f"unknown weighting {weighting!r}; choose from {', '.join(WEIGHTINGS)}")
            self.lag = T if math.isinf(lag) else int(min(lag, T))
            params["lag"] = "inf" if math.isinf(lag) else int(lag)
            params["weighting"] = self.weighting = weighting
        self.params = params
        self.cached = np.zeros((K, T), dtype=bool)          # past positions in the cache
        self.last_step = np.full((K, T), T - 1, dtype=np.int64)
        self.score = np.zeros((K, T), dtype=np.int64)       # h2o / rmm utility, lru last use, snapkv window
        self.t = 0              # the next row to observe
        self.decided = 0        # the next step to decide

    # ------------------------------------------------------------------ driving
    def observe(self, row, correct: bool = True) -> list:
        """Take row ``t`` (the next step) and whether step ``t``'s prediction was correct;
        return the evictions decided now."""
        t = self.t
        if t >= self.steps:
            raise InternalError("kv-policy-steps", f"{self.name}: row {t} of a {self.steps}-step run")
        row = np.asarray(row, dtype=np.int64)
        if row.shape != (self.n_heads, t + 1):
            raise InternalError("kv-policy-row", f"{self.name}: row {t} has shape {row.shape}, expected "
                                                 f"{(self.n_heads, t + 1)}")
        self._observe(t, row, bool(correct))
        self.t = t + 1
        out = []
        while self.decided <= self.t - 1 - self.lag:
            out += self._decide(self.decided)
        return out

    def observe_block(self, rows, correct) -> list:
        """Rows ``t .. t + m - 1`` at once, the same as :meth:`observe` on each in turn:
        ``rows`` int64 ``(n_heads, m, L)`` with ``L >= t + m``, row ``t + i`` its ``i``-th
        (entries past position ``t + i`` ignored), ``correct`` ``m`` flags.

        Why: a prefill press (:mod:`memopt.cache.kvpress`) decides nothing before its last
        rows, and for ``h2o`` and ``rmm`` the scores are sums of the rows, so a block of rows
        whose decisions all come before the prefill is one weighted sum (2,000 rows a head:
        one array operation instead of 2,000 calls). Any other block, or policy, is observed
        row by row."""
        t = self.t
        rows = np.asarray(rows, dtype=np.int64)
        correct = np.asarray(correct, dtype=bool)
        if rows.ndim != 3 or rows.shape[0] != self.n_heads or correct.shape != (rows.shape[1],) or \
                rows.shape[2] < t + rows.shape[1]:
            raise InternalError("kv-policy-row", f"{self.name}: a block of shape {rows.shape} with "
                                                 f"{correct.shape} flags at row {t}")
        m = rows.shape[1]
        if t + m > self.steps:
            raise InternalError("kv-policy-steps", f"{self.name}: rows {t}..{t + m - 1} of a {self.steps}-step run")
        last = t + m - 1 - self.lag          # the last step decided once the block is in
        if self.name not in ("h2o", "rmm") or last + 1 >= self.prefill or last >= self.steps - 1:
            out = []
            for i in range(m):
                out += self.observe(rows[:, i, :t + i + 1], bool(correct[i]))
            return out
        weight = correct if self.name == "rmm" and self.weighting == "correct" else np.ones(m, dtype=bool)
        block = np.tril(rows[:, :, :t + m], k=t)                # row t + i: positions 0..t + i
        self.score[:, :t + m] += np.einsum("kij,i->kj", block, weight.astype(np.int64))
        self.t = t + m
        out = []
        while self.decided <= self.t - 1 - self.lag:
            out += self._decide(self.decided)     # before the prefill: marks the step cached only
        return out

    def finish(self) -> list:
        """After the last row: the decisions still waiting for their lag."""
        if self.t != self.steps:
            raise InternalError("kv-policy-steps", f"{self.name}: finished after {self.t} of {self.steps} rows")
        out = []
        while self.decided < self.steps:
            out += self._decide(self.decided)
        return out

    # ------------------------------------------------------------------ scores
    def _observe(self, t: int, row: np.ndarray, correct: bool) -> None:
        name, sc = self.name, self.score
        if name in ("h2o", "rmm"):
            # accumulated (h2o) / demonstrated (rmm) attention; entries of positions a head no
            # longer holds never matter (they are not candidates), so rows are taken as they are
            weight = 1 if name == "h2o" or self.weighting == "uniform" or correct else 0
            if weight:
                sc[:, :t + 1] += row
        elif name == "lru":
            seen = np.concatenate([self.cached[:, :t], np.ones((self.n_heads, 1), dtype=bool)], axis=1)
            n_vis = seen.sum(axis=1)
            tot = (row * seen).sum(axis=1)
            used = seen & (row * n_vis[:, None] >= tot[:, None])
            sc[:, :t + 1] = np.where(used, t, sc[:, :t + 1])
            sc[:, t] = t
        elif name == "snapkv":     # sum of the last `window` rows (entries of evicted positions unused)
            sc[:, :t + 1] += row
            self.win_rows.append(row)
            if len(self.win_rows) > self.window:
                old = self.win_rows.popleft()
                sc[:, :old.shape[1]] -= old
        elif name == "tova":
            seen = np.concatenate([self.cached[:, :t], np.ones((self.n_heads, 1), dtype=bool)], axis=1)
            self.tova_row = row * seen

    def _keys(self, d: int) -> np.ndarray:
        """Eviction keys of positions ``0..d`` per head: smallest evicted first; protected
        = ``_BIG`` (positions not cached are set above it by the caller)."""
        name, K, n = self.name, self.n_heads, d + 1
        pos = np.arange(n, dtype=np.int64)[None, :]
        if name == "streaming-llm":
            return np.where(pos < self.sinks[:, None], _BIG, pos).astype(np.int64)
        if name in ("h2o", "rmm", "lru"):
            key = self.score[:, :n].copy()
            if name != "lru":
                key[pos >= n - self.recent[:, None]] = _BIG
            return key
        if name == "tova":
            lay = self.tova_row.reshape(self.layers, self.kv_heads, n).sum(axis=1)
            key = np.repeat(lay, self.kv_heads, axis=0)
            key[self.budgets >= 1, d] = _BIG
            return key
        # snapkv: pool the window's votes over the candidates in cache order
        w = np.minimum(self.window, self.budgets)
        cand = self.cached[:, :n] & (pos < n - w[:, None])
        n_c = cand.sum(axis=1)
        order = np.argsort(~cand, axis=1, kind="stable")
        inside = np.arange(n)[None, :] < n_c[:, None]
        vals = np.where(inside, np.take_along_axis(self.score[:, :n], order, axis=1), 0)
        key = np.full((K, n), _BIG, dtype=np.int64)
        np.put_along_axis(key, order, np.where(inside, _pool(vals, self.kernel), _BIG), axis=1)
        return key

    def _decide(self, d: int) -> list:
        """Step ``d`` joins the cache; evict down to the budget (module doc)."""
        self.decided = d + 1
        self.cached[:, d] = True
        if d + 1 < self.prefill or d == self.steps - 1:
            return []
        n_head = self.cached[:, :d + 1].sum(axis=1)
        caps = self.budgets
        if self.share == "layer":
            n_head = n_head.reshape(self.layers, self.kv_heads).sum(axis=1)
            caps = caps.reshape(self.layers, self.kv_heads).sum(axis=1)
        excess = np.maximum(n_head - caps, 0)
        m = int(excess.max(initial=0))
        if m == 0:
            return []
        key = np.where(self.cached[:, :d + 1], self._keys(d), _BIG + 1)
        n, Hh = d + 1, self.kv_heads
        if self.share == "layer":     # position-major: ties go to the oldest position, then head
            key = key.reshape(self.layers, Hh, n).transpose(0, 2, 1).reshape(self.layers, n * Hh)
        if m == 1:
            idx = np.argmin(key, axis=1)[:, None]
        else:
            idx = np.argsort(key, axis=1, kind="stable")[:, :m]
        sel = np.arange(m)[None, :] < excess[:, None]
        chosen = np.take_along_axis(key, idx, axis=1)[sel]
        if (chosen > _BIG).any():
            raise InternalError("kv-evict", f"{self.name}: evicted a position that is not cached")
        if (chosen == _BIG).any():
            raise InternalError("kv-evict", f"{self.name}: the protected positions exceed the budget")
        group = np.nonzero(sel)[0]
        flat = idx[sel]
        if self.share == "layer":
            heads, positions = group * Hh + flat % Hh, flat // Hh
        else:
            heads, positions = group, flat
        self.cached[heads, positions] = False
        self.last_step[heads, positions] = d
        return [(d, heads, positions)]


def simulate_kv(trace: AttentionTrace, policy: str, budget, *, prefill: int = 0, share: str = "head",
                sinks: int = 4, recent: int | None = None, window: int | None = None, kernel: int = 5,
                lag: float = 0, weighting: str = "correct") -> KVResult:
    """Replay ``policy`` on every head of ``trace``: drives a :class:`KVPolicy` with the
    trace's rows.

    Parameters
    ----------
    trace : AttentionTrace
    policy : str
        One of :data:`KV_POLICIES`.
    budget : int or list of int
        Past positions kept per head from step ``prefill`` on (or per-layer budgets,
        ``share``: module docstring).
    prefill : int, default 0
    share : {"head", "layer"}
    sinks, recent, window, kernel, lag, weighting
        The policies' own parameters (module docstring).

    Returns
    -------
    KVResult
        ``retained`` out of ``total`` attention (exact integers), the schedule.

    Raises
    ------
    OptionError
        Not an :class:`AttentionTrace`, an unknown policy or a bad parameter.

    Examples
    --------
    >>> from memopt.cache.kv_trace import make_attention_trace
    >>> a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
    >>> tr = make_attention_trace(a, [True] * 4, scale=8)
    >>> r = simulate_kv(tr, "h2o", 1, recent=0)
    >>> r.retained, r.total, r.last_step.tolist()
    (15, 19, [[3, 1, 2, 3]])
    """
    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"simulate_kv needs an AttentionTrace, got {type(trace).__name__}")
    pol = KVPolicy(policy, steps=trace.steps, layers=trace.layers, kv_heads=trace.kv_heads, budget=budget,
                   prefill=prefill, share=share, sinks=sinks, recent=recent, window=window,
                   kernel=kernel, lag=lag, weighting=weighting)
    A = trace.heads()
    for t in range(trace.steps):
        pol.observe(A[:, t, :t + 1], trace.correct[t])
    pol.finish()
    return policy_result(pol, trace)


def policy_result(pol: KVPolicy, trace: AttentionTrace) -> KVResult:
    """The :class:`KVResult` of a finished :class:`KVPolicy` (its committed schedule), with the
    retained attention of ``trace``'s rows, checked by :func:`schedule_retained`."""
    per = schedule_retained(trace, pol.last_step, pol.budgets, pol.prefill, pol.share)
    total = total_mass(trace, pol.prefill)
    return KVResult(pol.name, pol.budget, pol.prefill, trace.steps, trace.n_heads, int(per.sum()),
                    int(total.sum()), dict(pol.params), per, pol.last_step.copy())
