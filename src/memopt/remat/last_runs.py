"""The order of last runs: a trap bound on every plan that re-runs only a given op set.

Model (``docs/remat.md``; proof: ``proofs/remat_cost_bounds.md`` §6, Theorems 6, 6')
-----------------------------------------------------------------------------------
Order the ops of a plan ``P`` by their *last* runs. An op ``p`` is *inverted* in ``P`` when
some reader ``u`` of an output of ``p`` has its last run before the last run of ``p``; ``p``
then ran before that run of ``u`` and again later, so every inverted op re-runs. For a set
``S`` of ops, every plan whose re-runs are all in ``S`` inverts only ops of ``S``, so in its
order of last runs each op outside ``S`` comes before every reader of its outputs.

Take the moment of the last run of ``v`` and the set ``I`` of ops whose last runs came
before. Then live, besides ``v``'s inputs, outputs and workspace, is every tensor ``x``
made by an op of ``I`` (or a graph input) that some op outside ``I ∪ {v}`` reads, or that
is a graph output: that reader's last run needs ``x``, and ``x``'s producer never runs
again. ``I`` is closed under "an op outside ``S`` that feeds an op of ``I``", contains the
ops outside ``S`` that feed ``v`` (transitively) and none of the ops that need ``v`` that
way. The least such memory over ``I`` is a minimum-weight closure - one cut
(:mod:`memopt.core.closure`) - and the maximum over ``v`` is a lower bound on the peak of
every such plan: the **last-run trap** of ``S``.

**First runs too** (Theorem 6'): a plan that re-runs only ops of ``S`` runs every other op
once, so each op ``u`` of ``S`` gets a first-run node, after the first runs of the ops that
feed it (first runs follow the graph) and before its own last run, weighing nothing. The
first runs are then moments to bound as well, and the last runs gain requirements (an op of
``S`` that reads an op outside ``S`` runs, first and last, after that op's only run). Each
first-run trap is at least the forward trap of the op in ``G_S``, each last-run trap at least
its value without the first runs (``first_runs=False``, which needs only the inverted ops,
not every re-run, in ``S``).

It complements the relaxed graph ``G_S`` (:func:`memopt.remat.lower_bounds.relaxed_graph`),
which looks at first runs and lets a tensor made by an op of ``S`` weigh nothing between
its producer and its readers: here that tensor is held from its producer's last run to
every later reader's last run, and an op of ``S`` whose output is read late holds its own
inputs until its last run. On ``random_layered_n250`` at 0.9 the first core (the largest
set of the cheapest ops whose bound is above the limit) grows from the 82 cheapest ops
(``G_S^+``) to 118 (last runs) and 166 (first and last runs); on the Checkmate MobileNet graph
at 0.8 the last runs alone keep 6 where ``G_S`` keeps 14 (first and last runs: 14), so
:func:`memopt.remat.lower_bounds.cost_lower_bound` asks both. With ``S`` empty it is the
forward trap of the graph (:func:`memopt.bounds.trap.forward_trap_bound`), a property test
checks.

Not to be confused with :func:`memopt.remat.feasibility.last_run_bound` (Lemma 10 of
``proofs/remat_treedp.md``), which looks at the last run of two or three ops before one
op and holds for every plan whatever it re-runs.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build(
...     [Tensor("a", 4), Tensor("b", 1), Tensor("c", 4, output=True)],
...     [Op("A", outputs=["a"], cost=1), Op("B", inputs=["a"], outputs=["b"]),
...      Op("C", inputs=["a", "b"], outputs=["c"])])
>>> last_run_trap_bound(g, [])            # C holds a, b and c
9
>>> last_run_trap_bound(g, [0])           # A may run again: the same, C still needs a
9
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from memopt import _jit
from memopt._jit import kernel
from memopt.bounds.trap import remember_hint
from memopt.core.closure import max_flow_value, picard_network
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import OptionError

__all__ = ["last_run_trap", "last_run_trap_bound", "last_run_trap_exceeds", "last_run_traps_above"]

#: ops whose last-run trap decided a question lately, tried first
HINTS = 4
#: ops per kernel call between two looks at the deadline
CHUNK = 32


class _Static(NamedTuple):
    """What every op set ``S`` shares (cached on the graph)."""

    n: int                    # ops; node ids 0..n-1
    num_nodes: int            # ops + release nodes
    release: np.ndarray       # tensor -> its release node, or -1 (resident or graph output)
    w: np.ndarray             # int64 node weights: an op its non-resident outputs, a release -size
    base: int                 # resident bytes + the non-resident graph inputs
    end: int                  # resident bytes + the graph outputs: live at the end of every plan
    in_ptr: np.ndarray        # CSR op -> its distinct non-resident inputs
    in_idx: np.ndarray
    fixed: np.ndarray         # int64 per op: its distinct non-resident inputs and outputs + workspace
    op_edges: np.ndarray      # (k, 2) distinct (producer, reader) op pairs
    rel_edges: np.ndarray     # (k, 2) (required node, release node) pairs
    inf: int                  # a capacity above every finite cut
    prod: np.ndarray          # int64 tensor -> producer op, -1 for graph inputs
    size: np.ndarray          # int64 tensor sizes


def _static(graph: TensorGraph) -> _Static:
    cached = graph._cache.get("remat_last_runs")
    if cached is not None:
        return cached
    n, T = graph.num_ops, graph.num_tensors
    size = graph.tensor_size.astype(np.int64)
    prod = graph.tensor_producer.astype(np.int64)
    res = graph.tensor_resident.astype(bool)
    out = graph.tensor_output.astype(bool)
    has_release = ~res & ~out
    release = np.full(T, -1, np.int64)
    release[has_release] = n + np.arange(int(has_release.sum()), dtype=np.int64)
    N = n + int(has_release.sum())
    w = np.zeros(N, np.int64)
    made = (prod >= 0) & ~res
    np.add.at(w, prod[made], size[made])
    w[release[has_release]] = -size[has_release]
    gin = (prod < 0) & ~res
    base = int(size[res].sum()) + int(size[gin].sum())
    end = int(size[res].sum()) + int(size[out & ~res].sum())
    ins = [np.unique(graph.inputs_of(v)) for v in range(n)]
    ins = [x[~res[x]] for x in ins]
    in_ptr = np.zeros(n + 1, np.int64)
    in_ptr[1:] = np.cumsum([len(x) for x in ins])
    in_idx = np.concatenate(ins).astype(np.int64) if n else np.zeros(0, np.int64)
    fixed = graph.op_workspace.astype(np.int64).copy()
    for v in range(n):
        outs = np.unique(graph.outputs_of(v))
        fixed[v] += int(size[ins[v]].sum()) + int(size[outs[~res[outs]]].sum())
    reader = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.op_in_ptr))
    src = prod[graph.op_in_idx]
    keep = src >= 0
    op_edges = np.unique(np.stack([src[keep], reader[keep]], axis=1), axis=0) if keep.any() \
        else np.zeros((0, 2), np.int64)
    # a release needs the producer and every reader of its tensor to have run
    t_read = graph.op_in_idx.astype(np.int64)
    rel = [np.stack([reader, release[t_read]], axis=1)[release[t_read] >= 0]]
    pm = has_release & (prod >= 0)
    rel.append(np.stack([prod[pm], release[pm]], axis=1))
    rel_edges = np.unique(np.concatenate(rel).reshape(-1, 2), axis=0).astype(np.int64)
    inf = int(np.abs(w).sum()) + 1
    cached = _Static(n, N, release, w, base, end, in_ptr, in_idx, fixed, op_edges.astype(np.int64), rel_edges, inf,
                     prod, size)
    graph._cache["remat_last_runs"] = cached
    return cached


def _network(st: _Static, rerun: np.ndarray, first_runs: bool):
    """The closure network for ``S = rerun``: node count, the sorted ``(required,
    requirer)`` pairs, their adjacency both ways (CSR), and the events ``(node, op)``.

    Nodes: op ``u`` is its last run (its only run if ``u`` is not in ``S``), release nodes
    follow, then with ``first_runs`` one first-run node per op of ``S``, which the last run
    requires and which requires the first runs of the ops that feed ``u``."""
    keep = ~rerun[st.op_edges[:, 0]] if st.op_edges.size else np.zeros(0, bool)
    parts = [st.op_edges[keep], st.rel_edges]
    N = st.num_nodes
    events = np.stack([np.arange(st.n, dtype=np.int64)] * 2, axis=1)
    if first_runs and rerun.any():
        first = np.arange(st.n, dtype=np.int64)
        ops_s = np.flatnonzero(rerun)
        first[ops_s] = N + np.arange(ops_s.size, dtype=np.int64)
        N += ops_s.size
        parts.append(np.stack([first[st.op_edges[:, 0]], first[st.op_edges[:, 1]]], axis=1))
        parts.append(np.stack([first[ops_s], ops_s], axis=1))
        events = np.concatenate([events, np.stack([first[ops_s], ops_s], axis=1)])
    # distinct pairs, sorted lexicographically: one key per pair (``np.unique(axis=0)`` sorts
    # row views, several times slower on this hot path)
    pairs = np.concatenate(parts).reshape(-1, 2).astype(np.int64)
    keys = np.unique(pairs[:, 0] * N + pairs[:, 1])
    e = np.ascontiguousarray(np.stack([keys // N, keys % N], axis=1))
    # req: requirer -> required; dep: required -> requirer
    by_req = np.argsort(e[:, 1], kind="stable")
    req_ptr = np.zeros(N + 1, np.int64)
    np.add.at(req_ptr, e[:, 1] + 1, 1)
    req_ptr = np.cumsum(req_ptr)
    req_idx = np.ascontiguousarray(e[by_req, 0])
    dep_ptr = np.zeros(N + 1, np.int64)
    np.add.at(dep_ptr, e[:, 0] + 1, 1)
    dep_ptr = np.cumsum(dep_ptr)
    dep_idx = np.ascontiguousarray(e[:, 1])   # e is sorted by its first column
    return N, e, req_ptr, req_idx, dep_ptr, dep_idx, events


@kernel(inner=True)
def _spread(ptr, idx, mark, stack, top):
    """Mark everything reachable (CSR ``ptr``/``idx``) from the ``top`` marked nodes on ``stack``."""
    while top > 0:
        top -= 1
        a = stack[top]
        for k in range(ptr[a], ptr[a + 1]):
            b = idx[k]
            if not mark[b]:
                mark[b] = True
                stack[top] = b
                top += 1


@kernel
def _last_run_traps(nodes, ops, limit, N, edges, req_ptr, req_idx, dep_ptr, dep_idx, w, release, prod, size,
                    in_ptr, in_idx, fixed, base, inf):
    """The trap of each event (run ``nodes[i]`` of op ``ops[i]``) in turn. ``limit >= 0``:
    an event whose upper estimate is at most ``limit`` is skipped (value -1), and the loop
    stops after the first trap above ``limit``. Returns the values (-1: skipped or not reached)."""
    out = np.full(nodes.shape[0], -1, np.int64)
    pin = np.zeros(N, np.bool_)
    pout = np.zeros(N, np.bool_)
    stack = np.empty(N, np.int64)
    for i in range(nodes.shape[0]):
        e = nodes[i]
        v = ops[i]
        for x in range(N):  # not pin[:] = False: numba's slice assignment is slow to compile
            pin[x] = False
            pout[x] = False
        # forced in: what the event requires, transitively (the event itself stays unmarked)
        stack[0] = e
        _spread(req_ptr, req_idx, pin, stack, 1)
        # forced out: the event and what requires it, transitively
        pout[e] = True
        stack[0] = e
        _spread(dep_ptr, dep_idx, pout, stack, 1)
        # v's own inputs count once, in fixed[v]: not again through their producers or releases
        wv = w.copy()
        base_v = base
        for k in range(in_ptr[v], in_ptr[v + 1]):
            x = in_idx[k]
            if prod[x] >= 0:
                wv[prod[x]] -= size[x]
            else:
                base_v -= size[x]
            if release[x] >= 0:
                wv[release[x]] = 0
        if limit >= 0:
            # the closure of the forced-in nodes plus every release they alone allow
            est = base_v + fixed[v]
            for a in range(N):
                if pin[a]:
                    est += wv[a]
                elif not pout[a] and wv[a] < 0:
                    ok = True
                    for k in range(req_ptr[a], req_ptr[a + 1]):
                        if not pin[req_idx[k]]:
                            ok = False
                            break
                    if ok:
                        est += wv[a]
            if est <= limit:
                continue
        tails, heads, caps, w_pin, neg_free, free, clash = picard_network(pin, pout, wv, edges, np.int64(-1), np.int64(-1), inf)  # not literals: one signature
        flow = 0
        if caps.shape[0] > 0:
            flow = max_flow_value(N + 2, N, N + 1, tails, heads, caps)
        out[i] = base_v + w_pin + neg_free + flow + fixed[v]
        if limit >= 0 and out[i] > limit:
            break
    return out


def _mask(n: int, rerun) -> np.ndarray:
    """A boolean mask over the ops from a mask or a collection of op ids."""
    if isinstance(rerun, np.ndarray) and rerun.dtype == bool:
        if rerun.shape != (n,):
            raise OptionError(f"a mask over {n} ops has shape ({n},), got {rerun.shape}")
        return rerun
    m = np.zeros(n, bool)
    idx = [int(v) for v in rerun]
    if idx:
        m[idx] = True
    return m


class _Runner(NamedTuple):
    events: np.ndarray        # (k, 2): node, op
    run: object               # (event rows, limit) -> trap values


def _runner(graph: TensorGraph, rerun, first_runs: bool) -> _Runner:
    """The events of ``S = rerun`` and a function ``(event rows, limit) -> trap values``
    (:func:`_last_run_traps`)."""
    st = _static(graph)
    N, e, req_ptr, req_idx, dep_ptr, dep_idx, events = _network(st, _mask(st.n, rerun), first_runs)
    fn = _jit.choose(_last_run_traps, N)
    w = np.concatenate([st.w, np.zeros(N - st.num_nodes, np.int64)])

    def run(rows, limit: int) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        return fn(np.ascontiguousarray(events[rows, 0]), np.ascontiguousarray(events[rows, 1]), np.int64(limit),
                  np.int64(N), e, req_ptr, req_idx, dep_ptr, dep_idx, w, st.release, st.prod, st.size, st.in_ptr,
                  st.in_idx, st.fixed, np.int64(st.base), np.int64(st.inf))
    return _Runner(events, run)


def last_run_trap(graph: TensorGraph, rerun, v: int, *, first: bool = False) -> int:
    """A lower bound on the memory at the last run of op ``v`` (``first``: at its first run)
    in every plan that re-runs only ops of ``rerun`` (a list of op ids or a boolean mask), by
    one cut (module docstring). An op outside ``rerun`` runs once: both are that run."""
    r = _runner(graph, rerun, first)
    rows = np.flatnonzero(r.events[:, 1] == int(v))
    return int(r.run(rows[-1:], -1)[0])


def last_run_trap_bound(graph: TensorGraph, rerun, *, first_runs: bool = True) -> int:
    """The largest trap of a last run (and with ``first_runs`` of a first run), the start
    memory and the end memory (resident bytes and graph outputs): a lower bound on the peak of every plan that re-runs only ops of ``rerun``."""
    st = _static(graph)
    if st.n == 0:
        return max(st.base, st.end)
    r = _runner(graph, rerun, first_runs)
    return max(st.base, st.end, int(r.run(np.arange(r.events.shape[0]), -1).max()))


def last_run_trap_exceeds(graph: TensorGraph, rerun, limit: int, *, deadline: float = float("inf"),
                          hints: list | None = None, first_runs: bool = True) -> bool:
    """Is :func:`last_run_trap_bound` above ``limit``? Only events whose upper estimate
    exceeds ``limit`` get a cut, and it stops at the first trap above it; the events of
    ``hints`` (``(op, is first run)`` pairs, a list kept by the caller and updated here)
    are tried first. At the deadline it answers ``False`` (the weaker, always safe answer)."""
    st = _static(graph)
    limit = int(limit)
    if max(st.base, st.end) > limit:
        return True
    if st.n == 0:
        return False
    hints = [] if hints is None else hints
    r = _runner(graph, rerun, first_runs)
    rows = {(int(v), bool(i >= st.n)): i for i, v in enumerate(r.events[:, 1].tolist())}
    first = [rows[h] for h in hints if h in rows]
    seen = set(first)
    order = first + [i for i in range(r.events.shape[0]) if i not in seen]
    for lo in range(0, len(order), CHUNK):
        if time.perf_counter() > deadline:
            return False
        chunk = order[lo:lo + CHUNK]
        vals = r.run(chunk, limit)
        above = np.flatnonzero(vals > limit)
        if above.size:
            i = chunk[int(above[0])]
            remember_hint(hints, (int(r.events[i, 1]), bool(i >= st.n)), HINTS)
            return True
    return False


def last_run_traps_above(graph: TensorGraph, rerun, limit: int, *, deadline: float = float("inf"),
                         first_runs: bool = True) -> list[tuple[int, bool, int]]:
    """``(op, first, value)`` for every event whose trap exceeds ``limit`` (``first``: the
    first-run node of an op of ``rerun``; else the op's last run, its only run if the op is not
    in ``rerun``), in the order of the events. Events whose upper estimate is at most ``limit``
    get no cut. At the deadline the events not reached yet are left out (each value returned is
    a trap still). The trap cuts of last runs (:func:`memopt.remat.trap_cuts.last_run_cuts`)
    take these as their right-hand sides."""
    st = _static(graph)
    limit = int(limit)
    if st.n == 0:
        return []
    r = _runner(graph, rerun, first_runs)
    out = []
    pos, total = 0, r.events.shape[0]
    while pos < total and time.perf_counter() <= deadline:
        chunk = np.arange(pos, min(total, pos + CHUNK))
        vals = r.run(chunk, limit)
        above = np.flatnonzero(vals > limit)
        if limit < 0 or not above.size:
            # below 0 the kernel neither screens nor stops: every value of the chunk is exact
            out += [(int(r.events[chunk[k], 1]), int(chunk[k]) >= st.n, int(vals[k])) for k in above.tolist()]
            pos = int(chunk[-1]) + 1
            continue
        i = int(chunk[int(above[0])])    # the kernel stops after the first trap above the limit
        out.append((int(r.events[i, 1]), i >= st.n, int(vals[int(above[0])])))
        pos = i + 1
    return out
