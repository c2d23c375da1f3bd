"""Exact minimum-peak order of a signed DAG by search over its ideals (down-sets).

Model (``docs/design.md``, signed DAG). A schedule is a chain of ideals; the memory after ideal ``I`` is
``w(I) = base + sum(delta[I])`` and the memory while node ``v`` runs on top of ``I`` is
``w(I) + delta[v] + transient[v]``. Releases (``delta + transient <= 0``) run as soon as
they are ready, so a state of the search is an ideal of the *allocating* nodes, closed
under ready releases; its level ``w(I)`` is a function of the ideal alone.

Decision version. "Is there an order with peak ``<= B``?" is reachability in the ideal
lattice through moves whose level stays ``<= B``. It is decided by a depth-first search
(numba, resumable: it pauses every ~20 ms so that time limits are kept) with

* **free moves** (dominance): a ready node ``v`` whose level ``w(I) + delta + transient``
  is ``<= B`` and after which (with the releases it enables) memory does not grow is taken
  greedily, without branching. Exchange argument: moving ``v`` and those releases to the
  front of any completion shifts every level in between by ``w(after) - w(I) <= 0`` and
  leaves the later ones unchanged;
* **memoisation of dead ideals** in a hash table keyed by the bitset of allocating nodes.
  Each dead ideal stores a *threshold* ``e``: the smallest value the failed search of its
  sub-lattice compared against ``B`` and found too high (a level, a bound, the threshold
  of a dead ideal it met). For every bound below ``e`` that search makes exactly the same
  decisions, so the ideal is dead for every ``B < e``. The table is therefore shared by
  all searches on the DAG, and a failed search at ``B`` proves the optimum is at least
  ``e(root) > B`` (the lower bound jumps instead of creeping up byte by byte);
* a cheap **group bound per state**: node ``v`` runs on top of an ideal that contains
  ``I`` and the ancestors of ``v`` and no descendant of ``v``; grouping each allocating
  node with the releases it owns gives a relaxation of that minimum closure which is
  updated in O(allocating nodes) per move (:func:`_group_bound_tables`);
* the **trap bound per state** of a few critical nodes (those with the highest trap
  bound at the root): the exact minimum closure above, one minimum cut (Picard 1976,
  Dinic's algorithm) given the current ideal, skipped when ``I`` plus the ancestors of
  ``v`` already fits under ``B``. This catches early mistakes that only surface deep in
  the search (on the 250-node random layered graph it cuts the search from 2.2 million
  states to about a thousand).

Optimisation. Three resumable decision searches take turns in growing slices, all
sharing the table of dead ideals: one at ``B = lower bound`` (success proves optimality,
failure raises the bound to its threshold), one halfway between the bound and the
incumbent (bisection), and one just below the incumbent (a quick dive that improves it
step by step); slices are counted in states, so results do not depend on the machine's
speed unless the time limit stops the search. The lower bound starts from the root traps, the caller's bound and the
forward trap bound of :mod:`memopt.bounds.trap`; the incumbent from the caller's order,
a greedy dive and :func:`memopt.schedule.greedy.greedy_dag_order`. It stops when bound and
incumbent meet (optimal) or at the time limit (best order and proven bound).

Dynamic programming over the order ideals of a precedence order goes back to Lawler
("Sequencing jobs to minimize total weighted completion time subject to precedence
constraints", Annals of Discrete Mathematics 2, 1978); here it is the decision version for
peak memory with the dominance and bounds above.

Example
-------
>>> from memopt.core.signed_dag import SignedDAG
>>> # a and b each produce 4 bytes that c reads; c produces 1; a's output dies after c
>>> d = SignedDAG.build(["a", "b", "c", "free_a", "free_b"], [4, 4, 1, -4, -4],
...                     edges=[(0, 2), (1, 2), (2, 3), (2, 4)])
>>> r = ideal_search(d, time_limit=5)
>>> r.peak, r.lower_bound, r.optimal
(9, 9, True)
"""

from __future__ import annotations

import time

import numpy as np

from memopt import _jit
from memopt._jit import kernel

from memopt.core.signed_dag import SignedDAG, dag_peak, validate_node_order
from memopt.core.closure import dinic
from memopt.core.structure import reachability, release_owners
from memopt.schedule.result import ExactResult

INF = np.iinfo(np.int64).max // 4

# memo table: at most this many bytes of keys
_MEMO_BYTES = 192 * 1024 * 1024
# larger DAGs (allocating nodes) are not searched: ideal_search returns its incumbent
MAX_SEARCH_NODES = 20000


_MASK64 = (1 << 64) - 1


def _hash_pure(key):
    """:func:`_hash` for the pure-Python twin: the same 64-bit arithmetic on masked Python ints
    (numpy scalars would warn on the intended wrap-around)."""
    h = 1469598103934665603
    for w in key.tolist():
        h ^= w
        h = (h * 1099511628211) & _MASK64
        h ^= h >> 29
    return np.uint64(h)


@kernel(pure=_hash_pure)
def _hash(key):
    h = np.uint64(1469598103934665603)
    for w in range(key.shape[0]):
        h ^= key[w]
        h *= np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@kernel(inner=True)
def _memo_find(keys, used, key):
    cap = used.shape[0]
    i = np.int64(_hash(key) & np.uint64(cap - 1))
    W = key.shape[0]
    while used[i]:
        same = True
        for w in range(W):
            if keys[i, w] != key[w]:
                same = False
                break
        if same:
            return i
        i = (i + 1) & (cap - 1)
    return -1 - i  # a free slot, encoded


# scalar state of a (resumable) decision search, kept in one int64 array
_TLEN, _MEM, _ADONE, _DEPTH, _ENTER, _EXP, _THR, _B, _NALLOC, _MINDEPTH, _MAXDEPTH = range(11)


@kernel(inner=True)
def _run_cascade(v, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx, is_rel):
    """Run node v, then every release it makes ready (transitively). Returns (tlen, mem)."""
    done[v] = True
    mem += delta[v]
    trail[tlen] = v
    tlen += 1
    for e in range(succ_ptr[v], succ_ptr[v + 1]):
        deg[succ_idx[e]] -= 1
    idx = tlen - 1
    while idx < tlen:
        x = trail[idx]
        idx += 1
        for e in range(succ_ptr[x], succ_ptr[x + 1]):
            s = succ_idx[e]
            if deg[s] == 0 and is_rel[s] and not done[s]:
                done[s] = True
                mem += delta[s]
                trail[tlen] = s
                tlen += 1
                for e2 in range(succ_ptr[s], succ_ptr[s + 1]):
                    deg[succ_idx[e2]] -= 1
    return tlen, mem


@kernel(inner=True)
def _unrun(L, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx):
    """Take back the nodes of the trail after position L. Returns (tlen, mem)."""
    while tlen > L:
        tlen -= 1
        x = trail[tlen]
        done[x] = False
        mem -= delta[x]
        for e in range(succ_ptr[x], succ_ptr[x + 1]):
            deg[succ_idx[e]] += 1
    return tlen, mem


@kernel(inner=True)
def _account(L, tlen, trail, sign, is_rel, alloc_slot, key, D, gplus, use_lb):
    """Key bits and state-bound sums of trail[L:tlen] (sign +1: added, -1: removed)."""
    cnt = 0
    for k in range(L, tlen):
        x = trail[k]
        if is_rel[x]:
            continue
        a = alloc_slot[x]
        bit = np.uint64(1) << np.uint64(a & 63)
        if sign > 0:
            key[a >> 6] |= bit
        else:
            key[a >> 6] &= ~bit
        cnt += 1
        if use_lb:
            for u in range(D.shape[0]):
                D[u] += sign * gplus[a, u]
    return sign * cnt


@kernel
def _start(sc, B, base, delta, succ_ptr, succ_idx, indeg0, is_rel, done, deg, trail, key, D, f_tlen, f_e):
    """Reset the search state to the root (releases ready at the start already run)."""
    n = delta.shape[0]
    # loops, not slice assignments (deg[:] = indeg0): numba's slice assignment costs seconds to compile
    for v in range(done.shape[0]):
        done[v] = False
    for v in range(indeg0.shape[0]):
        deg[v] = indeg0[v]
    for w in range(key.shape[0]):
        key[w] = 0
    for u in range(D.shape[0]):
        D[u] = 0
    tlen = np.int64(0)  # not a literal 0, so that _run_cascade's overload is _search's
    mem = base
    for v in range(n):
        if deg[v] == 0 and is_rel[v] and not done[v]:
            tlen, mem = _run_cascade(v, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx, is_rel)
    sc[_TLEN] = tlen
    sc[_MEM] = mem
    sc[_ADONE] = 0
    sc[_DEPTH] = 0
    sc[_ENTER] = 1
    sc[_EXP] = 0
    sc[_THR] = INF
    sc[_B] = B
    sc[_MINDEPTH] = n
    sc[_MAXDEPTH] = 0
    f_tlen[0] = tlen
    f_e[0] = INF


@kernel
def _state_trap(v, done, anc_v, desc_v, delta, trans, base, pred_ptr, pred_idx,
                first, arc_to, arc_cap, arc_next, level, it, queue, path, cap_at=-1):
    """Trap bound of node ``v`` given the current ideal (``done``): the least memory while
    ``v`` runs over every ideal that contains the current one and the ancestors of ``v``
    and no descendant of ``v``. One minimum cut (Picard's closure network, Dinic's
    algorithm, the one max flow of :mod:`memopt.core.closure`); the network is that module's
    Picard network, built here straight into the residual arrays from the search state. With ``cap_at >= 0``,
    returns early an upper estimate ``<= cap_at`` when one exists (enough to decide ``<= B``).
    """
    n = delta.shape[0]
    s = n
    t = n + 1
    BIG = np.int64(1) << np.int64(60)
    if cap_at >= 0:
        # the ideal (current + ancestors of v) is feasible for v: its level bounds the trap above
        ub = base + delta[v] + trans[v]
        for x in range(n):
            if done[x] or anc_v[x]:
                ub += delta[x]
        if ub <= cap_at:
            return ub
    for x in range(n + 2):
        first[x] = -1
    na = 0
    w_in = base + delta[v] + trans[v]
    for x in range(n):
        if done[x] or anc_v[x]:
            w_in += delta[x]
        elif desc_v[x] or x == v:
            continue
        else:
            d = delta[x]
            if d < 0:
                w_in += d
                # s -> x, capacity -d
                arc_to[na] = x; arc_cap[na] = -d; arc_next[na] = first[s]; first[s] = na; na += 1
                arc_to[na] = s; arc_cap[na] = 0; arc_next[na] = first[x]; first[x] = na; na += 1
            elif d > 0:
                arc_to[na] = t; arc_cap[na] = d; arc_next[na] = first[x]; first[x] = na; na += 1
                arc_to[na] = x; arc_cap[na] = 0; arc_next[na] = first[t]; first[t] = na; na += 1
            for e in range(pred_ptr[x], pred_ptr[x + 1]):
                p = pred_idx[e]
                if done[p] or anc_v[p] or desc_v[p] or p == v:
                    continue
                # x in the ideal forces its predecessor p in: x -> p, infinite
                arc_to[na] = p; arc_cap[na] = BIG; arc_next[na] = first[x]; first[x] = na; na += 1
                arc_to[na] = x; arc_cap[na] = 0; arc_next[na] = first[p]; first[p] = na; na += 1
    flow = dinic(n + 2, s, t, first, arc_to, arc_cap, arc_next, level, it, queue, path)
    return w_in + flow


@kernel
def _search(sc, max_expand, delta, trans, succ_ptr, succ_idx, is_rel, alloc_slot, gplus, lb_static, use_lb,
            done, deg, trail, key, D, f_tlen, f_e, f_cptr, f_next, f_key, cbuf, ck1, ck2,
            memo_keys, memo_thr, memo_used, memo_count,
            base, pred_ptr, pred_idx, crit, R, RT, dyn_traps, first, arc_to, arc_cap, arc_next, level, it, queue,
            path):
    """Continue a depth-first search for an order with peak <= sc[_B] for max_expand states.

    Returns 1 (found: ``trail`` is a full node order), 0 (none exists; ``sc[_THR]`` is the
    proven lower bound on the optimum), -1 (budget spent: call again to resume), or -2
    (the candidate buffer is full: grow it and call again).
    """
    n = delta.shape[0]
    cap = memo_used.shape[0]
    B = sc[_B]
    n_alloc = sc[_NALLOC]
    tlen = sc[_TLEN]
    mem = sc[_MEM]
    alloc_done = sc[_ADONE]
    depth = sc[_DEPTH]
    entering = sc[_ENTER] == 1
    budget_end = sc[_EXP] + max_expand
    while True:
        if entering:
            if sc[_EXP] >= budget_end or f_cptr[depth] + n_alloc > cbuf.shape[0]:
                sc[_TLEN] = tlen
                sc[_MEM] = mem
                sc[_ADONE] = alloc_done
                sc[_DEPTH] = depth
                sc[_ENTER] = 1
                return -1 if sc[_EXP] >= budget_end else -2
            entering = False
            sc[_EXP] += 1
            # ---- closure under free moves (dominance: see the module docstring)
            fe = INF
            changed = True
            while changed:
                changed = False
                for v in range(n):
                    if done[v] or deg[v] != 0 or is_rel[v]:
                        continue
                    lev = mem + delta[v] + trans[v]
                    if lev > B:
                        if lev < fe:
                            fe = lev
                        continue
                    L = tlen
                    m0 = mem
                    tlen, mem = _run_cascade(v, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx, is_rel)
                    if mem <= m0:
                        alloc_done += _account(L, tlen, trail, np.int64(1), is_rel, alloc_slot, key, D, gplus, use_lb)
                        changed = True
                    else:
                        tlen, mem = _unrun(L, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx)
            if fe < f_e[depth]:
                f_e[depth] = fe
            if alloc_done == n_alloc and tlen == n:
                sc[_TLEN] = tlen
                return 1
            for w in range(key.shape[0]):  # not f_key[depth, :] = key: its shape check costs seconds to compile
                f_key[depth, w] = key[w]
            slot = _memo_find(memo_keys, memo_used, key)
            dead = False
            if slot >= 0 and memo_thr[slot] > B:
                dead = True
                if memo_thr[slot] < f_e[depth]:
                    f_e[depth] = memo_thr[slot]
            # ---- state lower bound
            top1 = -1
            top2 = -1
            if not dead and use_lb:
                worst = 0
                second = 0
                for u in range(n):
                    if done[u] or is_rel[u]:
                        continue
                    lb = lb_static[alloc_slot[u]] + D[alloc_slot[u]]
                    if lb > worst:
                        second = worst
                        top2 = top1
                        worst = lb
                        top1 = u
                    elif lb > second:
                        second = lb
                        top2 = u
                if worst > B:
                    dead = True
                    if worst < f_e[depth]:
                        f_e[depth] = worst
            # ---- exact trap bound of the critical nodes, given the current ideal
            # (the static critical nodes, then the nodes with the highest cheap state bound)
            if not dead:
                nst = crit.shape[0]
                ndyn = dyn_traps if RT.shape[0] == n else 0
                for c in range(nst + ndyn):
                    if c < nst:
                        v = crit[c]
                    else:
                        v = top1 if c == nst else top2
                        if v < 0:
                            continue
                    if done[v]:
                        continue
                    T = _state_trap(v, done, RT[v], R[v], delta, trans, base, pred_ptr, pred_idx,
                                    first, arc_to, arc_cap, arc_next, level, it, queue, path, B)
                    if T > B:
                        dead = True
                        if T < f_e[depth]:
                            f_e[depth] = T
                        break
            # ---- branching candidates, sorted by (net memory change, level)
            start = f_cptr[depth]
            nc = 0
            if not dead:
                for v in range(n):
                    if done[v] or deg[v] != 0 or is_rel[v]:
                        continue
                    lev = mem + delta[v] + trans[v]
                    if lev > B:
                        if lev < f_e[depth]:
                            f_e[depth] = lev
                        continue
                    L = tlen
                    m0 = mem
                    tlen, mem = _run_cascade(v, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx, is_rel)
                    net = mem - m0
                    tlen, mem = _unrun(L, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx)
                    k1, k2 = net, lev
                    j = start + nc
                    while j > start and (ck1[j - 1] > k1 or (ck1[j - 1] == k1 and ck2[j - 1] > k2)):
                        cbuf[j] = cbuf[j - 1]
                        ck1[j] = ck1[j - 1]
                        ck2[j] = ck2[j - 1]
                        j -= 1
                    cbuf[j] = v
                    ck1[j] = k1
                    ck2[j] = k2
                    nc += 1
            f_cptr[depth + 1] = start + nc
            f_next[depth] = start
            continue

        # ---- take the next candidate of the current frame, or fail the frame
        if f_next[depth] < f_cptr[depth + 1]:
            v = cbuf[f_next[depth]]
            f_next[depth] += 1
            L = tlen
            tlen, mem = _run_cascade(v, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx, is_rel)
            alloc_done += _account(L, tlen, trail, np.int64(1), is_rel, alloc_slot, key, D, gplus, use_lb)
            depth += 1
            if depth > sc[_MAXDEPTH]:
                sc[_MAXDEPTH] = depth
            f_tlen[depth] = L
            f_e[depth] = INF
            entering = True
            continue

        # frame exhausted: its ideal is dead for every bound below f_e[depth]
        e_val = f_e[depth]
        slot = _memo_find(memo_keys, memo_used, f_key[depth])
        if slot >= 0:
            if e_val > memo_thr[slot]:
                memo_thr[slot] = e_val
        elif memo_count[0] < (cap * 7) // 10:
            s = -1 - slot
            memo_used[s] = True
            for w in range(memo_keys.shape[1]):
                memo_keys[s, w] = f_key[depth, w]
            memo_thr[s] = e_val
            memo_count[0] += 1
        if depth == 0:
            sc[_THR] = e_val
            return 0
        L = f_tlen[depth]
        alloc_done += _account(L, tlen, trail, np.int64(-1), is_rel, alloc_slot, key, D, gplus, use_lb)
        tlen, mem = _unrun(L, done, deg, trail, tlen, mem, delta, succ_ptr, succ_idx)
        depth -= 1
        if depth < sc[_MINDEPTH]:
            sc[_MINDEPTH] = depth
        if e_val < f_e[depth]:
            f_e[depth] = e_val


def _group_bound_tables(dag: SignedDAG, is_rel: np.ndarray, R: np.ndarray):
    """Tables of the per-state lower bound of the ideal search.

    Node ``v`` runs on top of an ideal ``J`` that contains the current ideal ``I`` and
    the ancestors of ``v`` and no descendant of ``v``. Group every allocating node ``p``
    with the releases it owns (:func:`release_owners`; they cannot run before ``p``) and
    let ``G(v, p) = delta[p] + sum of delta of its releases that are not descendants of v``.
    A group whose owner is forced into ``J`` (an ancestor of ``v``, or already run)
    contributes at least ``G``; an optional one at least ``min(0, G)``; a group whose
    owner is ``v`` or follows it contributes nothing; an ownerless release at least its
    delta unless it follows ``v``. So the level of ``v`` is at least
    ``lb_static[v] + sum over run optional owners p of gplus[p, v]``, with
    ``gplus[p, v] = max(0, G(v, p))`` for ``p`` incomparable to ``v`` and 0 otherwise.
    Returns ``(lb_static, gplus)`` indexed by allocating-node slot.
    """
    A = np.flatnonzero(~is_rel)
    slot = np.full(dag.n, -1, np.int64)
    slot[A] = np.arange(A.shape[0], dtype=np.int64)
    delta = dag.delta.astype(np.int64)
    owner = release_owners(dag, is_rel)
    rels = np.flatnonzero(is_rel)
    owned = rels[owner[rels] >= 0]
    free_rels = rels[owner[rels] < 0]
    na = A.shape[0]
    not_desc = ~R[A]                                          # [v, x]: x does not follow v
    not_desc[np.arange(na), A] = False                        # nor is v itself
    G = np.tile(delta[A], (na, 1))                            # G[v, p]
    if owned.size:
        osort = owned[np.argsort(slot[owner[owned]], kind="stable")]
        oslots = slot[owner[osort]]
        contrib = not_desc[:, osort].astype(np.int64) * delta[osort][None, :]
        starts = np.flatnonzero(np.r_[True, oslots[1:] != oslots[:-1]])
        sums = np.add.reduceat(contrib, starts, axis=1)
        G[:, oslots[starts]] += sums
    anc = R[A][:, A].T                                        # [v, p]: p precedes v
    desc = R[A][:, A]                                         # [v, p]: p follows v
    optional = ~anc & ~desc
    np.fill_diagonal(optional, False)
    ungrouped = 0
    if free_rels.size:
        ungrouped = (not_desc[:, free_rels].astype(np.int64) * delta[free_rels][None, :]).sum(axis=1)
    lb_static = (int(dag.base) + delta[A] + dag.transient[A].astype(np.int64) + ungrouped
                 + np.where(anc, G, 0).sum(axis=1) + np.where(optional, np.minimum(G, 0), 0).sum(axis=1))
    gplus = np.ascontiguousarray(np.where(optional, np.maximum(G, 0), 0).T)   # [p, v]
    return lb_static.astype(np.int64), gplus.astype(np.int64)


class IdealSearch:
    """Reusable decision oracle "peak <= B?" over the ideals of one signed DAG.

    The table of dead ideals (with their thresholds) is shared by every call, so a
    sequence of bounds (bisection) reuses all earlier work.
    """

    def __init__(self, dag: SignedDAG, *, state_bound: bool = True, state_traps: int = 4, dyn_traps: int = 0,
                 memo_bytes: int = _MEMO_BYTES, setup_deadline: float = float("inf")):
        self.dag = dag
        n = dag.n
        self.is_rel = np.ascontiguousarray(dag.is_release, dtype=np.bool_)
        alloc = np.flatnonzero(~self.is_rel)
        self.alloc_slot = np.full(n, -1, np.int64)
        self.alloc_slot[alloc] = np.arange(alloc.shape[0], dtype=np.int64)
        self.n_alloc = int(alloc.shape[0])
        W = max(1, (self.n_alloc + 63) // 64)
        cap = 1 << max(10, int(np.log2(max(1024, memo_bytes // (8 * W + 9)))))
        self.memo_keys = np.zeros((cap, W), np.uint64)
        self.memo_thr = np.zeros(cap, np.int64)
        self.memo_used = np.zeros(cap, np.bool_)
        self.memo_count = np.zeros(1, np.int64)
        self.indeg = np.diff(dag.pred_ptr).astype(np.int64)
        self.delta = np.ascontiguousarray(dag.delta, dtype=np.int64)
        self.trans = np.ascontiguousarray(dag.transient, dtype=np.int64)
        self.use_lb = bool(state_bound) and self.n_alloc <= 4000
        R = reachability(dag) if (self.use_lb or state_traps) and n <= 5000 else None
        if self.use_lb and R is not None:
            self.lb_static, self.gplus = _group_bound_tables(dag, self.is_rel, R)
        else:
            self.use_lb = False
            self.lb_static = np.zeros(max(1, self.n_alloc), np.int64)
            self.gplus = np.zeros((1, 1), np.int64)
        # critical nodes: the allocating nodes with the highest trap bounds at the root; their
        # trap given the current ideal is recomputed (one min cut each) at every state
        k = min(int(state_traps), self.n_alloc) if R is not None else 0
        self.root_traps = {}
        if k > 0:
            # screen by the cheap bound, then rank the screened nodes by their exact root trap
            pool = alloc
            if alloc.shape[0] > 1500 and self.use_lb:
                pool = alloc[np.argsort(-self.lb_static[:alloc.shape[0]], kind="stable")[:1500]]
            m = int(dag.pred_ptr[-1])
            work = [np.zeros(n + 2, np.int64), np.zeros(2 * (n + m) + 4, np.int64), np.zeros(2 * (n + m) + 4, np.int64),
                    np.zeros(2 * (n + m) + 4, np.int64)] + [np.zeros(n + 2, np.int64) for _ in range(4)]
            none_done = np.zeros(n, np.bool_)
            state_trap = _jit.choose(_state_trap, n)
            for v in pool:
                if self.root_traps and time.perf_counter() > setup_deadline:
                    break  # keep the time limit: rank only the nodes screened so far
                v = int(v)
                self.root_traps[v] = int(state_trap(v, none_done, np.ascontiguousarray(R[:, v]), R[v], self.delta,
                                                     self.trans, np.int64(dag.base), dag.pred_ptr, dag.pred_idx, *work,
                                                     np.int64(-1)))  # cap_at as the search passes it: one signature
            cand = np.array(sorted(self.root_traps, key=lambda v: (-self.root_traps[v], v))[:k], np.int64)
            self.crit = cand
            self.R = R
            self.RT = np.ascontiguousarray(R.T)
        else:
            self.crit = np.zeros(0, np.int64)
            self.R = self.RT = np.zeros((0, 0), np.bool_)
        self.dyn_traps = int(dyn_traps) if (self.use_lb and k > 0) else 0
        self.expansions = 0
        # the search kernel: pure Python on small DAGs while it stays cheap (memopt._jit)
        self._search = _jit.Adaptive(_search, n)

    def root_bound(self) -> int:
        """The state bounds at the empty ideal (a valid lower bound on the optimum)."""
        lb = int(self.dag.base)
        if self.n_alloc and self.use_lb:
            lb = max(lb, int(self.lb_static.max()))
        if self.root_traps:
            lb = max(lb, max(self.root_traps.values()))
        return lb

    def runner(self, bound: int) -> "_Run":
        """A resumable decision search for ``peak <= bound`` sharing this table of dead ideals."""
        return _Run(self, int(bound))

    def decide(self, bound: int, deadline: float):
        """``(status, order, threshold)``: 1 found (``order``), 0 none exists (the optimum is at
        least ``threshold > bound``), -1 the deadline came first."""
        run = self.runner(bound)
        st = run.advance(deadline)
        return st, run.order, run.threshold


class _Run:
    """State of one depth-first decision search (all arrays, so it can pause and resume)."""

    def __init__(self, s: IdealSearch, bound: int):
        self.s = s
        d = s.dag
        n, na = d.n, s.n_alloc
        self.bound = bound
        self.sc = np.zeros(11, np.int64)
        self.sc[_NALLOC] = na
        self.done = np.zeros(n, np.bool_)
        self.deg = s.indeg.copy()
        self.trail = np.zeros(n, np.int64)
        W = s.memo_keys.shape[1]
        self.key = np.zeros(W, np.uint64)
        self.D = np.zeros(max(1, na), np.int64)
        self.f_tlen = np.zeros(na + 2, np.int64)
        self.f_e = np.zeros(na + 2, np.int64)
        self.f_cptr = np.zeros(na + 3, np.int64)
        self.f_next = np.zeros(na + 2, np.int64)
        self.f_key = np.zeros((na + 2, W), np.uint64)
        size = max(64, 8 * na)
        self.cbuf = np.zeros(size, np.int64)
        self.ck1 = np.zeros(size, np.int64)
        self.ck2 = np.zeros(size, np.int64)
        self.status = -1
        self.order = None
        self.threshold = None
        self.chunk = 16  # grows to about 20 ms of search per call
        m = int(d.pred_ptr[-1])
        self.first = np.zeros(n + 2, np.int64)
        self.arc_to = np.zeros(2 * (n + m) + 4, np.int64)
        self.arc_cap = np.zeros(2 * (n + m) + 4, np.int64)
        self.arc_next = np.zeros(2 * (n + m) + 4, np.int64)
        self.level = np.zeros(n + 2, np.int64)
        self.it = np.zeros(n + 2, np.int64)
        self.queue = np.zeros(n + 2, np.int64)
        self.path = np.zeros(n + 2, np.int64)
        _jit.choose(_start, n)(self.sc, np.int64(bound), np.int64(d.base), s.delta, d.succ_ptr, d.succ_idx, s.indeg, s.is_rel,
               self.done, self.deg, self.trail, self.key, self.D, self.f_tlen, self.f_e)
        if d.base > bound:  # the memory at the start already exceeds the bound
            self.status, self.threshold = 0, int(d.base)

    def advance(self, deadline: float, max_states: int | None = None) -> int:
        """Search until an answer, ``deadline`` or ``max_states`` more states; 1 found, 0 infeasible, -1 paused."""
        s, d = self.s, self.s.dag
        stop = int(self.sc[_EXP]) + max_states if max_states is not None else None
        while self.status == -1:
            if time.perf_counter() >= deadline or (stop is not None and self.sc[_EXP] >= stop):
                return -1
            t0 = time.perf_counter()
            before = int(self.sc[_EXP])
            chunk = self.chunk if stop is None else max(1, min(self.chunk, stop - before))
            st = s._search(self.sc, np.int64(chunk), s.delta, s.trans, d.succ_ptr, d.succ_idx, s.is_rel,
                         s.alloc_slot, s.gplus, s.lb_static, s.use_lb, self.done, self.deg, self.trail, self.key,
                         self.D,
                         self.f_tlen, self.f_e, self.f_cptr, self.f_next, self.f_key, self.cbuf, self.ck1, self.ck2,
                         s.memo_keys, s.memo_thr, s.memo_used, s.memo_count,
                         np.int64(d.base), d.pred_ptr, d.pred_idx, s.crit, s.R, s.RT, s.dyn_traps, self.first,
                         self.arc_to, self.arc_cap, self.arc_next, self.level, self.it, self.queue, self.path)
            s.expansions += int(self.sc[_EXP]) - before
            if st == -2:
                for name in ("cbuf", "ck1", "ck2"):
                    old = getattr(self, name)
                    new = np.zeros(2 * old.shape[0], np.int64)
                    new[:old.shape[0]] = old
                    setattr(self, name, new)
                continue
            if st == -1:
                if chunk == self.chunk:
                    # aim at about 20 ms per call, so that deadlines are kept closely
                    spent = time.perf_counter() - t0
                    aim = self.chunk * 0.02 / spent if spent > 0 else self.chunk * 4
                    self.chunk = int(max(16, min(self.chunk * 4, aim)))
                continue
            self.status = int(st)
            if st == 1:
                self.order = self.trail.copy()
            else:
                self.threshold = int(self.sc[_THR])
        return self.status


def _external_bound(dag: SignedDAG, time_limit: float) -> int:
    """The forward trap bound of :mod:`memopt.bounds.trap` (the reverse trap equals it node by
    node, so one suffices), within ``time_limit`` seconds."""
    from memopt.bounds.trap import forward_trap_bound

    return int(forward_trap_bound(dag, time_limit=time_limit).value)


def ideal_search(dag: SignedDAG, *, time_limit: float = 10.0, initial_order=None, lower_bound: int | None = None,
                 use_trap_bounds: bool = True, state_bound: bool = True, state_traps: int = 4) -> ExactResult:
    """Minimum-peak order of ``dag`` by decision searches on its ideal lattice (module docstring).

    ``initial_order`` (a full node order) is a warm start; ``lower_bound`` a known valid
    bound (when given, the forward trap bound is not recomputed; ``use_trap_bounds=False``
    never computes it). ``state_bound`` / ``state_traps`` switch the per-state group bound
    and set the number of critical nodes whose trap is recomputed at every state (0: none).
    Returns the best order found, its peak, the proven lower bound and whether the two
    meet (``optimal``), within about ``time_limit`` seconds; ``stats`` has the numbers of
    searches, states expanded and dead ideals stored.
    """
    t0 = time.perf_counter()
    deadline = t0 + max(0.0, float(time_limit))
    if initial_order is not None and lower_bound is not None:
        p = dag_peak(dag, initial_order)
        if p <= max(int(lower_bound), int(dag.base)):
            return ExactResult(order=np.asarray(initial_order, np.int64), peak=p, lower_bound=p, optimal=True,
                               solver="ideal_search", seconds=time.perf_counter() - t0, stats={"runs": 0})
    n_alloc = int(np.count_nonzero(~dag.is_release))
    if n_alloc > MAX_SEARCH_NODES:
        # the search state alone (a bitset per depth) would not fit: return the best incumbent
        order = np.asarray(initial_order, np.int64) if initial_order is not None else None
        if order is None:
            from memopt.schedule.greedy import greedy_dag_order

            order = np.asarray(greedy_dag_order(dag), np.int64)
        p = dag_peak(dag, order)
        lo = min(p, max(int(dag.base), int(lower_bound or 0)))
        return ExactResult(order=order, peak=p, lower_bound=lo, optimal=lo == p, solver="ideal_search",
                           seconds=time.perf_counter() - t0, stats={"runs": 0, "too_large": n_alloc})
    search = IdealSearch(dag, state_bound=state_bound, state_traps=state_traps,
                         setup_deadline=t0 + 0.3 * max(0.0, float(time_limit)))
    lo = max(int(dag.base), search.root_bound())
    if lower_bound is not None:
        lo = max(lo, int(lower_bound))
    stats = {"root_bound": search.root_bound(), "runs": 0}
    best_order, hi = None, None
    if initial_order is not None:
        best_order = np.asarray(initial_order, np.int64)
        validate_node_order(dag, best_order)
        hi = dag_peak(dag, best_order)
    # incumbents: a greedy dive of this search (no bound), and the project's greedy rules
    st, order, _ = search.decide(INF, deadline=deadline)
    if st == 1:
        p = dag_peak(dag, order)
        if hi is None or p < hi:
            best_order, hi = order, p
    if hi is None or lo < hi:
        from memopt.schedule.greedy import greedy_dag_order

        order = np.asarray(greedy_dag_order(dag), np.int64)
        p = dag_peak(dag, order)
        if hi is None or p < hi:
            best_order, hi = order, p
    if use_trap_bounds and lower_bound is None and lo < hi and time.perf_counter() < deadline:
        lo = max(lo, _external_bound(dag, max(0.0, deadline - time.perf_counter())))
        stats["trap_bound"] = lo
    stats["initial_upper"] = int(hi)
    # Resumable decision searches share the table of dead ideals: one at B = lo (its success
    # proves optimality, its failure raises lo to its threshold), one halfway between lo and
    # the incumbent (bisection), and one just below the incumbent (a loose bound: a quick
    # dive that improves the incumbent step by step). They take turns in growing slices.
    # Slices are counted in states, not seconds, so that results do not depend on the
    # machine's speed (unless the time limit stops the search).
    runs: dict = {}
    slice_n, turn = 256, 0
    while lo < hi and time.perf_counter() < deadline:
        targets = {"prove": lo, "bisect": lo + (hi - 1 - lo) // 2, "step": hi - 1}
        for name, b in targets.items():
            r = runs.get(name)
            if r is not None and (r.bound >= hi or r.bound < lo or r.status != -1):
                r = runs[name] = None
            if r is None and b not in [x.bound for x in runs.values() if x is not None]:
                runs[name] = search.runner(b)
                stats["runs"] += 1
        live = [runs[k] for k in ("prove", "bisect", "step") if runs.get(k) is not None]
        run = live[turn % len(live)]
        turn += 1
        st = run.advance(deadline, slice_n)
        if st == 1:
            p = dag_peak(dag, run.order)
            if p < hi:
                best_order, hi = run.order, p
        elif st == 0:
            lo = max(lo, run.threshold, run.bound + 1)
        else:
            slice_n = min(int(slice_n * 1.2) + 1, 1 << 20)
    timed_out = lo < hi
    lo = min(lo, hi)
    stats.update(expansions=search.expansions, memo_entries=int(search.memo_count[0]), timed_out=timed_out)
    return ExactResult(order=best_order, peak=int(hi), lower_bound=int(lo), optimal=bool(lo == hi),
                       solver="ideal_search", seconds=time.perf_counter() - t0, stats=stats)


def peak_at_most(dag: SignedDAG, bound: int, *, time_limit: float = 10.0):
    """Decision version: ``(True, order)`` if some order has peak ``<= bound``, ``(False, None)``
    if none does, ``(None, None)`` when the time limit ran out first."""
    search = IdealSearch(dag)
    st, order, _ = search.decide(int(bound), time.perf_counter() + max(0.0, float(time_limit)))
    return ({1: True, 0: False}.get(st), order)


def ideal_search_method(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0):
    """Registry method ``ideal-search``: :func:`ideal_search` warm-started with the incumbent."""
    from memopt.schedule.result import exact_result

    init = problem.to_full(incumbent) if incumbent is not None else None
    return exact_result(problem, ideal_search(problem.dag, time_limit=time_limit, initial_order=init,
                                              lower_bound=lower_bound))
