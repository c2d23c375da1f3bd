"""The exact KV offline optimum (memopt.cache.kv_optimum): the eviction-event assignment equals
the min-cost-flow reference and a brute force over cache contents written straight from the
model, its dual bound is checked and matches, it dominates every policy, and the edge cases
(prefill, budget 0, budget >= T, ties, zero attention) hold."""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memopt.cache.kv_optimum import (METHODS, _check_dual, _future_mass, _assign_events, eviction_events,
                                     kv_optimum, optimum_head, optimum_head_flow)
from memopt.cache.kv_policies import KV_POLICIES, schedule_retained, simulate_kv
from memopt.cache.kv_trace import make_attention_trace
from memopt.errors import InternalError, OptionError


def random_trace(seed, T, L=1, H=1, hi=50, group=1):
    """Uniform integer attention in ``[0, hi]`` (small ``hi``: many ties and zeros)."""
    rng = np.random.default_rng(seed)
    a = np.tril(rng.integers(0, hi + 1, (L, H, T, T)))
    return make_attention_trace(a, rng.random(T) < 0.6, scale=max(hi, 1), group=group)


def softmax_trace(seed, T, L=1, H=2, scale=2**16):
    """Peaked, real-looking attention: a sink, heavy hitters, recency (rows sum to ~scale)."""
    rng = np.random.default_rng(seed)
    t, j = np.arange(T)[:, None], np.arange(T)[None, :]
    a = np.zeros((L, H, T, T), dtype=np.int64)
    for li in range(L):
        for h in range(H):
            logit = 2 * rng.standard_normal(T)[None, :] - np.log1p(np.maximum(t - j, 0)) \
                + rng.standard_normal((T, T))
            logit[:, 0] += 3
            logit = np.where(j <= t, logit, -np.inf)
            p = np.exp(logit - logit.max(axis=1, keepdims=True))
            a[li, h] = np.rint(p / p.sum(axis=1, keepdims=True) * scale)
    return make_attention_trace(a, rng.random(T) < 0.5, scale=scale)


def brute_force(A, B, P):
    """The model itself, searched exhaustively: at each decode step ``t`` the cache is any
    set of at most ``B`` past positions drawn from the previous cache plus the position that
    just arrived (the whole prompt at ``t = P``); value = attention on cached positions."""
    T = A.shape[0]

    @lru_cache(maxsize=None)
    def best(t, pool):
        if t == T:
            return 0
        out = 0
        for n in range(min(B, len(pool)) + 1):
            for cache in combinations(pool, n):
                gain = sum(int(A[t, j]) for j in cache)
                out = max(out, gain + best(t + 1, tuple(sorted(cache + (t,)))))
        return out

    if P >= T:
        return 0
    return best(P, tuple(range(P)))


# ---------------------------------------------------------------------------- exactness

@settings(max_examples=80)
@given(st.integers(0, 2**32 - 1), st.integers(1, 7), st.integers(0, 8), st.integers(0, 8),
       st.sampled_from([1, 3, 50]))
def test_assignment_equals_flow_and_brute_force(seed, T, B, P, hi):
    P = min(P, T)
    tr = random_trace(seed, T, hi=hi)
    A = tr.heads()[0]
    want = brute_force(A, B, P)
    for method in METHODS:
        opt = kv_optimum(tr, B, prefill=P, method=method)
        assert opt.retained == want, method
        assert schedule_retained(tr, opt.last_step, B, P).tolist() == opt.per_head.tolist()
    assert kv_optimum(tr, B, prefill=P).bound == want


@settings(max_examples=25)
@given(st.integers(0, 2**32 - 1), st.integers(2, 48), st.floats(0.02, 1.0), st.integers(0, 20),
       st.booleans())
def test_assignment_equals_flow_on_larger_traces(seed, T, frac, P, peaked):
    P = min(P, T)
    B = int(frac * T)
    tr = softmax_trace(seed, T) if peaked else random_trace(seed, T, H=2, hi=5)
    new = kv_optimum(tr, B, prefill=P)
    ref = kv_optimum(tr, B, prefill=P, method="flow")
    assert new.per_head.tolist() == ref.per_head.tolist()
    assert new.bound == new.retained and ref.bound is None
    assert (new.total, new.method, ref.method) == (ref.total, "assignment", "flow")


def test_on_worker_processes_same_optimum():
    tr = softmax_trace(3, 40, L=2, H=2)
    one = kv_optimum(tr, 8, prefill=5)
    two = kv_optimum(tr, 8, prefill=5, jobs=2)
    assert two.per_head.tolist() == one.per_head.tolist()
    assert np.array_equal(two.last_step, one.last_step)


@given(st.builds(softmax_trace, st.integers(0, 2**32 - 1), st.integers(1, 40)), st.integers(0, 40),
       st.integers(0, 40))
def test_optimum_dominates_every_policy(trace, B, P):
    P = min(P, trace.steps)
    opt = kv_optimum(trace, B, prefill=P)
    for policy in KV_POLICIES:
        kw = {"window": max(1, min(3, B))} if policy == "snapkv" else {}
        if policy == "rmm":
            kw["lag"] = float("inf")
        r = simulate_kv(trace, policy, B, prefill=P, **kw)
        assert (r.per_head <= opt.per_head).all(), policy
        assert r.total == opt.total


# ---------------------------------------------------------------------------- edge cases

def test_by_hand():
    # one head, scale 8; decode rows 1..3 give past positions [6], [5, 1], [4, 3, 0]
    a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
    tr = make_attention_trace(a, [True] * 4, scale=8)
    opt = kv_optimum(tr, 1)
    assert (opt.retained, opt.total, opt.bound) == (15, 19, 15)   # keep position 0: 6 + 5 + 4
    assert opt.last_step.tolist() == [[3, 1, 2, 3]]                # 1 and 2 are never kept
    two = kv_optimum(tr, 2)                                        # evict 2 before step 3: all 19
    assert (two.retained, two.last_step.tolist()) == (19, [[3, 3, 2, 3]])
    assert brute_force(tr.heads()[0], 1, 0) == 15


@pytest.mark.parametrize("T, P", [(1, 0), (1, 1), (6, 0), (6, 3), (6, 6)])
def test_budget_edges(T, P):
    tr = random_trace(11, T, H=2)
    total = kv_optimum(tr, T, prefill=P).total
    for B in (T - 1, T, T + 5):                 # nothing must go: everything is retained
        opt = kv_optimum(tr, B, prefill=P)
        assert opt.retained == opt.bound == total
        assert (opt.last_step == T - 1).all()
    zero = kv_optimum(tr, 0, prefill=P)         # budget 0: nothing is ever cached
    assert zero.retained == 0 and zero.total == total
    assert kv_optimum(tr, 0, prefill=P, method="flow").retained == 0


def test_zero_attention_and_all_ties():
    a = np.zeros((1, 1, 6, 6), dtype=np.int64)
    tr = make_attention_trace(a, [False] * 6, scale=1)
    assert kv_optimum(tr, 2).retained == 0
    ones = make_attention_trace(np.tril(np.ones((1, 1, 6, 6), dtype=np.int64)), [True] * 6, scale=1)
    # every step attends 1 to each past position: B per step once B positions exist
    assert kv_optimum(ones, 2).retained == sum(min(t, 2) for t in range(6)) == 9


def test_events():
    assert eviction_events(6, 2, 0).tolist() == [2, 3, 4]
    assert eviction_events(6, 2, 4).tolist() == [3, 3, 4]      # the prompt's excess at once
    assert eviction_events(6, 0, 0).tolist() == [0, 1, 2, 3, 4]
    assert eviction_events(6, 5, 0).tolist() == [] and eviction_events(6, 1, 6).tolist() == []


def test_tampered_dual_is_rejected():
    tr = softmax_trace(5, 20, H=1)
    A = np.ascontiguousarray(tr.heads()[0])
    events = eviction_events(20, 4, 0)
    ok, pos, u, v = _assign_events(_future_mass(A, int(events[0])), events)
    total = kv_optimum(tr, 20).total
    assert ok and _check_dual(A, events, u, v, total) == kv_optimum(tr, 4).retained
    raised = u.copy()
    raised[3] += 1                              # its assigned pair's constraint is tight
    with pytest.raises(InternalError, match="dual"):
        _check_dual(A, events, raised, v, total)
    positive = v.copy()
    positive[int(np.argmax(v))] += 1            # a position's dual must stay <= 0
    with pytest.raises(InternalError, match="dual"):
        _check_dual(A, events, u, positive, total)


def test_head_functions_agree():
    tr = softmax_trace(9, 30, H=1)
    A = tr.heads()[0]
    assert optimum_head(A, 6, 4)[0] == optimum_head_flow(A, 6, 4)[0]


def test_bad_options():
    tr = random_trace(1, 5)
    with pytest.raises(OptionError, match="method"):
        kv_optimum(tr, 2, method="lp")
    with pytest.raises(OptionError, match="jobs"):
        kv_optimum(tr, 2, jobs=0)
    with pytest.raises(OptionError):
        kv_optimum(tr, -1)
    with pytest.raises(OptionError):
        kv_optimum(tr, 2, prefill=9)
    with pytest.raises(OptionError, match="AttentionTrace"):
        kv_optimum([[1]], 2)


def brute_stream(G, ends, kept):
    """The most a cache compressed at checkpoints earns: every subset the cache may hold after
    each checkpoint (evicted positions never return), by exhaustive search."""
    m = len(ends)

    @lru_cache(maxsize=None)
    def best(c, held):
        if c == m:
            return 0
        cands = sorted(set(held) | set(range(ends[c - 1] if c else 0, ends[c])))
        out = 0
        for r in range(min(kept[c], len(cands)) + 1):
            for keep in combinations(cands, r):
                out = max(out, sum(int(G[c][j]) for j in keep) + best(c + 1, keep))
        return out

    return best(0, ())


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_stream_optimum_equals_brute_force(data):
    from memopt.cache.kv_optimum import stream_optimum_head
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    ends = np.cumsum(sizes)
    T = int(ends[-1])
    kept = [data.draw(st.integers(0, int(e) + 1)) for e in ends]
    G = np.array([[data.draw(st.integers(0, 9)) if j < e else 0 for j in range(T)] for e in ends])
    value, last, bound = stream_optimum_head(G, ends, kept)
    assert value == bound == brute_stream(G, tuple(int(e) for e in ends), tuple(kept))
    # the schedule: held after checkpoint c iff arrived and last >= c, within each budget
    first = np.searchsorted(ends, np.arange(T), side="right")
    for c in range(len(ends)):
        held = (first <= c) & (last >= c)
        assert held.sum() <= kept[c]
    assert value == sum(int(G[c][(first <= c) & (last >= c)].sum()) for c in range(len(ends)))


def test_stream_optimum_rejects_bad_checkpoints():
    from memopt.cache.kv_optimum import stream_optimum_head
    with pytest.raises(OptionError):
        stream_optimum_head(np.zeros((2, 3), int), [2, 2], [1, 1])      # ends not increasing
    with pytest.raises(OptionError):
        stream_optimum_head(np.array([[0, 5, 0], [0, 0, 0]]), [1, 3], [1, 1])   # gain before arrival
