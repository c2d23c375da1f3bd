"""Local search for the peak of a signed DAG: peak-targeted insertion moves, iterated.

Model (DESIGN 1.3): a full node order of a :class:`~memopt.core.signed_dag.SignedDAG`;
the memory while the k-th node runs is ``run[k] = base + prefix sum of delta + transient``
and the peak is ``max(base, max_k run[k])``. The search improves an order lexicographically
on ``(peak, number of steps at the peak)`` — the count gives the search a slope on the
plateaus where the peak itself does not move.

Neighbourhood: move one node ``v`` from position ``i`` to any position ``j`` of its window
(after its last predecessor, before its first successor). Moving ``v`` earlier raises the
memory of the nodes it jumps over by ``delta[v]``, moving it later lowers it by
``delta[v]``; with prefix/suffix maxima and counts of the profile, every target ``j`` of
``v`` is evaluated in O(1) while scanning the window outward, so one pass over all nodes
costs O(sum of window lengths) and an accepted move O(n). Release nodes move like any
other node (they may drift back to their earliest place).

Search: steepest move per node, nodes in random order, until no move improves (a local
optimum); then an iterated-local-search *kick* of a few random valid moves, continuing
from the kicked order when its local optimum is not worse in peak, from the best order
otherwise (H. R. Lourenço, O. C. Martin, T. Stützle, "Iterated local search", 2003).

Determinism: the search is seeded; with ``max_rounds`` set (and a generous ``time_limit``)
it reproduces bit for bit; when the time limit stops it first, the number of rounds done
depends on the machine's speed.

Example
-------
>>> from memopt.core import SignedDAG, dag_peak
>>> d = SignedDAG.build(["a", "b", "free_a", "c"], [10, 1, -10, 5], edges=[(0, 2), (1, 3)])
>>> order, pk = local_search_dag(d, [1, 3, 0, 2], max_rounds=5)
>>> pk, dag_peak(d, order)
(10, 10)
"""

from __future__ import annotations

import time
from typing import Sequence

import numba
import numpy as np

from memopt.core.signed_dag import (SignedDAG, complete_order, dag_order_from_op_order, dag_peak, graph_to_dag,
                                    op_order_from_dag_order, validate_node_order)
from memopt.core._kernels import complete_with_releases
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import ScheduleError

__all__ = ["local_search_dag", "local_search_order"]

_NEG = -(2 ** 62)


@numba.njit(cache=True)
def _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc):
    """Prefix sums ``P[k+1]`` (``P[0] = base``), profile ``run``, prefix/suffix maxima and
    counts of steps at the peak; returns (peak, count)."""
    n = order.shape[0]
    P[0] = base
    peak = base
    for k in range(n):
        v = order[k]
        P[k + 1] = P[k] + delta[v]
        run[k] = P[k + 1] + trans[v]
        if run[k] > peak:
            peak = run[k]
    pm[0] = _NEG
    pc[0] = 0
    for k in range(n):
        pm[k + 1] = pm[k] if pm[k] > run[k] else run[k]
        pc[k + 1] = pc[k] + (1 if run[k] == peak else 0)
    sm[n] = _NEG
    sc[n] = 0
    for k in range(n - 1, -1, -1):
        sm[k] = sm[k + 1] if sm[k + 1] > run[k] else run[k]
        sc[k] = sc[k + 1] + (1 if run[k] == peak else 0)
    return peak, pc[n]


@numba.njit(cache=True)
def _block_window(i, b, order, pos, pred_ptr, pred_idx, succ_ptr, succ_idx, n):
    """Positions the block ``order[i:i+b]`` may move within: (first, last) free slot."""
    lo = 0
    hi = n - 1
    for k in range(i, i + b):
        v = order[k]
        for e in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pos[pred_idx[e]]
            if (p < i or p >= i + b) and p + 1 > lo:
                lo = p + 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            p = pos[succ_idx[e]]
            if (p < i or p >= i + b) and p - 1 < hi:
                hi = p - 1
    return lo, hi


@numba.njit(cache=True)
def _move_block(order, pos, i, b, j, tmp):
    """Move ``order[i:i+b]`` so that it starts at ``j`` (j < i) or ends at ``j`` (j >= i+b)."""
    for k in range(b):
        tmp[k] = order[i + k]
    if j < i:
        for k in range(i - 1, j - 1, -1):
            order[k + b] = order[k]
            pos[order[k + b]] = k + b
        start = j
    else:
        for k in range(i + b, j + 1):
            order[k - b] = order[k]
            pos[order[k - b]] = k - b
        start = j - b + 1
    for k in range(b):
        order[start + k] = tmp[k]
        pos[tmp[k]] = start + k


@numba.njit(cache=True)
def _best_block_move(i, b, lo, hi, order, delta, trans, base, P, run, pm, pc, sm, sc, peak, cnt, inner):
    """Best place for the block ``order[i:i+b]`` within ``[lo, hi]`` that improves
    ``(peak, count)``; returns (peak, count, j) with ``j = -1`` when there is none."""
    dB = 0
    m = _NEG
    for k in range(b):
        v = order[i + k]
        dB += delta[v]
        inner[k] = dB + trans[v]
        if inner[k] > m:
            m = inner[k]
    bp = peak
    bc = cnt
    bj = -1
    # earlier: the block starts at j; old positions j..i-1 gain dB
    seg_max = _NEG
    seg_eq = 0
    for j in range(i - 1, lo - 1, -1):
        rj = run[j] + dB
        if rj > seg_max:
            seg_max = rj
        if rj == peak:
            seg_eq += 1
        if seg_max > peak:
            break  # the shifted segment only grows as j decreases
        lvl = P[j]
        np_ = pm[j]
        if sm[i + b] > np_:
            np_ = sm[i + b]
        if seg_max > np_:
            np_ = seg_max
        if lvl + m > np_:
            np_ = lvl + m
        if base > np_:
            np_ = base
        if np_ > peak:
            continue
        if np_ < peak:
            c = 0
        else:
            c = pc[j] + sc[i + b] + seg_eq
            for k in range(b):
                if lvl + inner[k] == peak:
                    c += 1
        if np_ < bp or (np_ == bp and c < bc):
            bp, bc, bj = np_, c, j
    # later: the block ends at j; old positions i+b..j lose dB
    seg_max = _NEG
    seg_eq = 0
    for j in range(i + b, hi + 1):
        rj = run[j] - dB
        if rj > seg_max:
            seg_max = rj
        if rj == peak:
            seg_eq += 1
        if seg_max > peak:
            break
        lvl = P[j + 1] - dB
        np_ = pm[i]
        if sm[j + 1] > np_:
            np_ = sm[j + 1]
        if seg_max > np_:
            np_ = seg_max
        if lvl + m > np_:
            np_ = lvl + m
        if base > np_:
            np_ = base
        if np_ > peak:
            continue
        if np_ < peak:
            c = 0
        else:
            c = pc[i] + sc[j + 1] + seg_eq
            for k in range(b):
                if lvl + inner[k] == peak:
                    c += 1
        if np_ < bp or (np_ == bp and c < bc):
            bp, bc, bj = np_, c, j
    return bp, bc, bj


@numba.njit(cache=True)
def _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, alloc):
    """Releases as early as possible, allocating nodes in their current order (in place)."""
    m = 0
    for k in range(order.shape[0]):
        if not is_rel[order[k]]:
            alloc[m] = order[k]
            m += 1
    out = complete_with_releases(succ_ptr, succ_idx, indeg, is_rel, alloc[:m])
    for k in range(order.shape[0]):
        order[k] = out[k]
        pos[out[k]] = k


@numba.njit(cache=True)
def _block_len(order, i, is_rel, n):
    b = 1
    while i + b < n and is_rel[order[i + b]]:
        b += 1
    return b


@numba.njit(cache=True)
def _ils(order, best, delta, trans, base, pred_ptr, pred_idx, succ_ptr, succ_idx, rounds, kick_max, seed, first):
    """``rounds`` rounds of descent + kick on ``order`` (in place, releases as early as
    possible); ``best`` keeps the best order seen. Returns (best peak, its count, rounds)."""
    if first:
        np.random.seed(seed)
    n = order.shape[0]
    indeg = np.empty(n, np.int64)
    is_rel = np.empty(n, np.bool_)
    n_alloc = 0
    for v in range(n):
        indeg[v] = pred_ptr[v + 1] - pred_ptr[v]
        is_rel[v] = delta[v] + trans[v] <= 0
        if not is_rel[v]:
            n_alloc += 1
    allocs = np.empty(n_alloc, np.int64)
    m = 0
    for v in range(n):
        if not is_rel[v]:
            allocs[m] = v
            m += 1
    pos = np.empty(n, np.int64)
    tmp = np.empty(n, np.int64)
    inner = np.empty(n, np.int64)
    P = np.empty(n + 1, np.int64)
    run = np.empty(n, np.int64)
    pm = np.empty(n + 1, np.int64)
    pc = np.empty(n + 1, np.int64)
    sm = np.empty(n + 1, np.int64)
    sc = np.empty(n + 1, np.int64)
    _normalize(best, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
    best_peak, best_cnt = _rebuild(best, delta, trans, base, P, run, pm, pc, sm, sc)
    _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
    peak, cnt = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc)
    r = 0
    while r < rounds:
        r += 1
        # descent to a local optimum of (peak, count): move an allocating node together
        # with the releases it triggers
        improved = True
        while improved and peak > base and n_alloc > 0:
            improved = False
            perm = np.random.permutation(n_alloc)
            for q in perm:
                v = allocs[q]
                i = pos[v]
                b = _block_len(order, i, is_rel, n)
                lo, hi = _block_window(i, b, order, pos, pred_ptr, pred_idx, succ_ptr, succ_idx, n)
                np_, c, j = _best_block_move(i, b, lo, hi, order, delta, trans, base, P, run, pm, pc, sm, sc,
                                             peak, cnt, inner)
                if j >= 0:
                    _move_block(order, pos, i, b, j, tmp)
                    _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
                    peak, cnt = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc)
                    improved = True
        if peak < best_peak or (peak == best_peak and cnt < best_cnt):
            best[:] = order
            best_peak, best_cnt = peak, cnt
        elif peak > best_peak:
            order[:] = best  # restart the walk from the best order
            for k in range(n):
                pos[order[k]] = k
        if best_peak <= base or n_alloc == 0:
            break  # nothing can beat the memory at the start
        # kick: a few random valid block moves
        nk = 1 + np.random.randint(0, kick_max)
        for _ in range(nk):
            v = allocs[np.random.randint(0, n_alloc)]
            i = pos[v]
            b = _block_len(order, i, is_rel, n)
            lo, hi = _block_window(i, b, order, pos, pred_ptr, pred_idx, succ_ptr, succ_idx, n)
            choices = (i - lo) + (hi - (i + b - 1))
            if choices > 0:
                x = np.random.randint(0, choices)
                j = lo + x if x < i - lo else i + b + (x - (i - lo))
                _move_block(order, pos, i, b, j, tmp)
        _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
        peak, cnt = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc)
    return best_peak, best_cnt, r


def local_search_dag(dag: SignedDAG, initial_order: Sequence[int] | None = None, *, time_limit: float = 1.0,
                     seed: int = 0, max_rounds: int | None = None, kick_max: int | None = None,
                     lower_bound: int | None = None) -> tuple[np.ndarray, int]:
    """Improve a full node order of ``dag``; returns ``(best order, its peak)``.

    ``initial_order`` is a full node order or an order of the allocating nodes only
    (releases are then inserted as early as possible); default: the greedy order.
    Stops at ``time_limit`` seconds, after ``max_rounds`` descent+kick rounds, or when the
    peak reaches ``lower_bound`` (or the memory at the start, which no order can beat).
    """
    if initial_order is None:
        from memopt.schedule.greedy import greedy_dag_order

        order = greedy_dag_order(dag)
    else:
        order = np.asarray(initial_order, dtype=np.int64).reshape(-1)
        if order.shape[0] != dag.n:
            order = complete_order(dag, order)
        validate_node_order(dag, order)
    order = np.array(order, dtype=np.int64)
    n = dag.n
    if n == 0:
        return order, int(dag.base)
    best = order.copy()
    if kick_max is None:
        kick_max = max(2, min(8, n // 20))
    stop = lower_bound if lower_bound is not None else dag.base
    deadline = time.perf_counter() + max(0.0, float(time_limit))
    rounds_left = max_rounds if max_rounds is not None else 1 << 62
    chunk, first = 1, True
    best_peak = dag_peak(dag, best, validate=False)
    while rounds_left > 0 and best_peak > stop:
        t0 = time.perf_counter()
        if t0 >= deadline and not first:
            break
        todo = min(chunk, rounds_left)
        best_peak, _, done = _ils(order, best, dag.delta, dag.transient, np.int64(dag.base), dag.pred_ptr,
                                  dag.pred_idx, dag.succ_ptr, dag.succ_idx, todo, kick_max, seed, first)
        best_peak = int(best_peak)
        first = False
        rounds_left -= done
        if done < todo:
            break
        spent = time.perf_counter() - t0
        # aim at about 20 ms per call so the deadline is kept closely
        chunk = max(1, min(chunk * 2, int(chunk * 0.02 / spent) if spent > 0 else chunk * 2))
    return best, int(dag_peak(dag, best))


def local_search_order(graph: TensorGraph, initial_order: Sequence[int] | None = None, *, time_limit: float = 1.0,
                       seed: int = 0, max_rounds: int | None = None, lower_bound: int | None = None
                       ) -> tuple[np.ndarray, int]:
    """:func:`local_search_dag` on a tensor graph's signed DAG; returns ``(op order, peak)``.

    ``initial_order`` is an op order (default: the greedy order). The returned peak is
    memopt's exact :func:`~memopt.core.evaluate.peak` of the returned order.
    """
    from memopt.core.evaluate import peak, validate_order, order_indices

    gd = graph_to_dag(graph)
    init = None
    if initial_order is not None:
        idx = order_indices(graph, initial_order)
        validate_order(graph, idx)
        init = dag_order_from_op_order(gd, idx)
    order, _ = local_search_dag(gd.dag, init, time_limit=time_limit, seed=seed, max_rounds=max_rounds,
                                lower_bound=lower_bound)
    ops = op_order_from_dag_order(gd, order)
    return ops, peak(graph, ops)
