"""Offline optima for caches with unequal object sizes: an exact MIP and a min-cost-flow bound.

**Model** (the same as :mod:`memopt.cache.policies`): demand paging, **no bypass** — every
requested object is in the cache when it is served (it may be evicted right after), except an
object larger than the whole capacity, which is streamed (each request a miss, no space
taken). **Traffic** = bytes loaded into the cache on misses, first loads included (they are
the same for every policy: the *compulsory* traffic). Prefetching is not allowed (it never
lowers the minimum traffic of demand paging). Each cache of a per-layer trace has
``capacity`` bytes and is solved on its own.

Request ``t`` of object ``o`` (size ``s``) whose next request is ``u``: the object is either
*held* over ``(t, u)`` (``x_t = 1``; request ``u`` is a hit) or not (``u`` is a miss, moving
``s`` bytes). Holding it in part never helps (the hit needs it all the way), so an optimal
schedule is a choice of held intervals; after request ``tau`` the cache holds every interval
strictly around ``tau`` plus ``o_tau`` itself, so the schedule is feasible iff for all ``tau``

    sum_{held (t, u), t < tau < u} s_t  <=  C - s(o_tau)        (s(o_tau) read as 0 if streamed)

* :func:`offline_optimum`: that integer program, exactly (OR-Tools CP-SAT: integer arithmetic,
  no float rounding of byte counts), warm-started with the best online schedule; with equal
  sizes per cache it is Belady (``method="auto"``). Time-limited: returns the best schedule
  with ``status="feasible"`` and a proven lower bound when the limit hits.
* :func:`flow_lower_bound`: the FOO relaxation (Berger, Beckmann, Harchol-Balter, SIGMETRICS
  2018) adapted to no bypass. As a min-cost flow (``method="min-cost-flow"``, OR-Tools
  ``min_cost_flow``): nodes ``in_t -> out_t`` (capacity ``C - s(o_t)``: the bytes held
  through request ``t``), ``out_t -> in_{t+1}`` (capacity C) and, per interval, a "miss" arc
  ``out_t -> in_u`` (capacity ``s_t``, cost 1 per byte), with supply ``s_t`` at ``out_t`` and
  demand ``s_t`` at ``in_u``. Every schedule is a flow of the same cost (its held intervals
  run along the chain, its misses over their arcs), so compulsory traffic + minimum cost is a
  lower bound on the minimum traffic. By flow conservation the chain flow through ``t`` is
  exactly the fractional held bytes around ``t``, so the flow optimum is the optimum of the
  LP relaxation of the MIP above (``0 <= x <= 1``). All sizes of a cache are divided by their
  gcd ``g`` and every capacity rounded down to a multiple of ``g`` first (held bytes are
  multiples of ``g``, so no schedule is cut off; the bound only gets tighter).
  The default ``method="greedy"`` solves the same LP in ``O(n log n)``: the interval matrix
  with columns sorted by right end is a *greedy matrix* (no ``[[1,1],[1,0]]`` submatrix), so
  by Hoffman, Kolen and Sakarovitch (1985) the greedy that gives each interval, by increasing
  right end, as many bytes as the residual capacities allow is optimal. The two methods
  agree on every trace (tested); the flow one is kept as the independent cross-check (it
  grows roughly quadratically in practice, the greedy near-linearly).
  Either way the bound comes with an optimal **dual solution** (``FlowBound.dual_points``): a
  set ``P`` of requests such that no schedule keeps more than ``D(P) = sum_{tau in P}
  room(tau) + sum of s over intervals with no point of P inside`` (weak duality; the dual of an
  interval LP is integral, so the minimum ``D`` is the LP optimum). It is found by a dynamic
  program over the last chosen point (a lazy segment tree, ``O(n log n)``), and checked equal
  to the primal value every time (strong duality, ``InternalError`` otherwise). A checker
  needs only ``P`` and the trace to confirm the bound.
* :func:`schedule_traffic` checks a schedule given as hit flags and returns its exact traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from memopt import _jit
from memopt.clock import Clock, solve_by
from memopt._jit import kernel
from memopt.errors import InternalError, OptionError
from memopt.cache.policies import POLICIES, check_capacity, next_use, simulate
from memopt.cache.routes import RequestTrace

__all__ = ["OfflineResult", "FlowBound", "offline_optimum", "flow_lower_bound", "schedule_traffic",
           "METHODS", "OBJECTIVES", "FLOW_METHODS"]

METHODS = ("auto", "cp-sat", "belady")
FLOW_METHODS = ("greedy", "min-cost-flow")
OBJECTIVES = ("bytes", "misses")


@dataclass(frozen=True)
class OfflineResult:
    """Best schedule found (``misses``, ``bytes_moved``) and a proven ``lower_bound`` on the
    objective (``bytes``: traffic; ``misses``: miss count). ``status``: ``optimal`` (the
    schedule is a minimum) or ``feasible`` (time limit or size limit; the gap stays open).
    ``hit_flags`` (not in :meth:`to_dict`) is the schedule: one flag per request."""

    capacity: int
    requests: int
    hits: int
    misses: int
    bytes_moved: int
    lower_bound: int
    status: str
    method: str
    objective: str = "bytes"
    caches: int = 1
    hit_flags: np.ndarray = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"capacity": self.capacity, "requests": self.requests, "hits": self.hits,
                "misses": self.misses, "bytes_moved": self.bytes_moved,
                "lower_bound": self.lower_bound, "status": self.status, "method": self.method,
                "objective": self.objective, "caches": self.caches}


@dataclass(frozen=True)
class FlowBound:
    """``lower_bound`` (bytes) on the traffic of every policy at ``capacity``;
    ``compulsory`` is the part every policy pays (first loads and streamed objects)."""

    capacity: int
    requests: int
    lower_bound: int
    compulsory: int
    caches: int = 1
    method: str = "greedy"
    #: request indices of an optimal dual solution (not in :meth:`to_dict`): the bound equals
    #: ``compulsory + sum over caches of g * (sum of interval sizes/g - D(P))`` (module doc)
    dual_points: np.ndarray = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"capacity": self.capacity, "requests": self.requests, "lower_bound": self.lower_bound,
                "compulsory": self.compulsory, "caches": self.caches, "method": self.method}


def check_time_limit(value) -> float:
    """The library's time-limit check (:func:`memopt.clock.check_time_limit`); 0 is refused:
    the cache models have no answer before the solver's first solution."""
    from memopt.clock import check_time_limit as check

    return check(value, "time_limit", zero_ok=False)


def _caches(trace: RequestTrace):
    """(global request indices, local requests) per non-empty cache."""
    if len(trace.caches) == 1:
        yield np.arange(trace.n_requests), trace.requests
        return
    sel = trace.cache_of[trace.requests]
    for c in range(len(trace.caches)):
        idx = np.flatnonzero(sel == c)
        if idx.size:
            yield idx, trace.requests[idx]


class _Cache:
    """Intervals of one cache at one capacity."""

    def __init__(self, trace: RequestTrace, req: np.ndarray, cap: int):
        n = req.shape[0]
        self.n = n
        self.cap = cap
        s = trace.sizes[req]
        self.s = s
        nxt = next_use(req, trace.n_objects)
        has_next = nxt < n
        self.nxt = nxt
        self.s_eff = np.where(s <= cap, s, 0)
        # variable intervals: cacheable, non-empty, with a next request
        self.var = np.flatnonzero(has_next & (s <= cap) & (s > 0))
        first = np.ones(n, dtype=bool)
        first[nxt[has_next]] = False
        self.first = first
        # fixed parts: first requests always miss; repeats of streamed objects always miss;
        # repeats of empty objects always hit (holding them is free)
        streamed_rep = (~first) & (s > cap)
        self.fixed_misses = int(first.sum() + streamed_rep.sum())
        self.fixed_bytes = int(s[first].sum() + s[streamed_rep].sum())

    def traffic(self, held: np.ndarray) -> tuple[int, int]:
        """(misses, bytes) of a choice of held variable intervals (boolean per ``var``)."""
        miss = ~held
        return (self.fixed_misses + int(miss.sum()),
                self.fixed_bytes + int(self.s[self.var][miss].sum()))

    def hits_of(self, held: np.ndarray) -> np.ndarray:
        flags = np.zeros(self.n, dtype=bool)
        # repeats of empty objects are hits
        zero_rep = ~self.first & (self.s == 0)
        flags[zero_rep] = True
        flags[self.nxt[self.var[held]]] = True
        return flags

    def held_from_hits(self, flags: np.ndarray) -> np.ndarray:
        return flags[self.nxt[self.var]]

    def feasible(self, held: np.ndarray) -> bool:
        diff = np.zeros(self.n + 1, dtype=np.int64)
        t = self.var[held]
        u = self.nxt[t]
        np.add.at(diff, t + 1, self.s[t])
        np.add.at(diff, u, -self.s[t])
        through = np.cumsum(diff)[:self.n]
        return bool(np.all(through + self.s_eff <= self.cap))


def schedule_traffic(trace: RequestTrace, capacity, hit_flags) -> tuple[int, int]:
    """``(misses, bytes_moved)`` of the schedule whose hits are ``hit_flags`` (one flag per
    request), after checking it is feasible at ``capacity`` (see module doc): a hit needs a
    previous request of its object, an object that fits, and the kept objects plus the
    requested one within the capacity at every request. An infeasible schedule raises
    :class:`OptionError` naming the first violated request."""
    cap = check_capacity(capacity)
    flags = np.asarray(hit_flags, dtype=bool)
    if flags.shape != (trace.n_requests,):
        raise OptionError(f"hit flags: expected {trace.n_requests} flags, got {flags.shape}")
    misses = bytes_moved = 0
    for idx, req in _caches(trace):
        cc = _Cache(trace, req, cap)
        f = flags[idx]
        bad = f & (cc.first | (cc.s > cap))
        if bad.any():
            i = int(idx[np.flatnonzero(bad)[0]])
            raise OptionError(f"request {i} is marked a hit but its object cannot be resident then")
        held = cc.held_from_hits(f)
        if not cc.feasible(held):
            diff = np.zeros(cc.n + 1, dtype=np.int64)
            t = cc.var[held]
            np.add.at(diff, t + 1, cc.s[t])
            np.add.at(diff, cc.nxt[t], -cc.s[t])
            over = np.flatnonzero(np.cumsum(diff)[:cc.n] + cc.s_eff > cap)
            raise OptionError(f"the schedule exceeds the capacity {cap} at request {int(idx[over[0]])}")
        misses += int((~f).sum())
        bytes_moved += int(cc.s[~f].sum())
    return misses, bytes_moved


# ---------------------------------------------------------------------------- flow bound

def _flow_cache(cc: _Cache) -> int:
    """Minimum cost (bytes of repeat misses) of the relaxation for one cache."""
    var = cc.var
    if var.size == 0:
        return 0
    cap = cc.cap
    sv = cc.s[var]
    g = int(np.gcd.reduce(sv))
    if g <= 0:
        raise InternalError("flow-gcd", "gcd of interval sizes is not positive")
    # held bytes are multiples of g: dividing by g and rounding every capacity down keeps
    # every schedule feasible (and tightens the relaxation)
    sizes = cc.s // g
    room = (cap - cc.s_eff) // g
    capg = cap // g
    # only [first var start, last var end] matters
    lo = int(var.min())
    hi = int(cc.nxt[var].max())
    span = hi - lo + 1
    t_idx = np.arange(lo, hi + 1)
    tails = [2 * (t_idx - lo), 2 * (t_idx[:-1] - lo) + 1, 2 * (var - lo) + 1]
    heads = [2 * (t_idx - lo) + 1, 2 * (t_idx[1:] - lo), 2 * (cc.nxt[var] - lo)]
    caps = [room[lo:hi + 1], np.full(span - 1, capg, dtype=np.int64), sizes[var]]
    costs = [np.zeros(span, dtype=np.int64), np.zeros(span - 1, dtype=np.int64),
             np.ones(var.size, dtype=np.int64)]
    supply = np.zeros(2 * span, dtype=np.int64)
    np.add.at(supply, 2 * (var - lo) + 1, sizes[var])
    np.add.at(supply, 2 * (cc.nxt[var] - lo), -sizes[var])
    from ortools.graph.python import min_cost_flow

    mcf = min_cost_flow.SimpleMinCostFlow()
    mcf.add_arcs_with_capacity_and_unit_cost(np.concatenate(tails).astype(np.int32),
                                             np.concatenate(heads).astype(np.int32),
                                             np.concatenate(caps).astype(np.int64),
                                             np.concatenate(costs).astype(np.int64))
    mcf.set_nodes_supplies(np.arange(2 * span, dtype=np.int32), supply)
    status = mcf.solve()
    if status != mcf.OPTIMAL:
        if status in (mcf.BAD_CAPACITY_RANGE, mcf.BAD_COST_RANGE):
            raise OptionError(f"the flow bound's byte counts are too large for exact min-cost flow "
                              f"(status {status}); divide the sizes by a common unit")
        raise InternalError("min-cost-flow-status", f"min-cost flow ended with status {status}")
    return int(mcf.optimal_cost()) * g


@kernel(pure_max=2000)
def _greedy_hold(lo, hi, size, caps):
    """Hoffman-Kolen-Sakarovitch greedy for the interval LP: intervals (point ranges
    ``[lo, hi)``, already sorted by right end) each get ``y = min(size, least residual capacity
    over the range)``; returns the total of ``y`` (bytes held). A lazy segment tree with range
    add and range min (bottom-up, Al.Cash's layout) keeps the residual capacities."""
    n = caps.shape[0]
    size_t = 1
    h = 0
    while size_t < max(n, 1):
        size_t *= 2
        h += 1
    inf = np.int64(2**62)
    t = np.full(2 * size_t, inf, dtype=np.int64)
    d = np.zeros(size_t, dtype=np.int64)
    for i in range(n):
        t[size_t + i] = caps[i]
    for i in range(size_t - 1, 0, -1):
        t[i] = min(t[2 * i], t[2 * i + 1])
    held = 0
    for j in range(lo.shape[0]):
        s = size[j]
        a = lo[j]
        b = hi[j]
        if a >= b:
            held += s
            continue
        y = min(s, _st_range_min(t, d, a, b, h, size_t))
        held += y
        if y > 0:
            _st_range_add(t, d, a, b, -y, size_t)
    return held


@kernel(pure_max=2000)
def _st_push_node(t, d, q, size_t):
    """Hand tree node ``q``'s lazy add down to its two children."""
    v = d[q]
    if v != 0:
        t[2 * q] += v
        t[2 * q + 1] += v
        if 2 * q < size_t:
            d[2 * q] += v
            d[2 * q + 1] += v
        d[q] = 0


@kernel(pure_max=2000)
def _st_push(t, d, p, h, size_t):
    """Push the lazy adds on the path from the root down to tree node ``p``."""
    for sh in range(h, 0, -1):
        _st_push_node(t, d, p >> sh, size_t)


@kernel(pure_max=2000)
def _st_rebuild(t, d, p):
    while p > 1:
        p >>= 1
        t[p] = min(t[2 * p], t[2 * p + 1]) + d[p]


@kernel(pure_max=2000)
def _st_range_add(t, d, a, b, v, size_t):
    """Add ``v`` to leaves ``[a, b)`` (lazily) and repair the minima above the range's ends."""
    l = a + size_t
    r = b + size_t
    while l < r:
        if l & 1:
            t[l] += v
            if l < size_t:
                d[l] += v
            l += 1
        if r & 1:
            r -= 1
            t[r] += v
            if r < size_t:
                d[r] += v
        l >>= 1
        r >>= 1
    _st_rebuild(t, d, a + size_t)
    _st_rebuild(t, d, b - 1 + size_t)


@kernel(pure_max=2000)
def _st_range_min(t, d, a, b, h, size_t):
    """Least value over leaves ``[a, b)``."""
    _st_push(t, d, a + size_t, h, size_t)
    _st_push(t, d, b - 1 + size_t, h, size_t)
    res = np.int64(2**62)
    l = a + size_t
    r = b + size_t
    while l < r:
        if l & 1:
            res = min(res, t[l])
            l += 1
        if r & 1:
            r -= 1
            res = min(res, t[r])
        l >>= 1
        r >>= 1
    return res


@kernel(pure_max=2000)
def _dual_points(lo, hi, size, caps):
    """The LP dual of the interval relaxation, solved exactly: a set ``P`` of request points
    minimizing ``D(P) = sum_{tau in P} caps[tau] + sum of size[j] over intervals j (point
    ranges ``[lo, hi)``, sorted by ``hi``) that contain no point of P``. By weak duality every
    ``P`` bounds the held bytes from above; the minimum equals the LP optimum (the dual of an
    interval matrix is integral). Dynamic program over the last chosen point ``q`` (slot
    ``q + 1``; slot 0 is a virtual start): ``f(p) = caps[p] + min_q f(q) + (sizes of the
    intervals strictly between q and p)``, with a lazy segment tree (prefix adds, prefix
    argmin). Returns ``(D, chosen points in increasing order)``."""
    n = caps.shape[0]
    m = lo.shape[0]
    slots = n + 1
    size_t = 1
    h = 0
    while size_t < slots:
        size_t *= 2
        h += 1
    inf = np.int64(2**62)
    t = np.full(2 * size_t, inf, dtype=np.int64)
    d = np.zeros(size_t, dtype=np.int64)
    pred = np.zeros(n + 1, dtype=np.int64)
    _st_push(t, d, size_t, h, size_t)
    t[size_t] = 0
    _st_rebuild(t, d, size_t)
    left = np.empty(2 * h + 2, dtype=np.int64)
    right = np.empty(2 * h + 2, dtype=np.int64)
    j = 0
    best_val = np.int64(0)
    for p in range(n + 1):
        while j < m and hi[j] <= p:
            _st_range_add(t, d, 0, lo[j] + 1, size[j], size_t)
            j += 1
        # argmin over slots [0, p]
        l = size_t
        r = p + 1 + size_t
        _st_push(t, d, l, h, size_t)
        _st_push(t, d, r - 1, h, size_t)
        nl = 0
        nr = 0
        while l < r:
            if l & 1:
                left[nl] = l
                nl += 1
                l += 1
            if r & 1:
                r -= 1
                right[nr] = r
                nr += 1
            l >>= 1
            r >>= 1
        best = -1
        best_val = inf
        for i in range(nl):
            if t[left[i]] < best_val:
                best_val = t[left[i]]
                best = left[i]
        for i in range(nr - 1, -1, -1):
            if t[right[i]] < best_val:
                best_val = t[right[i]]
                best = right[i]
        v = best
        while v < size_t:
            _st_push_node(t, d, v, size_t)
            if t[2 * v] <= t[2 * v + 1]:
                v = 2 * v
            else:
                v = 2 * v + 1
        pred[p] = v - size_t
        if p < n:
            leaf = p + 1 + size_t
            _st_push(t, d, leaf, h, size_t)
            t[leaf] = best_val + caps[p]
            _st_rebuild(t, d, leaf)
    count = 0
    q = pred[n]
    while q > 0:
        count += 1
        q = pred[q - 1]
    points = np.empty(count, dtype=np.int64)
    q = pred[n]
    i = count - 1
    while q > 0:
        points[i] = q - 1
        i -= 1
        q = pred[q - 1]
    return best_val, points


def _intervals(cc: _Cache):
    """(g, lo, hi, size / g, room / g) of one cache's relaxation, intervals sorted by right end."""
    var = cc.var
    g = int(np.gcd.reduce(cc.s[var]))
    u = cc.nxt[var]
    order = np.argsort(u, kind="stable")
    lo = np.ascontiguousarray(var[order] + 1, dtype=np.int64)
    hi = np.ascontiguousarray(u[order], dtype=np.int64)
    size = np.ascontiguousarray(cc.s[var][order] // g, dtype=np.int64)
    caps = np.ascontiguousarray((cc.cap - cc.s_eff) // g, dtype=np.int64)
    return g, lo, hi, size, caps


def _greedy_cache(cc: _Cache) -> int:
    """Minimum cost of the relaxation for one cache by the exact greedy (module doc)."""
    if cc.var.size == 0:
        return 0
    g, lo, hi, size, caps = _intervals(cc)
    fn = _jit.choose(_greedy_hold, cc.n)
    held = int(fn(lo, hi, size, caps))
    total = int(size.sum())
    if not 0 <= held <= total:
        raise InternalError("flow-greedy", f"greedy held {held} of {total} units")
    return (total - held) * g


def _dual_cache(cc: _Cache) -> tuple[int, np.ndarray]:
    """(minimum cost of the relaxation, dual points: local request indices) for one cache,
    from the exact LP dual (:func:`_dual_points`)."""
    if cc.var.size == 0:
        return 0, np.zeros(0, dtype=np.int64)
    g, lo, hi, size, caps = _intervals(cc)
    fn = _jit.choose(_dual_points, cc.n)
    dual, points = fn(lo, hi, size, caps)
    total = int(size.sum())
    if not 0 <= int(dual) <= total:
        raise InternalError("flow-dual", f"dual value {int(dual)} outside [0, {total}]")
    return (total - int(dual)) * g, points


def flow_lower_bound(trace: RequestTrace, capacity, *, method: str = "greedy") -> FlowBound:
    """The FOO-style lower bound on the traffic of any policy (module docstring).

    Parameters
    ----------
    trace : RequestTrace
    capacity : int
        Bytes per cache.
    method : {"greedy", "min-cost-flow"}
        The optimum of the relaxation by the exact greedy (``O(n log n)``) or by OR-Tools
        min-cost flow on the network; both give the same number.

    Returns
    -------
    FlowBound

    Raises
    ------
    OptionError
        An unknown method or a bad capacity.

    Examples
    --------
    >>> from memopt.cache.routes import make_trace
    >>> flow_lower_bound(make_trace([0, 1, 0, 1], [2, 3]), 4).lower_bound
    7
    """
    if not isinstance(trace, RequestTrace):
        raise OptionError(f"flow_lower_bound needs a RequestTrace, got {type(trace).__name__}")
    if method not in FLOW_METHODS:
        raise OptionError(f"unknown flow method {method!r}; choose from {', '.join(FLOW_METHODS)}")
    cap = check_capacity(capacity)
    solve = _greedy_cache if method == "greedy" else _flow_cache
    total = compulsory = 0
    points = []
    for idx, req in _caches(trace):
        cc = _Cache(trace, req, cap)
        cost = solve(cc)
        dual_cost, pts = _dual_cache(cc)
        if dual_cost != cost:
            raise InternalError("flow-duality", f"{method} relaxation costs {cost} bytes but its exact "
                                                f"dual {dual_cost}")
        compulsory += cc.fixed_bytes
        total += cc.fixed_bytes + cost
        points.append(idx[pts])
    dual = np.sort(np.concatenate(points)) if points else np.zeros(0, dtype=np.int64)
    return FlowBound(cap, trace.n_requests, total, compulsory, len(trace.caches), method, dual)


# ---------------------------------------------------------------------------- exact MIP

def _constraints(cc: _Cache, scale: int):
    """Rows ``(var positions, rhs)`` of the capacity constraints that can bind (sizes / scale)."""
    var = cc.var
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for j, t in enumerate(var.tolist()):
        starts.setdefault(t + 1, []).append(j)       # strictly inside from t+1
        ends.setdefault(int(cc.nxt[t]), []).append(j)  # up to u-1
    sv = (cc.s[var] // scale).tolist()
    active: dict[int, None] = {}
    act_sum = 0
    rows = []
    changed = True
    last_rhs = None
    for tau in range(cc.n):
        for j in starts.get(tau, ()):
            active[j] = None
            act_sum += sv[j]
            changed = True
        for j in ends.get(tau, ()):      # after the starts: an interval (t, t+1) is never inside
            del active[j]
            act_sum -= sv[j]
            changed = True
        rhs = (cc.cap - int(cc.s_eff[tau])) // scale
        if act_sum <= rhs:
            continue
        if not changed and last_rhs is not None and rhs >= last_rhs:
            continue
        rows.append((list(active), rhs))
        changed = False
        last_rhs = rhs
    return rows


def _solve_cache(cc: _Cache, objective: str, end: float, hint: np.ndarray):
    """(held, optimal?, lower bound on the cache's objective) by CP-SAT, back by ``end`` (a
    :func:`time.perf_counter` reading, the call's deadline: :func:`memopt.clock.solve_by`)."""
    from ortools.sat.python import cp_model

    var = cc.var
    k = var.size
    if k == 0:
        held = np.zeros(0, dtype=bool)
        mi, by = cc.traffic(held)
        return held, True, (by if objective == "bytes" else mi)
    scale = int(np.gcd.reduce(cc.s[var]))
    w = (cc.s[var] // scale).tolist() if objective == "bytes" else [1] * k
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{j}") for j in range(k)]
    coef = (cc.s[var] // scale).tolist()
    for cols, rhs in _constraints(cc, scale):
        model.add(cp_model.LinearExpr.weighted_sum([x[j] for j in cols], [coef[j] for j in cols]) <= rhs)
    model.minimize(sum(w) - cp_model.LinearExpr.weighted_sum(x, w))
    for j in range(k):
        model.add_hint(x[j], bool(hint[j]))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solve_by(solver, model, end)
    fixed_mi, fixed_by = cc.traffic(np.ones(k, dtype=bool))
    # a bound that needs no solver: the relaxation for bytes, the compulsory misses otherwise
    relax = fixed_by + _greedy_cache(cc) if objective == "bytes" else fixed_mi
    unit = scale if objective == "bytes" else 1
    key = 0 if objective == "misses" else 1
    hint_obj = cc.traffic(hint)[key]
    # status None: the solve had not returned by the deadline (its answer is dropped)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        held = np.array([solver.value(v) for v in x], dtype=bool)
        if not cc.feasible(held):
            raise InternalError("cp-sat-schedule", "CP-SAT returned a schedule over the capacity")
        obj = cc.traffic(held)[key]
        if obj > hint_obj:
            held, obj = hint.copy(), hint_obj
        if status == cp_model.OPTIMAL:
            return held, True, obj
        bound = solver.best_objective_bound
        lb = relax
        if math.isfinite(bound) and abs(bound) < 2.0**52:   # integral doubles: exact
            lb = max(lb, (fixed_mi if objective == "misses" else fixed_by) + max(math.ceil(bound - 1e-6), 0) * unit)
        return held, lb >= obj, min(lb, obj)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        raise InternalError("cp-sat-status", f"CP-SAT says the caching model is "
                                             f"{solver.status_name(status)}")
    return hint.copy(), relax >= hint_obj, min(relax, hint_obj)


def offline_optimum(trace: RequestTrace, capacity, *, time_limit: float = 30.0,
                    objective: str = "bytes", method: str = "auto",
                    max_requests: int = 5000) -> OfflineResult:
    """The minimum traffic (``objective="bytes"``) or miss count (``"misses"``) of any
    demand-paging schedule at ``capacity`` bytes per cache (module docstring).

    The best online schedule (LRU, LFU, LRU-2, Belady) is CP-SAT's starting point, so a
    time-limited result is never worse than any of them.

    Parameters
    ----------
    trace : RequestTrace
    capacity : int
        Bytes per cache.
    time_limit : float, default 30.0
        Seconds for the whole call (one deadline: a cache solved after it gets the best
        online schedule and the flow bound).
    objective : {"bytes", "misses"}
    method : {"auto", "cp-sat", "belady"}
        ``"cp-sat"`` (the MIP), ``"belady"`` (only for equal sizes per cache, where it is
        exact), ``"auto"`` (Belady on caches with equal sizes, else CP-SAT).
    max_requests : int, default 5000
        A cache with more requests is not given to CP-SAT: its result is the best online
        schedule and the flow bound (``feasible`` unless they meet).

    Returns
    -------
    OfflineResult
        The schedule's ``misses`` and ``bytes_moved``, a proven ``lower_bound``, ``status``.

    Raises
    ------
    OptionError
        An unknown objective or method, a bad capacity or time limit.

    Examples
    --------
    >>> from memopt.cache.routes import make_trace
    >>> r = offline_optimum(make_trace([0, 1, 2, 0, 1, 2], [2, 2, 3]), 5, method="cp-sat")
    >>> r.bytes_moved, r.status
    (9, 'optimal')
    """
    if not isinstance(trace, RequestTrace):
        raise OptionError(f"offline_optimum needs a RequestTrace, got {type(trace).__name__}")
    cap = check_capacity(capacity)
    # the call's one deadline: every cache's solve is back by it
    end = Clock(check_time_limit(time_limit)).end
    if objective not in OBJECTIVES:
        raise OptionError(f"unknown objective {objective!r}; choose from {', '.join(OBJECTIVES)}")
    if method not in METHODS:
        raise OptionError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 0:
        raise OptionError(f"max_requests must be a non-negative integer, got {max_requests!r}")
    flags = np.zeros(trace.n_requests, dtype=bool)
    lb_total = 0
    all_optimal = True
    used = set()
    # best online schedule as the starting point
    best_online = {}
    for pol in POLICIES:
        res, f = simulate(trace, pol, cap, hits_out=True)
        best_online[pol] = f
    for idx, req in _caches(trace):
        cc = _Cache(trace, req, cap)
        equal = np.unique(cc.s).size <= 1
        if method == "belady" and not equal:
            raise OptionError("method='belady' is exact only when each cache's objects have one size")
        key = 0 if objective == "misses" else 1
        cands = []
        for pol in POLICIES:
            h = cc.held_from_hits(best_online[pol][idx])
            cands.append((cc.traffic(h)[key], pol, h))
        cands.sort(key=lambda c: (c[0], POLICIES.index(c[1])))
        best_val, _best_pol, hint = cands[0]
        if equal and method in ("auto", "belady"):
            held = cc.held_from_hits(best_online["belady"][idx])
            optimal, lb = True, cc.traffic(held)[key]
            used.add("belady")
        elif req.shape[0] > max_requests:
            held = hint
            if objective == "bytes":
                sub_lb = cc.fixed_bytes + _greedy_cache(cc)
            else:
                sub_lb = cc.fixed_misses
            lb = min(sub_lb, best_val)
            optimal = lb >= best_val
            used.add("online+flow")
        else:
            held, optimal, lb = _solve_cache(cc, objective, end, hint)
            used.add("cp-sat")
        if not cc.feasible(held):
            raise InternalError("offline-schedule", "offline schedule exceeds the capacity")
        all_optimal &= bool(optimal)
        lb_total += int(lb)
        flags[idx] = cc.hits_of(held)
    misses, moved = schedule_traffic(trace, cap, flags)
    value = moved if objective == "bytes" else misses
    if lb_total > value:
        raise InternalError("offline-bound-above-schedule", f"lower bound {lb_total} above the "
                                                            f"schedule's {value}")
    status = "optimal" if all_optimal or lb_total == value else "feasible"
    meth = "+".join(sorted(used)) or "none"
    return OfflineResult(cap, trace.n_requests, trace.n_requests - misses, misses, moved, lb_total,
                         status, meth, objective, len(trace.caches), flags)
