"""Structure of a signed DAG shared by every solver and bound: reachability, release owners.

Several solvers need the same derived structure of a :class:`~memopt.core.signed_dag.SignedDAG`
— the exact search (:mod:`memopt.schedule.ideal_search`) for its per-state bounds, the
CP-SAT and SCIP models (:mod:`memopt.schedule.ordering_model`) to fix comparable pairs as
constants, the trap bounds (:mod:`memopt.bounds.trap`) for their forced sets — so it is
computed here, once, and cached on the (immutable) DAG.

>>> from memopt.core.signed_dag import SignedDAG
>>> d = SignedDAG.build(["a", "b", "c"], [1, 1, -1], edges=[(0, 1), (1, 2)])
>>> reachability(d).astype(int).tolist()
[[0, 1, 1], [0, 0, 1], [0, 0, 0]]
>>> release_owners(d).tolist()
[-1, -1, 1]
"""

from __future__ import annotations

import numpy as np

from memopt.core.signed_dag import SignedDAG

__all__ = ["reachability", "ancestor_matrix", "release_owners"]


def reachability(dag: SignedDAG) -> np.ndarray:
    """Dense boolean matrix ``R[u, v]`` = there is a path from ``u`` to ``v`` (u != v).

    Bitsets per node, propagated in reverse topological order: O(n * m / 64) word operations.
    Cached on the DAG; callers must not modify the returned array.
    """
    cached = dag._cache.get("reachability")
    if cached is not None:
        return cached
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
    R.setflags(write=False)
    dag._cache["reachability"] = R
    return R


def ancestor_matrix(dag: SignedDAG) -> np.ndarray:
    """``anc[v, x]`` is true iff ``x`` is a proper ancestor of ``v`` (the transpose of
    :func:`reachability`, contiguous)."""
    cached = dag._cache.get("ancestors")
    if cached is None:
        cached = np.ascontiguousarray(reachability(dag).T)
        cached.setflags(write=False)
        dag._cache["ancestors"] = cached
    return cached


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
