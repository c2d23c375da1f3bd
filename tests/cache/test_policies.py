"""Eviction policies: hand-worked examples, Belady against exhaustive search, the compiled
kernel against independent plain-Python simulators, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from _cache_brute import brute_optimum
from memopt import _jit
from memopt.cache import belady, make_trace, simulate
from memopt.cache.certificate import reference_simulate
from memopt.cache.policies import next_use
from memopt.errors import OptionError

# a b c a d b e a b c d e a
HAND = [0, 1, 2, 0, 3, 1, 4, 0, 1, 2, 3, 4, 0]


def counts(policy, requests, sizes, capacity, **kw):
    r = simulate(make_trace(requests, sizes), policy, capacity, **kw)
    return r.hits, r.misses, r.bytes_moved


def test_lru_by_hand():
    # C=3: a b c | a hit | d evicts b | b evicts c | e evicts a | a evicts d | b hit |
    # c evicts e | d evicts a | e evicts b | a evicts c  -> hits at requests 4 and 9
    assert counts("lru", HAND, [1] * 5, 3) == (2, 11, 11)


def test_lfu_by_hand():
    # counts survive eviction, ties go to the least recently used:
    # d evicts b (1 request, older than c); b evicts c; e evicts d; a, b hit;
    # c evicts e (1 request); d evicts c (2, newer a/b have 3); e evicts d; a hits
    assert counts("lfu", HAND, [1] * 5, 3) == (4, 9, 9)


def test_lru_2_by_hand():
    # backward 2-distance: objects seen once go first (least recent first):
    # d evicts b, b evicts c, e evicts d, a and b hit, c evicts e (seen once),
    # d evicts c (2nd-last use at 3), e evicts a (2nd-last use at 4), a misses
    assert counts("lru-2", HAND, [1] * 5, 3) == (3, 10, 10)
    assert counts("lru-k", HAND, [1] * 5, 3, k=2) == (3, 10, 10)
    # LRU-1 is LRU
    assert counts("lru-1", HAND, [1] * 5, 3) == counts("lru", HAND, [1] * 5, 3)


def test_belady_by_hand():
    # d evicts c (next use 10), e evicts d (11), c evicts b (never again), d evicts c (never)
    # -> hits at 4, 6, 8, 9, 12, 13
    assert counts("belady", HAND, [1] * 5, 3) == (6, 7, 7)
    r = belady(make_trace(HAND, [1] * 5), 3)
    assert r.optimal and r.misses == brute_optimum(HAND, [1] * 5, 3, "misses")


def test_variable_sizes_by_hand():
    # sizes a=2 b=3 c=4, capacity 6; trace a b c a b
    # LRU: c evicts a then b; a fits beside c; b evicts c -> all miss: 2+3+4+2+3 bytes
    assert counts("lru", [0, 1, 2, 0, 1], [2, 3, 4], 6) == (0, 5, 14)
    # Belady: c evicts b (next use 5 > 4); a hits; b evicts c (never again, larger index first)
    assert counts("belady", [0, 1, 2, 0, 1], [2, 3, 4], 6) == (1, 4, 12)
    assert not simulate(make_trace([0, 1, 2, 0, 1], [2, 3, 4]), "belady", 6).optimal


def test_oversized_objects_are_streamed():
    # d (7 bytes) never fits in 6: it misses every time and evicts nothing
    assert counts("lru", [0, 3, 0, 3, 0], [2, 3, 4, 7], 6) == (2, 3, 16)
    assert counts("belady", [0, 3, 0, 3, 0], [2, 3, 4, 7], 6) == (2, 3, 16)
    # capacity 0 holds only empty objects
    assert counts("lfu", [0, 1, 0, 1], [0, 1], 0) == (1, 3, 2)


def test_result_dict_and_per_cache_independence():
    r = simulate(make_trace(HAND, [1] * 5), "lru", 3)
    assert set(r.to_dict()) >= {"requests", "hits", "misses", "bytes_moved"}
    assert r.to_dict()["requests"] == 13
    # two caches, each with capacity 2: the sum of two separate traces
    req = [0, 2, 1, 3, 0, 2, 1, 3, 2]
    split = make_trace(req, [1, 1, 2, 2], cache_of=[0, 0, 1, 1])
    a = make_trace([0, 1, 0, 1], [1, 1])
    b = make_trace([0, 1, 0, 1, 0], [2, 2])
    for pol in ("lru", "lfu", "lru-2", "belady"):
        whole = simulate(split, pol, 2)
        parts = [simulate(t, pol, 2) for t in (a, b)]
        assert whole.hits == sum(p.hits for p in parts)
        assert whole.bytes_moved == sum(p.bytes_moved for p in parts)
    assert simulate(split, "belady", 2).optimal          # one size per cache


def test_hit_flags():
    r, flags = simulate(make_trace(HAND, [1] * 5), "belady", 3, hits_out=True)
    assert np.flatnonzero(flags).tolist() == [3, 5, 7, 8, 11, 12]
    assert int(flags.sum()) == r.hits


def test_next_use():
    assert next_use(np.array([0, 1, 0, 2, 1]), 3).tolist() == [2, 4, 5 + 0, 5 + 2, 5 + 1]


@pytest.mark.parametrize("cap", [-1, 2**62, float("nan"), float("inf"), 1.5, True, "3", None])
def test_bad_capacity(cap):
    with pytest.raises(OptionError):
        simulate(make_trace([0], [1]), "lru", cap)


@pytest.mark.parametrize("policy,k", [("fifo", None), ("lru-k", 0), ("lru-k", 65), ("lru-2", 3),
                                      (3, None), ("lru-k", 1.5)])
def test_bad_policy(policy, k):
    with pytest.raises(OptionError):
        simulate(make_trace([0], [1]), policy, 1, k=k)


def test_integral_float_capacity_accepted():
    assert simulate(make_trace(HAND, [1] * 5), "lru", 3.0).hits == 2


# ---------------------------------------------------------------------------- properties

traces = st.integers(1, 5).flatmap(lambda m: st.tuples(
    st.lists(st.integers(0, m - 1), max_size=14), st.just(m)))


@settings(max_examples=80)
@given(traces, st.integers(0, 4))
def test_belady_equals_brute_force_unit_sizes(tr, cap):
    req, m = tr
    got = simulate(make_trace(req, [1] * m), "belady", cap)
    assert got.misses == brute_optimum(req, [1] * m, cap, "misses")
    assert got.optimal


@settings(max_examples=40)
@given(traces, st.integers(1, 4), st.integers(1, 3))
def test_belady_equal_sizes_per_cache_is_optimal(tr, size, cap_units):
    """Two caches with one object size each: Belady per cache = exhaustive search per cache."""
    req, m = tr
    cache_of = [o % 2 for o in range(m)]
    sizes = [size + (o % 2) for o in range(m)]
    cap = cap_units * (size + 1)
    got = simulate(make_trace(req, sizes, cache_of=cache_of), "belady", cap)
    want = 0
    for c in (0, 1):
        sub = [o for o in req if o % 2 == c]
        want += brute_optimum(sub, sizes, cap, "bytes")
    assert got.bytes_moved == want


@settings(max_examples=80)
@given(st.integers(1, 6).flatmap(lambda m: st.tuples(
    st.lists(st.integers(0, m - 1), max_size=40), st.lists(st.integers(0, 6), min_size=m, max_size=m))),
    st.integers(0, 12), st.sampled_from(["lru", "lfu", "lru-1", "lru-2", "lru-3", "belady"]))
def test_kernel_matches_plain_python_simulator(tr, cap, policy):
    req, sizes = tr
    r = simulate(make_trace(req, sizes), policy, cap)
    name, k = ("lru-k", int(policy[4:])) if policy.startswith("lru-") else (policy, 2)
    hits, moved = reference_simulate(req, sizes, cap, name, k)
    assert (r.hits, r.bytes_moved) == (hits, moved)
    assert r.misses == len(req) - hits
    # every policy moves at least the optimum (exhaustive search) when the trace is tiny
    if len(req) <= 10 and len(sizes) <= 4:
        assert r.bytes_moved >= brute_optimum(req, sizes, cap, "bytes")


def test_compiled_kernel_equals_pure_twin():
    rng = np.random.default_rng(7)
    m = 40
    req = (rng.zipf(1.3, 3000) - 1) % m
    sizes = rng.integers(1, 9, m)
    tr = make_trace(req, sizes)
    for pol in ("lru", "lfu", "lru-2", "belady"):
        with _jit.mode("pure"):
            a = simulate(tr, pol, 60)
        with _jit.mode("compiled"):
            b = simulate(tr, pol, 60)
        assert a == b, pol
        hits, moved = reference_simulate(req.tolist(), sizes.tolist(), 60, pol if pol != "lru-2" else "lru-k")
        assert (a.hits, a.bytes_moved) == (hits, moved)
