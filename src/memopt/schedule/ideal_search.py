"""Exact minimum-peak order of a signed DAG by search over its ideals (down-sets).

Model (DESIGN 1.3). A schedule is a chain of ideals; the memory after ideal ``I`` is
``w(I) = base + sum(delta[I])`` and the memory while node ``v`` runs on top of ``I`` is
``w(I) + delta[v] + transient[v]``. Releases (``delta + transient <= 0``) run as soon as
they are ready, so a state of the search is an ideal of the *allocating* nodes, closed
under ready releases; its level ``w(I)`` is a function of the ideal alone.

Decision version. "Is there an order with peak ``<= B``?" is reachability in the ideal
lattice through ideals whose moves stay ``<= B``. It is decided by a depth-first search
with

* **free moves** (dominance): a ready node ``v`` whose level ``w(I) + delta + transient``
  is ``<= B`` and after which (with the releases it enables) memory does not grow is taken
  greedily, without branching: moving it to the front of any completion lowers or keeps
  every level in between (exchange argument);
* **memoisation of dead ideals** in a hash table keyed by the bitset of allocating nodes;
  each dead ideal stores a *threshold* ``e``: the smallest level the failed search of its
  sub-lattice compared against ``B`` and found too high. The search of that sub-lattice
  makes exactly the same decisions for every bound below ``e``, so the ideal is dead for
  every ``B < e``. The table is therefore kept across bounds, and a failed search at ``B``
  proves the optimum is at least ``e(root) > B`` (bound jumps, not unit steps);
* a **lower bound per state**: node ``v`` runs in an ideal that contains ``I`` and every
  ancestor of ``v`` and no descendant, so its level is at least ``w(I)`` plus the deltas
  of its missing ancestors plus every not yet run negative delta that is incomparable to
  ``v`` (an LP-style relaxation of the minimum closure, maintained incrementally).

Optimisation. Bisection on ``B`` between a lower bound (the state bound at the root, the
caller's bound, and the trap bounds of :mod:`memopt.bounds` when available) and the
incumbent: a feasible run lowers the incumbent to the peak of the order it found, an
infeasible run raises the lower bound to its threshold. It stops when they meet (optimal)
or at the time limit (best order and proven bound).

This is the peak-memory analogue of the ideal-lattice dynamic programs for scheduling
with precedence constraints (Lawler 1978; see also Kayaaslan, Lambert, Marchal and Uçar,
"Scheduling series-parallel task graphs to minimize peak memory", TCS 707, 2018, whose
free-move argument for trees and series-parallel graphs is the dominance used here).

Example
-------
>>> from memopt.core.signed_dag import SignedDAG
>>> d = SignedDAG.build(["a", "b", "c", "free_a", "free_b"], [4, 3, 2, -4, -3],
...                     edges=[(0, 3), (1, 4), (3, 2), (4, 2)])
>>> r = ideal_search(d, time_limit=5)
>>> r.peak, r.optimal
(7, True)
"""

from __future__ import annotations

import time

import numba
import numpy as np

from memopt.core.signed_dag import SignedDAG, dag_peak, validate_node_order
from memopt.schedule.result import ExactResult

INF = np.iinfo(np.int64).max // 4

# memo table: at most this many bytes of keys
_MEMO_BYTES = 192 * 1024 * 1024


@numba.njit(cache=True)
def _now():
    with numba.objmode(t="float64"):
        t = time.perf_counter()
    return t


@numba.njit(cache=True)
def _hash(key):
    h = np.uint64(1469598103934665603)
    for w in range(key.shape[0]):
        h ^= key[w]
        h *= np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
    return h


@numba.njit(cache=True)
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
    return -1 - i  # free slot, encoded


@numba.njit(cache=True)
def _decide(B, base, delta, trans, succ_ptr, succ_idx, indeg0, is_rel, alloc_slot,
            gplus, lb_static, use_lb,
            memo_keys, memo_thr, memo_used, memo_count, deadline, max_expand, rule):
    """Depth-first search for an order with peak <= B.

    Returns (status, order, threshold, expansions): status 1 = found (``order`` is a full
    node order), 0 = none exists (every order exceeds ``threshold - 1``... i.e. the optimum
    is >= threshold), -1 = stopped at the deadline or expansion limit.
    """
    n = delta.shape[0]
    W = memo_keys.shape[1]
    cap = memo_used.shape[0]
    done = np.zeros(n, np.bool_)
    deg = indeg0.copy()
    trail = np.empty(n, np.int64)
    tlen = 0
    key = np.zeros(W, np.uint64)
    mem = base
    n_alloc = 0
    for v in range(n):
        if not is_rel[v]:
            n_alloc += 1
    # incremental state bound: bound(v) = lb_static[v] + D[v], D[v] = sum of gplus[p, v]
    # over the run allocating nodes p (see _group_bound_tables)
    D = np.zeros(max(n_alloc, 1), np.int64)
    alloc_done = 0

    # frames
    depth_cap = n_alloc + 2
    f_tlen = np.zeros(depth_cap, np.int64)
    f_e = np.full(depth_cap, INF, np.int64)
    f_cptr = np.zeros(depth_cap + 1, np.int64)
    f_next = np.zeros(depth_cap, np.int64)
    f_key = np.zeros((depth_cap, W), np.uint64)
    cbuf = np.empty(max(16, 8 * n_alloc), np.int64)
    cnet = np.empty(n_alloc + 1, np.int64)
    clev = np.empty(n_alloc + 1, np.int64)
    ctmp = np.empty(n_alloc + 1, np.int64)
    expansions = 0

    if base > B:
        return 0, trail[:0], base, 0

    # ---- root: run releases ready at the start
    for v in range(n):
        if deg[v] == 0 and is_rel[v] and not done[v]:
            # apply v and cascade
            done[v] = True
            mem += delta[v]
            trail[tlen] = v
            tlen += 1
            for e in range(succ_ptr[v], succ_ptr[v + 1]):
                deg[succ_idx[e]] -= 1
            if use_lb and not is_rel[v]:
                pa = alloc_slot[v]
                for u in range(n_alloc):
                    D[u] += gplus[pa, u]
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
                        if use_lb and not is_rel[s]:
                            pa = alloc_slot[s]
                            for u in range(n_alloc):
                                D[u] += gplus[pa, u]

    depth = 0
    f_tlen[0] = tlen
    entering = True  # the frame at `depth` must be expanded (closure, memo, candidates)
    last_check = 0
    while True:
        if entering:
            entering = False
            expansions += 1
            if expansions - last_check >= 256:
                last_check = expansions
                if _now() > deadline or expansions > max_expand:
                    return -1, trail[:0], 0, expansions
            # ---- closure under free moves
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
                    # tentative apply v and its release cascade
                    L = tlen
                    m0 = mem
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
                    if mem <= m0:
                        # free: keep it; finish the bookkeeping of the applied nodes
                        for k in range(L, tlen):
                            x = trail[k]
                            if not is_rel[x]:
                                a = alloc_slot[x]
                                key[a >> 6] |= np.uint64(1) << np.uint64(a & 63)
                                alloc_done += 1
                            if use_lb and not is_rel[x]:
                                pa = alloc_slot[x]
                                for u in range(n_alloc):
                                    D[u] += gplus[pa, u]
                        changed = True
                    else:
                        while tlen > L:
                            tlen -= 1
                            x = trail[tlen]
                            done[x] = False
                            mem -= delta[x]
                            for e in range(succ_ptr[x], succ_ptr[x + 1]):
                                deg[succ_idx[e]] += 1
            if fe < f_e[depth]:
                f_e[depth] = fe
            if alloc_done == n_alloc:
                # every allocating node ran; remaining releases are ready by closure
                if tlen == n:
                    return 1, trail.copy(), 0, expansions
            f_key[depth, :] = key
            slot = _memo_find(memo_keys, memo_used, key)
            dead = False
            if slot >= 0 and memo_thr[slot] > B:
                dead = True
                if memo_thr[slot] < f_e[depth]:
                    f_e[depth] = memo_thr[slot]
            # ---- state lower bound
            if not dead and use_lb:
                worst = 0
                for u in range(n):
                    if done[u] or is_rel[u]:
                        continue
                    lb = lb_static[alloc_slot[u]] + D[alloc_slot[u]]
                    if lb > worst:
                        worst = lb
                if worst > B:
                    dead = True
                    if worst < f_e[depth]:
                        f_e[depth] = worst
            # ---- candidates
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
                    # net memory change of v with its release cascade
                    L = tlen
                    m0 = mem
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
                    net = mem - m0
                    while tlen > L:
                        tlen -= 1
                        x = trail[tlen]
                        done[x] = False
                        mem -= delta[x]
                        for e in range(succ_ptr[x], succ_ptr[x + 1]):
                            deg[succ_idx[e]] += 1
                    # insertion sort by (net, level, id)
                    if rule == 1:
                        net, lev = lev, net
                    elif rule == 2:
                        lev = -lev
                    j = nc
                    while j > 0 and (cnet[j - 1] > net or (cnet[j - 1] == net and clev[j - 1] > lev)):
                        cnet[j] = cnet[j - 1]
                        clev[j] = clev[j - 1]
                        ctmp[j] = ctmp[j - 1]
                        j -= 1
                    cnet[j] = net
                    clev[j] = lev
                    ctmp[j] = v
                    nc += 1
                if start + nc > cbuf.shape[0]:
                    nb = np.empty(2 * (start + nc), np.int64)
                    nb[:start] = cbuf[:start]
                    cbuf = nb
                for k in range(nc):
                    cbuf[start + k] = ctmp[k]
            f_cptr[depth + 1] = start + nc
            f_next[depth] = start
            continue

        # ---- take the next candidate of the current frame, or fail the frame
        if f_next[depth] < f_cptr[depth + 1]:
            v = cbuf[f_next[depth]]
            f_next[depth] += 1
            L = tlen
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
            for k in range(L, tlen):
                x = trail[k]
                if not is_rel[x]:
                    a = alloc_slot[x]
                    key[a >> 6] |= np.uint64(1) << np.uint64(a & 63)
                    alloc_done += 1
                if use_lb and not is_rel[x]:
                    pa = alloc_slot[x]
                    for u in range(n_alloc):
                        D[u] += gplus[pa, u]
            depth += 1
            f_tlen[depth] = L
            f_e[depth] = INF
            entering = True
            continue

        # frame exhausted: its ideal is dead below f_e[depth]
        e_val = f_e[depth]
        slot = _memo_find(memo_keys, memo_used, f_key[depth])
        if slot >= 0:
            if e_val > memo_thr[slot]:
                memo_thr[slot] = e_val
        elif memo_count[0] < (cap * 7) // 10:
            s = -1 - slot
            memo_used[s] = True
            memo_keys[s, :] = f_key[depth]
            memo_thr[s] = e_val
            memo_count[0] += 1
        if depth == 0:
            return 0, trail[:0], e_val, expansions
        # undo the entering move of this frame and its closure
        L = f_tlen[depth]
        while tlen > L:
            tlen -= 1
            x = trail[tlen]
            done[x] = False
            mem -= delta[x]
            for e in range(succ_ptr[x], succ_ptr[x + 1]):
                deg[succ_idx[e]] += 1
            if not is_rel[x]:
                a = alloc_slot[x]
                key[a >> 6] &= ~(np.uint64(1) << np.uint64(a & 63))
                alloc_done -= 1
            if use_lb and not is_rel[x]:
                pa = alloc_slot[x]
                for u in range(n_alloc):
                    D[u] -= gplus[pa, u]
        depth -= 1
        if e_val < f_e[depth]:
            f_e[depth] = e_val


def reachability(dag: SignedDAG) -> np.ndarray:
    """Dense boolean matrix ``R[u, v]`` = there is a path from ``u`` to ``v`` (u != v)."""
    n = dag.n
    words = (n + 63) // 64
    bits = np.zeros((n, words), np.uint64)
    topo = dag.topological_order()
    for v in topo[::-1]:
        v = int(v)
        for s in dag.succ(v):
            s = int(s)
            bits[v] |= bits[s]
            bits[v, s >> 6] |= np.uint64(1) << np.uint64(s & 63)
    R = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(np.bool_)
    return R


def release_owners(dag: SignedDAG, is_rel: np.ndarray | None = None) -> np.ndarray:
    """For each release node, an allocating ancestor it cannot run without (-1: none).

    The owner is the topologically first allocating predecessor (for a tensor graph: the
    producer of the freed tensor); a release without one inherits the owner of a release
    predecessor.
    """
    is_rel = dag.is_release if is_rel is None else is_rel
    topo = dag.topological_order()
    pos = np.empty(dag.n, np.int64)
    pos[topo] = np.arange(dag.n, dtype=np.int64)
    owner = np.full(dag.n, -1, np.int64)
    for r in topo:
        r = int(r)
        if not is_rel[r]:
            continue
        best, best_pos = -1, None
        for p in dag.pred(r):
            p = int(p)
            cand = p if not is_rel[p] else int(owner[p])
            if cand >= 0 and (best_pos is None or pos[cand] < best_pos):
                best, best_pos = cand, pos[cand]
        owner[r] = best
    return owner


def _group_bound_tables(dag: SignedDAG, is_rel: np.ndarray):
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
    R = reachability(dag)
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
    ungrouped = (not_desc[:, free_rels].astype(np.int64) * delta[free_rels][None, :]).sum(axis=1) if free_rels.size else 0
    lb_static = (int(dag.base) + delta[A] + dag.transient[A].astype(np.int64) + ungrouped
                 + np.where(anc, G, 0).sum(axis=1) + np.where(optional, np.minimum(G, 0), 0).sum(axis=1))
    gplus = np.ascontiguousarray(np.where(optional, np.maximum(G, 0), 0).T)   # [p, v]
    return lb_static.astype(np.int64), gplus.astype(np.int64)


class IdealSearch:
    """Reusable decision oracle "peak <= B?" over the ideals of one signed DAG.

    The table of dead ideals (with their thresholds) is shared by every call, so a
    sequence of bounds (bisection) reuses all earlier work.
    """

    def __init__(self, dag: SignedDAG, *, state_bound: bool = True, memo_bytes: int = _MEMO_BYTES):
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
        if self.use_lb:
            self.lb_static, self.gplus = _group_bound_tables(dag, self.is_rel)
        else:
            self.lb_static = np.zeros(max(1, self.n_alloc), np.int64)
            self.gplus = np.zeros((1, 1), np.int64)
        self.expansions = 0
        self.rule = 0

    def root_bound(self) -> int:
        """The state bound at the empty ideal (a valid lower bound on the optimum)."""
        d = self.dag
        lb = int(d.base)
        if self.n_alloc:
            if self.use_lb:
                lb = max(lb, int(self.lb_static.max()))
            else:
                lb = max(lb, int((d.base + self.delta + self.trans)[~self.is_rel].min()))
        return lb

    def decide(self, bound: int, deadline: float, max_expand: int = 1 << 62):
        """``(status, order, threshold)``: 1 found (order), 0 infeasible (optimum >= threshold), -1 timeout."""
        d = self.dag
        st, order, thr, ex = _decide(np.int64(bound), np.int64(d.base), self.delta, self.trans, d.succ_ptr, d.succ_idx,
                                     self.indeg, self.is_rel, self.alloc_slot, self.gplus, self.lb_static,
                                     self.use_lb, self.memo_keys, self.memo_thr, self.memo_used, self.memo_count,
                                     float(deadline), np.int64(max_expand), self.rule)
        self.expansions += int(ex)
        return int(st), (np.asarray(order, np.int64) if st == 1 else None), int(thr)


def _external_bound(dag: SignedDAG) -> int:
    """The trap lower bounds of :mod:`memopt.bounds`, when that module is available."""
    try:
        from memopt.bounds import trap  # noqa: F401
    except Exception:
        return 0
    best = 0
    # the reverse trap equals the forward one node by node (memopt.bounds.trap), one suffices
    for fname in ("forward_trap_bound",):
        f = getattr(trap, fname, None)
        if f is None:
            continue
        try:
            val = f(dag)
        except Exception:
            continue
        val = getattr(val, "value", getattr(val, "bound", val))
        try:
            best = max(best, int(val))
        except (TypeError, ValueError):
            continue
    return best


def ideal_search(dag: SignedDAG, *, time_limit: float = 10.0, initial_order=None, lower_bound: int | None = None,
                 use_trap_bounds: bool = True, state_bound: bool = True) -> ExactResult:
    """Minimum-peak order of ``dag`` by bisection over decision searches on its ideal lattice.

    ``initial_order`` (a full node order) is a warm start; ``lower_bound`` a known valid
    bound. Returns the best order found, its peak, the proven lower bound and whether the
    two meet (``optimal``), within about ``time_limit`` seconds.
    """
    t0 = time.perf_counter()
    deadline = t0 + max(0.0, float(time_limit))
    search = IdealSearch(dag, state_bound=state_bound)
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
    st, order, _ = search.decide(INF, deadline=time.perf_counter() + 3600.0)
    if st == 1:
        p = dag_peak(dag, order)
        if hi is None or p < hi:
            best_order, hi = order, p
    try:
        from memopt.schedule.greedy import greedy_dag_order
        order = np.asarray(greedy_dag_order(dag), np.int64)
        p = dag_peak(dag, order)
        if p < hi:
            best_order, hi = order, p
    except ImportError:  # pragma: no cover - greedy is part of the package
        pass
    if use_trap_bounds and lo < hi:
        lo = max(lo, _external_bound(dag))
        stats["trap_bound"] = lo
    stats["initial_upper"] = int(hi)
    timed_out = False
    # Time-sliced runs: alternately try to prove the lower bound (B = lo) and to improve the
    # incumbent (B halfway). A run that runs out of its slice teaches nothing directly, but
    # its dead ideals stay in the table for the next runs; slices grow geometrically.
    slice_s = 0.25
    mode = 0
    while lo < hi:
        now = time.perf_counter()
        if now >= deadline:
            timed_out = True
            break
        B = lo if mode == 0 else lo + (hi - 1 - lo) // 2
        stats["runs"] += 1
        st, order, thr = search.decide(B, min(deadline, now + slice_s))
        if st == 1:
            p = dag_peak(dag, order)
            best_order, hi = order, min(hi, p)
        elif st == 0:
            lo = max(lo, thr, B + 1)
        elif mode == 1:
            slice_s *= 2.0
        mode ^= 1
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
