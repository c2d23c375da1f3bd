"""Trap lower bounds on the peak memory of a signed DAG (``docs/design.md``, lower bounds), by minimum cuts.

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

* :func:`forward_trap_bound`: ``max_v T(v)`` (and ``base``, and the end memory ``E``).
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
* :func:`probing_trap_bound`: the pair argument as edge finding: to refute a limit ``L``,
  an order of two nodes whose hypothesis edge pushes some trap above ``L`` is impossible,
  so the other order is added to the DAG; repeat until a trap exceeds ``L`` or the derived
  edges close a cycle (then the bound is ``L + 1``). Bisection on ``L``.
* :func:`simple_bounds` / :func:`simple_dag_bounds`: op footprint, graph outputs, base,
  end memory, and the cut-free relaxation of the trap. :func:`best_bound` runs them all.

Soundness proofs: ``proofs/trap_bounds.md``. Certificates and their checker:
:mod:`memopt.bounds.certificate`, :mod:`memopt.bounds.checker`.

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

import numpy as np

from memopt import _jit
from memopt._jit import kernel
from memopt.core.signed_dag import SignedDAG, graph_to_dag
from memopt.core.closure import max_flow, picard_network
from memopt.core.structure import ancestor_matrix
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import GraphError, InternalError

__all__ = [
    "Bound", "forward_trap_bound", "forward_trap_exceeds", "reverse_trap_bound", "pair_trap_bound", "node_trap_values",
    "simple_bounds", "simple_dag_bounds", "best_bound", "trap_cut", "probing_trap_bound", "remember_hint",
    "traps_above",
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

    def to_dict(self) -> dict:
        """Plain JSON data (what ``memopt bound --json`` prints for each bound)."""
        from memopt.io._json import plain_data as plain

        return {"name": self.name, "value": int(self.value), "critical": [int(v) for v in self.critical],
                "witness": plain(self.witness), "seconds": round(float(self.seconds), 6),
                "complete": bool(self.complete), "stats": plain(self.stats)}

    @classmethod
    def from_dict(cls, doc: dict) -> "Bound":
        """Inverse of :meth:`to_dict`. The value is *claimed*, not proved: check a bound's
        witness with :func:`memopt.bounds.checker.verify_certificate` before relying on it."""
        from memopt.errors import FormatError

        try:
            value = doc["value"]
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"value must be an integer, got {value!r}")
            return cls(value=value, name=str(doc["name"]), critical=tuple(int(v) for v in doc.get("critical", ())),
                       witness=dict(doc.get("witness", {})), seconds=float(doc.get("seconds", 0.0)),
                       complete=bool(doc.get("complete", True)), stats=dict(doc.get("stats", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"not a bound: {exc}") from None


# ---------------------------------------------------------------------------- preparation

@kernel
def _closure_sums(anc, vals):
    """``(sum of vals over anc(v), sum of vals over desc(v))`` for every node, in O(n^2), no copies."""
    n = anc.shape[0]
    up = np.zeros(n, np.int64)
    down = np.zeros(n, np.int64)
    for v in range(n):
        for x in range(n):
            if anc[v, x]:
                up[v] += vals[x]
                down[x] += vals[v]
    return up, down


@dataclass(frozen=True, eq=False)
class _Net:
    """What every cut of one DAG shares: weights, canonical edge list, reachability."""

    n: int
    w: np.ndarray          # int64 delta
    wr: np.ndarray         # int64 -delta (the reversed program's deltas)
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
    anc = ancestor_matrix(dag)
    w = np.array(dag.delta, np.int64)  # writable, as the remat traps' kernel passes it: picard_network compiles once
    inf = int(np.abs(w).sum()) + 1
    net = _Net(n=n, w=w, wr=-w, t=np.asarray(dag.transient, np.int64), base=int(dag.base),
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
    extra: tuple = ()          # a hypothesised extra edge (a, b) of the DAG, or ()
    arcs: tuple = ()           # (tails, heads) of the canonical network (when the flow was asked for)

    def witness(self) -> dict:
        w = {"kind": "cut", "program": "reverse" if self.reverse else "forward", "node": int(self.node),
             "force_in": [int(u) for u in self.force_in], "force_out": [int(u) for u in self.force_out]}
        if self.extra:
            w["extra_edges"] = [[int(self.extra[0]), int(self.extra[1])]]
        # the arcs that carry flow, in canonical order; every other arc carries 0
        tails, heads = self.arcs
        nz = np.flatnonzero(self.flow)
        w.update(value=int(self.value),
                 flow=[[int(a), int(b), int(f)] for a, b, f in zip(tails[nz], heads[nz], self.flow[nz])])
        return w


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


def _arcs(net: _Net, v: int, force_in=(), force_out=(), reverse: bool = False, extra: tuple = ()):
    """Canonical network of one cut: (tails, heads, caps, constant, pin, free) or None if infeasible.

    Canonical arc order (deterministic flows): source arcs of the free negative nodes by
    increasing id, sink arcs of the free positive nodes by increasing id, then one infinite
    arc ``x -> p`` per program edge ``(p, x)`` inside the free set, edges in lexicographic
    order. The checker rebuilds the network independently from the DAG. Node ``n`` is the source, ``n + 1`` the sink. The reversed
    program has deltas negated and edges reversed. ``extra = (a, b)`` adds the edge
    ``a -> b`` to the (forward) DAG first: the trap of ``v`` in schedules running ``a`` before ``b``.
    """
    pin, pout = _forced_sets(net, v, force_in, force_out, reverse)
    edges = net.redges if reverse else net.edges
    if extra:
        a, b = extra
        if v == b or net.anc[v, b]:        # b ∈ anc[v] ∪ {v}: now a and its ancestors come first
            pin |= net.anc[a]
            pin[a] = True
        if v == a or net.anc[a, v]:        # v ∈ anc[a] ∪ {a}: now b and its descendants come after
            pout |= net.anc[:, b]
            pout[b] = True
    w = net.wr if reverse else net.w
    ea, eb = (int(extra[0]), int(extra[1])) if extra else (-1, -1)
    tails, heads, caps, w_pin, neg_free, free, clash = _jit.choose(picard_network, net.n)(
        pin, pout, w, edges, ea, eb, net.inf)
    if clash:
        return None
    base = net.end if reverse else net.base
    # memory while v runs = base + w(pin) + neg(F) + cut + delta(v) + transient(v), in the program;
    # the reversed program's "while v runs" misses delta(v) compared with ours: add it back.
    const = base + int(w_pin) + int(neg_free) + int(w[v]) + int(net.t[v]) + (int(net.w[v]) if reverse else 0)
    return tails, heads, caps, const, pin, free


def _solve(net: _Net, v: int, force_in=(), force_out=(), reverse: bool = False, *, flow: bool = False,
           extra: tuple = ()) -> _Cut | None:
    if extra and reverse:
        raise InternalError("trap-extra-edge", "a hypothesised edge is only defined for the forward program")
    built = _arcs(net, v, force_in, force_out, reverse, extra)
    if built is None:
        return None
    tails, heads, caps, const, pin, free = built
    n = net.n
    flows = None
    ideal = pin.copy()
    if caps.size and not np.any(heads == n + 1):
        # no free allocation: nothing to pay, every free node may run first (J = F, cut 0).
        # (a max flow of 0 leaves no side to read the ideal from, so decide here.)
        value = 0
        ideal |= free
        if flow:
            flows = np.zeros(caps.size, np.int64)
    elif caps.size:
        value, arc_flows, side = max_flow(n + 2, n, n + 1, tails, heads, caps)
        if value >= net.inf:
            raise InternalError("finite-cut", f"the closure network of node {v} has no finite cut")
        if flow:
            flows = arc_flows
        if not reverse:
            ideal[:n] |= side[:n]
    else:
        value = 0
        if flow:
            flows = np.zeros(0, np.int64)
    return _Cut(const + value, int(v), tuple(int(u) for u in force_in), tuple(int(u) for u in force_out),
                reverse, None if reverse else ideal, flows, tuple(int(x) for x in extra),
                (tails, heads) if flow else ())


def trap_cut(dag, v: int, force_in=(), force_out=(), *, reverse: bool = False) -> dict | None:
    """The trap bound of node ``v`` (optionally with nodes forced before / after it) and its flow witness.

    Returns the witness dict (``value``, ``flow``...) or ``None`` when the forcing is
    impossible (a forced-before node is a descendant of a forced-after one).
    """
    c = _solve(_net(_as_dag(dag)), int(v), tuple(force_in), tuple(force_out), reverse, flow=True)
    return None if c is None else c.witness()


# ---------------------------------------------------------------------------- single-node traps

def _cheap_estimates(net: _Net, reverse: bool = False):
    """Per node, an upper estimate of its trap from two admissible ideals, no cut.

    The ideal ``anc(v)`` (nothing optional has run) gives ``base + w(anc v) + delta(v) +
    transient(v)``; the ideal of all non-descendants (everything optional has run) gives
    ``E - w(desc v) + transient(v)``. In the reversed program the two ideals swap roles, so
    both directions use the same pair of estimates (the reverse trap equals the forward one
    node by node anyway, ``proofs/trap_bounds.md`` §2).
    """
    if not net.n:
        return np.zeros(0, np.int64)
    w_anc, w_desc = _jit.choose(_closure_sums, net.n)(_jit.readonly(net.anc), _jit.readonly(net.w))
    nothing = net.base + w_anc + net.w + net.t
    everything = net.end - w_desc + net.t
    return np.minimum(nothing, everything)


def _all_traps(net: _Net, nodes: np.ndarray, reverse: bool = False, *, prune_below: int | None = None,
               deadline: float = float("inf"), status: dict | None = None):
    """Exact trap values of ``nodes`` (a dict v -> _Cut); skips nodes whose estimate cannot beat ``prune_below``.

    ``status["timed_out"]`` is set when the deadline stopped the loop early.
    """
    ub = _cheap_estimates(net, reverse)
    order = nodes[np.argsort(-ub[nodes], kind="stable")]
    best = prune_below
    out: dict[int, _Cut] = {}
    for v in order.tolist():
        if best is not None and ub[v] <= best:
            break  # sorted: no later node can raise the maximum either
        if time.perf_counter() > deadline:
            if status is not None:
                status["timed_out"] = True
            break
        c = _solve(net, v, reverse=reverse)
        out[v] = c
        if best is not None and c.value > best:
            best = c.value
    return out


# Dense reachability (n x n booleans, float screens of k x n) bounds the sizes the cut bounds
# accept; beyond them the bounds fall back to the O(n) ones (start and end memory), flagged.
MAX_TRAP_NODES = 8000
MAX_PAIR_NODES = 4000
PROBE_ALL_NODES = 1200   # probing hypotheses range over all nodes up to this size


def _fallback(dag: SignedDAG, name: str, limit: int) -> Bound:
    """``max(base, end)`` for DAGs too large for the dense cut machinery (never an error)."""
    w = np.asarray(dag.delta, np.int64)
    base, end = int(dag.base), int(dag.base) + int(w.sum())
    wit = {"kind": "end_memory"} if dag.n and end > base else {"kind": "base"}
    return Bound(max(base, end) if dag.n else base, name, (), wit, 0.0, False,
                 {"skipped": f"{dag.n} nodes exceed the {limit} this bound handles; start/end memory only"})


def _max_trap(dag, reverse: bool, name: str, time_limit: float | None = None) -> Bound:
    t0 = time.perf_counter()
    dag = _as_dag(dag)
    if dag.n > MAX_TRAP_NODES:
        return _fallback(dag, name, MAX_TRAP_NODES)
    deadline = float("inf") if time_limit is None else t0 + max(0.0, float(time_limit))
    net = _net(dag)
    status: dict = {}
    cuts = _all_traps(net, np.arange(net.n, dtype=np.int64), reverse,
                      prune_below=max(net.base, net.end) if net.n else net.base,
                      deadline=deadline, status=status)
    complete = not status.get("timed_out", False)
    if cuts:
        v, c = max(cuts.items(), key=lambda kv: (kv[1].value, -kv[0]))
    # the start and (once a node has run) the end are also measured: P >= base, P >= E
    floor = max(net.base, net.end) if net.n else net.base
    if not cuts or c.value <= floor:
        wit = {"kind": "base"} if floor == net.base else {"kind": "end_memory"}
        return Bound(floor, name, (), wit, time.perf_counter() - t0, complete, stats={"cuts": len(cuts)})
    c = _solve(net, v, reverse=reverse, flow=True)
    return Bound(c.value, name, (v,), c.witness(), time.perf_counter() - t0, complete, stats={"cuts": len(cuts) + 1})


def forward_trap_bound(dag, *, time_limit: float | None = None) -> Bound:
    """``max(base, E, max_v T(v))``: the forward trap bound of a signed DAG (or tensor graph).

    (``E = base + sum(delta)`` is live after the last node, so ``P >= E`` when there is one;
    the traps alone may miss it: a node that can run first sees none of the others.)

    ``T(v)`` is the least memory while ``v`` runs over every ideal it may run after (module
    docstring); one Picard minimum cut per node, skipping nodes whose cheap upper estimate
    (the ideal ``anc(v)``) cannot beat the running maximum. The witness is the max flow of
    the critical node's network. With ``time_limit``, the nodes left when it expires are
    skipped (``complete`` is False; the value is still a bound). DAGs above
    ``MAX_TRAP_NODES`` nodes get ``max(base, end memory)``, flagged incomplete.
    """
    return _max_trap(dag, False, "forward_trap", time_limit)


def forward_trap_exceeds(dag, limit: int, *, deadline: float = float("inf"), hints: list | None = None,
                         keep_hints: int = 4, hint_below: int | None = None) -> bool:
    """Is :func:`forward_trap_bound` above ``limit``? The same cuts, but only for nodes whose
    cheap upper estimate exceeds ``limit``, stopping at the first trap above it: a fast
    feasibility test for callers that ask it many times (the recomputation cost bounds).
    At the deadline, and on DAGs above ``MAX_TRAP_NODES`` beyond start and end memory, it
    answers ``False``: the weaker answer, always safe for a caller that uses ``True`` as a
    proof that ``limit`` is below every schedule's peak.

    ``hints``: a list of nodes, kept by a caller that asks about many similar DAGs, tried
    first; the node whose trap is found above ``limit`` moves to its front (only nodes below
    ``hint_below``, e.g. the ops of relaxed graphs whose other nodes differ; at most
    ``keep_hints``). The answer does not depend on the order (any trap above ``limit`` is a
    yes, a no checks every node that could exceed it); only the number of cuts does."""
    dag = _as_dag(dag)
    base, end = int(dag.base), int(dag.base) + int(np.asarray(dag.delta, np.int64).sum())
    if max(base, end if dag.n else base) > limit:
        return True
    if dag.n == 0 or dag.n > MAX_TRAP_NODES:
        return False
    net = _net(dag)
    ub = _cheap_estimates(net)
    first = [v for v in (hints or ()) if 0 <= v < net.n and ub[v] > limit]
    tried = set(first)
    # hints all have ub > limit; in the sorted rest the first ub <= limit ends the search
    for v in first + [v for v in np.argsort(-ub, kind="stable").tolist() if v not in tried]:
        if ub[v] <= limit or time.perf_counter() > deadline:
            return False
        if _solve(net, v).value > limit:
            if hints is not None and (hint_below is None or v < hint_below):
                remember_hint(hints, v, keep_hints)
            return True
    return False


def remember_hint(hints: list, key, keep: int) -> None:
    """Move ``key`` (what decided the last question) to the front of ``hints``, keeping at
    most ``keep`` entries: the order in which repeated exceed-tests try their candidates."""
    if key in hints:
        hints.remove(key)
    hints.insert(0, key)
    del hints[keep:]


def reverse_trap_bound(dag, *, time_limit: float | None = None) -> Bound:
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
    return _max_trap(dag, True, "reverse_trap", time_limit)


def node_trap_values(dag, *, reverse: bool = False) -> np.ndarray:
    """Exact ``T(v)`` for every node (int64 array): one minimum cut per node, no pruning."""
    net = _net(_as_dag(dag))
    cuts = _all_traps(net, np.arange(net.n, dtype=np.int64), reverse, prune_below=None)
    return np.array([cuts[v].value for v in range(net.n)], np.int64)


def traps_above(dag, limit: int, nodes=None, *, deadline: float = float("inf")) -> dict[int, int]:
    """``{v: T(v)}`` for every node ``v`` of ``nodes`` (default: all) whose exact forward trap
    exceeds ``limit``: one cut per node whose cheap upper estimate exceeds it, none for the
    others (their trap cannot). At the deadline (and on DAGs above ``MAX_TRAP_NODES``) the
    nodes not reached yet are left out: a caller that uses each value as a bound stays sound."""
    dag = _as_dag(dag)
    if dag.n == 0 or dag.n > MAX_TRAP_NODES:
        return {}
    net = _net(dag)
    ub = _cheap_estimates(net)
    nodes = np.arange(net.n, dtype=np.int64) if nodes is None else np.asarray(nodes, np.int64)
    out: dict[int, int] = {}
    for v in nodes[ub[nodes] > limit].tolist():
        if time.perf_counter() > deadline:
            break
        value = int(_solve(net, v).value)
        if value > limit:
            out[v] = value
    return out


# ---------------------------------------------------------------------------- pair branching

def _slack(net: _Net) -> float:
    """Rounding allowance of the float screens (sums of byte counts in float64)."""
    return 1.0 + 1e-9 * float(np.abs(net.w).sum() + net.base + int(net.t.max(initial=0)))


def _pair_estimates(net: _Net, cand: np.ndarray, single: dict):
    """Upper estimates ``ub_in[v, u] >= T(v | u in)``, ``ub_out[v, u] >= T(v | u out)`` over candidates.

    From the cheapest ideal ``S_v`` of each single cut: ``S_v ∪ anc[u]`` and ``S_v \\ desc[u]``
    are ideals that respect the forcing (for ``u`` incomparable with ``v``), so their memory
    bounds the forced minimum from above; when ``S_v`` already agrees with the forcing the
    estimate is exact (``T(v)``). Float64 matrix products (BLAS); callers add :func:`_slack`.
    """
    k = cand.size
    n = net.n
    T = np.array([single[v].value for v in cand.tolist()], np.float64)
    S = np.stack([single[v].ideal for v in cand.tolist()])           # (k, n) bool
    wf = net.w.astype(np.float64)
    eye = np.zeros((k, n), bool)
    eye[np.arange(k), cand] = True
    ancc = (net.anc[cand] | eye).astype(np.float64)                  # (k, n): anc[u] ∪ {u}
    descc = (net.anc.T[cand] | eye).astype(np.float64)               # (k, n): desc[u] ∪ {u}
    ub_in = T[:, None] + np.where(S, 0.0, wf[None, :]) @ ancc.T      # [v, u]
    ub_out = T[:, None] - np.where(S, wf[None, :], 0.0) @ descc.T    # [v, u]
    in_S = S[:, cand]                                                # [v, u]: u in S_v
    ub_in = np.where(in_S, T[:, None], ub_in)
    ub_out = np.where(~in_S, T[:, None], ub_out)
    incomparable = ~(net.anc[np.ix_(cand, cand)] | net.anc.T[np.ix_(cand, cand)]) & ~np.eye(k, dtype=bool)
    return ub_in, ub_out, incomparable


def pair_trap_bound(dag, *, time_limit: float = 10.0, target: int | None = None,
                    nodes=None) -> Bound:
    """Trap bound strengthened by branching on a second node (``docs/design.md``, lower bounds).

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
    if dag.n > MAX_PAIR_NODES:
        fb = forward_trap_bound(dag, time_limit=time_limit)
        return Bound(fb.value, "pair_trap", fb.critical, fb.witness, time.perf_counter() - t0, False,
                     dict(fb.stats, skipped=f"{dag.n} nodes exceed the {MAX_PAIR_NODES} pair branching handles"))
    net = _net(dag)
    if nodes is None:
        cand = np.flatnonzero(net.w + net.t > 0).astype(np.int64)
    else:
        cand = np.unique(np.asarray(nodes, np.int64))
    # exact single traps (and their ideals) of every candidate, plus the pruned max over all nodes
    fwd = _max_trap(dag, False, "pair_trap", time_limit)
    best_value, best_wit, best_crit = fwd.value, fwd.witness, fwd.critical
    single = {}
    for v in cand.tolist():
        if time.perf_counter() > deadline:
            return Bound(best_value, "pair_trap", best_crit, best_wit, time.perf_counter() - t0, False,
                         {"cuts": len(single) + fwd.stats.get("cuts", 0)})
        single[v] = _solve(net, v)
    cuts_done = len(single) + fwd.stats.get("cuts", 0)
    stats = {"candidates": int(cand.size), "pairs_screened": 0, "pairs_examined": 0}
    complete = fwd.complete
    if target is not None and best_value >= target or cand.size < 2:
        return Bound(best_value, "pair_trap", best_crit, best_wit, time.perf_counter() - t0, complete,
                     dict(stats, cuts=cuts_done))
    k = cand.size
    ub_in, ub_out, incomparable = _pair_estimates(net, cand, single)
    case_before = np.maximum(ub_in, ub_out.T)     # [v, u]: u before v -> T(v|u in), T(u|v out)
    case_after = np.maximum(ub_out, ub_in.T)      # [v, u]: u after v  -> T(v|u out), T(u|v in)
    screen = np.minimum(case_before, case_after)
    slack = _slack(net)
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
    base, end = int(dag.base), int(dag.base) + int(np.asarray(dag.delta, np.int64).sum())
    out = [Bound(base, "base_memory", (), {"kind": "base"}, time.perf_counter() - t0),
           Bound(end, "end_memory", (), {"kind": "end_memory"}, time.perf_counter() - t0)]
    if 0 < dag.n <= MAX_TRAP_NODES:
        net = _net(dag)
        val = _node_relaxation(net)
        v = int(np.argmax(val))
        out.append(Bound(int(val[v]), "node_relaxation", (v,), {"kind": "node_relaxation", "node": v},
                         time.perf_counter() - t0))
    return out


def _node_relaxation(net: _Net) -> np.ndarray:
    neg = np.minimum(net.w, 0)
    closure_sums = _jit.choose(_closure_sums, net.n)
    wanc, _ = closure_sums(_jit.readonly(net.anc), _jit.readonly(net.w))
    neg_anc, neg_desc = closure_sums(_jit.readonly(net.anc), _jit.readonly(neg))
    neg_free = neg.sum() - neg_anc - neg_desc - neg
    return net.base + wanc + neg_free + net.w + net.t


def best_bound(dag, *, time_limit: float = 10.0, target: int | None = None) -> Bound:
    """The strongest bound within ``time_limit``: simple bounds, forward trap, pair branching, probing.

    ``target`` is a known schedule's peak: the search stops as soon as the bound reaches it
    (the schedule is then certified optimal), and probing bisects below it. Without a
    target, probing is skipped (it needs an upper end to search below).
    """
    t0 = time.perf_counter()
    dag = _as_dag(dag)
    cands = simple_dag_bounds(dag) + [forward_trap_bound(dag)]
    best = max(cands, key=lambda b: b.value)
    if target is not None and best.value >= target:
        return best
    left = time_limit - (time.perf_counter() - t0)
    pb = pair_trap_bound(dag, time_limit=max(0.0, left / 2), target=target)
    best = pb if pb.value > best.value else best
    left = time_limit - (time.perf_counter() - t0)
    if target is not None and best.value < target and left > 0:
        q = probing_trap_bound(dag, upper=target, time_limit=left, start=pb)
        best = q if q.value > best.value else best
    return best


# ---------------------------------------------------------------------------- probing: refute a peak limit

def _augment(net: _Net, new_edges) -> _Net | None:
    """``net`` with extra precedence edges (transitive closure updated); ``None`` if they close a cycle."""
    anc = net.anc.copy()
    for u, v in new_edges:
        if u == v or anc[u, v]:
            return None
        if anc[v, u]:
            continue
        rows = anc[:, v].copy()
        rows[v] = True                     # v and its descendants ...
        ancc_u = anc[u].copy()
        ancc_u[u] = True
        anc[rows] |= ancc_u                # ... now come after u and u's ancestors
    e = np.concatenate([net.edges, np.asarray(new_edges, np.int64).reshape(-1, 2)])
    e = np.ascontiguousarray(np.unique(e, axis=0))   # lexicographic order
    r = e[:, ::-1]
    r = np.ascontiguousarray(r[np.lexsort((r[:, 1], r[:, 0]))])
    return _Net(n=net.n, w=net.w, wr=net.wr, t=net.t, base=net.base, end=net.end, edges=e, redges=r, anc=anc,
                inf=net.inf)


def _probe(net0: _Net, cand: np.ndarray, limit: int, deadline: float, stats: dict, max_tries: int = 6,
           warm: list | None = None):
    """Try to prove that no schedule has peak <= ``limit``: ``(witness or None, derived steps)``.

    ``warm``: steps derived for a limit ``>= limit`` (by a probe that failed there); they hold
    for every schedule within ``limit`` too, so the search starts from them.

    Rounds of edge finding on the current DAG ``D'`` (original edges + derived precedences):

    * a trap of ``D'`` above ``limit`` refutes the limit (final ``cut``);
    * for incomparable candidates ``u, v``, the hypothesis "``u`` before ``v``" is the DAG
      ``D' + (u -> v)``; if some node's trap there exceeds ``limit``, no schedule within the
      limit runs ``u`` before ``v``: ``v -> u`` is a derived precedence. Both orders refuted
      means the derived edges close a cycle (final ``cycle``).

    Only nodes ``x`` whose cheapest ideal ``P_x = S_x ∪ {x}`` violates the hypothesis can
    change their trap (every other ``S_x`` stays feasible); the screen bounds their new
    trap from above by ``P_x ∪ anc[u]`` or ``P_x \\ desc[v]`` and tries the ``max_tries``
    most promising exactly.
    """
    steps: list[dict] = list(warm or [])
    net = _augment(net0, [tuple(st["edge"]) for st in steps]) if steps else net0
    if net is None:
        return {"steps": steps, "final": {"kind": "cycle"}}, steps
    slack = _slack(net0)
    all_nodes = np.arange(net0.n, dtype=np.int64)
    k = cand.size
    thr = limit + 1 - slack
    while True:
        on = len(steps)
        if time.perf_counter() > deadline:
            return None, steps
        hit = _all_traps(net, all_nodes, prune_below=limit, deadline=deadline)
        stats["cuts"] += len(hit)
        over = [c for c in hit.values() if c.value > limit]
        if over:
            c = _solve(net, over[0].node, flow=True)
            return {"steps": steps, "final": {"kind": "cut", "on": on, "cut": c.witness()}}, steps
        if k < 2:
            return None, steps
        single = {}
        for v in cand.tolist():
            single[v] = hit[v] if v in hit else _solve(net, v)
            if time.perf_counter() > deadline:
                return None, steps
        stats["cuts"] += len(single)
        if time.perf_counter() > deadline:
            return None, steps
        T = np.array([single[v].value for v in cand.tolist()], np.float64)
        P = np.stack([single[v].ideal for v in cand.tolist()])
        P[np.arange(k), cand] = True                                   # P_x = S_x ∪ {x}
        wf = net.w.astype(np.float64)
        eye = np.zeros((k, net.n), bool)
        eye[np.arange(k), cand] = True
        ancc = net.anc[cand] | eye
        descc = net.anc.T[cand] | eye
        # ub1[x, u]: P_x ∪ anc[u]∪{u} (valid unless x ∈ anc[u]∪{u}); ub2[x, v]: P_x \ desc[v]∪{v} (unless x ∈ desc[v]∪{v})
        ub1 = T[:, None] + np.where(P, 0.0, wf[None, :]) @ ancc.T.astype(np.float64)
        ub2 = T[:, None] - np.where(P, wf[None, :], 0.0) @ descc.T.astype(np.float64)
        ub1[ancc[:, cand].T] = np.inf
        ub2[descc[:, cand].T] = np.inf
        Pc = P[:, cand]                                                # [x, y]: y ∈ P_x
        inc = ~(net.anc[np.ix_(cand, cand)] | net.anc.T[np.ix_(cand, cand)]) & ~np.eye(k, dtype=bool)
        refuted: dict[tuple[int, int], _Cut] = {}
        hyps = []
        for iu in range(k):
            if iu % 64 == 0 and time.perf_counter() > deadline:
                return None, steps
            # hypothesis u -> v violates P_x iff v ∈ P_x and u ∉ P_x, or x = u and v ∈ P_u
            aff = Pc & ~Pc[:, iu][:, None]
            aff[iu, :] |= Pc[iu, :]
            ub = np.minimum(ub1[:, iu][:, None], ub2)                  # [x, v]
            good = aff & (ub > thr)
            cols = np.flatnonzero(good.any(axis=0) & inc[iu])
            for iv in cols.tolist():
                xs = np.flatnonzero(good[:, iv])
                hyps.append((float(ub[xs, iv].max()), iu, iv, xs[np.argsort(-ub[xs, iv], kind="stable")]))
        hyps.sort(key=lambda h: -h[0])
        stats["hypotheses"] = stats.get("hypotheses", 0) + len(hyps)
        for _, iu, iv, xs in hyps:
            if time.perf_counter() > deadline:
                return None, steps
            u, v = int(cand[iu]), int(cand[iv])
            for ix in xs[:max_tries].tolist():
                c = _solve(net, int(cand[ix]), extra=(u, v))
                stats["cuts"] += 1
                if c is not None and c.value > limit:
                    refuted[(u, v)] = c
                    break
        if not refuted:
            return None, steps
        new_edges = []
        for (u, v), c in refuted.items():
            cf = _solve(net, c.node, extra=(u, v), flow=True)
            steps.append({"edge": [v, u], "on": on, "cut": cf.witness()})
            new_edges.append((v, u))
        stats["derived_edges"] = len(steps)
        stats["rounds"] = stats.get("rounds", 0) + 1
        aug = _augment(net, new_edges)
        if aug is None:
            return {"steps": steps, "final": {"kind": "cycle"}}, steps
        net = aug


def probing_trap_bound(dag, *, upper: int | None = None, time_limit: float = 10.0, nodes=None,
                       start: Bound | None = None) -> Bound:
    """Pair branching turned into edge finding, by refuting peak limits (destructive bounding).

    To prove ``peak > L``: assume a schedule within ``L``. For an incomparable pair, a case
    whose pair cut exceeds ``L`` cannot occur, so the other order is a *derived precedence*;
    adding the derived edges to the DAG only removes ideals, which raises every trap; repeat
    until a trap (or both cases of a pair) exceeds ``L`` — then no schedule is within ``L``
    and the bound is ``L + 1`` — or nothing new is derived (``L`` is not refuted). Sound by
    induction over the derivation (``proofs/trap_bounds.md`` §4). The largest refutable
    ``L`` is found by bisection between the pair bound (``start``, computed when omitted)
    and ``upper`` (a known schedule's peak; default: a trivial upper bound), within
    ``time_limit``. The witness lists every derived edge with its cut (on the DAG with the
    edges derived before it) and the final contradiction.

    Hypotheses range over pairs of ``nodes`` (default: every node, releases included: that
    a tensor is freed before or after an op runs is often the decisive case; above
    ``PROBE_ALL_NODES`` nodes, the allocating ones only, to keep the screen affordable). Edges derived
    by a probe that fails at ``L`` hold below ``L``, so the bisection reuses them.
    """
    t0 = time.perf_counter()
    deadline = t0 + max(0.0, float(time_limit))
    dag = _as_dag(dag)
    if dag.n > MAX_PAIR_NODES:
        return pair_trap_bound(dag, time_limit=time_limit)   # flagged incomplete fallback
    net = _net(dag)
    if start is None:
        start = pair_trap_bound(dag, time_limit=max(0.0, time_limit / 4), target=upper, nodes=nodes)
    # every node takes part: hypotheses on releases ("t is freed before v runs") are the
    # strongest derivations on tensor graphs
    if nodes is None:   # all nodes while the O(k^3) screen stays cheap, then the allocating ones
        cand = np.arange(net.n) if net.n <= PROBE_ALL_NODES else np.flatnonzero(net.w + net.t > 0)
    else:
        cand = np.unique(np.asarray(nodes, np.int64))
    cand = cand.astype(np.int64)
    if upper is None:
        upper = net.base + int(np.maximum(net.w, 0).sum()) + int(net.t.max(initial=0))
    lo, hi = start.value, int(upper)      # the optimum lies in [lo, hi]
    best = Bound(start.value, start.name, start.critical, start.witness, 0.0, start.complete, dict(start.stats))
    stats = {"cuts": 0, "probes": 0, "refuted": []}
    complete = True
    warm: list = []            # steps derived by the last failed probe: valid below its limit
    while lo < hi:
        if time.perf_counter() > deadline:
            complete = False
            break
        # first try to raise the bound by one (cheapest, most useful), then bisect upward
        L = lo if stats["probes"] == 0 else lo + (hi - lo) // 2
        stats["probes"] += 1
        st: dict = {"cuts": 0}
        wit, steps = _probe(net, cand, L, deadline, st, warm=warm)
        stats["cuts"] += st["cuts"]
        if wit is None:
            if time.perf_counter() > deadline:
                complete = False
                break
            if L == lo:
                break                  # not even lo + 1 can be proved: stop
            hi = L                     # treat as unrefutable; bisect below, from what it derived
            warm = steps
            continue
        stats["refuted"].append(L)
        lo = L + 1
        best = Bound(L + 1, "probing_trap", (), dict({"kind": "refutation", "limit": int(L), "value": int(L + 1)}, **wit),
                     0.0, True, {})
    return Bound(best.value, best.name if best.name == "probing_trap" else start.name, best.critical, best.witness,
                 time.perf_counter() - t0, complete, dict(stats, start=start.value, derived_edges=len(best.witness.get("steps", []))))
