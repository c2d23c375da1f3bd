"""Online eviction policies and Belady's offline policy, simulated on a :class:`RequestTrace`.

Cache model (shared with :mod:`memopt.cache.offline` and the certificate): each cache holds
objects whose sizes add up to at most its ``capacity`` bytes. On a request the object is
either resident (a **hit**) or not (a **miss**: its bytes are moved into the cache, then
objects chosen by the policy are evicted until everything fits). Every requested object is
loaded into the cache (no bypass), except an object larger than the whole capacity, which is
streamed: each of its requests is a miss that moves its bytes and evicts nothing. Traffic
(``bytes_moved``) counts the bytes loaded on misses, compulsory first loads included;
evictions cost nothing. With several caches (per-layer), each has ``capacity`` bytes and
they run independently.

Policies (evict the resident object with the smallest key; every key is unique, so the
choice never depends on data-structure order):

* ``lru``: last access time.
* ``lfu``: (number of requests so far, over the whole trace — "perfect" LFU, counts survive
  eviction; last access time); ties in frequency go to the least recently used.
* ``lru-k`` (O'Neil, O'Neil, Weikum 1993; ``k=2`` by default, also spelled ``lru-2``,
  ``lru-3``...): the time of the k-th most recent request (history kept for evicted objects
  too, no correlated-reference period); an object with fewer than k requests has an infinite
  backward k-distance and goes first, least recently used first.
* ``belady``: the next request furthest in the future (never requested again: first, largest
  object index first). With equal sizes in each cache this is the offline optimum for misses
  and bytes (Belady 1966 / Mattson et al. 1970); with unequal sizes it is a heuristic and
  :class:`SimResult` says ``optimal=False``.

All policies run in one compiled kernel (an indexed binary heap over the resident objects,
``O(log C)`` per request); small traces run its pure-Python twin (:mod:`memopt._jit`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from memopt import _jit
from memopt._jit import kernel
from memopt.errors import InternalError, OptionError
from memopt.cache.routes import MAX_BYTES, RequestTrace

__all__ = ["POLICIES", "SimResult", "simulate", "belady", "next_use", "check_capacity",
           "parse_policy"]

POLICIES = ("lru", "lfu", "lru-k", "belady")
_CODE = {"lru": 0, "lfu": 1, "lru-k": 2, "belady": 3}


@dataclass(frozen=True)
class SimResult:
    """Counts of one simulation. ``optimal`` is true only for Belady on a trace whose caches
    each hold objects of one size (then ``misses`` and ``bytes_moved`` are the minimum any
    policy achieves)."""

    policy: str
    capacity: int
    requests: int
    hits: int
    misses: int
    bytes_moved: int
    bytes_requested: int
    caches: int = 1
    optimal: bool = False

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def check_capacity(capacity, what: str = "capacity") -> int:
    """``capacity`` as an exact byte count in ``[0, 2**62)`` or :class:`OptionError`."""
    if isinstance(capacity, (bool, np.bool_)):
        raise OptionError(f"{what} must be an integer number of bytes, got {capacity!r}")
    if isinstance(capacity, (float, np.floating)):
        if not math.isfinite(capacity) or not float(capacity).is_integer():
            raise OptionError(f"{what} must be a whole number of bytes, got {capacity!r}")
        if capacity >= MAX_BYTES:
            raise OptionError(f"{what} {capacity!r} is beyond memopt's exact limit of 2**62 bytes")
        capacity = int(capacity)
    if not isinstance(capacity, (int, np.integer)):
        raise OptionError(f"{what} must be an integer number of bytes, got {type(capacity).__name__}")
    capacity = int(capacity)
    if capacity < 0:
        raise OptionError(f"{what} is negative: {capacity}")
    if capacity >= MAX_BYTES:
        raise OptionError(f"{what} {capacity} is beyond memopt's exact limit of 2**62 bytes")
    return capacity


def parse_policy(policy: str, k: int | None = None) -> tuple[str, int]:
    """``(canonical name, k)`` for a policy name (``lru-2`` means ``lru-k`` with k=2)."""
    if not isinstance(policy, str):
        raise OptionError(f"policy must be a name, got {type(policy).__name__}")
    name = policy.strip().lower()
    if name.startswith("lru-") and name[4:].isdigit():
        kk = int(name[4:])
        if k is not None and k != kk:
            raise OptionError(f"policy {policy!r} and k={k} disagree")
        k, name = kk, "lru-k"
    if name not in _CODE:
        raise OptionError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)} (or lru-2, lru-3...)")
    if name == "lru-k":
        k = 2 if k is None else k
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 64:
            raise OptionError(f"lru-k needs an integer k in [1, 64], got {k!r}")
        return name, int(k)
    return name, 1


# ---------------------------------------------------------------------------- kernels

@kernel(pure_max=2000)
def _next_use(req, m):
    """``nxt[t]``: index of the next request of the same object, or ``n + object`` if none."""
    n = req.shape[0]
    nxt = np.empty(n, dtype=np.int64)
    last = np.full(m, -1, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        o = req[t]
        if last[o] >= 0:
            nxt[t] = last[o]
        else:
            nxt[t] = n + o
        last[o] = t
    return nxt


@kernel(pure_max=2000)
def _sift_up(heap, pos, key, p, o):
    """Place object ``o`` (key ``key[o]``) at heap slot ``p`` or above (binary min-heap)."""
    kv = key[o]
    while p > 0:
        q = (p - 1) >> 1
        if key[heap[q]] <= kv:
            break
        heap[p] = heap[q]
        pos[heap[p]] = p
        p = q
    heap[p] = o
    pos[o] = p


@kernel(pure_max=2000)
def _sift_down(heap, pos, key, p, size, o):
    """Place object ``o`` at heap slot ``p`` or below, among the first ``size`` slots."""
    kv = key[o]
    while True:
        c = 2 * p + 1
        if c >= size:
            break
        if c + 1 < size and key[heap[c + 1]] < key[heap[c]]:
            c += 1
        if key[heap[c]] >= kv:
            break
        heap[p] = heap[c]
        pos[heap[p]] = p
        p = c
    heap[p] = o
    pos[o] = p


@kernel(pure_max=2000)
def _simulate(req, sizes, nxt, capacity, policy, k, hit_out):
    """Run one cache; returns ``(hits, bytes_moved)``; ``hit_out`` (length n or 0) gets the
    hit flag of each request."""
    n = req.shape[0]
    m = sizes.shape[0]
    heap = np.empty(m, dtype=np.int64)
    pos = np.full(m, -1, dtype=np.int64)
    key = np.zeros(m, dtype=np.int64)
    count = np.zeros(m, dtype=np.int64)
    hist = np.full((m, k), -1, dtype=np.int64)
    hptr = np.zeros(m, dtype=np.int64)
    record = hit_out.shape[0] == n
    size = 0
    used = 0
    hits = 0
    moved = 0
    for t in range(n):
        o = req[t]
        s = sizes[o]
        # the object's new key
        if policy == 0:
            kv = t
        elif policy == 1:
            count[o] += 1
            kv = count[o] * (n + 1) + t
        elif policy == 2:
            hist[o, hptr[o]] = t
            hptr[o] = (hptr[o] + 1) % k
            kv = (hist[o, hptr[o]] + 1) * (n + 1) + t
        else:
            kv = -nxt[t]
        p = pos[o]
        if p >= 0:
            hits += 1
            if record:
                hit_out[t] = True
            old = key[o]
            key[o] = kv
            if kv < old:
                _sift_up(heap, pos, key, p, o)
            else:
                _sift_down(heap, pos, key, p, size, o)
            continue
        if record:
            hit_out[t] = False
        moved += s
        if s > capacity:
            continue
        while used + s > capacity:
            # pop the minimum: the last leaf takes the root's place and sinks
            v = heap[0]
            pos[v] = -1
            used -= sizes[v]
            size -= 1
            if size > 0:
                _sift_down(heap, pos, key, 0, size, heap[size])
        key[o] = kv
        used += s
        size += 1
        _sift_up(heap, pos, key, size - 1, o)
    return hits, moved


def next_use(requests: np.ndarray, n_objects: int) -> np.ndarray:
    """Next request index of the same object for each request (``>= n`` when there is none)."""
    req = np.ascontiguousarray(requests, dtype=np.int64)
    fn = _jit.choose(_next_use, req.shape[0])
    return fn(req, int(n_objects))


def _run_cache(trace: RequestTrace, req: np.ndarray, capacity: int, code: int, k: int,
               hit_out: np.ndarray | None):
    req = np.ascontiguousarray(req, dtype=np.int64)
    n = req.shape[0]
    nxt = next_use(req, trace.n_objects) if code == 3 else np.zeros(0, dtype=np.int64)
    out = hit_out if hit_out is not None else np.zeros(0, dtype=np.bool_)
    fn = _jit.choose(_simulate, n)
    hits, moved = fn(req, np.ascontiguousarray(trace.sizes, dtype=np.int64), nxt, np.int64(capacity),
                     np.int64(code), np.int64(k), out)
    return int(hits), int(moved)


def simulate(trace: RequestTrace, policy: str, capacity, *, k: int | None = None,
             hits_out: bool = False):
    """Simulate ``policy`` on ``trace`` with ``capacity`` bytes per cache (see the module docstring).

    Parameters
    ----------
    trace : RequestTrace
    policy : {"lru", "lfu", "lru-k", "belady"}
        One of :data:`POLICIES` (``"lru-2"`` is ``"lru-k"`` with ``k=2``).
    capacity : int
        Bytes per cache.
    k : int, optional
        The ``k`` of LRU-k.
    hits_out : bool, default False
        Also return the schedule: one hit flag per request.

    Returns
    -------
    SimResult or tuple
        A :class:`SimResult`; with ``hits_out=True``, ``(result, hit_flags)``.

    Raises
    ------
    OptionError
        An unknown policy, a negative or non-integer capacity.

    Examples
    --------
    >>> from memopt.cache.routes import make_trace
    >>> tr = make_trace([0, 1, 2, 0, 1, 3, 0], [1, 1, 1, 1])
    >>> simulate(tr, "lru", 2).misses, simulate(tr, "belady", 2).misses
    (7, 5)
    """
    if not isinstance(trace, RequestTrace):
        raise OptionError(f"simulate needs a RequestTrace, got {type(trace).__name__}")
    name, kk = parse_policy(policy, k)
    cap = check_capacity(capacity)
    code = _CODE[name]
    flags = np.zeros(trace.n_requests, dtype=np.bool_) if hits_out else None
    hits = moved = 0
    if len(trace.caches) == 1:
        hits, moved = _run_cache(trace, trace.requests, cap, code, kk, flags)
    else:
        sel_all = trace.cache_of[trace.requests]
        for c in range(len(trace.caches)):
            idx = np.flatnonzero(sel_all == c)
            if idx.size == 0:
                continue
            sub = np.zeros(idx.size, dtype=np.bool_) if hits_out else None
            h, mv = _run_cache(trace, trace.requests[idx], cap, code, kk, sub)
            hits += h
            moved += mv
            if hits_out:
                flags[idx] = sub
    n = trace.n_requests
    requested = trace.requested_bytes()
    if not (0 <= hits <= n and 0 <= moved <= requested):
        raise InternalError("simulate-counts", f"{name}: hits {hits} of {n}, bytes moved {moved} of "
                                               f"{requested} requested")
    label = name if name != "lru-k" else f"lru-{kk}"
    res = SimResult(label, cap, n, hits, n - hits, moved, requested, len(trace.caches),
                    optimal=(name == "belady" and trace.equal_sizes()))
    return (res, flags) if hits_out else res


def belady(trace: RequestTrace, capacity, *, hits_out: bool = False):
    """Belady's furthest-next-use policy: the minimum misses and bytes moved when each cache
    holds objects of one size (``result.optimal``); a heuristic otherwise."""
    return simulate(trace, "belady", capacity, hits_out=hits_out)
