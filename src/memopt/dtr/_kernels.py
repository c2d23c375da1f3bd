"""Numba kernel of the DTR replay: simrd's ``RuntimeV2EagerOptimized`` on flat arrays.

This is a line-by-line transcription of simrd (``simrd/runtime/v2.py``,
``simrd/optimization/{region,eqclass}.py``, ``simrd/heuristic/{dtr,etc}.py``) with the
object graph replaced by arrays indexed by tensor / storage id, Python sets by bitsets,
and the recursion of ``_materialize`` by an explicit frame stack. Where simrd's outcome
depends on an order (the eviction pool is a list scanned front to back; ``choose`` keeps
the *last* minimum and stops at the first zero score) the same order is kept.

Scores are compared exactly as simrd compares Python floats: ``int / int`` in Python is
correctly rounded, so :func:`div_rn` reproduces it bit for bit; the pool scan first uses a
cheap float approximation and re-evaluates exactly only the near-minimal candidates.

The kernel is *resumable*: all state lives in arrays, and ``run`` returns whenever it
needs something from Python (a user-defined heuristic's choice, bigger buffers) or is
done. Status codes are the ``ST_*`` constants below.

Data layout: tensors and storages are integers (simrd's creation order); a storage's
regions live in a slot of ``reg_bits[slot, 4, words]`` (interior and frontier bitsets,
towards children and towards parents) allocated while it is material; region
traversals walk a deduplicated storage-level adjacency whose edges carry the tensor id
from which they exist. The eviction pool is simrd's list with tombstones. Regions of
pinned storages are maintained too although simrd never scores them: their staleness
can make simrd fail an assertion, which is part of its behaviour. A fresh
equivalence-class node is created for every new storage because simrd merges
not-yet-computed outputs into classes.

simrd's assertion failures (e.g. an absorb of a storage missing from a stale frontier)
are reported as ``ST_ERROR`` with an ``ERR_*`` code instead of a wrong result.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, objmode

# status codes
ST_RUNNING = 0
ST_PASS = 1
ST_OOM = 2
ST_THRASH = 3
ST_NEED_CHOICE = 4
ST_GROW = 5
ST_ERROR = 6

# error codes (simrd would fail an assertion)
ERR_NONE = 0
ERR_LOCK_EVICTED = 1
ERR_ABSORB = 2
ERR_EVICT_LOCKED = 3
ERR_ECN = 4
ERR_POOL = 5
ERR_REBUILD = 6
ERR_OVERFLOW = 7   # not simrd's: the clock would leave int64 (memopt refuses, never wraps)

# heuristic codes
H_DTR = 0
H_EQCLASS = 1
H_LOCAL = 2
H_MSPS = 3
H_LRU = 4
H_LARGEST = 5
H_USER = 6

# scalar state slots (sc)
SC_CLOCK = 0
SC_MEM = 1
SC_MAXMEM = 2
SC_MODEL = 3
SC_REMAT = 4
SC_EVALS = 5
SC_SCHED = 6
SC_DEPTH = 7
SC_ULEN = 8
SC_TCOUNT = 9
SC_STATUS = 10
SC_NEVENTS = 11
SC_POOL_END = 12
SC_POOL_LIVE = 13
SC_SLOT_FREE = 14
SC_NNODES = 15
SC_ERR = 16
SC_ERR_ARG = 17
SC_VICTIM = 18
SC_STAMP = 19
SC_GROW = 20      # what to grow: 1 slots, 2 nodes, 3 events
SC_ST_REBUILD = 21   # statistics: region rebuilds, storages visited, absorbs
SC_ST_VISIT = 22
SC_ST_ABSORB = 23
SC_NSC = 24

# parameters (pa)
PA_BUDGET = 0
PA_LIMIT = 1
PA_HEUR = 2
PA_REGIONS = 3
PA_EQ = 4
PA_RECORD = 5
PA_NPA = 8

# schedule kinds (see trace.py)
K_COMPUTE = 0
K_GET = 1
K_PIN = 2
K_RELEASE = 3

# event kinds
EV_EVICT = 0
EV_REMAT = 1

LA_NEG_INF = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max
TWO53 = 1 << 53


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_INDEX = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DEBRUIJN_INDEX[((1 << _i) * 0x03F79D71B4CB0A89 % (1 << 64)) >> 58] = _i


@njit(cache=True, inline='always')
def _ctz(low):
    """Index of the single set bit of ``low`` (a power of two), by de Bruijn lookup."""
    return _DEBRUIJN_INDEX[(low * _DEBRUIJN) >> np.uint64(58)]


@njit(cache=True)
def _bit_length(x):
    n = 0
    while x > 0:
        x >>= 1
        n += 1
    return n


@njit(cache=True)
def div_rn(a, b):
    """Correctly rounded ``a / b`` for int64 ``a`` and ``b > 0`` (Python's int/int)."""
    if a == 0:
        return 0.0
    if a < 0:
        return -div_rn(-a, b)
    if a <= TWO53 and b <= TWO53:
        return float(a) / float(b)
    q = a // b
    r = np.uint64(a - q * b)
    ub = np.uint64(b)
    e = 0
    while q < (1 << 55):
        r = r << np.uint64(1)
        q = q * 2
        if r >= ub:
            r -= ub
            q += 1
        e -= 1
    shift = _bit_length(q) - 53
    mant = q >> shift
    rem = q - (mant << shift)
    half = np.int64(1) << (shift - 1)
    if rem > half or (rem == half and (r != 0 or (mant & 1) == 1)):
        mant += 1
    return math.ldexp(float(mant), shift + e)


def _py_true_div(a, b, c):
    return a / (b * c)


@njit(cache=True)
def _div_prod_rn(num, size, stale):
    """``num / (size * stale)`` rounded like Python, with ``size, stale > 0``."""
    if stale <= (np.iinfo(np.int64).max // size):
        return div_rn(num, size * stale)
    # the exact denominator needs more than 63 bits: let Python's bignums do it (rare)
    return _div_prod_rn_big(num, size, stale)


@njit(cache=True)
def _div_prod_rn_big(num, size, stale):
    with objmode(res="float64"):
        res = _py_true_div(int(num), int(size), int(stale))
    return res


# --------------------------------------------------------------------------------------
# eviction pool: simrd's list (append, remove, scan in order) with tombstones
# --------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _pool_add(s, pool, pool_pos, sc):
    if pool_pos[s] >= 0:
        return
    end = sc[SC_POOL_END]
    if end == pool.shape[0]:
        end = _pool_compact(pool, pool_pos, sc)
    pool[end] = s
    pool_pos[s] = end
    sc[SC_POOL_END] = end + 1
    sc[SC_POOL_LIVE] += 1


@njit(cache=True)
def _pool_compact(pool, pool_pos, sc):
    """Squeeze out tombstones, keeping simrd's list order."""
    end = sc[SC_POOL_END]
    j = 0
    for i in range(end):
        x = pool[i]
        if x >= 0:
            pool[j] = x
            pool_pos[x] = j
            j += 1
    for i in range(j, end):
        pool[i] = -1
    sc[SC_POOL_END] = j
    return j


@njit(cache=True, inline='always')
def _pool_remove(s, pool, pool_pos, sc):
    i = pool_pos[s]
    if i < 0:
        return False
    pool[i] = -1
    pool_pos[s] = -1
    sc[SC_POOL_LIVE] -= 1
    return True


# --------------------------------------------------------------------------------------
# union-find of evicted storages (simrd's EqClassNode), values are compute sums
# --------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _uf_find(x, uf_parent):
    r = x
    while uf_parent[r] >= 0:
        r = uf_parent[r]
    while uf_parent[x] >= 0:
        nxt = uf_parent[x]
        if nxt != r:
            uf_parent[x] = r
        x = nxt
    return r


@njit(cache=True, inline='always')
def _uf_new(value, uf_parent, uf_value, sc):
    n = sc[SC_NNODES]
    uf_parent[n] = -1
    uf_value[n] = value
    sc[SC_NNODES] = n + 1
    return n


# --------------------------------------------------------------------------------------
# regions (simrd's Region): bitsets per slot; dir 0 = children (region), 1 = parents
# reg_bits[slot, 2*dir] = interior, reg_bits[slot, 2*dir+1] = frontier
# --------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _region_rebuild(x, d, s_slot, reg_bits, reg_comp, s_material, s_compute, t_storage,
                    adj_start, adj_edge, tcount, dfs, sc):
    """simrd's ``Region.rebuild``: evicted storages reachable from ``x`` through evicted
    storages (interior, with their compute summed) and the material ones bordering them
    (frontier, ``x`` excluded), on the storage-level graph (same sets as simrd's walk
    over tensors' ``children`` / ``parents``)."""
    slot = s_slot[x]
    sc[SC_ST_REBUILD] += 1
    interior = reg_bits[slot, 2 * d]
    frontier = reg_bits[slot, 2 * d + 1]
    interior[:] = 0
    frontier[:] = 0
    comp = 0
    top = 0
    dfs[top] = x
    top += 1
    visits = 0
    while top > 0:
        top -= 1
        s = dfs[top]
        visits += 1
        for j in range(adj_start[d, s], adj_start[d, s + 1]):
            if adj_edge[j, 1] >= tcount:
                break
            us = adj_edge[j, 0]
            w = us >> 6
            bit = np.uint64(1) << np.uint64(us & 63)
            if s_material[us]:
                if us != x:
                    frontier[w] |= bit
                continue
            if (interior[w] & bit) == 0:
                comp += s_compute[us]
                interior[w] |= bit
                dfs[top] = us
                top += 1
    sc[SC_ST_VISIT] += visits
    reg_comp[slot, d] = comp


@njit(cache=True, inline='always')
def _region_absorb(x, d, s, s_slot, reg_bits, reg_comp, s_compute, sc):
    """Region of ``x`` (direction d) absorbs the just-evicted frontier storage ``s``."""
    xs = s_slot[x]
    ss = s_slot[s]
    sc[SC_ST_ABSORB] += 1
    if xs < 0 or ss < 0:
        sc[SC_ERR] = ERR_ABSORB
        sc[SC_ERR_ARG] = x
        return False
    xi = reg_bits[xs, 2 * d]
    xf = reg_bits[xs, 2 * d + 1]
    si = reg_bits[ss, 2 * d]
    sf = reg_bits[ss, 2 * d + 1]
    w = s >> 6
    bit = np.uint64(1) << np.uint64(s & 63)
    if (xf[w] & bit) == 0:
        sc[SC_ERR] = ERR_ABSORB
        sc[SC_ERR_ARG] = x
        return False
    xf[w] &= ~bit
    nw = xf.shape[0]
    for k in range(nw):
        xf[k] |= sf[k]
    comp = reg_comp[xs, d]
    for k in range(nw):
        diff = si[k] & ~xi[k]
        if k == w:
            diff |= bit
        if diff != 0:
            xi[k] |= diff
            base = k << 6
            while diff != 0:
                low = diff & (~diff + np.uint64(1))
                b = _ctz(low)
                comp += s_compute[base + b]
                diff ^= low
    reg_comp[xs, d] = comp
    return True


# --------------------------------------------------------------------------------------
# scoring (simrd's Heuristic.evaluate), approximate and exact
# --------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _numerator(s, h, s_compute, s_slot, reg_comp, uf_parent, uf_value, ecn, uf_mark, sc,
               s_material, adj_start, adj_edge):
    if h == H_DTR:
        slot = s_slot[s]
        return s_compute[s] + reg_comp[slot, 0] + reg_comp[slot, 1]
    if h == H_MSPS:
        return s_compute[s] + reg_comp[s_slot[s], 1]
    if h == H_EQCLASS:
        # CheckpointInfo(s.compute) merged with each distinct class among the evicted
        # neighbours (simrd's Storage.evicted_neighbors: parents' and children's storages)
        total = s_compute[s]
        sc[SC_STAMP] += 1
        stamp = sc[SC_STAMP]
        tcount = sc[SC_TCOUNT]
        for d in range(2):
            for j in range(adj_start[d, s], adj_start[d, s + 1]):
                if adj_edge[j, 1] >= tcount:
                    break
                ns = adj_edge[j, 0]
                if not s_material[ns]:
                    r = _uf_find(ecn[ns], uf_parent)
                    if uf_mark[r] != stamp:
                        uf_mark[r] = stamp
                        total += uf_value[r]
        return total
    return s_compute[s]  # DTRLocal


@njit(cache=True)
def _score(s, h, exact, clock, s_size, s_la, s_compute, s_slot, reg_comp, uf_parent,
           uf_value, ecn, uf_mark, sc, s_material, adj_start, adj_edge):
    size = s_size[s]
    if h == H_LRU:
        la = s_la[s]
        if la == LA_NEG_INF:
            return -np.inf
        return float(la)
    if h == H_LARGEST:
        if size > 0:
            return 1.0 / float(size)
        return np.inf
    num = _numerator(s, h, s_compute, s_slot, reg_comp, uf_parent, uf_value, ecn, uf_mark,
                     sc, s_material, adj_start, adj_edge)
    if h == H_MSPS:
        if size > 0:
            if exact:
                return div_rn(num, size)
            return float(num) / float(size)
        return np.inf
    # DTR, DTREqClass, DTRLocal: compute / (size * staleness)
    if size <= 0:
        return np.inf          # 0 * staleness is 0 or nan: not > 0
    la = s_la[s]
    if la == LA_NEG_INF:
        return 0.0 if num >= 0 else -0.0   # num / inf
    stale = clock - la
    if stale <= 0:
        return np.inf
    if exact:
        return _div_prod_rn(num, size, stale)
    return float(num) / (float(size) * float(stale))


@njit(cache=True)
def _choose(h, clock, pool, pool_pos, sc, s_size, s_la, s_compute, s_slot, reg_comp, uf_parent,
            uf_value, ecn, uf_mark, s_material, adj_start, adj_edge, out_score, score_buf):
    """simrd's ``Heuristic.choose``: last minimum of the scan, stopping at a zero score."""
    end = sc[SC_POOL_END]
    if end > 2 * sc[SC_POOL_LIVE] + 32:
        end = _pool_compact(pool, pool_pos, sc)
    if h == H_LRU or h == H_LARGEST:
        # scores are exact floats already: one pass, simrd's rule verbatim
        best = -1
        best_cost = np.inf
        evals = 0
        for i in range(end):
            s = pool[i]
            if s < 0:
                continue
            evals += 1
            if h == H_LRU:
                la = s_la[s]
                c = -np.inf if la == LA_NEG_INF else float(la)
            else:
                size = s_size[s]
                c = 1.0 / float(size) if size > 0 else np.inf
            if c <= best_cost:
                best_cost = c
                best = s
            if c == 0.0:
                break
        sc[SC_EVALS] += evals
        out_score[0] = best_cost
        return best
    # pass 1: cheap float scores (inline: calls with many array arguments cost more than
    # the arithmetic), up to and including the first zero, as simrd's loop breaks there
    best_approx = np.inf
    stop = end
    evals = 0
    for i in range(end):
        s = pool[i]
        if s < 0:
            continue
        evals += 1
        size = s_size[s]
        if h == H_EQCLASS:
            num = _numerator(s, h, s_compute, s_slot, reg_comp, uf_parent, uf_value, ecn,
                             uf_mark, sc, s_material, adj_start, adj_edge)
        elif h == H_DTR:
            slot = s_slot[s]
            num = s_compute[s] + reg_comp[slot, 0] + reg_comp[slot, 1]
        elif h == H_MSPS:
            num = s_compute[s] + reg_comp[s_slot[s], 1]
        else:
            num = s_compute[s]
        if size <= 0:
            a = np.inf
        elif h == H_MSPS:
            a = float(num) / float(size)
        else:
            la = s_la[s]
            if la == LA_NEG_INF:
                a = 0.0
            elif clock - la <= 0:
                a = np.inf
            else:
                a = float(num) / (float(size) * float(clock - la))
        score_buf[i] = a
        if a < best_approx:
            best_approx = a
        if a == 0.0:
            stop = i + 1
            break
    sc[SC_EVALS] += evals
    if best_approx == np.inf:
        thresh = best_approx   # all infinite: exact already
    else:
        thresh = best_approx + abs(best_approx) * 1e-11 + 1e-300
    best = -1
    best_cost = np.inf
    for i in range(stop):
        s = pool[i]
        if s < 0:
            continue
        if score_buf[i] > thresh:
            continue
        c = _score(s, h, True, clock, s_size, s_la, s_compute, s_slot, reg_comp, uf_parent,
                   uf_value, ecn, uf_mark, sc, s_material, adj_start, adj_edge)
        if c <= best_cost:
            best_cost = c
            best = s
    out_score[0] = best_cost
    return best


# --------------------------------------------------------------------------------------
# the runtime
# --------------------------------------------------------------------------------------
@njit(cache=True)
def run(pa, sc,
        op_cost, op_out_start, op_nout, op_arg_start, op_args, op_total_size,
        t_op, t_size, t_storage, t_child_start, t_children,
        s_size, s_tensor_start, s_tensors, s_is_const, s_resident,
        sched_kind, sched_arg, sched_record,
        t_defined, s_material, s_ref_int, s_ref_ext, s_pinned, s_la, s_compute, s_lastop,
        pool, pool_pos,
        s_slot, slot_free, reg_bits, reg_comp, tmp_bits, dfs,
        ecn, uf_parent, uf_value, uf_mark,
        fr_t, fr_remat, fr_phase, fr_i, fr_uend, ulist,
        ev_kind, ev_step, ev_record, ev_op, ev_subject, ev_size, ev_depth, ev_score,
        out_score, tmp_def, rs_buf, score_buf, adj_start, adj_edge):
    budget = pa[PA_BUDGET]
    limit = pa[PA_LIMIT]
    h = pa[PA_HEUR]
    use_regions = pa[PA_REGIONS] != 0
    use_eq = pa[PA_EQ] != 0
    record = pa[PA_RECORD] != 0
    n_sched = sched_kind.shape[0]
    nw = reg_bits.shape[2]

    while True:
        depth = sc[SC_DEPTH]
        if depth == 0:
            pos = sc[SC_SCHED]
            if pos >= n_sched:
                sc[SC_STATUS] = ST_PASS
                return ST_PASS
            kind = sched_kind[pos]
            arg = sched_arg[pos]
            if kind == K_GET:
                s_ref_ext[t_storage[arg]] += 1
                sc[SC_SCHED] = pos + 1
                continue
            if kind == K_RELEASE:
                if use_eq and sc[SC_NNODES] >= uf_parent.shape[0]:
                    sc[SC_GROW] = 2
                    sc[SC_STATUS] = ST_GROW
                    return ST_GROW
                s = t_storage[arg]
                s_ref_ext[s] -= 1
                # RuntimeV2EagerOptimized.release: eager eviction of unreferenced storage
                if s_ref_ext[s] == 0 and s_material[s] and not s_pinned[s]:
                    if not _evict(s, sc, use_regions, use_eq, s_ref_int, s_pinned, s_is_const,
                                  s_material, s_size, pool, pool_pos, s_tensor_start,
                                  s_tensors, t_defined, s_slot, slot_free, reg_bits, reg_comp,
                                  s_compute, ecn, uf_parent, uf_value, adj_start,
                                  adj_edge):
                        sc[SC_STATUS] = ST_ERROR
                        return ST_ERROR
                sc[SC_SCHED] = pos + 1
                continue
            if kind == K_PIN:
                if t_defined[arg]:
                    if not _pin(t_storage[arg], sc, s_material, s_pinned, s_ref_int, pool,
                                pool_pos):
                        sc[SC_STATUS] = ST_ERROR
                        return ST_ERROR
                    sc[SC_SCHED] = pos + 1
                    continue
                # rt.rematerialize(t) then pin (done when the frame stack empties)
                fr_t[0] = arg
                fr_remat[0] = 1
                fr_phase[0] = 0
                sc[SC_DEPTH] = 1
                continue
            # K_COMPUTE: RuntimeV2Optimized.compute -> Tensor.from_op + _materialize
            op = arg
            if use_eq and sc[SC_NNODES] + op_nout[op] > uf_parent.shape[0]:
                sc[SC_GROW] = 2
                sc[SC_STATUS] = ST_GROW
                return ST_GROW
            tc = sc[SC_TCOUNT]
            o0 = op_out_start[op]
            for i in range(op_nout[op]):
                t = o0 + i
                s = t_storage[t]
                if s_tensor_start[s] < s_tensor_start[s + 1] and s_tensors[s_tensor_start[s]] == t:
                    # a new storage (this tensor is its root)
                    s_la[s] = LA_NEG_INF
                    if use_eq:
                        ecn[s] = _uf_new(0, uf_parent, uf_value, sc)
                s_ref_ext[s] += 1
                if s_lastop[s] != op:
                    s_lastop[s] = op
                    s_compute[s] += op_cost[op]
            sc[SC_TCOUNT] = tc + op_nout[op]
            fr_t[0] = o0
            fr_remat[0] = 0
            fr_phase[0] = 0
            sc[SC_DEPTH] = 1
            continue

        # ---- a _materialize frame --------------------------------------------------------
        f = depth - 1
        t = fr_t[f]
        op = t_op[t]
        a0 = op_arg_start[op]
        a1 = op_arg_start[op + 1]
        phase = fr_phase[f]
        if phase == 0:
            clock = sc[SC_CLOCK]
            for j in range(a0, a1):
                s_la[t_storage[op_args[j]]] = clock
            for j in range(a0, a1):
                p = op_args[j]
                if t_defined[p]:
                    if not _lock(t_storage[p], sc, s_material, s_ref_int, pool, pool_pos):
                        sc[SC_STATUS] = ST_ERROR
                        return ST_ERROR
            ul = sc[SC_ULEN]
            fr_i[f] = ul
            for j in range(a0, a1):
                p = op_args[j]
                if not t_defined[p]:
                    ulist[ul] = p
                    ul += 1
            fr_uend[f] = ul
            sc[SC_ULEN] = ul
            fr_phase[f] = 1
            continue
        if phase == 1:
            i = fr_i[f]
            if i < fr_uend[f]:
                p = ulist[i]
                if not t_defined[p]:
                    fr_phase[f] = 2
                    fr_t[depth] = p
                    fr_remat[depth] = 1
                    fr_phase[depth] = 0
                    sc[SC_DEPTH] = depth + 1
                    continue
                if not _lock(t_storage[p], sc, s_material, s_ref_int, pool, pool_pos):
                    sc[SC_STATUS] = ST_ERROR
                    return ST_ERROR
                fr_i[f] = i + 1
                continue
            fr_phase[f] = 3
            continue
        if phase == 2:
            i = fr_i[f]
            if not _lock(t_storage[ulist[i]], sc, s_material, s_ref_int, pool, pool_pos):
                sc[SC_STATUS] = ST_ERROR
                return ST_ERROR
            fr_i[f] = i + 1
            fr_phase[f] = 1
            continue
        # phase 3: _free, then _compute, unlock parents, remat limit
        total = op_total_size[op]
        while sc[SC_MEM] + total > budget:
            if sc[SC_VICTIM] >= 0:
                victim = sc[SC_VICTIM]
                sc[SC_VICTIM] = -1
                score = out_score[0]
            else:
                if sc[SC_POOL_LIVE] == 0:
                    sc[SC_STATUS] = ST_OOM
                    return ST_OOM
                if use_eq and sc[SC_NNODES] >= uf_parent.shape[0]:
                    sc[SC_GROW] = 2
                    sc[SC_STATUS] = ST_GROW
                    return ST_GROW
                if record and sc[SC_NEVENTS] + 2 > ev_kind.shape[0]:
                    sc[SC_GROW] = 3
                    sc[SC_STATUS] = ST_GROW
                    return ST_GROW
                if h == H_USER:
                    sc[SC_STATUS] = ST_NEED_CHOICE
                    return ST_NEED_CHOICE
                victim = _choose(h, sc[SC_CLOCK], pool, pool_pos, sc, s_size, s_la, s_compute,
                                 s_slot, reg_comp, uf_parent, uf_value, ecn, uf_mark,
                                 s_material, adj_start, adj_edge, out_score, score_buf)
                score = out_score[0]
            if record:
                n = sc[SC_NEVENTS]
                ev_kind[n] = EV_EVICT
                ev_step[n] = sc[SC_SCHED]
                ev_record[n] = sched_record[sc[SC_SCHED]]
                ev_op[n] = op
                ev_subject[n] = victim
                ev_size[n] = s_size[victim]
                ev_depth[n] = depth - 1
                ev_score[n] = score
                sc[SC_NEVENTS] = n + 1
            if not _evict(victim, sc, use_regions, use_eq, s_ref_int, s_pinned, s_is_const,
                          s_material, s_size, pool, pool_pos, s_tensor_start, s_tensors,
                          t_defined, s_slot, slot_free, reg_bits, reg_comp, s_compute, ecn,
                          uf_parent, uf_value, adj_start, adj_edge):
                sc[SC_STATUS] = ST_ERROR
                return ST_ERROR
        # room for what _compute needs (re-entering phase 3 is harmless: memory fits now)
        if use_regions and sc[SC_SLOT_FREE] < op_nout[op]:
            sc[SC_GROW] = 1
            sc[SC_STATUS] = ST_GROW
            return ST_GROW
        if record and sc[SC_NEVENTS] + 1 > ev_kind.shape[0]:
            sc[SC_GROW] = 3
            sc[SC_STATUS] = ST_GROW
            return ST_GROW
        remat = fr_remat[f] != 0
        # ---- RuntimeV2._compute ----
        o0 = op_out_start[op]
        no = op_nout[op]
        # snapshot (before anything changes): defined siblings, storages to materialize
        nrs = 0
        for i in range(no):
            u = o0 + i
            tmp_def[i] = 1 if (u != t and t_defined[u]) else 0
        for i in range(no + 1):
            u = o0 + i if i < no else t
            if i < no and u == t:
                continue
            us = t_storage[u]
            if not s_material[us]:
                dup = False
                for k in range(nrs):
                    if rs_buf[k] == us:
                        dup = True
                if not dup:
                    rs_buf[nrs] = us          # simrd's remat_storages
                    nrs += 1
        cost = op_cost[op]
        if cost > INT64_MAX - sc[SC_CLOCK]:
            # checked sum: rematerializations pushed the clock past int64
            sc[SC_ERR] = ERR_OVERFLOW
            sc[SC_ERR_ARG] = t_storage[t]
            sc[SC_STATUS] = ST_ERROR
            return ST_ERROR
        sc[SC_CLOCK] += cost
        sc[SC_MEM] += total
        if sc[SC_MEM] > sc[SC_MAXMEM]:
            sc[SC_MAXMEM] = sc[SC_MEM]
        s_material[t_storage[t]] = True
        t_defined[t] = True
        if remat:
            sc[SC_REMAT] += cost
        else:
            sc[SC_MODEL] += cost
        for i in range(no):
            u = o0 + i
            if u == t:
                continue
            if tmp_def[i] == 0:              # remat sibling
                s_material[t_storage[u]] = True
                t_defined[u] = True
        for i in range(no):
            u = o0 + i
            if u == t:
                continue
            if tmp_def[i] == 1:              # duplicate sibling: freed again
                sc[SC_MEM] -= t_size[u]
        for k in range(nrs):
            us = rs_buf[k]
            _pool_add(us, pool, pool_pos, sc)
        if use_regions:
            for k in range(nrs):
                us = rs_buf[k]
                if s_slot[us] < 0:
                    fs = sc[SC_SLOT_FREE] - 1
                    s_slot[us] = slot_free[fs]
                    sc[SC_SLOT_FREE] = fs
            tcount = sc[SC_TCOUNT]
            for k in range(nrs):
                us = rs_buf[k]
                _region_rebuild(us, 0, s_slot, reg_bits, reg_comp, s_material, s_compute,
                                t_storage, adj_start, adj_edge, tcount, dfs, sc)
                _region_rebuild(us, 1, s_slot, reg_bits, reg_comp, s_material, s_compute,
                                t_storage, adj_start, adj_edge, tcount, dfs, sc)
            # regions of the frontier storages are rebuilt (simrd: affected_regions)
            aff = tmp_bits[0]
            aff_rev = tmp_bits[1]
            aff[:] = 0
            aff_rev[:] = 0
            for k in range(nrs):
                sl = s_slot[rs_buf[k]]
                for w in range(nw):
                    aff[w] |= reg_bits[sl, 3, w]       # region_rev.frontier
                    aff_rev[w] |= reg_bits[sl, 1, w]   # region.frontier
            for d in range(2):
                bits = aff if d == 0 else aff_rev
                for w in range(nw):
                    word = bits[w]
                    while word != 0:
                        low = word & (~word + np.uint64(1))
                        b = _ctz(low)
                        x = (w << 6) + b
                        word ^= low
                        if s_slot[x] < 0 or not s_material[x]:
                            sc[SC_ERR] = ERR_REBUILD
                            sc[SC_ERR_ARG] = x
                            sc[SC_STATUS] = ST_ERROR
                            return ST_ERROR
                        _region_rebuild(x, d, s_slot, reg_bits, reg_comp, s_material,
                                        s_compute, t_storage, adj_start, adj_edge,
                                        tcount, dfs, sc)
        if use_eq:
            for k in range(nrs):
                us = rs_buf[k]
                if ecn[us] < 0:
                    sc[SC_ERR] = ERR_ECN
                    sc[SC_ERR_ARG] = us
                    sc[SC_STATUS] = ST_ERROR
                    return ST_ERROR
                r = _uf_find(ecn[us], uf_parent)
                uf_value[r] = uf_value[r] - s_compute[us]
                ecn[us] = -1
        # keep_resident: pin a resident storage as soon as it is materialized
        for k in range(nrs):
            us = rs_buf[k]
            if s_resident[us] and not s_pinned[us]:
                _lock(us, sc, s_material, s_ref_int, pool, pool_pos)
                s_pinned[us] = True
        if record and remat:
            n = sc[SC_NEVENTS]
            ev_kind[n] = EV_REMAT
            ev_step[n] = sc[SC_SCHED]
            ev_record[n] = sched_record[sc[SC_SCHED]]
            ev_op[n] = op
            ev_subject[n] = t
            ev_size[n] = total
            ev_depth[n] = depth - 1
            ev_score[n] = 0.0
            sc[SC_NEVENTS] = n + 1
        # release locks on parents
        for j in range(a0, a1):
            _unlock(t_storage[op_args[j]], s_ref_int, pool, pool_pos, sc)
        # pop the frame
        sc[SC_DEPTH] = depth - 1
        if f > 0:
            sc[SC_ULEN] = fr_uend[f - 1]
        else:
            sc[SC_ULEN] = 0
        if sc[SC_REMAT] > limit:
            sc[SC_STATUS] = ST_THRASH
            return ST_THRASH
        if f == 0:
            pos = sc[SC_SCHED]
            if sched_kind[pos] == K_COMPUTE:
                clock = sc[SC_CLOCK]
                o0 = op_out_start[op]
                for i in range(op_nout[op]):
                    s_la[t_storage[o0 + i]] = clock
            else:   # K_PIN after rematerialization
                if not _pin(t_storage[t], sc, s_material, s_pinned, s_ref_int, pool,
                            pool_pos):
                    sc[SC_STATUS] = ST_ERROR
                    return ST_ERROR
            sc[SC_SCHED] = pos + 1


@njit(cache=True, inline='always')
def _lock(s, sc, s_material, s_ref_int, pool, pool_pos):
    if not s_material[s]:
        sc[SC_ERR] = ERR_LOCK_EVICTED
        sc[SC_ERR_ARG] = s
        return False
    if s_ref_int[s] == 0:
        if not _pool_remove(s, pool, pool_pos, sc):
            sc[SC_ERR] = ERR_POOL
            sc[SC_ERR_ARG] = s
            return False
    s_ref_int[s] += 1
    return True


@njit(cache=True, inline='always')
def _unlock(s, s_ref_int, pool, pool_pos, sc):
    s_ref_int[s] -= 1
    if s_ref_int[s] == 0:
        _pool_add(s, pool, pool_pos, sc)


@njit(cache=True, inline='always')
def _pin(s, sc, s_material, s_pinned, s_ref_int, pool, pool_pos):
    if not s_material[s]:
        sc[SC_ERR] = ERR_LOCK_EVICTED
        sc[SC_ERR_ARG] = s
        return False
    if s_pinned[s]:
        return True
    if not _lock(s, sc, s_material, s_ref_int, pool, pool_pos):
        return False
    s_pinned[s] = True
    return True


@njit(cache=True, inline='always')
def _evict(s, sc, use_regions, use_eq, s_ref_int, s_pinned, s_is_const, s_material, s_size,
           pool, pool_pos, s_tensor_start, s_tensors, t_defined, s_slot, slot_free, reg_bits,
           reg_comp, s_compute, ecn, uf_parent, uf_value, adj_start, adj_edge):
    if s_ref_int[s] != 0 or s_pinned[s] or s_is_const[s]:
        sc[SC_ERR] = ERR_EVICT_LOCKED
        sc[SC_ERR_ARG] = s
        return False
    s_material[s] = False
    sc[SC_MEM] -= s_size[s]
    _pool_remove(s, pool, pool_pos, sc)
    tcount = sc[SC_TCOUNT]
    for k in range(s_tensor_start[s], s_tensor_start[s + 1]):
        t = s_tensors[k]
        if t >= tcount:
            break
        t_defined[t] = False
    if use_regions:
        sl = s_slot[s]
        nw = reg_bits.shape[2]
        # ps.region.absorb(s) for ps in s.region_rev.frontier, then the reverse direction
        for d in range(2):
            fr = reg_bits[sl, 3 if d == 0 else 1]
            for w in range(nw):
                word = fr[w]
                while word != 0:
                    low = word & (~word + np.uint64(1))
                    b = _ctz(low)
                    word ^= low
                    x = (w << 6) + b
                    if not _region_absorb(x, d, s, s_slot, reg_bits, reg_comp, s_compute, sc):
                        return False
        reg_bits[sl, :, :] = 0
        reg_comp[sl, 0] = 0
        reg_comp[sl, 1] = 0
        s_slot[s] = -1
        slot_free[sc[SC_SLOT_FREE]] = sl
        sc[SC_SLOT_FREE] += 1
    if use_eq:
        if ecn[s] >= 0:
            sc[SC_ERR] = ERR_ECN
            sc[SC_ERR_ARG] = s
            return False
        node = _uf_new(s_compute[s], uf_parent, uf_value, sc)
        ecn[s] = node
        tcount = sc[SC_TCOUNT]
        for d in range(2):
            for j in range(adj_start[d, s], adj_start[d, s + 1]):
                if adj_edge[j, 1] >= tcount:
                    break
                ns = adj_edge[j, 0]
                if not s_material[ns]:
                    if not _merge(ns, node, ecn, uf_parent, uf_value, sc):
                        return False
    return True


@njit(cache=True, inline='always')
def _merge(ns, node, ecn, uf_parent, uf_value, sc):
    if ecn[ns] < 0:
        sc[SC_ERR] = ERR_ECN
        sc[SC_ERR_ARG] = ns
        return False
    lroot = _uf_find(ecn[ns], uf_parent)
    rroot = _uf_find(node, uf_parent)
    if lroot != rroot:
        uf_parent[lroot] = rroot
        uf_value[rroot] = uf_value[lroot] + uf_value[rroot]
    return True
