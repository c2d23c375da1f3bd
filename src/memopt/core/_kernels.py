"""Compiled inner loops shared by the core (numba, cached on disk; pure Python on small
instances, see :mod:`memopt._jit`: call them through ``_jit.choose(kernel, size)``)."""

from __future__ import annotations

import numpy as np

from memopt._jit import kernel


@kernel(pure_max=2000)
def kahn_order(succ_ptr, succ_idx, indeg):
    """Kahn's topological order, popping the smallest ready index first (a binary heap).

    Returns a shorter array when the graph has a cycle.
    """
    n = indeg.shape[0]
    deg = indeg.copy()
    heap = np.empty(n, np.int64)
    size = 0
    for v in range(n):
        if deg[v] == 0:
            heap[size] = v  # increasing v keeps the heap property
            size += 1
    order = np.empty(n, np.int64)
    k = 0
    while size > 0:
        v = heap[0]
        size -= 1
        last = heap[size]
        i = 0
        while True:  # sift down
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and heap[c + 1] < heap[c]:
                c += 1
            if heap[c] < last:
                heap[i] = heap[c]
                i = c
            else:
                break
        if size > 0:
            heap[i] = last
        order[k] = v
        k += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            u = succ_idx[e]
            deg[u] -= 1
            if deg[u] == 0:
                j = size  # sift up
                size += 1
                while j > 0:
                    p = (j - 1) // 2
                    if heap[p] > u:
                        heap[j] = heap[p]
                        j = p
                    else:
                        break
                heap[j] = u
    return order[:k]


@kernel(pure_max=2000)
def segment_max(values, ptr, empty):
    """Max of ``values[ptr[i]:ptr[i+1]]`` for every segment, ``empty`` where it has none."""
    n = ptr.shape[0] - 1
    out = np.empty(n, np.int64)
    for i in range(n):
        m = empty
        for e in range(ptr[i], ptr[i + 1]):
            if values[e] > m:
                m = values[e]
        out[i] = m
    return out


@kernel(pure_max=2000)
def complete_with_releases(succ_ptr, succ_idx, indeg, is_release, alloc_order):
    """Insert every release node as soon as it is ready around ``alloc_order``.

    Returns the full order, or ``[-1, v]`` when node ``v`` of ``alloc_order`` is not ready at
    its place (``[-1, -1]`` when the order leaves allocating nodes out).
    """
    n = indeg.shape[0]
    deg = indeg.copy()
    out = np.empty(n, np.int64)
    k = 0
    stack = np.empty(n, np.int64)
    top = 0
    done = np.zeros(n, np.bool_)
    for v in range(n):
        if deg[v] == 0 and is_release[v]:
            stack[top] = v
            top += 1
    i = 0
    m = alloc_order.shape[0]
    while True:
        # drain ready releases first (lowest memory, never raises the peak)
        while top > 0:
            top -= 1
            v = stack[top]
            if done[v]:
                continue
            done[v] = True
            out[k] = v
            k += 1
            for e in range(succ_ptr[v], succ_ptr[v + 1]):
                u = succ_idx[e]
                deg[u] -= 1
                if deg[u] == 0 and is_release[u]:
                    stack[top] = u
                    top += 1
        if i >= m:
            break
        v = alloc_order[i]
        i += 1
        if done[v]:
            continue  # a release listed explicitly that already ran
        if deg[v] != 0:
            res = np.empty(2, np.int64)
            res[0] = -1
            res[1] = v
            return res
        done[v] = True
        out[k] = v
        k += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            u = succ_idx[e]
            deg[u] -= 1
            if deg[u] == 0 and is_release[u]:
                stack[top] = u
                top += 1
    if k < n:
        res = np.empty(2, np.int64)
        res[0] = -1
        res[1] = -1
        return res
    return out


@kernel(pure_max=2000)
def csr_from_pairs(rows, cols, nrows):
    """CSR (ptr, idx) of the pairs (rows[k], cols[k]) by a stable counting sort, O(n + m)."""
    m = rows.shape[0]
    ptr = np.zeros(nrows + 1, np.int64)
    for k in range(m):
        ptr[rows[k] + 1] += 1
    for i in range(nrows):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    idx = np.empty(m, np.int64)
    for k in range(m):
        r = rows[k]
        idx[fill[r]] = cols[k]
        fill[r] += 1
    return ptr, idx


@kernel(pure_max=2000)
def dedupe_csr_rows(ptr, idx, ncols):
    """Drop repeated columns within each CSR row (first occurrence kept), O(n + m)."""
    n = ptr.shape[0] - 1
    stamp = np.full(ncols, -1, np.int64)
    out_ptr = np.zeros(n + 1, np.int64)
    out_idx = np.empty(idx.shape[0], np.int64)
    k = 0
    for i in range(n):
        for e in range(ptr[i], ptr[i + 1]):
            c = idx[e]
            if stamp[c] != i:
                stamp[c] = i
                out_idx[k] = c
                k += 1
        out_ptr[i + 1] = k
    return out_ptr, out_idx[:k]
