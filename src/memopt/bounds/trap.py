"""Trap lower bounds on the peak memory of a signed DAG (DESIGN 1.4), by minimum cuts.

Model
-----
A :class:`~memopt.core.SignedDAG` has nodes with a signed ``delta`` and a ``transient >= 0``,
and ``base`` bytes live at the start. In a linear extension, the node ``v`` runs after
exactly the nodes of an *ideal* (down-closed set) ``I`` with ``anc(v) ⊆ I`` and
``I ∩ (desc(v) ∪ {v}) = ∅``, and the memory while it runs is

    M(v, I) = base + w(I) + delta(v) + transient(v),      w(I) = sum of delta over I.

Every schedule's peak is at least ``M(v, I)`` for its own ``I``, hence at least

    T(v) = base + min{ w(I) : I ideal, anc(v) ⊆ I, I ∩ (desc(v) ∪ {v}) = ∅ } + delta(v) + transient(v),

the **forward trap** of ``v``. The minimum is a minimum-weight closure problem, which
Picard (1976, "Maximal closure of a graph and applications to combinatorial problems",
Management Science 22(11)) reduced to one minimum s-t cut:

* free nodes ``F = V \\ (anc(v) ∪ desc(v) ∪ {v})`` (the others are forced in or out);
* an arc ``s -> x`` of capacity ``-delta(x)`` for every ``x ∈ F`` with ``delta(x) < 0``;
* an arc ``x -> t`` of capacity ``delta(x)`` for every ``x ∈ F`` with ``delta(x) > 0``;
* an arc ``x -> p`` of infinite capacity for every edge ``p -> x`` inside ``F``
  (``x`` in the ideal forces its predecessor ``p`` in).

A finite cut ``(S, T)`` is an ideal ``J = S ∩ F`` of weight ``w(J) = cut(S) + sum of the
negative deltas in F``, so ``T(v) = base + w(anc(v)) + neg(F) + mincut + delta(v) +
transient(v)``. By weak duality any feasible flow value is at most the minimum cut, so a
flow is a solver-free *witness* of the bound (see :mod:`memopt.bounds.certificate`).

* :func:`forward_trap_bound`: ``max_v T(v)`` (and ``base``).
* :func:`reverse_trap_bound`: the same argument on the reversed program (edges reversed,
  deltas negated, starting from the end memory ``E = base + sum(delta)``), translated back
  to our model. Its network is the transpose of the forward one; node by node it equals the
  forward trap (``proofs/trap_bounds.md``, section 2), and the untranslated reverse value
  is *not* a bound on our peak when a releasing node holds transient bytes.
* :func:`pair_trap_bound`: branch on a second node ``u`` incomparable with ``v``: either
  ``u`` runs before ``v`` (then the peak is at least ``max(T(v | u ∈ I_v), T(u | v ∉ I_u))``)
  or after (``max(T(v | u ∉ I_v), T(u | v ∈ I_u))``); the pair's bound is the smaller of the
  two cases, and the bound is the maximum over pairs. At most ``4 n^2`` cuts; pairs are
  screened with closed-form upper estimates derived from the single-node optimal ideals.

Example
-------
>>> from memopt.core import SignedDAG
>>> d = SignedDAG.build(["a", "b", "free_a", "free_b", "c"], [4, 3, -4, -3, 1],
...                     edges=[(0, 2), (1, 3), (0, 4), (1, 4), (4, 2), (4, 3)])
>>> forward_trap_bound(d).value   # c needs a and b: 4 + 3 + 1
8
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np
from ortools.graph.python import max_flow

from memopt.core.signed_dag import SignedDAG, graph_to_dag
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import GraphError

__all__ = [
    "Bound", "forward_trap_bound", "reverse_trap_bound", "pair_trap_bound", "node_trap_values",
    "simple_bounds", "simple_dag_bounds", "best_bound", "trap_cut",
]


@dataclass(frozen=True)
class Bound:
    """A lower bound on the peak memory of every schedule.

    ``value`` (int bytes); ``name`` (``forward_trap``, ``reverse_trap``, ``pair_trap``,
    ``max_op_footprint``, ``graph_outputs``, ``base_memory``, ``end_memory``,
    ``node_relaxation``); ``critical``: the node ids (op ids for tensor-graph bounds) whose
    argument gives the value; ``witness``: a JSON-ready dict a checker can verify (see
    :mod:`memopt.bounds.certificate`); ``complete`` is False when a time limit stopped a
    search early (the value is still a valid bound, maybe not the strongest of its kind).
    """

    value: int
    name: str
    critical: tuple[int, ...] = ()
    witness: dict = field(default_factory=dict)
    seconds: float = 0.0
    complete: bool = True
    stats: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- preparation

@numba.njit(cache=True)
def _ancestor_matrix(topo, pred_ptr, pred_idx, n):
    """``anc[v, x]`` is true iff ``x`` is a proper ancestor of ``v``."""
    anc = np.zeros((n, n), np.bool_)
    for k in range(topo.shape[0]):
        v = topo[k]
        for e in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred_idx[e]
            anc[v, p] = True
            for x in range(n):
                if anc[p, x]:
                    anc[v, x] = True
    return anc


@dataclass(frozen=True, eq=False)
class _Net:
    """What every cut of one DAG shares: weights, canonical edge list, reachability."""

    n: int
    w: np.ndarray          # int64 delta
    t: np.ndarray          # int64 transient
    base: int
    end: int               # base + sum(delta): memory after the last node
    edges: np.ndarray      # (m, 2) DAG edges (p, x), sorted lexicographically
    redges: np.ndarray     # (m, 2) reversed-program edges (x, p), sorted lexicographically
    anc: np.ndarray        # bool (n, n): anc[v, x] <=> x is a proper ancestor of v
    inf: int               # a capacity larger than any finite cut


def _net(dag: SignedDAG) -> _Net:
    cached = dag._cache.get("trap_net")  # the DAG is immutable: the preparation can be kept with it
    if cached is not None:
        return cached
    n = dag.n
    e = dag.edges()
    if e.size:
        e = e[np.lexsort((e[:, 1], e[:, 0]))]
        r = e[:, ::-1]
        r = np.ascontiguousarray(r[np.lexsort((r[:, 1], r[:, 0]))])
    else:
        e = np.zeros((0, 2), np.int64)
        r = e
    anc = _ancestor_matrix(np.asarray(dag.topological_order(), np.int64), dag.pred_ptr, dag.pred_idx, n)
    w = np.asarray(dag.delta, np.int64)
    inf = int(np.abs(w).sum()) + 1
    net = _Net(n=n, w=w, t=np.asarray(dag.transient, np.int64), base=int(dag.base),
               end=int(dag.base) + int(w.sum()), edges=e, redges=r, anc=anc, inf=inf)
    dag._cache["trap_net"] = net
    return net


def _as_dag(g) -> SignedDAG:
    if isinstance(g, SignedDAG):
        return g
    if isinstance(g, TensorGraph):
        return graph_to_dag(g).dag
    raise GraphError(f"expected a SignedDAG or a TensorGraph, got {type(g).__name__}")


# ---------------------------------------------------------------------------- one cut

@dataclass(frozen=True)
class _Cut:
    value: int             # the bound on the memory while `node` runs (in our model)
    node: int
    force_in: tuple[int, ...]
    force_out: tuple[int, ...]
    reverse: bool
    ideal: np.ndarray | None   # bool [n]: the nodes before `node` in a cheapest cut (forward only)
    flow: np.ndarray | None    # int64 arc flows in canonical order (when asked for)

    def witness(self) -> dict:
        return {"kind": "cut", "program": "reverse" if self.reverse else "forward", "node": int(self.node),
                "force_in": [int(u) for u in self.force_in], "force_out": [int(u) for u in self.force_out],
                "value": int(self.value), "flow": [int(f) for f in self.flow]}


def _forced_sets(net: _Net, v: int, force_in, force_out, reverse: bool):
    """(nodes forced into the ideal, nodes forced out) of the program's cut for ``v``."""
    anc = net.anc.T if reverse else net.anc   # ancestors in the (reversed) program
    desc = net.anc if reverse else net.anc.T
    pin = anc[v].copy()
    for u in force_in:
        pin |= anc[u]
        pin[u] = True
    pout = desc[v].copy()
    pout[v] = True
    for u in force_out:
        pout |= desc[u]
        pout[u] = True
    return pin, pout


def _arcs(net: _Net, v: int, force_in=(), force_out=(), reverse: bool = False):
    """Canonical network of one cut: (tails, heads, caps, constant, pin) or None if infeasible.

    Canonical arc order (the checker rebuilds it independently): source arcs of the free
    negative nodes by increasing id, sink arcs of the free positive nodes by increasing id,
    then one infinite arc ``x -> p`` per program edge ``(p, x)`` inside the free set, edges
    in lexicographic order. Node ``n`` is the source, ``n + 1`` the sink. The reversed
    program has deltas negated and edges reversed.
    """
    pin, pout = _forced_sets(net, v, force_in, force_out, reverse)
    if np.any(pin & pout):
        return None
    free = ~(pin | pout)
    w = -net.w if reverse else net.w
    edges = net.redges if reverse else net.edges
    xs = np.flatnonzero(free & (w < 0))
    xt = np.flatnonzero(free & (w > 0))
    em = free[edges[:, 0]] & free[edges[:, 1]] if edges.size else np.zeros(0, bool)
    ep, ex = edges[em, 0], edges[em, 1]
    n = net.n
    tails = np.concatenate([np.full(xs.size, n, np.int64), xt, ex])
    heads = np.concatenate([xs, np.full(xt.size, n + 1, np.int64), ep])
    caps = np.concatenate([-w[xs], w[xt], np.full(ep.size, net.inf, np.int64)])
    base = net.end if reverse else net.base
    # memory while v runs = base + w(pin) + neg(F) + cut + delta(v) + transient(v), in the program;
    # the reversed program's "while v runs" misses delta(v) compared with ours: add it back.
    const = base + int(w[pin].sum()) + int(w[xs].sum()) + int(w[v]) + int(net.t[v]) + (int(net.w[v]) if reverse else 0)
    return tails, heads, caps, const, pin


def _solve(net: _Net, v: int, force_in=(), force_out=(), reverse: bool = False, *, flow: bool = False) -> _Cut | None:
    built = _arcs(net, v, force_in, force_out, reverse)
    if built is None:
        return None
    tails, heads, caps, const, pin = built
    n = net.n
    flows = None
    ideal = pin.copy()
    if caps.size:
        smf = max_flow.SimpleMaxFlow()
        arcs = smf.add_arcs_with_capacity(tails, heads, caps)
        status = smf.solve(n, n + 1)
        if status != max_flow.SimpleMaxFlow.OPTIMAL:  # pragma: no cover - capacities are bounded by `inf`
            raise RuntimeError(f"max flow failed with status {status}")
        value = int(smf.optimal_flow())
        if flow:
            flows = np.asarray(smf.flows(arcs), np.int64)
        if not reverse:
            side = np.asarray(smf.get_source_side_min_cut(), np.int64)
            side = side[side < n]
            ideal[side] = True
    else:
        value = 0
        if flow:
            flows = np.zeros(0, np.int64)
    return _Cut(const + value, int(v), tuple(int(u) for u in force_in), tuple(int(u) for u in force_out),
                reverse, None if reverse else ideal, flows)


def trap_cut(dag, v: int, force_in=(), force_out=(), *, reverse: bool = False) -> dict | None:
    """The trap bound of node ``v`` (optionally with nodes forced before / after it) and its flow witness.

    Returns the witness dict (``value``, ``flow``...) or ``None`` when the forcing is
    impossible (a forced-before node is a descendant of a forced-after one).
    """
    c = _solve(_net(_as_dag(dag)), int(v), tuple(force_in), tuple(force_out), reverse, flow=True)
    return None if c is None else c.witness()


# ---------------------------------------------------------------------------- single-node traps

def _cheap_estimates(net: _Net):
    """Per node: the memory with ``I = anc(v)`` (an upper estimate of the trap) ."""
    wanc = net.anc.astype(np.int64) @ net.w if net.n else np.zeros(0, np.int64)
    return net.base + wanc + net.w + net.t


def _all_traps(net: _Net, nodes: np.ndarray, reverse: bool = False, *, prune_below: int | None = None,
               deadline: float = float("inf")):
    """Exact trap values of ``nodes`` (a dict v -> _Cut); skips nodes whose estimate cannot beat ``prune_below``."""
    ub = _cheap_estimates(net)
    order = nodes[np.argsort(-ub[nodes], kind="stable")]
    best = prune_below
    out: dict[int, _Cut] = {}
    for v in order.tolist():
        if best is not None and ub[v] <= best:
            break  # sorted: no later node can raise the maximum either
        if time.perf_counter() > deadline:
            break
        c = _solve(net, v, reverse=reverse)
        out[v] = c
        if best is not None and c.value > best:
            best = c.value
    return out


def _max_trap(dag, reverse: bool, name: str) -> Bound:
    t0 = time.perf_counter()
    dag = _as_dag(dag)
    net = _net(dag)
    cuts = _all_traps(net, np.arange(net.n, dtype=np.int64), reverse, prune_below=net.base)
    if cuts:
        v, c = max(cuts.items(), key=lambda kv: (kv[1].value, -kv[0]))
    if not cuts or c.value <= net.base:
        return Bound(net.base, name, (), {"kind": "base"}, time.perf_counter() - t0,
                     stats={"cuts": len(cuts)})
    c = _solve(net, v, reverse=reverse, flow=True)
    return Bound(c.value, name, (v,), c.witness(), time.perf_counter() - t0, stats={"cuts": len(cuts) + 1})


def forward_trap_bound(dag) -> Bound:
    """``max(base, max_v T(v))``: the forward trap bound of a signed DAG (or tensor graph).

    ``T(v)`` is the least memory while ``v`` runs over every ideal it may run after (module
    docstring); one Picard minimum cut per node, skipping nodes whose cheap upper estimate
    (the ideal ``anc(v)``) cannot beat the running maximum. The witness is the max flow of
    the critical node's network.
    """
    return _max_trap(dag, False, "forward_trap")


def reverse_trap_bound(dag) -> Bound:
    """The trap bound of the reversed program, translated back to the memory of our model.

    Reversing a program turns allocations into releases: edges reversed, ``delta' = -delta``,
    start at the end memory ``E = base + sum(delta)``, transients unchanged. In the reversed
    order, node ``v`` runs on the level our schedule had *before* ``v`` (``L_before(v) +
    transient(v)``), so the reversed program's trap bounds ``min_I (base + w(I)) +
    transient(v)``; adding ``delta(v)`` gives a bound on our memory while ``v`` runs. The
    reversed network is the transpose of the forward one (same max flow), so node by node
    the result equals :func:`forward_trap_bound`'s ``T(v)`` — a cross-check computed on a
    different network, proved in ``proofs/trap_bounds.md`` §2. Without the ``+ delta(v)``
    shift the reversed value is not a bound on our peak (a free with transient bytes).
    """
    return _max_trap(dag, True, "reverse_trap")


def node_trap_values(dag, *, reverse: bool = False) -> np.ndarray:
    """Exact ``T(v)`` for every node (int64 array): one minimum cut per node, no pruning."""
    net = _net(_as_dag(dag))
    cuts = _all_traps(net, np.arange(net.n, dtype=np.int64), reverse, prune_below=None)
    return np.array([cuts[v].value for v in range(net.n)], np.int64)


# ---------------------------------------------------------------------------- pair branching

def pair_trap_bound(dag, *, time_limit: float = 10.0, target: int | None = None,
                    nodes=None) -> Bound:
    """Trap bound strengthened by branching on a second node (DESIGN 1.4).

    For nodes ``u, v`` that no edge path orders, every schedule runs ``u`` before ``v`` or
    after it. Before: ``u`` is in the ideal of ``v`` and ``v`` is not in the ideal of ``u``,
    so the peak is at least ``max(T(v | u in), T(u | v out))``; after: at least
    ``max(T(v | u out), T(u | v in))`` (``T(x | y in/out)``: the trap of ``x`` with ``y``
    forced into / out of its ideal, one cut each). The pair bound is the smaller case, and the
    bound the maximum over pairs and over the single traps.

    Only allocating nodes (``delta + transient > 0``) are branched on (``nodes`` overrides).
    Pairs are screened with upper estimates from the single-node optimal ideals ``S_v``:
    ``T(v | u in) <= T(v) + w(anc[u] \\ S_v)`` and ``T(v | u out) <= T(v) - w(desc[u] ∩ S_v)``
    (both are feasible ideals), then examined by decreasing estimate until the estimate
    cannot beat the incumbent (``complete``), ``target`` is reached, or ``time_limit``.
    """
    t0 = time.perf_counter()
    deadline = t0 + max(0.0, float(time_limit))
    dag = _as_dag(dag)
    net = _net(dag)
    n = net.n
    if nodes is None:
        cand = np.flatnonzero(net.w + net.t > 0).astype(np.int64)
    else:
        cand = np.unique(np.asarray(nodes, np.int64))
    # exact single traps (and their ideals) of every candidate, plus the pruned max over all nodes
    fwd = _max_trap(dag, False, "pair_trap")
    best_value, best_wit, best_crit = fwd.value, fwd.witness, fwd.critical
    single = {v: _solve(net, v) for v in cand.tolist()}
    cuts_done = len(single) + fwd.stats.get("cuts", 0)
    stats = {"candidates": int(cand.size), "pairs_screened": 0, "pairs_examined": 0}
    complete = True
    if target is not None and best_value >= target or cand.size < 2:
        return Bound(best_value, "pair_trap", best_crit, best_wit, time.perf_counter() - t0, True,
                     dict(stats, cuts=cuts_done))
    k = cand.size
    T = np.array([single[v].value for v in cand.tolist()], np.float64)
    S = np.stack([single[v].ideal for v in cand.tolist()])           # (k, n) bool
    wf = net.w.astype(np.float64)
    eye = np.zeros((k, n), bool)
    eye[np.arange(k), cand] = True
    ancc = net.anc[cand] | eye                                         # (k, n): anc[u] ∪ {u}
    descc = net.anc.T[cand] | eye                                      # (k, n): desc[u] ∪ {u}
    ub_in = T[:, None] + (np.where(S, 0.0, wf[None, :]) @ ancc.T.astype(np.float64))    # [v, u]
    ub_out = T[:, None] - (np.where(S, wf[None, :], 0.0) @ descc.T.astype(np.float64))  # [v, u]
    # the estimate is exact for the case consistent with S_v
    in_S = S[:, cand]                                                  # [v, u]: u in S_v
    ub_in = np.where(in_S, T[:, None], ub_in)
    ub_out = np.where(~in_S, T[:, None], ub_out)
    incomparable = ~(net.anc[np.ix_(cand, cand)] | net.anc.T[np.ix_(cand, cand)]) & ~np.eye(k, dtype=bool)
    case_before = np.maximum(ub_in, ub_out.T)     # [v, u]: u before v -> T(v|u in), T(u|v out)
    case_after = np.maximum(ub_out, ub_in.T)      # [v, u]: u after v  -> T(v|u out), T(u|v in)
    screen = np.minimum(case_before, case_after)
    # float sums of byte counts: allow for rounding before trusting a screen to prune
    slack = 1.0 + 1e-9 * float(np.abs(net.w).sum() + net.base + int(net.t.max(initial=0)))
    iu = np.triu_indices(k, 1)
    mask = incomparable[iu] & (screen[iu] + slack > best_value + 1)
    vi, ui = iu[0][mask], iu[1][mask]
    sc = screen[vi, ui]
    order = np.argsort(-sc, kind="stable")
    stats["pairs_screened"] = int(vi.size)
    cache: dict[tuple, _Cut] = {}

    def cut(x: int, y: int, y_in: bool) -> _Cut:
        key = (x, y, y_in)
        c = cache.get(key)
        if c is None:
            sx = single[x]
            if sx.ideal[y] == y_in:   # the cheapest ideal already agrees with the forcing
                c = sx
            else:
                c = _solve(net, x, (y,) if y_in else (), () if y_in else (y,))
                cache[key] = c
        return c

    best_pair = None
    for j in order.tolist():
        if sc[j] + slack <= best_value + 1:
            break
        if time.perf_counter() > deadline:
            complete = False
            break
        v, u = int(cand[vi[j]]), int(cand[ui[j]])
        stats["pairs_examined"] += 1
        # case u before v: max(T(v | u in), T(u | v out)); evaluate lazily, reject early
        a = cut(v, u, True)
        b = cut(u, v, False) if a.value <= best_value else None
        if a.value <= best_value and b.value <= best_value:
            continue
        c_ = cut(v, u, False)
        d = cut(u, v, True) if c_.value <= best_value else None
        if c_.value <= best_value and d.value <= best_value:
            continue
        b = b if b is not None else cut(u, v, False)
        d = d if d is not None else cut(u, v, True)
        before = a if a.value >= b.value else b
        after = c_ if c_.value >= d.value else d
        value = min(before.value, after.value)
        if value > best_value:
            best_value, best_pair = value, (u, v, before, after)
            if target is not None and best_value >= target:
                stats["target_reached"] = True  # no pair can matter beyond the target
                break
    cuts_done += len(cache)
    if best_pair is not None:
        u, v, before, after = best_pair
        cases = []
        for label, c in (("u_before_v", before), ("u_after_v", after)):
            cf = _solve(net, c.node, c.force_in, c.force_out, flow=True)
            cases.append({"case": label, "cut": cf.witness()})
        best_wit = {"kind": "pair", "u": int(u), "v": int(v), "value": int(best_value), "cases": cases}
        best_crit = (int(u), int(v))
    return Bound(int(best_value), "pair_trap", best_crit, best_wit, time.perf_counter() - t0, complete,
                 dict(stats, cuts=cuts_done))


# ---------------------------------------------------------------------------- simple bounds

def simple_bounds(graph: TensorGraph) -> list[Bound]:
    """The trivial bounds of a tensor graph.

    * ``max_op_footprint``: while op ``v`` runs, its (non-resident) inputs, its outputs and
      its workspace are live, plus the resident bytes: ``max_v in(v) + out(v) + w(v) + R``.
    * ``graph_outputs``: while the last op runs (or at the start when there is none), every
      graph output is live: ``sum of outputs + R`` (resident outputs counted once, in R).
    """
    t0 = time.perf_counter()
    R = graph.resident_bytes
    size_nr = np.where(graph.tensor_resident, 0, graph.tensor_size)
    n = graph.num_ops
    in_bytes = np.zeros(n, np.int64)
    if graph.op_in_idx.size:
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.op_in_ptr))
        np.add.at(in_bytes, rows, size_nr[graph.op_in_idx])
    foot = in_bytes + graph.op_output_bytes + graph.op_workspace + R
    out = []
    if n:
        v = int(np.argmax(foot))
        out.append(Bound(int(foot[v]), "max_op_footprint", (v,), {"kind": "op_footprint", "op": v},
                         time.perf_counter() - t0))
    else:
        out.append(Bound(R, "max_op_footprint", (), {"kind": "op_footprint", "op": None}, time.perf_counter() - t0))
    outs = int(size_nr[graph.tensor_output].sum()) + R
    out.append(Bound(outs, "graph_outputs", (), {"kind": "end_memory"}, time.perf_counter() - t0))
    return out


def simple_dag_bounds(dag) -> list[Bound]:
    """The trivial bounds of a signed DAG (the analogues of :func:`simple_bounds`).

    * ``base_memory``: the start, ``base``;
    * ``end_memory``: after the last node, ``E = base + sum(delta)`` (the graph outputs and
      resident bytes, for a compiled tensor graph);
    * ``node_relaxation``: ``max_v base + w(anc(v)) + neg(F_v) + delta(v) + transient(v)``,
      the trap with every free release assumed done and no free allocation: a lower
      estimate of ``T(v)`` needing no cut (the analogue of the op footprint).
    """
    t0 = time.perf_counter()
    dag = _as_dag(dag)
    net = _net(dag)
    out = [Bound(net.base, "base_memory", (), {"kind": "base"}, time.perf_counter() - t0),
           Bound(net.end, "end_memory", (), {"kind": "end_memory"},
                 time.perf_counter() - t0)]
    if net.n:
        val = _node_relaxation(net)
        v = int(np.argmax(val))
        out.append(Bound(int(val[v]), "node_relaxation", (v,), {"kind": "node_relaxation", "node": v},
                         time.perf_counter() - t0))
    return out


def _node_relaxation(net: _Net) -> np.ndarray:
    A = net.anc.astype(np.int64)
    neg = np.minimum(net.w, 0)
    wanc = A @ net.w
    neg_anc = A @ neg
    neg_desc = A.T @ neg
    neg_free = neg.sum() - neg_anc - neg_desc - neg
    return net.base + wanc + neg_free + net.w + net.t


def best_bound(dag, *, time_limit: float = 10.0, target: int | None = None) -> Bound:
    """The strongest of the DAG bounds: simple ones, forward trap, then pair branching if time allows."""
    dag = _as_dag(dag)
    cands = simple_dag_bounds(dag) + [forward_trap_bound(dag)]
    best = max(cands, key=lambda b: b.value)
    if target is not None and best.value >= target:
        return best
    pb = pair_trap_bound(dag, time_limit=time_limit, target=target)
    return pb if pb.value > best.value else best
