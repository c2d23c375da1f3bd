"""Offline optima with unequal sizes: the CP-SAT MIP against exhaustive search and against every
online policy, the FOO-style flow bound below the optimum, schedule checking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from _cache_brute import brute_optimum
from memopt.cache import (POLICIES, flow_lower_bound, make_trace, offline_optimum, schedule_traffic,
                          simulate)
from memopt.errors import OptionError

ONLINE = ("lru", "lfu", "lru-2", "lru-3", "belady")


def small_traces(max_objects=5, max_len=12, max_size=5):
    return st.integers(1, max_objects).flatmap(lambda m: st.tuples(
        st.lists(st.integers(0, m - 1), max_size=max_len),
        st.lists(st.integers(0, max_size), min_size=m, max_size=m)))


def test_mip_by_hand():
    # sizes a=2 b=2 c=3, capacity 5, trace a b c a b c. Compulsory 7 bytes. Holding a over
    # (0,3) and c over (2,5) fits (2 <= 5-3 at request 2, 3 <= 5-2 at request 3); holding
    # a and b together does not fit beside c at request 2. Best: only b's repeat misses.
    tr = make_trace([0, 1, 2, 0, 1, 2], [2, 2, 3])
    r = offline_optimum(tr, 5, method="cp-sat")
    assert (r.bytes_moved, r.misses, r.lower_bound, r.status) == (9, 4, 9, "optimal")
    assert np.flatnonzero(r.hit_flags).tolist() == [3, 5]
    assert schedule_traffic(tr, 5, r.hit_flags) == (4, 9)
    # fewest misses instead of fewest bytes: the same here
    assert offline_optimum(tr, 5, method="cp-sat", objective="misses").misses == 4
    # LRU evicts a for c, b for a, c for b...: every request misses; Belady finds the optimum here
    assert simulate(tr, "lru", 5).bytes_moved == 14
    assert simulate(tr, "belady", 5).bytes_moved == 9


def test_bytes_and_misses_objectives_differ():
    # B (4 bytes), c (1), a (2); capacity 6; trace B c a c B a; compulsory 7 bytes, 3 misses.
    # Holding B over (0,4) leaves 0 bytes beside a at request 2 and 1 beside c at request 3:
    # nothing else can be held -> 10 bytes, 5 misses. Holding c over (1,3) and a over (2,5)
    # instead fits (1 <= 6-2, 2 <= 6-1) -> 11 bytes, 4 misses.
    req = [0, 1, 2, 1, 0, 2]
    sizes = [4, 1, 2]
    tr = make_trace(req, sizes)
    b = offline_optimum(tr, 6, method="cp-sat")
    m = offline_optimum(tr, 6, method="cp-sat", objective="misses")
    assert (b.bytes_moved, b.misses) == (10, 5) == (brute_optimum(req, sizes, 6, "bytes"), 5)
    assert (m.bytes_moved, m.misses) == (11, 4)
    assert m.misses == brute_optimum(req, sizes, 6, "misses")


def test_flow_bound_by_hand():
    # a=2, b=3, capacity 4: neither repeat can be held (2 > 4-3, 3 > 4-2): optimum 10 bytes;
    # the relaxation holds half of a and two thirds of b: 5 + 1 + 1 = 7
    tr = make_trace([0, 1, 0, 1], [2, 3])
    assert flow_lower_bound(tr, 4).lower_bound == 7
    assert flow_lower_bound(tr, 4).compulsory == 5
    assert offline_optimum(tr, 4, method="cp-sat").bytes_moved == 10
    assert flow_lower_bound(tr, 5).lower_bound == offline_optimum(tr, 5).bytes_moved == 5


@settings(max_examples=60)
@given(small_traces(), st.integers(0, 8))
def test_mip_equals_brute_force(tr, cap):
    req, sizes = tr
    t = make_trace(req, sizes)
    r = offline_optimum(t, cap, method="cp-sat")
    assert r.status == "optimal"
    assert r.bytes_moved == r.lower_bound == brute_optimum(req, sizes, cap, "bytes")
    assert schedule_traffic(t, cap, r.hit_flags) == (r.misses, r.bytes_moved)
    rm = offline_optimum(t, cap, method="cp-sat", objective="misses")
    assert rm.misses == rm.lower_bound == brute_optimum(req, sizes, cap, "misses")
    assert flow_lower_bound(t, cap).lower_bound <= r.bytes_moved


@settings(max_examples=30)
@given(small_traces(max_objects=8, max_len=60, max_size=9), st.integers(0, 25))
def test_mip_at_most_every_online_policy_and_flow_below(tr, cap):
    req, sizes = tr
    t = make_trace(req, sizes)
    r = offline_optimum(t, cap, method="cp-sat")
    rm = offline_optimum(t, cap, method="cp-sat", objective="misses")
    assert r.status == "optimal"
    for pol in ONLINE:
        s = simulate(t, pol, cap)
        assert r.bytes_moved <= s.bytes_moved, pol
        assert rm.misses <= s.misses, pol
    f = flow_lower_bound(t, cap)
    assert f.compulsory <= f.lower_bound <= r.bytes_moved


@settings(max_examples=60)
@given(st.integers(1, 6).flatmap(lambda m: st.tuples(st.lists(st.integers(0, m - 1), max_size=50),
                                                       st.just(m))),
       st.integers(0, 5), st.integers(1, 4))
def test_flow_bound_is_exact_for_equal_sizes(tr, cap_units, size):
    """With one size the interval LP is totally unimodular (consecutive ones), so the flow
    relaxation is integral and equals Belady's optimum."""
    req, m = tr
    t = make_trace(req, [size] * m)
    assert flow_lower_bound(t, cap_units * size).lower_bound == simulate(t, "belady", cap_units * size).bytes_moved


@settings(max_examples=25)
@given(small_traces(max_objects=6, max_len=40, max_size=6), st.integers(0, 15))
def test_per_cache_problems_are_independent(tr, cap):
    req, sizes = tr
    cache_of = [o % 2 for o in range(len(sizes))]
    whole = make_trace(req, sizes, cache_of=cache_of)
    r = offline_optimum(whole, cap, method="cp-sat")
    f = flow_lower_bound(whole, cap)
    want_r = want_f = 0
    for c in (0, 1):
        objs = [o for o in range(len(sizes)) if o % 2 == c]
        sub = make_trace([objs.index(o) for o in req if o % 2 == c], [sizes[o] for o in objs])
        want_r += offline_optimum(sub, cap, method="cp-sat").bytes_moved
        want_f += flow_lower_bound(sub, cap).lower_bound
    assert (r.bytes_moved, f.lower_bound) == (want_r, want_f)
    assert schedule_traffic(whole, cap, r.hit_flags) == (r.misses, r.bytes_moved)


def test_auto_uses_belady_on_equal_sizes_and_size_limit_falls_back():
    rng = np.random.default_rng(3)
    req = rng.integers(0, 12, 300)
    eq = make_trace(req, [7] * 12)
    a = offline_optimum(eq, 28)
    assert (a.method, a.status) == ("belady", "optimal")
    assert a.bytes_moved == simulate(eq, "belady", 28).bytes_moved
    var = make_trace(req, rng.integers(1, 9, 12))
    small = offline_optimum(var, 20, max_requests=0)     # no MIP: best online + flow bound
    exact = offline_optimum(var, 20)
    assert small.method == "online+flow"
    assert small.lower_bound <= exact.bytes_moved <= small.bytes_moved
    assert small.lower_bound == flow_lower_bound(var, 20).lower_bound
    assert exact.status == "optimal" and exact.method == "cp-sat"
    assert exact.bytes_moved <= min(simulate(var, p, 20).bytes_moved for p in POLICIES)


def test_schedule_traffic_refuses_infeasible_schedules():
    tr = make_trace([0, 1, 0, 1], [2, 3])
    with pytest.raises(OptionError, match="request 0 is marked a hit"):
        schedule_traffic(tr, 10, [True, False, False, False])
    with pytest.raises(OptionError, match="exceeds the capacity 4 at request 1"):
        schedule_traffic(tr, 4, [False, False, True, False])
    with pytest.raises(OptionError, match="expected 4 flags"):
        schedule_traffic(tr, 4, [False])
    assert schedule_traffic(tr, 5, [False, False, True, True]) == (2, 5)


@pytest.mark.parametrize("kw", [{"time_limit": 0}, {"time_limit": float("nan")}, {"objective": "hits"},
                                {"method": "scip"}, {"max_requests": -1}])
def test_bad_arguments(kw):
    with pytest.raises(OptionError):
        offline_optimum(make_trace([0, 1], [1, 2]), 3, **kw)


def test_belady_method_needs_equal_sizes():
    with pytest.raises(OptionError, match="one size"):
        offline_optimum(make_trace([0, 1, 0], [1, 2]), 3, method="belady")
    with pytest.raises(OptionError):
        flow_lower_bound(make_trace([0], [1]), -1)


@settings(max_examples=80)
@given(small_traces(max_objects=8, max_len=60, max_size=9), st.integers(0, 30), st.sampled_from([1, 2, 6]),
       st.booleans())
def test_greedy_equals_min_cost_flow(tr, cap, unit, split):
    """Hoffman-Kolen-Sakarovitch: the greedy solves the same LP as the min-cost flow."""
    req, sizes = tr
    cache_of = [o % 2 for o in range(len(sizes))] if split else None
    t = make_trace(req, [s * unit for s in sizes], cache_of=cache_of)
    a = flow_lower_bound(t, cap * unit)
    b = flow_lower_bound(t, cap * unit, method="min-cost-flow")
    assert (a.lower_bound, a.compulsory) == (b.lower_bound, b.compulsory)
    assert (a.method, b.method) == ("greedy", "min-cost-flow")


def test_gcd_rounding_tightens_the_bound():
    # two objects of 5 bytes, capacity 8: 3 bytes of room can never hold a 5-byte object, so the
    # rounded relaxation holds nothing beside a requested 5-byte object
    tr = make_trace([0, 1, 0, 1], [5, 5])
    assert flow_lower_bound(tr, 8).lower_bound == 20 == offline_optimum(tr, 8, method="cp-sat").bytes_moved


def test_compiled_greedy_equals_pure_twin():
    from memopt import _jit

    rng = np.random.default_rng(5)
    req = (rng.zipf(1.3, 4000) - 1) % 50
    t = make_trace(req, rng.integers(1, 9, 50) * 3)
    with _jit.mode("pure"):
        a = flow_lower_bound(t, 90)
    with _jit.mode("compiled"):
        b = flow_lower_bound(t, 90)
    assert a == b
    assert a.lower_bound == flow_lower_bound(t, 90, method="min-cost-flow").lower_bound


def test_flow_method_argument():
    with pytest.raises(OptionError, match="unknown flow method"):
        flow_lower_bound(make_trace([0], [1]), 1, method="lp")


def test_time_limited_mip_keeps_a_valid_schedule_and_bound():
    rng = np.random.default_rng(9)
    req = (rng.zipf(1.2, 1500) - 1) % 40
    t = make_trace(req, rng.integers(1, 20, 40))
    r = offline_optimum(t, 120, time_limit=1e-3)
    assert r.status in ("optimal", "feasible")
    assert r.lower_bound <= r.bytes_moved <= min(simulate(t, p, 120).bytes_moved for p in POLICIES)
    assert r.lower_bound >= flow_lower_bound(t, 120).lower_bound
    assert schedule_traffic(t, 120, r.hit_flags) == (r.misses, r.bytes_moved)


def test_every_cache_solve_runs_to_the_calls_one_deadline(monkeypatch):
    # two caches of unequal sizes: two CP-SAT solves, both back by the same deadline (the
    # call's), through memopt.clock.solve_by; a solve dropped at it (None) leaves that cache
    # the best online schedule and the relaxation bound
    import memopt.cache.offline as offline

    ends = []

    def dropped(solver, model, end, callback=None):
        ends.append(end)
        return None

    monkeypatch.setattr(offline, "solve_by", dropped)
    tr = make_trace([0, 1, 2, 0, 1, 2, 3, 4, 3, 4], [2, 2, 3, 1, 2], cache_of=[0, 0, 0, 1, 1])
    r = offline_optimum(tr, 5, method="cp-sat", time_limit=7)
    assert len(ends) == 2 and ends[0] == ends[1]
    best_online = min(simulate(tr, pol, 5).bytes_moved for pol in POLICIES)
    assert r.bytes_moved == best_online >= r.lower_bound
    assert schedule_traffic(tr, 5, r.hit_flags) == (r.misses, r.bytes_moved)
