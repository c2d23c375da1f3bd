"""The offline optimum of KV-cache eviction: the most attention any eviction schedule retains.

**Model** (:mod:`memopt.cache.kv_policies`): per head, at most ``B`` past positions are cached
at each decode step ``t >= prefill``; evicted positions never come back; the value of a
schedule is the retained attention ``sum_{t >= prefill} sum_{j cached at t} a_t[j]``.
Position ``j`` can be a cached past position from step ``arr(j) = max(j + 1, prefill)`` on, so
a schedule is one last step ``e_j in {arr(j) - 1 (never kept), ..., T - 1}`` per position,
worth ``W_j(e) = sum_{t = arr(j)}^{e} a_t[j]``; it is feasible iff at every decode step at
most ``B`` of the intervals ``[arr(j), e_j]`` contain it.

**Eviction events (the algorithm).** Attention is non-negative, so an optimal schedule evicts
only when it must: delaying a voluntary eviction by one step keeps the budget and loses
nothing. At the decode step ``t`` the positions ``j < t`` are all candidates, so exactly
``N(t) = max(0, t - B)`` of them must be gone before ``t``: the schedule makes
``E = max(0, T - 1 - B)`` *eviction events* (none if ``prefill >= T``), the ``k``-th at the end
of step ``s_k = max(prefill - 1, B + k - 1)`` (the prompt's excess all at once, then one per
step). Event ``s`` may take any position ``j <= s`` not taken yet (``j = s``: the newest
position is never kept) and *loses* ``R_s[j] = sum_{t > s} a_t[j]``, the attention ``j``
would still have received; positions no event takes stay to the end. So

    optimum = total - min { sum_k R_{s_k}[j_k] : j_1, ..., j_E distinct, j_k <= s_k }

a rectangular **linear assignment problem** (events x positions) with ``O(T^2 / 2)``
allowed pairs, and every assignment is a feasible schedule (``last_step[j_k] = s_k``).
It is solved exactly, in int64 arithmetic, by the shortest-augmenting-path method of
Jonker & Volgenant (Computing 38, 1987) in the rectangular form of Crouse ("On implementing
2D rectangular assignment algorithms", IEEE TAES 52(4), 2016; the algorithm of
``scipy.optimize.linear_sum_assignment``), compiled with numba: events are added in time
order, so an augmentation from event ``s`` only scans the positions ``j <= s`` (every event
it can reach is earlier). Worst case ``O(E * T^2)``; in practice the augmenting paths are
short.

**Certificate.** The solver also returns dual values ``u_k`` (events) and ``v_j <= 0``
(positions) with ``u_k + v_j <= R_{s_k}[j]`` for every allowed pair; by weak LP duality
``total - sum(u) - sum(v)`` bounds the retained attention of *every* schedule from above.
:func:`kv_optimum` re-checks the dual constraints from the attention itself (numpy,
independently of the solver) and requires the bound to equal the schedule's value, which
:func:`memopt.cache.kv_policies.schedule_retained` recomputes from the trace: a returned
optimum is a checked schedule together with a matching checked upper bound
(``InternalError`` otherwise).

**Reference formulation** (``method="flow"``, kept for tests and the benchmark): a min-cost
flow (OR-Tools) with ``B`` units (cache slots) along a time chain ``F_prefill -> ... -> F_T``,
a node ``E_j`` per position fed by ``F_arr(j) -> E_j`` (capacity 1) and arcs
``E_j -> F_{e+1}`` of cost ``-W_j(e)``; its constraint matrix is a network matrix (totally
unimodular), so the integral min-cost flow is an optimal schedule. Same optimum, ``O(T^2)``
arcs per head, several times slower at ``T = 2048``.

**Exactness.** Attention is stored as integers (units of ``1 / scale``,
:mod:`memopt.cache.kv_trace`), so every cost is an exact int64 (below ``T * group * scale <
2**47``) and the optimum is the exact maximum over schedules of the trace *as stored*.
(Relative to the unrounded float attention, any schedule's value moves by at most
``group / 2`` units per counted cell, the same for the optimum and the policies.)

Heads are independent: ``jobs > 1`` solves them on local worker processes
(:func:`memopt.sweep.run_tasks`). The commit-lag axis of fixed-lag commit (``rmm`` at
``lag = 0, 1, 4, ...``) ends here: with the whole future known, the best schedule is this one.

>>> from memopt.cache.kv_trace import make_attention_trace
>>> a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
>>> opt = kv_optimum(make_attention_trace(a, [True] * 4, scale=8), 1)
>>> opt.retained, opt.bound, opt.total, opt.last_step.tolist()
(15, 15, 19, [[3, 1, 2, 3]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memopt import _jit
from memopt._jit import kernel
from memopt.errors import InternalError, MemoptError, OptionError
from memopt.cache.kv_policies import RetainedAttention, check_prefill, arrivals, check_budget, schedule_retained
from memopt.cache.kv_trace import AttentionTrace

__all__ = ["KVOptimum", "kv_optimum", "optimum_head", "optimum_head_flow", "eviction_events",
           "stream_optimum_head", "METHODS"]

#: ``assignment`` (default: eviction events, shortest augmenting paths) or ``flow`` (the
#: min-cost-flow reference formulation)
METHODS = ("assignment", "flow")
# search keys of the assignment kernel (real keys 2 dist + 1 stay below 2**57)
_UNSEEN = np.int64(2**62 - 2)     # a position no searched row has reached yet
_DONE = np.int64(2**62 - 1)       # a position already taken out of the search
_BLOCK = np.int64(2**62)          # added to a done position's candidates: they all exceed _DONE
#: dual values must stay far from int64 overflow in the certificate check
_DUAL_LIMIT = 2**55


@dataclass(frozen=True)
class KVOptimum(RetainedAttention):
    """The offline optimum: ``retained`` (exact, units of ``1 / scale``, summed over heads)
    out of ``total``; ``bound``: the checked upper bound (LP dual) on every schedule's retained
    attention, equal to ``retained`` (``None`` for ``method="flow"``, whose optimality is
    OR-Tools' status); ``status`` is ``"optimal"``. ``per_head`` and ``last_step`` (the optimal
    schedule, as in :class:`memopt.cache.kv_policies.KVResult`) are not in :meth:`to_dict`."""

    budget: int
    prefill: int
    steps: int
    heads: int
    retained: int
    total: int
    status: str = "optimal"
    per_head: np.ndarray = None
    last_step: np.ndarray = None
    bound: int | None = None
    method: str = "assignment"

    def to_dict(self) -> dict:
        return super().to_dict(policy="optimum")


def eviction_events(T: int, budget: int, prefill: int) -> np.ndarray:
    """End steps ``s_k`` of the evictions a schedule that evicts only when it must makes,
    ascending (module doc).

    >>> eviction_events(6, 2, 0).tolist(), eviction_events(6, 2, 4).tolist()
    ([2, 3, 4], [3, 3, 4])
    """
    if prefill >= T:
        return np.zeros(0, dtype=np.int64)
    count = max(0, T - 1 - budget)
    return np.maximum(prefill - 1, np.arange(budget, budget + count, dtype=np.int64))


# ---------------------------------------------------------------------------- kernels

@kernel
def _future_mass(A, first):
    """``R[s, j] = sum_{t > s} A[t, j]`` for ``first <= s``, ``j <= s`` (0 elsewhere)."""
    T = A.shape[0]
    R = np.zeros((T, T), dtype=np.int64)
    for s in range(T - 2, max(first, 0) - 1, -1):
        below = A[s + 1]
        for j in range(s + 1):
            R[s, j] = R[s + 1, j] + below[j]
    return R


@kernel
def _assign_events(R, events):
    """Min-cost assignment of events (rows, ascending end steps) to distinct positions
    ``j <= s``, by shortest augmenting paths (Crouse 2016, integer). Returns
    ``(ok, position of each event, u, v)``; ``ok`` is False only if no assignment exists.

    The search keeps one key per position, ``2 dist + (position taken)`` (the minimum
    prefers a free position on ties: the path ends there), ``_UNSEEN`` before a row reaches
    it and ``_DONE`` once it is taken out of the search; a reached position's ``block`` makes
    every later candidate exceed ``_DONE``. So relaxing a row is a branch-free loop (a
    minimum and a select) that the compiler vectorises: the search reads hundreds of rows of
    ``R`` per event and is limited by that memory traffic."""
    E = events.size
    T = R.shape[1]
    u = np.zeros(E, dtype=np.int64)
    v = np.zeros(T, dtype=np.int64)
    col4row = np.full(E, -1, dtype=np.int64)
    row4col = np.full(T, -1, dtype=np.int64)
    taken = np.zeros(T, dtype=np.int64)
    path = np.full(T, -1, dtype=np.int64)
    dist = np.zeros(T, dtype=np.int64)
    key = np.empty(T, dtype=np.int64)
    block = np.empty(T, dtype=np.int64)
    reached = np.empty(T, dtype=np.int64)      # positions taken out of the search, in order
    visited = np.empty(E, dtype=np.int64)
    for cur in range(E):
        ncols = events[cur] + 1          # an earlier event reaches no position beyond its own end
        for j in range(ncols):
            key[j] = _UNSEEN
            block[j] = taken[j]
        minval = np.int64(0)
        i = cur
        nvis = 0
        nreached = 0
        sink = -1
        while sink == -1:
            visited[nvis] = i
            nvis += 1
            si = events[i]
            base2 = 2 * (minval - u[i])
            row = R[si]
            for j in range(si + 1):
                c = base2 + 2 * (row[j] - v[j]) + block[j]
                kj = key[j]
                better = c < kj
                key[j] = c if better else kj
                path[j] = i if better else path[j]
            best = _DONE
            for j in range(ncols):
                best = min(best, key[j])
            if best >= _UNSEEN:
                return False, col4row, u, v
            index = 0
            while key[index] != best:
                index += 1
            minval = best >> 1
            dist[index] = minval
            key[index] = _DONE
            block[index] = _BLOCK
            reached[nreached] = index
            nreached += 1
            if taken[index] == 0:
                sink = index
            else:
                i = row4col[index]
        u[cur] += minval
        for k in range(1, nvis):
            i = visited[k]
            u[i] += minval - dist[col4row[i]]
        for q in range(nreached):
            j = reached[q]
            v[j] -= minval - dist[j]
        j = sink
        while True:
            i = path[j]
            row4col[j] = i
            taken[j] = 1
            nxt = col4row[i]
            col4row[i] = j
            j = nxt
            if i == cur:
                break
    return True, col4row, u, v


# ---------------------------------------------------------------------------- one head

def _head_total(A: np.ndarray, prefill: int) -> int:
    """Attention of the decode steps on past positions (what a full cache retains)."""
    rows = A[prefill:]
    return int(rows.sum(dtype=np.int64)) - int(np.trace(rows, offset=prefill, dtype=np.int64))


def _check_dual(A: np.ndarray, events: np.ndarray, u: np.ndarray, v: np.ndarray, total: int) -> int:
    """The upper bound ``total - sum(u) - sum(v)`` after checking, from ``A`` alone, that
    ``(u, v)`` is dual feasible: ``v <= 0`` and ``u_k <= R_{s_k}[j] - v_j`` for all ``j <= s_k``.
    ``R_s`` is rebuilt row by row from the attention (no ``T x T`` array: memory ``O(T)``)."""
    T = A.shape[0]
    if np.abs(u).max(initial=0) >= _DUAL_LIMIT or np.abs(v).max(initial=0) >= _DUAL_LIMIT or (v > 0).any():
        raise InternalError("kv-dual-range", "the assignment's dual values are out of range")
    steps = np.unique(events)
    least = np.empty(steps.size, dtype=np.int64)         # min_{j <= s} R_s[j] - v_j per distinct end step
    future = np.zeros(T, dtype=np.int64)                 # R_s = sum over t > s of A[t]
    s = T - 1
    for q in range(steps.size - 1, -1, -1):
        while s > steps[q]:
            future += A[s]
            s -= 1
        least[q] = (future[:s + 1] - v[:s + 1]).min()
    if (u > least[np.searchsorted(steps, events)]).any():
        raise InternalError("kv-dual-feasible", "the assignment's dual values violate a constraint")
    return total - int(u.sum()) - int(v.sum())


def _solve_head(A: np.ndarray, budget: int, prefill: int) -> tuple[int, np.ndarray, int]:
    """``(retained, last_step, checked upper bound)`` of one head (assignment method)."""
    T = A.shape[0]
    total = _head_total(A, prefill)
    last = np.full(T, T - 1, dtype=np.int64)
    events = eviction_events(T, budget, prefill)
    if events.size == 0:
        return total, last, total
    R = _jit.choose(_future_mass, T)(A, int(events[0]))
    ok, pos, u, v = _jit.choose(_assign_events, T)(R, events)
    if not ok:
        raise InternalError("kv-assignment-feasible", "no assignment of eviction events to positions")
    lost = int(R[events, pos].sum())
    del R
    last[pos] = events
    bound = _check_dual(A, events, u, v, total)
    return total - lost, last, bound


def optimum_head(A: np.ndarray, budget: int, prefill: int = 0) -> tuple[int, np.ndarray]:
    """Optimal retained attention and schedule (``last_step`` per position) of one head with
    integer attention ``A`` (``T x T``, lower triangular), by the eviction-event assignment."""
    value, last, bound = _solve_head(np.ascontiguousarray(A), int(budget), int(prefill))
    if bound != value:
        raise InternalError("kv-dual-gap", f"the schedule retains {value} but the dual bound is {bound}")
    return value, last


def optimum_head_flow(A: np.ndarray, budget: int, prefill: int = 0) -> tuple[int, np.ndarray]:
    """The same optimum by the min-cost-flow reference formulation (module doc; OR-Tools)."""
    T = A.shape[0]
    P = prefill
    arr = arrivals(T, P)
    last = arr - 1
    last[T - 1:] = T - 1
    if T == 0 or P >= T or budget == 0:
        return 0, np.minimum(last, T - 1)
    col = np.cumsum(A.astype(np.int64), axis=0)            # col[t, j] = sum_{s <= t} A[s, j]
    js = np.flatnonzero(arr <= T - 1)                      # positions that can be kept
    e_grid = np.arange(T)[None, :]
    ok = e_grid >= arr[js][:, None]                        # (len(js), T): e >= arr(j)
    jj, ee = np.nonzero(ok)
    jpos = js[jj]
    before = np.where(arr[jpos] >= 1, col[arr[jpos] - 1, jpos], 0)
    W = col[ee, jpos] - before
    n_chain = T - P + 1                                    # F_P .. F_T
    e_node = n_chain + np.arange(js.size)                  # E_j
    tails = np.concatenate([np.arange(n_chain - 1), arr[js] - P, e_node[jj]])
    heads = np.concatenate([np.arange(1, n_chain), e_node, ee + 1 - P])
    caps = np.concatenate([np.full(n_chain - 1, budget), np.ones(js.size), np.ones(jj.size)])
    costs = np.concatenate([np.zeros(n_chain - 1 + js.size, dtype=np.int64), -W])
    from ortools.graph.python import min_cost_flow

    mcf = min_cost_flow.SimpleMinCostFlow()
    arcs = mcf.add_arcs_with_capacity_and_unit_cost(tails.astype(np.int32), heads.astype(np.int32),
                                                    caps.astype(np.int64), costs.astype(np.int64))
    supply = np.zeros(n_chain + js.size, dtype=np.int64)
    supply[0], supply[n_chain - 1] = budget, -budget
    mcf.set_nodes_supplies(np.arange(supply.size, dtype=np.int32), supply)
    status = mcf.solve()
    if status != mcf.OPTIMAL:
        if status in (mcf.BAD_CAPACITY_RANGE, mcf.BAD_COST_RANGE):
            raise OptionError(f"attention sums too large for exact min-cost flow (status {status}); "
                              "use a smaller scale")
        raise InternalError("kv-min-cost-flow-status", f"min-cost flow ended with status {status}")
    flows = mcf.flows(np.asarray(arcs)[n_chain - 1 + js.size:])
    used = np.flatnonzero(flows > 0)
    if np.unique(jj[used]).size != used.size:
        raise InternalError("kv-flow-integral", "a position is held by two slots in the optimal flow")
    last[jpos[used]] = ee[used]
    return -int(mcf.optimal_cost()), last


def _head_task(A: np.ndarray, budget: int, prefill: int, method: str):
    """One head (the task of a worker process): ``(retained, last_step, bound or None)``."""
    if method == "flow":
        value, last = optimum_head_flow(A, budget, prefill)
        return value, last, None
    return _solve_head(A, budget, prefill)


# ---------------------------------------------------------------------------- all heads

def kv_optimum(trace: AttentionTrace, budget, *, prefill: int = 0, method: str = "assignment",
               jobs: int = 1) -> KVOptimum:
    """The most attention any schedule with at most ``budget`` past positions per head (from
    step ``prefill`` on) retains, exactly, with an optimal schedule (module docstring).

    Parameters
    ----------
    trace : AttentionTrace
    budget : int
    prefill : int, default 0
    method : {"assignment", "flow"}
        ``"assignment"`` also gives a matching upper bound (an LP dual, checked).
    jobs : int, default 1
        Solve heads on that many local worker processes.

    Returns
    -------
    KVOptimum

    Raises
    ------
    OptionError
        An unknown method or a bad budget.

    Examples
    --------
    >>> from memopt.cache.kv_trace import make_attention_trace
    >>> a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
    >>> tr = make_attention_trace(a, [True] * 4, scale=8)
    >>> [kv_optimum(tr, 1, method=m).retained for m in METHODS]
    [15, 15]
    """
    from memopt.sweep import run_tasks

    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"kv_optimum needs an AttentionTrace, got {type(trace).__name__}")
    if method not in METHODS:
        raise OptionError(f"unknown kv_optimum method {method!r}; choose from {', '.join(METHODS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 1:
        raise OptionError(f"jobs must be an integer >= 1, got {jobs!r}")
    B = check_budget(budget, trace)
    P = check_prefill(prefill, trace)
    A = trace.heads()
    K, T = A.shape[0], trace.steps
    per = np.zeros(K, dtype=np.int64)
    bounds = np.zeros(K, dtype=np.int64)
    last = np.zeros((K, T), dtype=np.int64)
    tasks = [(k, (A[k], B, P, method)) for k in range(K)]
    for k, kind, payload in run_tasks(_head_task, tasks, jobs=min(int(jobs), max(K, 1))):
        if kind != "done":
            raise MemoptError(f"kv_optimum: head {k} was not solved ({kind}: {payload})")
        per[k], last[k], bound = payload
        bounds[k] = per[k] if bound is None else bound
    check = schedule_retained(trace, last, B, P)
    if not np.array_equal(check, per):
        raise InternalError("kv-optimum-value", "the optimum's value disagrees with its schedule's "
                                                "retained attention")
    if not np.array_equal(bounds, per):
        raise InternalError("kv-dual-gap", "the optimal schedule does not reach the dual upper bound")
    total = sum(_head_total(A[k], P) for k in range(K))
    return KVOptimum(B, P, T, K, int(per.sum()), int(total), "optimal", per, last,
                     int(bounds.sum()) if method == "assignment" else None, method)


# ---------------------------------------------------------------------------- streamed chunks

def stream_optimum_head(gain, ends, kept) -> tuple[int, np.ndarray, int]:
    """The offline optimum of one head of a cache compressed at **checkpoints** (a conversation
    streamed turn by turn, :class:`memopt.cache.kvpress.PressedStream`), with a matching
    checked upper bound.

    Positions arrive in chunks: by checkpoint ``c`` the positions ``j < ends[c]`` have arrived,
    and after its compression the cache holds at most ``kept[c]`` of them; an evicted position
    never comes back. The cache after checkpoint ``c`` earns ``gain[c, j]`` from each position
    ``j`` it holds (the attention of the question asked before the next chunk). The same
    eviction-event argument as :func:`kv_optimum` holds (gains are non-negative, so evicting
    only when forced loses nothing): checkpoint ``c`` forces ``N_c = max_{c' <= c} (ends[c'] -
    kept[c'])`` evictions in all; each event at ``c`` may take any position ``j < ends[c]`` not
    taken yet and loses ``sum_{c' >= c} gain[c', j]``. The assignment kernel solves it exactly
    (its rows indexed by ``ends[c] - 1``); the dual is re-checked here from ``gain`` alone.

    Parameters
    ----------
    gain : array of int, ``(m, T)``
        Non-negative; ``gain[c, j] == 0`` for ``j >= ends[c]``.
    ends : array of int, ``(m,)``
        Strictly increasing, ``ends[-1] == T``.
    kept : array of int, ``(m,)``
        Slots after each checkpoint, ``>= 0``.

    Returns
    -------
    tuple
        ``(retained, last, bound)``: the optimum, the last checkpoint after which each position
        is held (``first - 1`` for a position dropped at its arrival checkpoint ``first``), and
        the dual bound (equal to ``retained``; ``InternalError`` otherwise).

    Examples
    --------
    >>> g = np.array([[5, 1, 0, 0], [0, 2, 4, 1]])
    >>> value, last, bound = stream_optimum_head(g, [2, 4], [1, 2])
    >>> value, last.tolist(), bound
    (10, [0, -1, 1, 1], 10)
    """
    G = np.ascontiguousarray(gain, dtype=np.int64)
    ends, kept = np.asarray(ends, dtype=np.int64), np.asarray(kept, dtype=np.int64)
    m, T = G.shape
    if ends.shape != (m,) or kept.shape != (m,) or m == 0:
        raise OptionError(f"stream_optimum_head: gain {G.shape}, ends {ends.shape} and kept {kept.shape} disagree")
    if (np.diff(ends) <= 0).any() or ends[0] <= 0 or ends[-1] != T or (kept < 0).any():
        raise OptionError("stream_optimum_head: ends must increase strictly to T, kept must be >= 0")
    arrived = np.arange(T)[None, :] < ends[:, None]
    if (G < 0).any() or G[~arrived].any():
        raise OptionError("stream_optimum_head: gains must be >= 0 and 0 before a position arrives")
    lost_from = np.cumsum(G[::-1], axis=0)[::-1]         # lost_from[c, j] = sum_{c' >= c} G[c', j]
    total = int(G.sum())
    forced = np.maximum.accumulate(np.maximum(0, ends - kept))
    at = np.repeat(np.arange(m), np.diff(forced, prepend=0))          # checkpoint of each event
    first = np.searchsorted(ends, np.arange(T), side="right")           # arrival checkpoint of j
    last = np.full(T, m - 1, dtype=np.int64)
    if at.size == 0:
        return total, last, total
    events = ends[at] - 1
    R = np.zeros((T, T), dtype=np.int64)                # only the checkpoints' rows are read
    R[ends - 1] = lost_from
    ok, pos, u, v = _jit.choose(_assign_events, T)(R, events)
    del R
    if not ok:
        raise InternalError("kv-stream-feasible", "no assignment of eviction events to positions")
    last[pos] = at - 1
    # the schedule's value and the dual bound, both from the gains alone
    held = (np.arange(m)[:, None] >= first[None, :]) & (np.arange(m)[:, None] <= last[None, :])
    if (held.sum(axis=1) > kept).any():
        raise InternalError("kv-stream-budget", "the optimal schedule holds more slots than a checkpoint allows")
    value = int(G[held].sum())
    if np.abs(u).max(initial=0) >= _DUAL_LIMIT or np.abs(v).max(initial=0) >= _DUAL_LIMIT or (v > 0).any():
        raise InternalError("kv-dual-range", "the assignment's dual values are out of range")
    least = np.array([(lost_from[c, :ends[c]] - v[:ends[c]]).min() for c in range(m)])
    if (u > least[at]).any():
        raise InternalError("kv-dual-feasible", "the assignment's dual values violate a constraint")
    bound = total - int(u.sum()) - int(v.sum())
    if bound != value:
        raise InternalError("kv-dual-gap", f"the stream schedule retains {value} but the dual bound is {bound}")
    return value, last, bound
