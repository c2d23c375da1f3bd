"""Brute-force references for the cache tests: exhaustive search over eviction choices, and
plain-Python simulators written independently of the kernels."""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

from memopt.cache.routes import make_trace


def brute_optimum(requests, sizes, capacity, objective="bytes"):
    """Minimum traffic (or misses) of demand paging without bypass, by exhaustive search over
    every set of objects a miss may evict (objects larger than the capacity are streamed)."""
    requests = tuple(requests)
    n = len(requests)

    @lru_cache(maxsize=None)
    def best(t, cache):
        if t == n:
            return 0
        o = requests[t]
        if o in cache:
            return best(t + 1, cache)
        cost = sizes[o] if objective == "bytes" else 1
        if sizes[o] > capacity:
            return cost + best(t + 1, cache)
        res = None
        items = sorted(cache)
        for r in range(len(items) + 1):
            for keep in combinations(items, r):
                if sum(sizes[x] for x in keep) + sizes[o] <= capacity:
                    v = best(t + 1, frozenset(keep) | {o})
                    res = v if res is None or v < res else res
        return cost + res

    return best(0, frozenset())


def trace_of(requests, sizes, cache_of=None):
    return make_trace(list(requests), list(sizes), cache_of=cache_of)
