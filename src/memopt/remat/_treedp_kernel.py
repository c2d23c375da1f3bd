"""Compiled expansion step of the exact recomputation DP (:mod:`memopt.remat.treedp`).

Model: the frontier states ``(live set, per-op run counts)`` of ``proofs/remat_treedp.md``
§2. One call of :func:`expand` generates every successor of one state - every op that may
run, settled (availability forward pass, usefulness / potential backward pass, closing,
freeing), every subset of the tensors the op touched freed (C4 skipped), settled again -
with its bound ``h`` (Lemma 4, :func:`settle` / ``_rerun_bound``). The Python search in
:mod:`memopt.remat.treedp` keeps the heap, the table of best costs and the parent pointers;
this module replaced the former pure-Python expansion over big-integer masks, with the same
successors in the same order (with Lemmas 6-7 off, the same states are expanded).

State rows (``uint8``): the live set as a bit array (``ceil(T / 8)`` bytes, bit ``t % 8`` of
byte ``t // 8``), then one run count per op in ``cw`` little-endian bytes (``cw`` = 1 or 4),
``CLOSED`` stored as all ones. Costs are int64 (the caller scales exact costs to integers).
Every array of the instance is passed as the tuple ``_Instance.arrays`` of
:mod:`memopt.remat.treedp`; Lemmas 6-7 of the proof (held tensors, memory-forced re-runs) are
``_held_bound``.

Example (:meth:`memopt.remat.treedp._Instance.successors` makes this call; the pure-Python
twin runs the same code on graphs of up to ``PURE_MAX`` ops)::

    k = expand(row, memory_limit, *inst.arrays, *inst.work, *inst.out)   # k successors in inst.out

Reference: the A* frontier search of ``proofs/remat_treedp.md`` (Hart, Nilsson and Raphael
1968 for A*); compiled with numba through :mod:`memopt._jit`.
"""

from __future__ import annotations

import numpy as np

from memopt._jit import kernel

# the pure-Python twin of this kernel is ~100x slower than the compiled one: compile early
PURE_MAX = 12


@kernel(pure_max=PURE_MAX)
def unpack(row, n, T, lb, cw, live, count):
    """Decode a state row into ``live`` (uint8 per tensor) and ``count`` (int64 per op, -1 = closed)."""
    for t in range(T):
        live[t] = (row[t >> 3] >> (t & 7)) & 1
    full = (1 << (8 * cw)) - 1
    for v in range(n):
        x = 0
        for b in range(cw):
            x |= np.int64(row[lb + v * cw + b]) << (8 * b)
        count[v] = -1 if x == full else x


@kernel(pure_max=PURE_MAX)
def pack(live, count, n, T, lb, cw, row):
    """Encode ``live`` / ``count`` into ``row`` (inverse of :func:`unpack`)."""
    for i in range(lb):
        row[i] = 0
    for t in range(T):
        if live[t]:
            row[t >> 3] |= np.uint8(1 << (t & 7))
    full = (1 << (8 * cw)) - 1
    for v in range(n):
        x = full if count[v] < 0 else count[v]
        for b in range(cw):
            row[lb + v * cw + b] = np.uint8((x >> (8 * b)) & 255)


@kernel(pure_max=PURE_MAX)
def _rerun_bound(live, count, n, T, in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx, producer,
                 resident, output, keepable, limit, cost, unrun_read, ran_out, seen, stack, want, fset):
    """Lemma 4: total cost of the ops that every normal-form completion must re-run; with
    ``want`` the set itself is written to ``fset`` (for exact non-integer costs)."""
    for t in range(T):
        unrun_read[t] = 0
        ran_out[t] = 0
    for v in range(n):
        seen[v] = 0
        if count[v] == 0:
            for i in range(in_ptr[v], in_ptr[v + 1]):
                unrun_read[in_idx[i]] = 1
        else:
            for i in range(out_ptr[v], out_ptr[v + 1]):
                ran_out[out_idx[i]] = 1
    top = 0
    for t in range(T):
        gone = live[t] == 0 and resident[t] == 0
        if ran_out[t] and gone and (output[t] or unrun_read[t]):
            stack[top] = producer[t]  # missing: its producer ran, so it re-runs
            top += 1
        elif live[t] and keepable[t] and unrun_read[t] == 0:
            only, many = -1, False  # kept: the one consumer that can still re-run reads it again
            for i in range(cons_ptr[t], cons_ptr[t + 1]):
                w = cons_idx[i]
                if count[w] > 0 and count[w] < limit[w]:
                    if only >= 0 and only != w:
                        many = True
                    only = w
            if only >= 0 and not many:
                stack[top] = only
                top += 1
    bound = np.int64(0)
    while top > 0:
        top -= 1
        u = stack[top]
        if seen[u]:
            continue
        seen[u] = 1
        bound += cost[u]
        for i in range(in_ptr[u], in_ptr[u + 1]):
            y = in_idx[i]
            if live[y] == 0 and resident[y] == 0 and producer[y] >= 0 and not seen[producer[y]]:
                stack[top] = producer[y]  # closure: a re-run needs its missing inputs re-made
                top += 1
    if want:
        for v in range(n):
            fset[v] = seen[v]
    return bound


@kernel(pure_max=PURE_MAX)
def _held_bound(live, count, n, T, cons_ptr, cons_idx, producer, size, keepable, limit, cost, memory_limit,
                first_mem, desc, acr_ptr, acr_idx, use_cover):
    """Lemmas 6 and 7 for a settled state whose frees are all done: ``-1`` if some op ``v``
    that has not run cannot fit its first run (``first_mem[v]``: resident bytes, inputs,
    outputs, workspace) next to the tensors that must be held across it, else a lower bound
    on the cost of the re-runs the memory at those first runs forces (0 without
    ``use_cover``), to be added to the bound of Lemma 4.

    Held across ``v`` (Lemma 6): live kept tensors whose possible readers are all strict
    descendants of ``v``; and (Lemma 7) ``acr[v]``, tensors not made yet whose producer is a
    strict ancestor of ``v`` and whose readers are all strict descendants of ``v``: each is
    held across ``v`` or re-made by a re-run of its producer (impossible under cap 0)."""
    held = np.zeros(n, dtype=np.int64)
    val = np.zeros(n, dtype=np.int64)
    for x in range(T):
        if live[x] == 0 or keepable[x] == 0:
            continue
        for v in range(n):
            if count[v] != 0:
                continue
            across = False
            for i in range(cons_ptr[x], cons_ptr[x + 1]):
                w = cons_idx[i]
                if count[w] == 0 or (count[w] > 0 and count[w] < limit[w]):
                    if w == v or desc[v, w] == 0:
                        across = False
                        break
                    across = True
            if across:
                held[v] += size[x]
    best = np.int64(0)
    for v in range(n):
        if count[v] != 0:
            continue
        must = first_mem[v] + held[v]
        total = np.int64(0)
        for i in range(acr_ptr[v], acr_ptr[v + 1]):
            y = acr_idx[i]
            p = producer[y]
            if count[p] != 0:
                continue  # made already: live (counted above if held) or missing (Lemma 4)
            if limit[p] <= 1:
                must += size[y]  # its producer cannot re-run: held
            else:
                val[p] += size[y]
                total += size[y]
        if must > memory_limit:
            return np.int64(-1)
        over = must + total - memory_limit
        if over > 0 and use_cover:
            # the dropped tensors total >= over bytes; each producer re-run re-makes val[p]
            # bytes for cost[p]: at least one re-run, and at least over * (least cost per byte)
            least = np.int64(-1)
            for i in range(acr_ptr[v], acr_ptr[v + 1]):
                p = producer[acr_idx[i]]
                if val[p] > 0:
                    c = cost[p]
                    if c == 0:
                        e = np.int64(0)
                    elif over < (np.int64(1) << 62) // c:
                        e = max((over * c + val[p] - 1) // val[p], c)
                    else:
                        e = c  # (would overflow int64: the one re-run only)
                    if least < 0 or e < least:
                        least = e
            best = max(best, least)
        for i in range(acr_ptr[v], acr_ptr[v + 1]):
            val[producer[acr_idx[i]]] = 0
    return best


@kernel(pure_max=PURE_MAX)
def settle(live, count, n, T, topo, in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx, producer, size,
           resident, output, keepable, goal, limit, pos_out, makes_output, cost, memory_limit, first_mem, desc, acr_ptr,
           acr_idx, check_held, avail, avail_op, active, useful, unrun_read, ran_out, seen, stack, want, fset):
    """Settle a state in place (proofs/remat_treedp.md §2): close the ops that cannot usefully
    run again, free the live tensors that are not potential; a dead end also when some op
    that has not run cannot fit its first run next to the tensors held across it (Lemma 6;
    only with ``check_held``: the rule holds for states whose frees are all done).
    Returns ``(dead end, h)``."""
    for t in range(T):
        avail[t] = 1 if (live[t] or resident[t]) else 0
    for i in range(n):
        v = topo[i]
        avail_op[v] = 0
        k = count[v]
        if k < 0:
            continue  # closed: makes nothing available and is never useful
        ok = True
        for j in range(in_ptr[v], in_ptr[v + 1]):
            if avail[in_idx[j]] == 0:
                ok = False
                break
        if ok:
            avail_op[v] = 1
            if k < limit[v]:
                for j in range(out_ptr[v], out_ptr[v + 1]):
                    avail[out_idx[j]] = 1
        elif k == 0:
            return True, np.int64(0)  # an op that must still run cannot
    for t in range(T):
        if goal[t] and avail[t] == 0:
            return True, np.int64(0)  # a graph output cannot be live at the end
    for i in range(n - 1, -1, -1):
        u = topo[i]
        k = count[u]
        active[u] = 0
        useful[u] = 0
        if k == 0:
            active[u] = 1
        elif k > 0 and k < limit[u] and pos_out[u] and avail_op[u]:
            ok = makes_output[u] != 0
            if not ok:
                for j in range(out_ptr[u], out_ptr[u + 1]):
                    t = out_idx[j]
                    for c in range(cons_ptr[t], cons_ptr[t + 1]):
                        if active[cons_idx[c]]:
                            ok = True
                            break
                    if ok:
                        break
            if ok:
                useful[u] = 1
                active[u] = 1
    for t in range(T):
        if live[t] and not output[t]:
            pot = False
            for c in range(cons_ptr[t], cons_ptr[t + 1]):
                if active[cons_idx[c]]:
                    pot = True
                    break
            if not pot:
                live[t] = 0
    for u in range(n):
        if count[u] > 0 and not useful[u]:
            count[u] = -1
    h = _rerun_bound(live, count, n, T, in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx, producer,
                     resident, output, keepable, limit, cost, unrun_read, ran_out, seen, stack, want, fset)
    if check_held:
        extra = _held_bound(live, count, n, T, cons_ptr, cons_idx, producer, size, keepable, limit, cost,
                            memory_limit, first_mem, desc, acr_ptr, acr_idx, not want)
        if extra < 0:
            return True, np.int64(0)
        h += extra
    return False, h


@kernel(pure_max=PURE_MAX)
def expand(row, memory_limit, n, T, lb, cw, topo, in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx, producer,
           size, resident, output, keepable, goal, limit, pos_out, makes_output, cost, run_mem, touch_ptr, touch_idx,
           want, first_mem, desc, acr_ptr, acr_idx, live0, count0, live1, count1, live2, count2, avail, avail_op,
           active, useful, unrun_read, ran_out, seen, stack, comb, out_rows, out_dcost, out_h, out_op, out_bytes,
           out_f):
    """Every successor of the state ``row`` (the moves of proofs/remat_treedp.md §2, in the
    order of the former pure-Python search: ops by index, free subsets by size, then
    lexicographically). Writes rows, re-run cost of the move, ``h``, the op run, live bytes
    (and with ``want`` the bound's op set); returns the number of successors."""
    unpack(row, n, T, lb, cw, live0, count0)
    base = np.int64(0)
    for t in range(T):
        if live0[t]:
            base += size[t]
    m_out = 0
    for v in range(n):
        k = count0[v]
        if k < 0 or k >= limit[v]:
            continue
        ok = True
        for j in range(in_ptr[v], in_ptr[v + 1]):
            t = in_idx[j]
            if resident[t] == 0 and live0[t] == 0:
                ok = False
                break
        if not ok:
            continue
        for j in range(out_ptr[v], out_ptr[v + 1]):
            t = out_idx[j]
            if size[t] > 0 and live0[t]:
                ok = False
                break
        if not ok or base + run_mem[v] > memory_limit:
            continue
        for t in range(T):
            live1[t] = live0[t]
        for u in range(n):
            count1[u] = count0[u]
        for j in range(out_ptr[v], out_ptr[v + 1]):
            live1[out_idx[j]] = 1
        count1[v] = k + 1
        slot = m_out if want else 0  # out_f has one row per successor only when want
        # not final yet (the frees chosen below follow): no held-tensor check here
        dead, h1 = settle(live1, count1, n, T, topo, in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx,
                          producer, size, resident, output, keepable, goal, limit, pos_out, makes_output, cost,
                          memory_limit, first_mem, desc, acr_ptr, acr_idx, False, avail, avail_op, active, useful,
                          unrun_read, ran_out, seen, stack, want, out_f[slot])
        if dead:
            continue
        dcost = cost[v] if k > 0 else np.int64(0)
        # optional frees: positive-size tensors v touched that are still live
        m = 0
        for j in range(touch_ptr[v], touch_ptr[v + 1]):
            t = touch_idx[j]
            if live1[t]:
                comb[T + m] = t
                m += 1
        for r in range(m + 1):
            for i in range(r):
                comb[i] = i
            while True:
                # C4: a re-run whose positive-size outputs are all freed at once is useless
                skip = False
                if k > 0 and pos_out[v]:
                    skip = True
                    for j in range(out_ptr[v], out_ptr[v + 1]):
                        t = out_idx[j]
                        if size[t] > 0 and live1[t]:
                            dropped = False
                            for i in range(r):
                                if comb[T + comb[i]] == t:
                                    dropped = True
                                    break
                            if not dropped:
                                skip = False
                                break
                if not skip:
                    for t in range(T):
                        live2[t] = live1[t]
                    for u in range(n):
                        count2[u] = count1[u]
                    h2 = h1
                    alive = True
                    if r > 0:
                        slot = m_out if want else 0
                        for i in range(r):
                            live2[comb[T + comb[i]]] = 0
                        dead2, h2 = settle(live2, count2, n, T, topo, in_ptr, in_idx, out_ptr, out_idx, cons_ptr,
                                           cons_idx, producer, size, resident, output, keepable, goal, limit,
                                           pos_out, makes_output, cost, memory_limit, first_mem, desc, acr_ptr,
                                           acr_idx, True,
                                           avail, avail_op, active, useful, unrun_read, ran_out, seen, stack,
                                           want, out_f[slot])
                        alive = not dead2
                    else:
                        # the state is final as settled (its F is in this slot already)
                        extra = _held_bound(live2, count2, n, T, cons_ptr, cons_idx, producer, size, keepable,
                                            limit, cost, memory_limit, first_mem, desc, acr_ptr, acr_idx, not want)
                        alive = extra >= 0
                        h2 = h1 + extra
                    if alive:
                        pack(live2, count2, n, T, lb, cw, out_rows[m_out])
                        live_bytes = np.int64(0)
                        for t in range(T):
                            if live2[t]:
                                live_bytes += size[t]
                        out_dcost[m_out] = dcost
                        out_h[m_out] = h2
                        out_op[m_out] = v
                        out_bytes[m_out] = live_bytes
                        m_out += 1
                # next combination of r out of m
                i = r - 1
                while i >= 0 and comb[i] == m - r + i:
                    i -= 1
                if i < 0:
                    break
                comb[i] += 1
                for j in range(i + 1, r):
                    comb[j] = comb[j - 1] + 1
    return m_out
