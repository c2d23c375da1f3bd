"""Local search for the peak of a signed DAG: peak-targeted insertion moves, iterated.

Model (``docs/design.md``, signed DAG): a full node order of a :class:`~memopt.core.signed_dag.SignedDAG`;
the memory while the k-th node runs is ``run[k] = base + prefix sum of delta + transient``
and the peak is ``max(base, max_k run[k])``. The search improves an order lexicographically
on ``(peak, number of steps at the peak)`` — the count gives the search a slope on the
plateaus where the peak itself does not move.

Moves. Releases always run as early as possible (the order is re-normalised after every
accepted move), so a move takes an allocating node ``v`` together with the releases that
follow it (the *block*):

* **block move**: the block jumps to another place inside its window (after its last
  predecessor, before its first successor). The nodes it jumps over shift by the block's
  net delta; with prefix/suffix maxima and counts of the profile every target is
  evaluated in O(1) while the window is scanned outward.
* **closure move** (default): the block jumps earlier *together with its ancestors* in
  between (they keep their order and go first), or later together with its descendants
  in between. This reaches far more orders (a node no longer waits for its neighbours to
  move first); scanning outward, the ancestors / the others / the block are three
  sequences whose maxima are updated in O(deg) per position, so a scan of ``reach``
  positions (120 by default) costs O(reach * deg). When the peak stays, counting the
  steps at the peak inside the segment is O(1) if the segment drops below it and
  O(segment) otherwise, which is rationed to a few targets per move.

Search. Steepest move per block, blocks in random order, until no move improves; then an
iterated-local-search kick of random moves whose size grows while the walk is stuck
(variable neighbourhood) and resets on improvement; the walk continues from the kicked
order when its local optimum is not worse in peak, from the walk's best otherwise, and
restarts from the initial order after many stuck rounds (H. R. Lourenço, O. C. Martin,
T. Stützle, "Iterated local search", 2003; N. Mladenović, P. Hansen, "Variable
neighborhood search", 1997). On the published random layered graphs it reaches the
optimum of the 100-, 250- and 500-node graphs in well under a second.

Determinism: the search is seeded and its walk does not depend on timing; with
``max_rounds`` set (and a generous ``time_limit``) it reproduces bit for bit; when the time
limit stops it first, how far it got depends on the machine's speed.

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

import numpy as np

from memopt import _jit
from memopt._jit import kernel

from memopt.core.signed_dag import (SignedDAG, complete_order, dag_order_from_op_order, dag_peak, graph_to_dag,
                                    op_order_from_dag_order, validate_node_order)
from memopt.core._kernels import complete_with_releases
from memopt.core.tensor_graph import TensorGraph

#: restarts of the walk without a new best after which :func:`local_search_method` stops
#: (a restart happens after ``20 + allocating nodes / 5`` stuck rounds)
PATIENCE = 3

__all__ = ["local_search_dag", "local_search_order"]

_NEG = -(2 ** 62)
_POS = 2 ** 62


@kernel(inner=True)
def _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc, slack):
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
    thr = peak - (peak - base) // slack if slack > 0 else peak
    pm[0] = _NEG
    pc[0] = 0
    for k in range(n):
        pm[k + 1] = pm[k] if pm[k] > run[k] else run[k]
        pc[k + 1] = pc[k] + (1 if run[k] >= thr else 0)
    sm[n] = _NEG
    sc[n] = 0
    for k in range(n - 1, -1, -1):
        sm[k] = sm[k + 1] if sm[k + 1] > run[k] else run[k]
        sc[k] = sc[k + 1] + (1 if run[k] >= thr else 0)
    return peak, pc[n], thr


@kernel(inner=True)
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


@kernel(inner=True)
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


@kernel(inner=True)
def _best_block_move(i, b, lo, hi, order, delta, trans, base, P, run, pm, pc, sm, sc, peak, cnt, inner, thr):
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
        if rj >= thr:
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
                if lvl + inner[k] >= thr:
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
        if rj >= thr:
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
                if lvl + inner[k] >= thr:
                    c += 1
        if np_ < bp or (np_ == bp and c < bc):
            bp, bc, bj = np_, c, j
    return bp, bc, bj


@kernel(inner=True)
def _closure_eval(i, b, j, order, delta, trans, P, mark, stamp, thr, earlier):
    """Count of steps at ``peak`` inside the segment after the closure move to ``j``
    (``mark[u] == stamp`` flags the ancestors, resp. descendants, that move along)."""
    c = 0
    if earlier:
        lvl = P[j]
        for k in range(j, i):  # ancestors first
            u = order[k]
            if mark[u] == stamp:
                lvl += delta[u]
                if lvl + trans[u] >= thr:
                    c += 1
        for k in range(i, i + b):
            u = order[k]
            lvl += delta[u]
            if lvl + trans[u] >= thr:
                c += 1
        for k in range(j, i):
            u = order[k]
            if mark[u] != stamp:
                lvl += delta[u]
                if lvl + trans[u] >= thr:
                    c += 1
    else:
        lvl = P[i]
        for k in range(i + b, j + 1):  # the others first
            u = order[k]
            if mark[u] != stamp:
                lvl += delta[u]
                if lvl + trans[u] >= thr:
                    c += 1
        for k in range(i, i + b):
            u = order[k]
            lvl += delta[u]
            if lvl + trans[u] >= thr:
                c += 1
        for k in range(i + b, j + 1):
            u = order[k]
            if mark[u] == stamp:
                lvl += delta[u]
                if lvl + trans[u] >= thr:
                    c += 1
    return c


@kernel(inner=True)
def _mark_closure(i, b, j, order, pred_ptr, pred_idx, succ_ptr, succ_idx, pos, mark, stamp):
    """Flag the nodes of the segment between ``j`` and the block that must move with it."""
    for k in range(i, i + b):
        mark[order[k]] = stamp
    if j < i:
        for k in range(i - 1, j - 1, -1):
            u = order[k]
            for e in range(succ_ptr[u], succ_ptr[u + 1]):
                if mark[succ_idx[e]] == stamp:
                    mark[u] = stamp
                    break
    else:
        for k in range(i + b, j + 1):
            u = order[k]
            for e in range(pred_ptr[u], pred_ptr[u + 1]):
                if mark[pred_idx[e]] == stamp:
                    mark[u] = stamp
                    break


@kernel(inner=True)
def _apply_closure(i, b, j, order, pos, mark, stamp, tmp):
    """Rewrite the segment: ancestors, block, others (earlier) / others, block, descendants."""
    m = 0
    if j < i:
        for k in range(j, i):
            if mark[order[k]] == stamp:
                tmp[m] = order[k]
                m += 1
        for k in range(i, i + b):
            tmp[m] = order[k]
            m += 1
        for k in range(j, i):
            if mark[order[k]] != stamp:
                tmp[m] = order[k]
                m += 1
        for k in range(m):
            order[j + k] = tmp[k]
            pos[tmp[k]] = j + k
    else:
        for k in range(i + b, j + 1):
            if mark[order[k]] != stamp:
                tmp[m] = order[k]
                m += 1
        for k in range(i, i + b):
            tmp[m] = order[k]
            m += 1
        for k in range(i + b, j + 1):
            if mark[order[k]] == stamp:
                tmp[m] = order[k]
                m += 1
        for k in range(m):
            order[i + k] = tmp[k]
            pos[tmp[k]] = i + k


@kernel(inner=True)
def _best_closure_move(i, b, order, delta, trans, base, P, run, pm, pc, sm, sc, peak, cnt, inner,
                       pred_ptr, pred_idx, succ_ptr, succ_idx, mark, stamp, thr, reach):
    """Best closure move of the block ``order[i:i+b]``: to an earlier place together with
    its ancestors in between, or to a later place together with its descendants in between.
    Returns (peak, count, j, stamp used); ``j = -1`` when nothing improves ``(peak, count)``."""
    n = order.shape[0]
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
    bstamp = -1
    exact_left = 4
    # earlier, scanning j = i-1 .. 0; relative to L = P[j]: A (ancestors) then block then R
    stamp += 1
    for k in range(i, i + b):
        mark[order[k]] = stamp
    a_sum = 0
    a_max = _NEG
    r_sum = 0
    r_max = _NEG
    for j in range(i - 1, max(-1, i - 1 - reach), -1):
        u = order[j]
        is_anc = False
        for e in range(succ_ptr[u], succ_ptr[u + 1]):
            if mark[succ_idx[e]] == stamp:
                is_anc = True
                break
        du = delta[u]
        x = du + trans[u]
        if is_anc:
            mark[u] = stamp
            a_max = x if x > a_max + du else a_max + du
            a_sum += du
        else:
            r_max = x if x > r_max + du else r_max + du
            r_sum += du
        L = P[j]
        seg = a_max
        if a_sum + m > seg:
            seg = a_sum + m
        if a_sum + dB + r_max > seg:
            seg = a_sum + dB + r_max
        np_ = L + seg
        if pm[j] > np_:
            np_ = pm[j]
        if sm[i + b] > np_:
            np_ = sm[i + b]
        if base > np_:
            np_ = base
        if np_ > peak:
            continue
        if np_ < peak:
            c = 0
        else:
            # steps at the peak (or above thr) inside the segment before and after the move;
            # exact counting is O(segment), so it is rationed
            old_seg = pc[i + b] - pc[j]
            if old_seg == 0:
                continue
            if L + seg < thr:
                c = cnt - old_seg
            elif old_seg >= 2 and exact_left > 0:
                exact_left -= 1
                c = pc[j] + sc[i + b] + _closure_eval(i, b, j, order, delta, trans, P, mark, stamp, thr, np.bool_(True))
            else:
                continue
        if np_ < bp or (np_ == bp and c < bc):
            bp, bc, bj, bstamp = np_, c, j, stamp
    # later, scanning j = i+b .. n-1; relative to L = P[i]: R then block then D (descendants)
    stamp += 1
    for k in range(i, i + b):
        mark[order[k]] = stamp
    d_sum = 0
    d_max = _NEG
    r_sum = 0
    r_max = _NEG
    L = P[i]
    for j in range(i + b, min(n, i + b + reach)):
        u = order[j]
        is_desc = False
        for e in range(pred_ptr[u], pred_ptr[u + 1]):
            if mark[pred_idx[e]] == stamp:
                is_desc = True
                break
        du = delta[u]
        if is_desc:
            mark[u] = stamp
            if d_sum + du + trans[u] > d_max:
                d_max = d_sum + du + trans[u]
            d_sum += du
        else:
            if r_sum + du + trans[u] > r_max:
                r_max = r_sum + du + trans[u]
            r_sum += du
        seg = r_max
        if r_sum + m > seg:
            seg = r_sum + m
        if r_sum + dB + d_max > seg:
            seg = r_sum + dB + d_max
        np_ = L + seg
        if pm[i] > np_:
            np_ = pm[i]
        if sm[j + 1] > np_:
            np_ = sm[j + 1]
        if base > np_:
            np_ = base
        if np_ > peak:
            continue
        if np_ < peak:
            c = 0
        else:
            old_seg = pc[j + 1] - pc[i]
            if old_seg == 0:
                continue
            if L + seg < thr:
                c = cnt - old_seg
            elif old_seg >= 2 and exact_left > 0:
                exact_left -= 1
                c = pc[i] + sc[j + 1] + _closure_eval(i, b, j, order, delta, trans, P, mark, stamp, thr,
                                                      np.bool_(False))
            else:
                continue
        if np_ < bp or (np_ == bp and c < bc):
            bp, bc, bj, bstamp = np_, c, j, stamp
    return bp, bc, bj, bstamp, stamp


@kernel(inner=True)
def _copy(dst, src):
    """``dst[:len(src)] = src`` as a loop: numba's slice assignment checks shapes with an error
    message whose string formatting costs seconds to compile."""
    for k in range(src.shape[0]):
        dst[k] = src[k]


@kernel(inner=True)
def _permute(perm, m):
    """``perm[:m] = np.random.permutation(m)``: the same Fisher-Yates shuffle and the same
    random numbers as numba's (and numpy's legacy) permutation, without compiling numba's
    permutation, shuffle and arange (over a second)."""
    for k in range(m):
        perm[k] = k
    i = m - 1
    while i > 0:
        j = np.random.randint(0, i + 1)
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t
        i -= 1


@kernel(inner=True)
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


@kernel(inner=True)
def _block_len(order, i, is_rel, n):
    b = 1
    while i + b < n and is_rel[order[i + b]]:
        b += 1
    return b


@kernel(pure_max=64)  # a search: pure Python is ~50x slower per move, so only on small DAGs
def _ils(order, best, delta, trans, base, pred_ptr, pred_idx, succ_ptr, succ_idx, rounds, kick_max, seed, first,
         closure, budget, stop, home, state, init, slack, reach, perm):
    """Up to ``rounds`` rounds of descent + kick on ``order`` (in place, releases as early as
    possible) and at most ``budget`` move evaluations; ``best`` keeps the best order seen.
    Stops early when the best peak reaches ``stop``. Returns (best peak, its count, rounds
    completed, evaluations made); a paused descent resumes from ``order`` on the next call."""
    if first:
        np.random.seed(seed)
    n = order.shape[0]
    indeg = np.empty(n, np.int64)
    is_rel = np.empty(n, np.bool_)
    n_alloc = np.int64(0)  # not a literal 0: numba would compile ``_permute`` for Literal[int](0) too
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
    mark = np.zeros(n, np.int64)
    stamp = np.int64(0)  # not a literal 0: numba would compile the callees for Literal[int](0) too
    tmp = np.empty(n, np.int64)
    inner = np.empty(n, np.int64)
    P = np.empty(n + 1, np.int64)
    run = np.empty(n, np.int64)
    pm = np.empty(n + 1, np.int64)
    pc = np.empty(n + 1, np.int64)
    sm = np.empty(n + 1, np.int64)
    sc = np.empty(n + 1, np.int64)
    _normalize(best, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
    best_peak, best_cnt, _ = _rebuild(best, delta, trans, base, P, run, pm, pc, sm, sc, slack)
    _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
    peak, cnt, thr = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc, slack)
    r = 0
    evals = 0
    kbig = max(kick_max, min(n_alloc // 4, 32))
    stall_limit = 20 + n_alloc // 5
    kcur = state[0] if state[0] > 0 else kick_max
    stall = state[1]
    if state[2] < 0:  # a new walk starts at ``order``
        _copy(home, order)
        home_peak, home_cnt = peak, cnt
    else:
        home_peak, home_cnt = state[2], state[3]
    while r < rounds and best_peak > stop:
        # descent to a local optimum of (peak, count): move an allocating node together
        # with the releases it triggers (and, for closure moves, the ancestors/descendants
        # it jumps over)
        paused = False
        while peak > base and n_alloc > 0:
            if state[4] < 0:  # a new pass over the allocating nodes, in random order
                _permute(perm, n_alloc)
                state[4] = 0
                state[5] = 0
            while state[4] < n_alloc:
                if evals >= budget:
                    paused = True
                    break
                evals += 1
                v = allocs[perm[state[4]]]
                state[4] += 1
                i = pos[v]
                b = _block_len(order, i, is_rel, n)
                # a move helps only if the stretch it shifts holds a step at the peak
                lo_r = i - reach if closure else 0
                hi_r = i + b + reach if closure else n
                if lo_r < 0:
                    lo_r = 0
                if hi_r > n:
                    hi_r = n
                if pc[hi_r] - pc[lo_r] == 0:
                    continue
                if closure:
                    np_, c, j, st, stamp = _best_closure_move(i, b, order, delta, trans, base, P, run, pm, pc,
                                                              sm, sc, peak, cnt, inner, pred_ptr, pred_idx,
                                                              succ_ptr, succ_idx, mark, stamp, thr, reach)
                    if j >= 0:
                        # re-flag the closure of the chosen target and rewrite the segment
                        stamp += 1
                        _mark_closure(i, b, j, order, pred_ptr, pred_idx, succ_ptr, succ_idx, pos, mark, stamp)
                        _apply_closure(i, b, j, order, pos, mark, stamp, tmp)
                else:
                    lo, hi = _block_window(i, b, order, pos, pred_ptr, pred_idx, succ_ptr, succ_idx, n)
                    np_, c, j = _best_block_move(i, b, lo, hi, order, delta, trans, base, P, run, pm, pc, sm, sc,
                                                 peak, cnt, inner, thr)
                    if j >= 0:
                        _move_block(order, pos, i, b, j, tmp)
                if j >= 0:
                    _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
                    peak, cnt, thr = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc, slack)
                    state[5] = 1
            if paused:
                break  # the pass resumes on the next call
            state[4] = -1
            if state[5] == 0:
                break  # a whole pass without improvement: a local optimum
        if peak < best_peak or (peak == best_peak and cnt < best_cnt):
            _copy(best, order)
            best_peak, best_cnt = peak, cnt
        if peak < home_peak or (peak == home_peak and cnt < home_cnt):
            if peak < home_peak:
                kcur = kick_max  # an improvement: back to small kicks
                stall = 0
            _copy(home, order)
            home_peak, home_cnt = peak, cnt
        elif not paused:
            kcur = min(kcur + 1, kbig)  # stuck: kick harder (variable neighbourhood)
            stall += 1
        if paused:
            break  # out of budget: the caller resumes from ``order``
        r += 1
        if best_peak <= stop or n_alloc == 0:
            break  # nothing can beat the bound (or the memory at the start)
        if stall >= stall_limit:
            # restart: a new walk from the initial order, kicked
            _copy(order, init)
            for k in range(n):
                pos[order[k]] = k
            home_peak = _POS
            home_cnt = 0
            stall = 0
            kcur = kick_max
            nk = 1 + np.random.randint(0, kbig)
        else:
            if peak > home_peak:
                _copy(order, home)  # continue the walk from its best order
                for k in range(n):
                    pos[order[k]] = k
            nk = 1 + np.random.randint(0, kcur)
        # kick: a few random valid moves
        evals += nk
        for _ in range(nk):
            v = allocs[np.random.randint(0, n_alloc)]
            i = pos[v]
            b = _block_len(order, i, is_rel, n)
            if closure:
                lo, hi = 0, n - 1
            else:
                lo, hi = _block_window(i, b, order, pos, pred_ptr, pred_idx, succ_ptr, succ_idx, n)
            choices = (i - lo) + (hi - (i + b - 1))
            if choices > 0:
                x = np.random.randint(0, choices)
                j = lo + x if x < i - lo else i + b + (x - (i - lo))
                if closure:
                    stamp += 1
                    _mark_closure(i, b, j, order, pred_ptr, pred_idx, succ_ptr, succ_idx, pos, mark, stamp)
                    _apply_closure(i, b, j, order, pos, mark, stamp, tmp)
                else:
                    _move_block(order, pos, i, b, j, tmp)
        _normalize(order, pos, succ_ptr, succ_idx, indeg, is_rel, tmp)
        peak, cnt, thr = _rebuild(order, delta, trans, base, P, run, pm, pc, sm, sc, slack)
    state[0] = kcur
    state[1] = stall
    state[2] = home_peak
    state[3] = home_cnt
    return best_peak, best_cnt, r, evals


def local_search_dag(dag: SignedDAG, initial_order: Sequence[int] | None = None, *, time_limit: float = 1.0,
                     seed: int = 0, max_rounds: int | None = None, kick_max: int | None = None,
                     lower_bound: int | None = None, closure: bool = True, slack: int = 0,
                     reach: int | None = 120, patience: int | None = None) -> tuple[np.ndarray, int]:
    """Improve a full node order of ``dag``; returns ``(best order, its peak)``.

    ``initial_order`` is a full node order or an order of the allocating nodes only
    (releases are then inserted as early as possible); default: the greedy order.
    Stops at ``time_limit`` seconds, after ``max_rounds`` descent+kick rounds, or when the
    peak reaches ``lower_bound`` (or the memory at the start, which no order can beat).
    ``closure`` selects closure moves (else block moves only), ``reach`` bounds how far a
    closure move may jump (``None``: anywhere), ``kick_max`` the initial kick size and
    ``slack > 0`` counts the steps within ``(peak - base) / slack`` of the peak instead of
    the steps at the peak as the secondary objective. ``patience``: stop once that many
    rounds in a row found no better peak (the neighbourhood is exhausted; ``None``: never).
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
    stop = max(int(dag.base), int(lower_bound) if lower_bound is not None else int(dag.base))
    deadline = time.perf_counter() + max(0.0, float(time_limit))
    rounds_left = max_rounds if max_rounds is not None else 1 << 62
    # a fixed number of move evaluations per compiled call (a few ms): the walk does not
    # depend on the machine's speed, only where the time limit cuts it does
    budget, first = max(256, 400_000 // (n + 1)), True
    home = order.copy()
    init = order.copy()
    # kick size, stalled rounds, walk's best (peak, count), position in the pass, pass improved
    state = np.array([0, 0, -1, 0, -1, 0], dtype=np.int64)
    perm = np.empty(n, np.int64)
    best_peak = dag_peak(dag, best, validate=False)
    ils = _jit.choose(_ils, n)
    stale = 0  # rounds since the best peak last improved
    while rounds_left > 0 and best_peak > stop and (patience is None or stale < patience):
        t0 = time.perf_counter()
        if t0 >= deadline and not first:
            break
        best_before = best_peak
        best_peak, _, done, evals = ils(order, best, dag.delta, dag.transient, np.int64(dag.base), dag.pred_ptr,
                                         dag.pred_idx, dag.succ_ptr, dag.succ_idx, rounds_left, kick_max, seed,
                                         first, closure, budget, np.int64(stop), home, state, init, slack,
                                         n if reach is None else int(reach), perm)
        best_peak = int(best_peak)
        # a call that finished no round (a long or, with ``slack``, cycling descent) counts as one
        stale = 0 if best_peak < best_before else stale + max(int(done), 1)
        first = False
        rounds_left -= done
        if evals < budget:
            break  # finished its rounds or reached the bound
    return best, int(dag_peak(dag, best))


def local_search_order(graph: TensorGraph, initial_order: Sequence[int] | None = None, *, time_limit: float = 1.0,
                       seed: int = 0, max_rounds: int | None = None, lower_bound: int | None = None,
                       **options) -> tuple[np.ndarray, int]:
    """:func:`local_search_dag` on a tensor graph's signed DAG; returns ``(op order, peak)``.

    ``initial_order`` is an op order (default: the greedy order); ``options`` go to
    :func:`local_search_dag`. The returned peak is memopt's exact
    :func:`~memopt.core.evaluate.peak` of the returned order.
    """
    from memopt.core.evaluate import peak, validate_order, order_indices

    gd = graph_to_dag(graph)
    init = None
    if initial_order is not None:
        idx = order_indices(graph, initial_order)
        validate_order(graph, idx)
        init = dag_order_from_op_order(gd, idx)
    order, _ = local_search_dag(gd.dag, init, time_limit=time_limit, seed=seed, max_rounds=max_rounds,
                                lower_bound=lower_bound, **options)
    ops = op_order_from_dag_order(gd, order)
    return ops, peak(graph, ops)


def local_search_method(problem, *, time_limit: float = 1.0, incumbent=None, lower_bound=None, seed: int = 0,
                        patience: int | None | str = "auto"):
    """Registry method ``local-search``: :func:`local_search_dag` from the incumbent (default:
    the greedy order). It stops when the peak reaches ``lower_bound``, when its
    neighbourhood is exhausted (``patience="auto"``: :data:`PATIENCE` restarts of the walk
    without a new best; ``None``: never), or at the time limit."""
    from memopt.schedule.result import order_result

    if incumbent is None:
        from memopt.schedule.greedy import greedy_dag_order

        start = greedy_dag_order(problem.dag)
    else:
        start = problem.to_full(incumbent)
    n_alloc = problem.num_allocating
    if patience == "auto":
        patience = PATIENCE * (20 + n_alloc // 5)
    full, _ = local_search_dag(problem.dag, start, time_limit=time_limit, seed=seed, lower_bound=lower_bound,
                               patience=patience)
    return order_result(problem, problem.from_full(full))
