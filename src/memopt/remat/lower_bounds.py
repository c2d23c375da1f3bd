"""Lower bounds on the peak of *any* capped recomputation plan (``proofs/remat_infeasibility.md``).

A memory limit below :func:`peak_lower_bound` admits no plan within the caps: the solvers
report ``infeasible`` with the returned witness. The bound is the maximum of

* ``start``: resident bytes + every non-resident graph input (the start is measured);
* ``end``: resident bytes + every non-resident graph output (all are live after the last
  run, so while the last run runs they are live or being written);
* ``first_run(v)`` for every op ``v``: resident bytes + ``out(v) + w(v)`` + the bytes of the
  non-resident tensors that must be live at **the first run** of ``v``: its inputs, and every
  *non-recomputable* tensor (a graph input, or the output of an op with cap 0) that exists
  before that run and is still needed at or after it — produced by a strict ancestor of
  ``v`` (or a graph input) and either a graph output or read by ``v`` or a descendant of
  ``v``. Such a tensor exists once, is needed later, and cannot be rebuilt, so no plan can
  have freed it (Theorem 1 of the proof). With every cap above 0 this is the op footprint
  plus the graph inputs still needed downstream; the more caps are 0, the closer it gets
  to the scheduling core's trap bounds;
* ``order`` (only when **every** cap is 0): a plan then runs every op once in a topological
  order and holds at least what the order model holds, so any sound bound on the
  no-recomputation peak applies: memopt's trap bounds (:func:`memopt.bounds.best_bound`);
* ``relaxed_order`` (some cap above 0): the forward trap bound of the **relaxed graph**
  ``G_S`` (:func:`relaxed_graph`) of the set ``S`` of ops that may re-run. ``G_S`` keeps every
  tensor, but a tensor made by an op of ``S`` weighs 0 and its bytes are added to the
  workspace of its producer and of each of its consumers: it is counted only where every
  plan must hold it. The other tensors are made once and are live on one interval, as in
  the order model, so every plan that re-runs only ops of ``S`` peaks at least at the
  least no-recomputation peak of ``G_S`` (``proofs/remat_cost_bounds.md``, Theorem 1).

The same relaxation bounds the **extra cost** (:func:`cost_lower_bound`): if ``G_S`` has a
trap above the limit ``M``, every plan within ``M`` re-runs some op outside ``S`` (a *core*);
the cheapest set of ops meeting every core found (a minimum-cost hitting set, solved
exactly by CP-SAT) is a lower bound on the extra cost of every plan within ``M``
(``proofs/remat_cost_bounds.md``, Theorem 2). This is the implicit-hitting-set scheme of
MaxSAT solvers (Davies and Bacchus, "Solving MAXSAT by solving a sequence of simpler SAT
instances", CP 2011) with the trap bound (``proofs/trap_bounds.md``) as the oracle: the
forward trap first, then, once it finds no more cores, the pair trap too (any lower bound on
the least no-recomputation peak of ``G_S`` is a sound oracle, Corollary 2' of the proof; on
graphs whose forward trap stays below the limit, e.g. ``random_layered_n100`` at 0.9, only
the pair trap finds cores), on :func:`held_inputs_graph` ``G_S^+`` as well as ``G_S``:
a re-run needs its inputs, so until the last reader of its output the plan holds the
output or the re-run op's inputs (Theorem 1'; without it the relaxation lets both die, and
on layered graphs, where every op reads the previous layer, it was far too weak).

Before the first core, the **trap cuts** of :mod:`memopt.remat.trap_cuts` (§7): for each op
whose forward trap exceeds the limit, the bytes the re-run ops must together take off it, a
knapsack row that every later hitting set meets too (a core learns such a row one excluded
combination at a time; on the Checkmate training graphs at 0.8 the rows alone are exact).
Once the last-run traps take part, the rows of those traps (§7F) at each grown set and at its
cheap ops: where a cheap re-run must hold its inputs (the ViT training step), they say how
many bytes the dear ops must take off.

Two further strengthenings act once that scheme reaches its fixpoint (``G_H`` fits, ``H`` the
cheapest hitting set): the oracle also takes the least-peak bound that memopt's scheduler
*proves* for the relaxed graph (any lower bound on its least peak is sound), and **re-run
spikes** (:func:`rerun_graph`, ``proofs/remat_cost_bounds.md`` §5): a plan that re-runs an op
``v`` holds ``v``'s inputs and output together at its last re-run, before the last reader of
``v``'s output; ``G_{S,Y}`` adds an op for that moment for each ``v`` of ``Y``, and a trap above
the limit yields the clause "re-run an op outside ``S``, or do not re-run some op of ``Y``"
(the hitting set becomes a small weighted SAT problem). On ``random_layered_n100`` at 0.9,
cap 2, the bound goes from 226 (``G_{68}`` fits) to 444.

Example (``A`` makes ``a``, 6 bytes, read again by the last op ``Z``; the big op ``B`` runs
in between; re-running ``A`` costs 5):

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1),
...     Tensor("z", 1, output=True)], [Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1),
...     Op("B", ("m",), ("b",), cost=1), Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])
>>> peak_lower_bound(g, 0), peak_lower_bound(g, 1)
(12, 8)
>>> cb = cost_lower_bound(g, 11, 1, trap_cuts=False)   # below 12, ``a`` cannot be held across ``B``: re-run ``A``
>>> cb.value, [[g.op_names[v] for v in c] for c in cb.cores]
(5, [['A']])
>>> cb = cost_lower_bound(g, 11, 1)      # the trap cuts (§7) say so before any core
>>> cb.value, [(g.op_names[c.op], c.need, [g.op_names[v] for v in c.ops]) for c in cb.cuts]
(5, [('B', 1, ['A']), ('C', 1, ['A'])])

The oracle is asked thousands of times (``random_layered_n250``: ~18 questions per core,
hundreds of cores), so it reuses what the relaxed graphs share: their DAG reachability comes
from the graph's op ancestors (:func:`_relaxed_dag`), the op whose trap decided the last
questions is cut first (:func:`_forward_trap_above`), the test that said yes last is asked
first, and the hitting-set model keeps only the minimal cores (none of which changes an
answer; ``proofs/remat_cost_bounds.md`` §2). The scheme also remembers its answers
(:class:`_Answers`): a subset of a set found over the limit is over, and the core growth takes
a superset of a set found to fit as fitting (§2 (vi)). Both only save time; the measured
effect (``random_layered_n250`` at 0.9, 2026-12-01) is in ``benchmarks/README.md``.

Under an extra-cost budget ``B`` (``cost_budget=B``) an op costing more than ``B`` cannot
re-run, so it counts as cap 0 (proof §4). All sums are exact integers. ``O(n · (n + T))`` for the first-run terms (a descendant set
per op), plus the trap bound's minimum cuts (one per op and relaxed graph).
"""

from __future__ import annotations

import dataclasses
import math
import time
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from memopt.clock import solve_by
from memopt.core.signed_dag import graph_to_dag
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import InternalError
from memopt.remat.plan import exact_costs, resolve_caps

__all__ = ["PeakBound", "CostBound", "infeasibility_witness", "peak_lower_bound", "peak_lower_bound_details",
           "relaxed_graph", "held_inputs_graph", "relaxed_peak_bound", "relaxed_trap_exceeds", "cost_lower_bound",
           "min_hitting_set", "rerun_graph", "rerun_trap_exceeds"]


class PeakBound(NamedTuple):
    """``value`` (bytes) and the term that attains it: ``kind`` in ``start``, ``end``,
    ``first_run`` (with ``op`` and the forced ``tensors``), ``order`` (trap bound name),
    ``relaxed_order`` (the forward trap of the relaxed graph of the ops that may re-run)."""

    value: int
    kind: str
    op: int | None
    tensors: tuple[int, ...]
    detail: str = ""


def _descendants(graph: TensorGraph) -> list[set[int]]:
    """Per op, the set of ops reachable from it (itself included)."""
    n = graph.num_ops
    succ = [set() for _ in range(n)]
    for a, b in zip(*graph.op_edges()):
        succ[int(a)].add(int(b))
    desc: list[set[int]] = [set() for _ in range(n)]
    for v in reversed([int(x) for x in graph.topological_order()]):
        d = {v}
        for w in succ[v]:
            d |= desc[w]
        desc[v] = d
    return desc


def _reach_masks(graph: TensorGraph) -> tuple[list[int], list[int]]:
    """Per op, the ops reachable from it and the ops it is reachable from (itself included in
    both), as Python int bit masks: an OR per edge, so thousands of ops take milliseconds
    where sets took seconds."""
    n = graph.num_ops
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(*(x.tolist() for x in graph.op_edges())):
        succ[a].append(b)
        pred[b].append(a)
    order = [int(x) for x in graph.topological_order()]
    desc, anc = [0] * n, [0] * n
    for v in reversed(order):
        d = 1 << v
        for w in succ[v]:
            d |= desc[w]
        desc[v] = d
    for v in order:
        a = 1 << v
        for u in pred[v]:
            a |= anc[u]
        anc[v] = a
    return desc, anc


def _mask_bits(mask: int, n: int) -> np.ndarray:
    """The bit mask ``mask`` over ``n`` ops as a boolean array."""
    raw = np.frombuffer(mask.to_bytes((n + 7) // 8, "little"), np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


def peak_lower_bound_details(graph: TensorGraph, cap=1, *, trap: bool = True, trap_time_limit: float = 2.0,
                             cost_budget=None) -> PeakBound:
    """The strongest of the bounds of the module docstring, with its witness.

    ``cap``: as in :func:`memopt.remat.resolve_caps` (``None``: no cap at all, every op may
    re-run; then no produced tensor is non-recomputable). ``trap``: use the trap bounds
    when every cap is 0. ``cost_budget``: bound only the plans whose extra cost is at most
    this; an op whose cost exceeds it cannot re-run in such a plan, so it counts as cap 0.
    """
    caps = resolve_caps(graph, cap)
    if cost_budget is not None:
        costs = graph.op_cost_exact
        caps = [0 if costs[v] > cost_budget else (1 << 62 if caps is None else caps[v]) for v in range(graph.num_ops)]
    n, T = graph.num_ops, graph.num_tensors
    size = [int(s) for s in graph.tensor_size]
    resident = [bool(r) for r in graph.tensor_resident]
    producer = [int(p) for p in graph.tensor_producer]
    output = [bool(o) for o in graph.tensor_output]
    R = graph.resident_bytes
    inputs = [t for t in range(T) if producer[t] < 0 and not resident[t]]
    best = PeakBound(R + sum(size[t] for t in inputs), "start", None, tuple(inputs))
    outs = [t for t in range(T) if output[t] and not resident[t]]
    if n:
        end = PeakBound(R + sum(size[t] for t in outs), "end", None, tuple(outs))
        if end.value > best.value:
            best = end
    if not n:
        return best
    # each fixed tensor's set of ops v where it must be live (the first-run bound below), as bit
    # masks over the ops: made strictly before v (reachable from its producer; a graph input
    # always) and needed at or after v (a graph output, or read by v or a descendant of v)
    desc, anc = _reach_masks(graph)
    full = (1 << n) - 1
    fixed = [t for t in range(T) if not resident[t] and (producer[t] < 0 or (caps is not None and caps[producer[t]] == 0))]
    is_fixed = np.zeros(T, bool)
    is_fixed[fixed] = True
    live_at = {}
    held = np.zeros(n, np.int64)   # bytes of fixed tensors forced at each op; their sum < 2**62 (graph check)
    for t in fixed:
        p = producer[t]
        after = full if p < 0 else desc[p] & ~(1 << p)
        need = full
        if not output[t]:
            need = 0
            for c in graph.consumers_of(t).tolist():
                need |= anc[c]
        live_at[t] = m = after & need
        if m and size[t]:
            held[_mask_bits(m, n)] += size[t]
    ws = graph.op_workspace
    best_v, best_val = None, best.value
    for v in range(n):
        loose = sum(size[t] for t in {int(t) for t in graph.inputs_of(v)} if not resident[t] and not is_fixed[t])
        val = R + int(held[v]) + loose + sum(size[int(t)] for t in graph.outputs_of(v)) + int(ws[v])
        if val > best_val:
            best_v, best_val = v, val
    if best_v is not None:
        v = best_v
        forced = {int(t) for t in graph.inputs_of(v) if not resident[int(t)]}
        forced |= {t for t in fixed if (live_at[t] >> v) & 1}
        best = PeakBound(best_val, "first_run", v, tuple(sorted(forced)))
    if trap and caps is not None and all(k == 0 for k in caps):
        from memopt.bounds import best_bound

        b = best_bound(graph, time_limit=trap_time_limit)
        if int(b.value) > best.value:
            best = PeakBound(int(b.value), "order", None, (), b.name)
    elif trap:
        rerun = range(n) if caps is None else [v for v in range(n) if caps[v] > 0]
        val = relaxed_peak_bound(graph, rerun, time_limit=trap_time_limit)
        if val > best.value:
            best = PeakBound(val, "relaxed_order", None, (), "forward trap of the relaxed graph")
    return best


def peak_lower_bound(graph: TensorGraph, cap=1, **kw) -> int:
    """A lower bound (bytes) on the peak of every valid plan within the caps."""
    return peak_lower_bound_details(graph, cap, **kw).value


def infeasibility_witness(graph: TensorGraph, memory_limit: int, cap=1, **kw) -> PeakBound | None:
    """A bound term above ``memory_limit`` (a proof that no plan meets it), or ``None``."""
    b = peak_lower_bound_details(graph, cap, **kw)
    return b if b.value > memory_limit else None


# ---------------------------------------------------------------------------- relaxed graphs
def relaxed_graph(graph: TensorGraph, rerun) -> TensorGraph:
    """``G_S`` for the op set ``S = rerun``: the same ops, tensors and edges; every
    non-resident tensor made by an op of ``S`` weighs 0, and its size is added to the
    workspace of its producer and of every op that reads it (once per op). Every plan that
    re-runs only ops of ``S`` peaks at least at the least no-recomputation peak of ``G_S``
    (``proofs/remat_cost_bounds.md``, Theorem 1). ``S`` empty: ``graph`` itself."""
    rerun = np.zeros(graph.num_ops, bool) if rerun is None else _mask(graph.num_ops, rerun)
    if not rerun.any():
        return graph
    adj = _adjacency(graph)
    prod = graph.tensor_producer
    moved = np.flatnonzero((prod >= 0) & ~graph.tensor_resident & rerun[np.maximum(prod, 0)])
    size = graph.tensor_size.copy()
    ws = graph.op_workspace.copy()
    moved_sizes = size[moved].astype(np.int64)
    size[moved] = 0
    np.add.at(ws, prod[moved], moved_sizes.astype(ws.dtype))
    # each distinct reader of a moved tensor, once (exact integer sums)
    cnt = adj.cons_ptr[moved + 1] - adj.cons_ptr[moved]
    idx = np.repeat(adj.cons_ptr[moved], cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    np.add.at(ws, adj.cons_idx[idx], np.repeat(moved_sizes, cnt).astype(ws.dtype))
    return dataclasses.replace(graph, tensor_size=size, op_workspace=ws, _cache={})


class _Adjacency(NamedTuple):
    """Distinct readers per tensor (CSR ``cons_ptr``/``cons_idx`` and Python lists and sets),
    distinct inputs per op: what the relaxed graphs look up thousands of times."""

    cons_ptr: np.ndarray
    cons_idx: np.ndarray
    readers: list
    reader_sets: list
    inputs: list


def _adjacency(graph: TensorGraph) -> _Adjacency:
    cached = graph._cache.get("remat_adjacency")
    if cached is None:
        readers = [np.unique(graph.consumers_of(t)).tolist() for t in range(graph.num_tensors)]
        ptr = np.zeros(graph.num_tensors + 1, np.int64)
        ptr[1:] = np.cumsum([len(r) for r in readers])
        idx = np.asarray([c for r in readers for c in r], np.int64)
        cached = _Adjacency(ptr, idx, readers, [set(r) for r in readers],
                            [np.unique(graph.inputs_of(v)).tolist() for v in range(graph.num_ops)])
        graph._cache["remat_adjacency"] = cached
    return cached


def held_inputs_graph(graph: TensorGraph, rerun) -> TensorGraph:
    """``G_S^+``: :func:`relaxed_graph` ``G_S`` strengthened by the inputs a re-run needs
    (``proofs/remat_cost_bounds.md``, Theorem 1'). For a tensor ``t`` made by an op ``u`` of
    ``S`` and a *fixed* input ``y`` of ``u`` (a graph input or made by an op outside ``S``),
    every plan holds ``t`` or ``y`` at every moment from the first run of ``u`` to the first
    run of each consumer of ``t``: a part of ``y`` of ``m(t, y)`` bytes is split off and also
    read by the consumers of ``t``, whose workspace loses ``m(t, y)`` unless they read ``y``
    too (``t`` is counted there already). ``m`` is allocated greedily (largest inputs first)
    so that the parts of ``t`` sum to at most ``s(t)`` and the parts of ``y`` to at most
    ``s(y)``. Every plan that re-runs only ops of ``S`` peaks at least at the least
    no-recomputation peak of ``G_S^+``. Not always above ``G_S`` (a consumer of ``t`` where
    ``y`` is live anyway loses the part), so callers use both."""
    base = relaxed_graph(graph, rerun)
    mask = _mask(graph.num_ops, rerun if rerun is not None else ())
    if not mask.any():
        return base
    prod = graph.tensor_producer
    resident = graph.tensor_resident
    size0 = graph.tensor_size
    size = base.tensor_size.astype(np.int64).copy()
    ws = base.op_workspace.astype(np.int64).copy()
    capacity = {}
    new_size, new_prod, new_readers = [], [], []
    adj = _adjacency(graph)
    prod_l, resident_l, size0_l, mask_l = prod.tolist(), resident.tolist(), size0.tolist(), mask.tolist()
    for t in np.flatnonzero((prod >= 0) & ~resident & mask[np.maximum(prod, 0)]).tolist():
        budget = int(size0_l[t])
        readers = adj.readers[t]
        if budget <= 0 or not readers:
            continue
        u = prod_l[t]
        fixed = [y for y in adj.inputs[u]
                 if not resident_l[y] and (prod_l[y] < 0 or not mask_l[prod_l[y]]) and size0_l[y] > 0]
        for y in sorted(fixed, key=lambda y: (-int(size0_l[y]), y)):
            m = min(budget, capacity.setdefault(y, int(size0[y])))
            if m <= 0:
                continue
            budget -= m
            capacity[y] -= m
            size[y] -= m
            new_size.append(m)
            new_prod.append(prod_l[y])
            own = adj.reader_sets[y]
            new_readers.append(sorted(adj.reader_sets[t] | own))
            for c in readers:
                if c not in own:  # a reader of y holds all of y anyway: nothing counted twice there
                    ws[c] -= m
            if budget == 0:
                break
    if not new_size:
        return base
    T = graph.num_tensors
    rows = np.repeat(np.arange(graph.num_ops, dtype=np.int64), np.diff(graph.op_in_ptr))
    cols = graph.op_in_idx.astype(np.int64)
    extra_rows = [c for r in new_readers for c in r]
    extra_cols = [T + i for i, r in enumerate(new_readers) for _ in r]
    k = len(new_size)
    return TensorGraph.from_arrays(
        tensor_size=np.concatenate([size, np.asarray(new_size, np.int64)]),
        tensor_producer=np.concatenate([prod, np.asarray(new_prod, np.int64)]),
        op_inputs=(np.concatenate([rows, np.asarray(extra_rows, np.int64)]),
                   np.concatenate([cols, np.asarray(extra_cols, np.int64)])),
        num_ops=graph.num_ops,
        tensor_output=np.concatenate([graph.tensor_output, np.zeros(k, bool)]),
        tensor_resident=np.concatenate([resident, np.zeros(k, bool)]),
        op_workspace=ws, op_cost=graph.op_cost_exact, check_acyclic=False)


def _spike_target(graph: TensorGraph, v: int, rerun: set, desc) -> tuple[int, int] | None:
    """For an op ``v`` that re-runs, the op ``c`` whose first run its last re-run must
    precede, and the bytes held from that re-run up to ``c``: ``None`` unless every output
    of ``v`` is non-resident, of positive size and no graph output, and its readers are
    all outside ``rerun`` and have a last one ``c`` (a descendant of all of them). The
    bytes are those of the output when ``v`` has one output and ``c`` is its only reader
    (that run reads the last re-run's production), else 0 (``proofs/remat_cost_bounds.md``, §5)."""
    outs = [int(t) for t in graph.outputs_of(v)]
    if not outs or any(graph.tensor_resident[t] or graph.tensor_output[t] or graph.tensor_size[t] <= 0 for t in outs):
        return None
    readers = {int(c) for t in outs for c in graph.consumers_of(t).tolist()}
    if not readers or readers & rerun:
        return None
    last = [c for c in readers if all(c in desc[d] for d in readers)]
    if not last:
        return None
    held = int(graph.tensor_size[outs[0]]) if len(outs) == 1 and len(readers) == 1 else 0
    return last[0], held


def rerun_graph(graph: TensorGraph, rerun, forced) -> TensorGraph:
    """``G_{S,Y}``: :func:`relaxed_graph` ``G_S`` plus, for each op ``v`` of ``Y = forced``
    with a spike target (:func:`_spike_target`: its readers all run once, and one of them,
    ``c``, comes last), a zero-cost op ``v'`` for the **last re-run** of ``v``: it runs after
    ``v`` (a size-0 tensor from ``v``) and before ``c`` (a tensor from ``v'`` to ``c``, of the
    output's size when ``c`` is its only reader, whose workspace then drops by as much),
    reads every input of ``v`` and has the workspace of ``v`` in ``G_S``. Every plan whose
    re-run set contains ``Y`` and lies in ``S``, and whose re-runs are each read
    (``proofs/remat_cost_bounds.md``, Lemma 5), peaks at least at the least
    no-recomputation peak of ``G_{S,Y}`` (Theorem 5): a re-run needs its inputs *and* its
    output live at once, a moment ``G_S`` has no op for. ``G_S`` itself when no op of ``Y``
    has a target. Ops ``>= graph.num_ops`` are the added ones."""
    S = {int(v) for v in rerun}
    base = relaxed_graph(graph, sorted(S))
    desc = _descendants(graph)
    targets = {}
    for v in sorted({int(v) for v in forced} & S):
        tgt = _spike_target(graph, v, S, desc)
        if tgt is not None:
            targets[v] = tgt
    if not targets:
        return base
    size = base.tensor_size.astype(np.int64).tolist()
    prod = base.tensor_producer.astype(np.int64).tolist()
    ws = base.op_workspace.astype(np.int64).tolist()
    rows = np.repeat(np.arange(graph.num_ops, dtype=np.int64), np.diff(base.op_in_ptr)).tolist()
    cols = base.op_in_idx.astype(np.int64).tolist()
    for i, (v, (c, held)) in enumerate(targets.items()):
        vp = graph.num_ops + i
        ws.append(int(base.op_workspace[v]) - held)
        for t in np.unique(graph.inputs_of(v)).tolist():
            rows.append(vp)
            cols.append(int(t))
        size += [0, held]           # v -> v' (order only), v' -> c
        prod += [v, vp]
        rows += [vp, c]
        cols += [len(size) - 2, len(size) - 1]
        ws[c] -= held               # c's read of the output is the new tensor now
    k = 2 * len(targets)
    return TensorGraph.from_arrays(
        tensor_size=np.asarray(size, np.int64), tensor_producer=np.asarray(prod, np.int64),
        op_inputs=(np.asarray(rows, np.int64), np.asarray(cols, np.int64)),
        num_ops=graph.num_ops + len(targets),
        tensor_output=np.concatenate([base.tensor_output, np.zeros(k, bool)]),
        tensor_resident=np.concatenate([base.tensor_resident, np.zeros(k, bool)]),
        op_workspace=np.asarray(ws, np.int64),
        op_cost=list(base.op_cost_exact) + [0] * len(targets), check_acyclic=False)


def rerun_trap_exceeds(graph: TensorGraph, rerun, forced, limit: int, *, deadline: float = float("inf"),
                       pair_time: float = 0.0, exact_time: float = 0.0) -> bool:
    """Does :func:`rerun_graph` ``G_{S,Y}`` have a forward trap (or, for up to ``pair_time``
    seconds, a pair trap; for up to ``exact_time``, a scheduler's proved bound) above
    ``limit``? ``False`` when no op of ``forced`` has a spike target (``G_{S,Y} = G_S``) or
    at the deadline (the safe answer)."""
    from memopt.bounds.trap import MAX_PAIR_NODES, forward_trap_exceeds, pair_trap_bound

    g = rerun_graph(graph, rerun, forced)
    if g.num_ops == graph.num_ops:
        return False
    dag = graph_to_dag(g).dag
    if forward_trap_exceeds(dag, limit, deadline=deadline):
        return True
    budget = min(float(pair_time), deadline - time.perf_counter())
    if budget > 0 and dag.n <= MAX_PAIR_NODES and \
            int(pair_trap_bound(dag, time_limit=budget, target=int(limit) + 1).value) > limit:
        return True
    return _scheduled_above(g, limit, min(float(exact_time), deadline - time.perf_counter()))


def _op_ancestors(graph: TensorGraph) -> np.ndarray:
    """``anc[v, u]``: op ``u`` is a proper ancestor of op ``v`` (bool, ``n x n``), cached on
    ``graph``. Every relaxed graph of ``graph`` (``G_S``, ``G_S^+``) has these op-to-op paths:
    ``relaxed_graph`` keeps the edges, and a held part ``y_t`` only adds edges from ``p(y)``
    to readers of ``t``, which descend from ``p(y)`` already (through ``p(t)``)."""
    cached = graph._cache.get("remat_op_ancestors")
    if cached is None:
        from memopt.core.structure import ancestor_matrix

        cached = np.ascontiguousarray(ancestor_matrix(graph_to_dag(graph).dag)[:graph.num_ops, :graph.num_ops])
        graph._cache["remat_op_ancestors"] = cached
    return cached


def _relaxed_dag(relaxed: TensorGraph, op_anc: np.ndarray):
    """``graph_to_dag(relaxed).dag`` with its reachability filled in from ``op_anc`` (the op
    ancestors of the graph it relaxes, :func:`_op_ancestors`) instead of a bitset pass over
    the DAG: the trap oracle asks about thousands of relaxed graphs that differ only in
    their release nodes. In ``graph_to_dag`` op ``v`` is node ``v`` and every other node is a
    release (a sink, whose predecessors are all ops), so a release's ancestors are the union
    of its predecessors and their ancestors."""
    dag = graph_to_dag(relaxed).dag
    if "ancestors" in dag._cache:
        return dag
    n, N = op_anc.shape[0], dag.n
    anc = np.zeros((N, N), bool)
    anc[:n, :n] = op_anc
    if N > n:
        cnt = np.diff(dag.pred_ptr)[n:]
        preds = dag.pred_idx[dag.pred_ptr[n]:dag.pred_ptr[N]]
        if preds.size and int(preds.max()) >= n:
            raise InternalError("relaxed-dag", "a release node has a release predecessor")
        some = np.flatnonzero(cnt)   # a release without predecessors (an unread input) has no ancestor
        if some.size:
            starts = (dag.pred_ptr[n:N] - dag.pred_ptr[n])[some]
            with_self = op_anc | np.eye(n, dtype=bool)
            anc[n + some, :n] = np.logical_or.reduceat(with_self[preds], starts, axis=0)
    reach = np.ascontiguousarray(anc.T)
    anc.setflags(write=False)
    reach.setflags(write=False)
    # the same entries memopt.core.structure caches (reachability, and its transpose)
    dag._cache["reachability"] = reach
    dag._cache["ancestors"] = anc
    return dag


def _mask(n: int, ops) -> np.ndarray:
    m = np.zeros(n, bool)
    idx = [int(v) for v in ops]
    if idx:
        m[idx] = True
    return m


def relaxed_peak_bound(graph: TensorGraph, rerun, *, time_limit: float | None = None) -> int:
    """The forward trap bound of :func:`relaxed_graph` ``(graph, rerun)``: a lower bound on
    the peak of every plan whose re-runs are all of ops in ``rerun`` (any number of them)."""
    from memopt.bounds.trap import forward_trap_bound

    if graph.num_ops == 0:
        return int(graph.resident_bytes)
    return int(forward_trap_bound(relaxed_graph(graph, rerun), time_limit=time_limit).value)


def _scheduled_above(g: TensorGraph, limit: int, seconds: float) -> bool:
    """Does memopt's scheduler prove, within ``seconds``, that every order of ``g`` peaks
    above ``limit``? (Its ``lower_bound`` is proved: an exact solver's bound or a
    certified one; Corollary 2' takes any such bound.)"""
    if seconds <= 0.05:
        return False
    from memopt.schedule import schedule

    return int(schedule(g, time_limit=seconds).lower_bound) > limit


def relaxed_trap_exceeds(graph: TensorGraph, rerun, limit: int, *, deadline: float = float("inf"),
                         pair_time: float = 0.0, held_inputs: bool = False, exact_time: float = 0.0,
                         last_runs: bool = False) -> bool:
    """Does the relaxed graph ``G_rerun`` have a forward trap (or its start or end memory)
    above ``limit``? The same cuts as :func:`relaxed_peak_bound`, but only for ops whose
    cheap upper estimate exceeds ``limit``, and it stops at the first trap above it. At the
    deadline it answers ``False`` (the weaker, always safe answer).

    ``pair_time > 0``: when no single trap exceeds ``limit``, also try the pair-branching
    trap (:func:`memopt.bounds.trap.pair_trap_bound`, ``proofs/trap_bounds.md`` §3) of
    ``G_rerun`` for up to that many seconds; it is a lower bound on the least
    no-recomputation peak of ``G_rerun`` too, so Theorem 1 applies to it unchanged (the
    random layered graphs, whose single traps stay below 0.9 of their optimum, need it).
    ``held_inputs``: also try :func:`held_inputs_graph` (``G_S^+``; its pair trap first).
    ``last_runs``: then also the last-run trap of ``rerun``
    (:func:`memopt.remat.last_runs.last_run_trap_exceeds`, ``proofs/remat_cost_bounds.md``
    §6), before any pair trap. These single-trap tests are asked in the order of the one that
    said yes last (kept on ``graph``): the answer is their disjunction whatever the order.
    ``exact_time > 0``: then also the scheduler's proved lower bound on the least peak of
    the same graphs (:func:`memopt.schedule.schedule`, up to that many seconds each): on
    ``random_layered_n100`` it proves ``OPT_order(G_{44,50}) = 33,190`` above the limit
    33,111 where no trap bound does."""
    from memopt.bounds.trap import MAX_PAIR_NODES, pair_trap_bound, remember_hint

    if graph.num_ops == 0:
        return int(graph.resident_bytes) > limit
    op_anc = _op_ancestors(graph)
    hints = graph._cache.setdefault("remat_trap_hints", [])
    graphs: dict = {}   # "held" (G_S^+, None when no input is held), "relaxed" (G_S), built when first asked
    dags: dict = {}

    def relaxed_graph_of(key: str):
        if key not in graphs:
            if key == "held":
                strong = held_inputs_graph(graph, rerun)
                # no input held: the same graph as G_S, asked about under "relaxed"
                graphs[key] = strong if strong.num_tensors > graph.num_tensors else None
            else:
                graphs[key] = relaxed_graph(graph, rerun)
        return graphs[key]

    def forward(key: str) -> bool:
        g = relaxed_graph_of(key)
        if g is None:
            return False
        dags[key] = _relaxed_dag(g, op_anc)
        return _forward_trap_above(dags[key], limit, deadline, hints, graph.num_ops)

    def last() -> bool:
        from memopt.remat.last_runs import last_run_trap_exceeds

        return last_run_trap_exceeds(graph, rerun, limit, deadline=deadline,
                                     hints=graph._cache.setdefault("remat_last_run_hints", []))

    # the test that said yes last is asked first (the answer is their disjunction, so the order
    # changes only the time): on random_layered_n250 at 0.9 the last-run trap decides 19 of 20
    # questions, and it costs a fifth of building and cutting G_S^+ and G_S
    keys = ("held", "relaxed") if held_inputs else ("relaxed",)
    tests = {key: (lambda key=key: forward(key)) for key in keys}
    if last_runs:
        tests["last"] = last
    first = graph._cache.setdefault("remat_oracle_first", [])
    for key in [k for k in first if k in tests] + [k for k in tests if k not in first]:
        if tests[key]():
            remember_hint(first, key, len(tests))
            return True
    for key in keys:
        d = dags.get(key)
        budget = min(float(pair_time), deadline - time.perf_counter())
        if d is None:
            continue
        if budget <= 0:
            break  # no time for pair traps; the scheduler's level below may still have some
        if d.n <= MAX_PAIR_NODES and int(pair_trap_bound(d, time_limit=budget, target=int(limit) + 1).value) > limit:
            return True
    if exact_time > 0:
        for g in filter(None, map(relaxed_graph_of, keys)):
            if _scheduled_above(g, limit, min(float(exact_time), deadline - time.perf_counter())):
                return True
    return False


#: the seconds that the rows of one hitting set (Theorem 7 at ``S_0 = H``) may take; about
#: 0.03 s on random_layered_n250, where a core takes about twice that (0.35 s before the
#: oracle asked its deciding test first; measured 2026-12-01 on the 2-core machine)
SET_ROWS_SECONDS = 1.0

#: op nodes whose trap was above the limit lately, tried first (most recent first)
TRAP_HINTS = 4


def _forward_trap_above(dag, limit: int, deadline: float, hints: list, num_ops: int) -> bool:
    """:func:`memopt.bounds.trap.forward_trap_exceeds` with the op nodes of ``hints`` tried
    first (the node found moves to the front). The answer is the same; only the number of
    cuts changes: on ``random_layered_n250`` one op's trap decides most relaxed graphs, which
    the plain loop (by decreasing upper estimate) reached after ~20 cuts. ``num_ops``: the
    nodes below it are ops (``graph_to_dag``), the same in every relaxed graph."""
    from memopt.bounds.trap import forward_trap_exceeds

    return forward_trap_exceeds(dag, limit, deadline=deadline, hints=hints, keep_hints=TRAP_HINTS, hint_below=num_ops)


# the shares of cost_lower_bound's time (the trap cuts first, G_S^+ joining, one pair or
# scheduler question) are the ``bound.*`` entries of memopt.time_shares.SHARES

#: the rows of Theorem 7F are sought at a grown set ``S`` and at its ops that cost at most
#: 1/ROW_BASE_RATIO of the cheapest op of its core: a row at ``S`` weighs only the core's ops, one
#: at those cheap ops every dearer op too, which is what excludes the dear combinations a core
#: learns one at a time (``benchmarks/results/2026-12-03-train-remat-last-run-rows.md``)
ROW_BASE_RATIO = 16

#: other hitting sets the solver found on its way whose cores are sought before the next solve
POOL_CORES = 6   # random_layered_n250, 60 s, 2026-12-01: 870 without, 909 with 2, 932 with 6

#: ops tried one by one to shrink each core (the next cheapest after the binary search).
#: Most say yes, and a yes is cheap once the test that decides goes first: on
#: random_layered_n250 at 0.9 the bound after 255 s was 2,176 with 30 and 2,231 with 60
#: (about 1,830 at 120 s with 12 before that reordering; 2026-12-01, 2-core machine)
SHRINK_TRIES = 60


class _Answers:
    """The oracle's answers so far, as op bitmasks (``proofs/remat_cost_bounds.md`` §2 (vi)).

    ``over``: the maximal sets ``S`` found with a trap above the limit. A subset ``S'`` of one
    is over too, whatever the level: every plan re-running only ops of ``S'`` re-runs only ops
    of ``S``, so the trap found for ``G_S`` bounds it. ``under``: the minimal sets that the
    current level found no trap for (cleared when the level rises); the core growth takes a
    superset of one as "no trap" without asking. Only a "yes" makes a core, so that shortcut
    can only leave a core larger, never wrong. It pays on the growth's "no" questions, the dear
    ones: a "no" computes every trap, a "yes" usually one."""

    def __init__(self):
        self.over: list[int] = []
        self.under: list[int] = []
        self.level = 0

    @staticmethod
    def bits(S) -> int:
        b = 0
        for v in S:
            b |= 1 << int(v)
        return b

    def known_over(self, b: int) -> bool:
        return any(b & y == b for y in self.over)

    def known_under(self, b: int, level: int) -> bool:
        return level == self.level and any(b & x == x for x in self.under)

    def add(self, b: int, answer: bool, level: int) -> None:
        if answer:
            if not self.known_over(b):
                self.over = [y for y in self.over if y & b != y] + [b]
            return
        if level != self.level:
            self.level, self.under = level, []
        if not self.known_under(b, level):
            self.under = [x for x in self.under if x & b != b] + [b]


class _Cancelled(Exception):
    """``cost_lower_bound``'s ``cancel`` said stop (caught inside it, never raised out)."""


class CostBound(NamedTuple):
    """A lower bound on the extra cost of every plan within a memory limit.

    ``value``: the bound (an ``int`` or ``Fraction``; ``None`` when ``infeasible``);
    ``cores``: sets of op ids (sorted tuples), each containing an op that every plan within
    the limit re-runs; ``hitting_set``: an op set meeting every core, a cheapest one unless
    the time limit stopped the hitting-set solver; ``infeasible``: no plan within the caps meets the limit
    (the relaxed graph of every op that may re-run has a trap above it); ``complete``:
    ``value`` is what the scheme proves, not where a deadline stopped it: it reached its fixpoint
    (the relaxed graph of ``hitting_set`` fits the limit, answered before the deadline), or the
    least hitting cost, solved to optimality, reached ``stop_at``, or it proved ``infeasible``
    (false by default: a bound made by hand claims nothing); ``ended``: how it ended,
    ``"fixpoint"``, ``"stop_at"``, ``"infeasible"``, ``"deadline"`` (time limit or ``cancel``) or
    ``"hitting_set_time"`` (the hitting-set solver was stopped); ``evaluations``: trap bounds computed; ``clauses``:
    pairs ``(C, Y)`` of sorted op tuples, each saying that every plan within the limit
    whose re-runs are all read re-runs an op of ``C`` or does not re-run some op of ``Y``
    (Theorem 5; not in ``cores``, whose users read each core as "some op of it re-runs");
    ``cuts``: the trap cuts (:class:`memopt.remat.trap_cuts.TrapCut`, §7) the hitting sets met."""

    value: object
    cores: tuple
    hitting_set: tuple = ()
    infeasible: bool = False
    complete: bool = False
    evaluations: int = 0
    clauses: tuple = ()
    cuts: tuple = ()
    ended: str = ""


def floor_scaled_costs(costs, terms: int) -> tuple[list[int], Fraction, bool]:
    """``(scaled, factor, exact)`` with ``scaled[i] = floor(c_i * factor)``, for models whose
    totals add up at most ``terms`` costs; ``exact``: every ``c_i * factor`` is an integer.
    Rounding down keeps a minimum of scaled costs divided by the factor a lower bound on the
    true minimum. Every total stays below ``2**62``, so the solvers' int64 sums cannot
    overflow: the factor is the lcm of the denominators when that fits (exact), else a power
    of two leaving totals below ``2**40`` (below 1 for costs near ``2**62``), computed in
    exact arithmetic. Read a solver's float64 objective bound with :func:`bound_units`."""
    costs = [Fraction(c) for c in costs]
    den = 1
    for c in costs:
        den = math.lcm(den, c.denominator)
    top = max(costs + [Fraction(1)]) * max(1, terms)
    if top * den < 2**62:
        return [int(c * den) for c in costs], Fraction(den), True
    # the largest e with top * 2**e < 2**40 (e < 0 when costs are large)
    e = 40 - math.ceil(math.log2(top))
    while top * Fraction(2) ** e >= 2**40:
        e -= 1
    while top * Fraction(2) ** (e + 1) < 2**40:
        e += 1
    factor = Fraction(2) ** e
    scaled = [math.floor(c * factor) for c in costs]
    return scaled, factor, all(c * factor == s for c, s in zip(costs, scaled))


def bound_units(bound: float) -> int:
    """The least integer a solver's float64 objective bound proves, soundly: a bound of an
    integer model at or above ``2**53`` may have been rounded up by up to ``2**-53`` of its
    value, so a margin of ``2**-50`` of it (below 1 under ``2**50``) is taken off first."""
    return math.ceil(bound - 1e-6 - abs(bound) * 2.0**-50)


def _scaled_costs(costs) -> tuple[list[int], Fraction]:
    """:func:`floor_scaled_costs` for a model that adds up each cost at most once."""
    return floor_scaled_costs(costs, len(costs))[:2]


def min_hitting_set(cores, costs, deadline: float, clauses=(), upper=None, pool=None, cuts=()) -> tuple[object, tuple, bool]:
    """The cheapest set of ops meeting every core, by CP-SAT (the value is what counts).
    Returns ``(a lower bound on the least cost, a cheapest set found, proved optimal)``, or
    ``(None, (), True)`` when no set meets them all (an empty core); costs are scaled as in
    :func:`_scaled_costs`, so the value is a lower bound even if scaling rounds.
    ``clauses``: pairs ``(C, Y)``; the set must also meet ``C`` or miss an op of ``Y``.

    ``upper``: the cost of a set known to meet them all. No op costing more is in a cheapest
    set (costs are ``>= 0``), so those ops are left out (a clause whose ``Y`` holds one is met
    by every such set): the least cost and every bound on it stay the same, the model shrinks
    (on ``random_layered_n250`` to four fifths of the ops, half the solver time).
    ``pool``: a list that receives every set the solver finds on its way (each meets them all).
    ``cuts``: :class:`memopt.remat.trap_cuts.TrapCut` rows; the set must also meet each
    (its ops' bytes sum to at least ``need``; ``upper`` must then meet them too)."""
    from ortools.sat.python import cp_model

    from memopt.remat.trap_cuts import add_row

    cut_ops = {v for cut in cuts for v in cut.ops}
    if upper is not None:
        top = Fraction(upper)
        keep = {v for v in {v for c in cores for v in c} | {v for c, y in clauses for v in (*c, *y)} | cut_ops
                if Fraction(costs[v]) <= top}
        cores = [[v for v in c if v in keep] for c in cores]
        clauses = [([v for v in c if v in keep], y) for c, y in clauses if all(v in keep for v in y)]
        cuts = [_kept_cut(cut, keep) for cut in cuts]
        cut_ops &= keep
    ops = sorted({v for c in cores for v in c} | {v for c, y in clauses for v in (*c, *y)} | cut_ops)
    scaled, factor = _scaled_costs([costs[v] for v in ops])
    m = cp_model.CpModel()
    x = {v: m.new_bool_var(f"x{v}") for v in ops}
    for c in cores:
        m.add_bool_or([x[v] for v in c if v in x])
    for c, y in clauses:
        m.add_bool_or([x[v] for v in c] + [x[v].Not() for v in y])
    for cut in cuts:
        if not add_row(m, x, cut):
            return None, (), True  # no set meets this row
    m.minimize(cp_model.LinearExpr.weighted_sum([x[v] for v in ops], scaled))
    solver = cp_model.CpSolver()
    # one worker, no presolve: the scheme solves hundreds of these small models (bool_or
    # clauses, a linear objective); on random_layered_n250 (200 cores of ~170 ops) this is
    # 3-8 times faster than 2 workers with presolve, the time mostly model setup
    solver.parameters.num_workers = 1
    solver.parameters.cp_model_presolve = False
    if pool is not None:
        # the callback runs in the solve's thread, which a dropped solve outlives: it fills a
        # list of its own, handed to ``pool`` only once the solve has returned
        found = []

        class _Collect(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self):
                found.append(tuple(v for v in ops if self.boolean_value(x[v])))

        status = solve_by(solver, m, deadline, _Collect())
        if status is not None:
            pool.extend(found)
    else:
        status = solve_by(solver, m, deadline)
    if status == cp_model.INFEASIBLE:
        return None, (), True
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Fraction(0), (), False
    chosen = tuple(v for v in ops if solver.boolean_value(x[v]))
    units = max(0, bound_units(solver.best_objective_bound))
    optimal = status == cp_model.OPTIMAL
    if optimal:
        units = sum(c for v, c in zip(ops, scaled) if solver.boolean_value(x[v]))
    return Fraction(units) / factor, chosen, optimal


def _kept_cut(cut, keep):
    """``cut`` without the ops outside ``keep`` (those are fixed out of the set)."""
    pairs = [(v, b) for v, b in zip(cut.ops, cut.bytes) if v in keep]
    return cut._replace(ops=tuple(v for v, _ in pairs), bytes=tuple(b for _, b in pairs))


def _known_cost(H, cores, clauses, costs, cuts=()):
    """The cost of ``H`` plus the cheapest op of each core it misses, plus, for each trap cut
    it misses, ops by bytes per cost until the row is met, if that set meets every core,
    clause and cut (an upper bound for :func:`min_hitting_set`), else ``None``."""
    from memopt.remat.trap_cuts import cut_met

    chosen = set(H)
    for c in cores:
        if c and not chosen & c:
            chosen.add(min(c, key=lambda v: (Fraction(costs[v]), v)))
    for cut in cuts:
        # most rows are met already: sort only the others' ops (this loop once took a fifth of
        # the bound's time on random_layered_n250 with a few hundred rows)
        have = sum(b for w, b in zip(cut.ops, cut.bytes) if w in chosen)
        if have >= cut.need:
            continue
        for v, b in sorted(((w, b) for w, b in zip(cut.ops, cut.bytes) if w not in chosen),
                           key=lambda vb: (-Fraction(vb[1]) / max(Fraction(costs[vb[0]]), Fraction(1, 10**9)), vb[0])):
            chosen.add(v)
            have += b
            if have >= cut.need:
                break
    # an empty core is never met (no set meets it)
    if not all(chosen & c for c in cores) or \
            not all(chosen & set(c) or not set(y) <= chosen for c, y in clauses) or \
            not all(cut_met(cut, chosen) for cut in cuts):
        return None
    return sum((Fraction(costs[v]) for v in chosen), Fraction(0))


def cost_lower_bound(graph: TensorGraph, memory_limit: int, cap=1, *, time_limit: float = 5.0,
                     stop_at=None, pair_time: float | None = None, held_inputs: bool = True,
                     spikes: bool = True, exact_time: float | None = None, cancel=None,
                     last_runs: bool = True, trap_cuts: bool = True, clock=None) -> CostBound:
    """A lower bound on the extra cost of every plan within the caps whose peak is at most
    ``memory_limit`` (``proofs/remat_cost_bounds.md``, Theorem 2), with its cores.

    Scheme: ``H`` = the cheapest op set meeting the cores so far (empty at first). While the
    relaxed graph ``G_H`` has a trap above the limit, grow ``S`` from ``H`` by adding the
    other ops that may re-run, cheapest first, as long as ``G_S`` keeps a trap above the
    limit (a binary search over the sorted prefix, then one pass over the rest); the ops
    that may re-run but are not in ``S`` form a new core, and ``H`` is recomputed. The value
    is the cost of the last ``H`` (or the hitting-set solver's bound if it was stopped). Never
    above the least extra cost; ``time_limit`` (seconds) stops it early with a weaker but
    still valid bound, and so does reaching ``stop_at`` (a known plan's extra cost: the
    plan is then optimal).

    The oracle "``G_S`` has a trap above the limit", in levels, each switched on once the one
    below finds no more cores: the forward trap of ``G_S``; with ``held_inputs`` (default)
    also that of :func:`held_inputs_graph` ``G_S^+`` (Theorem 1'; asked first, and from the
    start: the share ``bound.escalate``) and, with ``last_runs`` (default), the last-run trap of
    ``S`` (:mod:`memopt.remat.last_runs`, §6: the order of last runs, which holds a tensor
    made by an op of ``S`` from its producer's last run to its later readers); then also their pair
    traps, up to ``pair_time`` seconds per question (default the share ``bound.pair_question``
    of the time, a twentieth; 0 turns it off); then also the least-peak bound the scheduler
    proves for them, up to ``exact_time`` seconds per graph (default ``bound.exact_question``,
    a tenth; 0 turns it off) (Corollary 2'). ``clock``: the caller's
    :class:`memopt.clock.Clock` (else one of ``time_limit`` seconds).

    ``spikes`` (default): at that fixpoint (``G_H`` fits), ask whether a plan that re-runs
    *every* op of ``H`` fits: :func:`rerun_graph` ``G_{S,H}`` adds the moment of each last
    re-run, when its inputs and output are live together. If it has a trap above the limit,
    grow ``S`` from ``H`` as above (then drop from ``Y = H`` what is not needed) and add the
    clause "re-run an op outside ``S`` or do not re-run some op of ``Y``" (Theorem 5); the
    next ``H`` is the cheapest set meeting cores and clauses.

    ``trap_cuts`` (default): first the rows of :func:`memopt.remat.trap_cuts.trap_cuts` (§7,
    Theorem 7; in ``CostBound.cuts``), met by the first ``H`` and every later one; then also
    the rows at ``S_0 = H`` for every set ``H`` whose core is sought (the hitting sets and the
    solver's other sets) while the forward trap of ``G_H`` is above the limit: a row that
    excludes ``H`` and, unlike its core, says how many bytes the other re-runs must uncover.
    With ``last_runs``, once the last-run traps are asked: the rows of
    :func:`memopt.remat.trap_cuts.last_run_cuts` (Theorem 7F) at each grown set ``S`` whose
    core is recorded and at the ops of ``S`` costing at most ``1/ROW_BASE_RATIO`` of the
    cheapest op of its core (each base once).

    ``cancel``: a function asked before each oracle question and each hitting set; once it
    returns true the bound stops as at the time limit (the best value proved so far, the cores
    completed so far, ``complete=False``). ``stop_at`` may be a function too, asked after each
    hitting set (a plan found meanwhile, e.g. by a process alongside)."""
    from memopt.time_shares import remat_clock

    clock = remat_clock(time_limit, clock)
    deadline = clock.end
    total = clock.left()
    shares = clock.shares
    caps = resolve_caps(graph, cap)
    n = graph.num_ops
    M = int(memory_limit)
    costs = exact_costs(graph)
    rerun = [v for v in range(n) if caps is None or caps[v] > 0]
    count = [0]

    # the oracle gets stronger, and dearer, in levels: forward traps of G_S; also of G_S^+
    # (held inputs: a second graph and trap per question); also their pair traps (a few cuts
    # per pair, a slice of the time per question). A level is switched on only once the one
    # below reaches its fixpoint, so where the cheap oracle alone keeps finding cores (the
    # Checkmate graphs) the scheme runs as fast as with it alone
    pair = shares["bound.pair_question"].fraction * total if pair_time is None else float(pair_time)
    exact = shares["bound.exact_question"].fraction * total if exact_time is None else float(exact_time)
    second = held_inputs or last_runs
    levels = [(False, False, 0.0, 0.0)] + ([(held_inputs, last_runs, 0.0, 0.0)] if second else []) + \
        ([(held_inputs, last_runs, pair, 0.0)] if pair > 0 else []) + \
        ([(held_inputs, last_runs, pair, exact)] if exact > 0 else [])
    level = [0]
    escalate_at = clock.child("bound.escalate").end

    def check_cancel() -> None:
        if cancel is not None and cancel():
            raise _Cancelled

    answers = _Answers()

    def over(S) -> bool:
        check_cancel()
        b = answers.bits(S)
        if answers.known_over(b):
            return True
        count[0] += 1
        if level[0] == 0 and len(levels) > 1 and second and time.perf_counter() > escalate_at:
            level[0] = 1  # past the share bound.escalate (0: at once), G_S^+ and last runs join G_S
        held, last, pt, et = levels[level[0]]
        answer = relaxed_trap_exceeds(graph, S, M, deadline=deadline, pair_time=pt, held_inputs=held, exact_time=et,
                                      last_runs=last)
        if answer or time.perf_counter() < deadline:   # a "no" at the deadline proves nothing
            answers.add(b, answer, level[0])
        return answer

    def over_in_growth(S) -> bool:
        """:func:`over`, but a superset of a set that this level found fits is taken to fit
        (the growth only looks for sets that are over; a "no" never makes a core)."""
        if answers.known_under(answers.bits(S), level[0]):
            return False
        return over(S)

    def fits(S) -> bool:
        """No trap above the limit found for ``S``, at the strongest level needed."""
        while not over(S):
            if level[0] == len(levels) - 1:
                return True
            level[0] += 1
        return False

    clauses: list[tuple] = []

    cuts: list = []

    def result(value, cores, hs=(), infeasible=False, ended="fixpoint"):
        value = None if value is None else (int(value) if Fraction(value).denominator == 1 else Fraction(value))
        complete = ended in ("fixpoint", "stop_at", "infeasible")
        return CostBound(value, tuple(cores), tuple(hs), infeasible, complete, count[0], tuple(clauses), tuple(cuts),
                         ended)

    def spike_over(S, Y) -> bool:
        check_cancel()
        count[0] += 1
        return rerun_trap_exceeds(graph, S, Y, M, deadline=deadline, pair_time=pair, exact_time=exact)

    last_prefix = [0]

    def grow(inside: set, test) -> set:
        """``inside`` plus the largest prefix of the cheapest other ops for which ``test``
        still holds (a search from the last core's prefix length, galloping then binary),
        then the next few one by one."""
        cand = [v for v in order if v not in inside]
        lo, hi = 0, len(cand)         # test(inside + cand[:lo]) holds; cand[:hi + 1] is unknown
        # successive cores have similar prefixes: probe around the last one first (a few
        # questions instead of log2(n)); any outcome leaves a valid core
        guess, step = min(last_prefix[0], hi), 1
        while lo < hi and guess > lo and time.perf_counter() < deadline:
            if test(list(inside) + cand[:guess]):
                lo = guess
                guess = min(hi, guess + step)
            else:
                hi = guess - 1
                guess = max(lo, guess - step)
            step *= 2
        while lo < hi and time.perf_counter() < deadline:
            mid = (lo + hi + 1) // 2
            if test(list(inside) + cand[:mid]):
                lo = mid
            else:
                hi = mid - 1
        last_prefix[0] = lo
        S = inside | set(cand[:lo])
        # shrinking the core pays off on the cheap ops (the hitting set picks those); the
        # expensive rest stays in it
        for v in cand[lo + 1: lo + 1 + SHRINK_TRIES]:
            if time.perf_counter() >= deadline:
                break
            if test(list(S) + [v]):
                S.add(v)
        return S

    order = sorted(rerun, key=lambda v: (Fraction(costs[v]), v))
    cores: list[tuple] = []
    minimal: list[frozenset] = []

    def add_core(S) -> tuple:
        core = tuple(v for v in order if v not in S)
        cores.append(tuple(sorted(core)))
        # the hitting-set model needs only the minimal cores: a superset of a core is met
        # by every set meeting the core (a third of the n250 cores, and solver time)
        new = frozenset(core)
        if not any(c <= new for c in minimal):
            minimal[:] = [c for c in minimal if not new <= c] + [new]
        return core

    from memopt.remat.trap_cuts import last_run_cuts as make_last_cuts
    from memopt.remat.trap_cuts import trap_cuts as make_cuts

    row_keys: set = set()
    row_bases: set = set()     # the sets S_0 whose last-run rows were sought

    def keep_rows(new) -> None:
        """Add the rows of ``new`` not in ``cuts`` yet (the same row from another ``S_0``)."""
        for cut in new:
            key = (cut.op, cut.need, cut.ops, cut.bytes)
            if key not in row_keys:
                row_keys.add(key)
                cuts.append(cut)

    def rows_at(S) -> None:
        """The rows of Theorem 7 at ``S_0 = S`` (none unless the forward trap of ``G_S`` is
        above the limit), added to ``cuts``: each excludes ``S`` as a core would, and says how
        many bytes the re-runs outside ``S`` must uncover at its trap
        (``proofs/remat_cost_bounds.md`` §7)."""
        if trap_cuts and S:
            keep_rows(make_cuts(graph, M, caps, base=S, deadline=min(deadline, time.perf_counter() + SET_ROWS_SECONDS)))

    def core_of(S) -> tuple:
        """The core of a grown set ``S`` and, once the last-run traps are asked, the rows of
        Theorem 7F at ``S_0 = S``: the core says some op outside ``S`` re-runs, the rows how
        many bytes those re-runs must take off each last-run trap of ``S`` above the limit (the
        cheap ops the growth put into ``S`` get no coefficient: where their re-runs hold their
        inputs, as in the ViT training step, the core's combinations are excluded by the bytes)."""
        core = add_core(S)   # cheapest op first
        if trap_cuts and last_runs and level[0] >= 1:
            least = Fraction(costs[core[0]]) if core else None
            cheap = frozenset(v for v in S if least is None or Fraction(costs[v]) * ROW_BASE_RATIO <= least)
            for base in (frozenset(S), cheap):
                if base and base not in row_bases and time.perf_counter() < deadline:
                    row_bases.add(base)
                    keep_rows(make_last_cuts(graph, M, caps, base=sorted(base),
                                             deadline=min(deadline, time.perf_counter() + SET_ROWS_SECONDS)))
        return core

    H: tuple = ()
    value = Fraction(0)
    try:
        if n == 0 or fits(()):
            # a "fits" answered at the deadline proves nothing (the trap search was cut short)
            return result(0, (), ended="fixpoint" if n == 0 or time.perf_counter() < deadline else "deadline")
        if over(rerun):
            return result(None, (), infeasible=True, ended="infeasible")
        if trap_cuts:
            # the trap cuts (§7) first: where a limit needs several re-runs at one trap, they
            # give the hitting set what cores would learn one combination at a time
            # (a share of the time at most: a few cuts per op whose trap may exceed the limit)
            keep_rows(make_cuts(graph, M, caps, deadline=clock.child("bound.cuts").end))
            if cuts:
                hs_value, hs, optimal = min_hitting_set([], costs, deadline, cuts=cuts)
                if hs_value is None:  # a row no set of re-runnable ops meets
                    return result(None, (), infeasible=True, ended="infeasible")
                value = hs_value
                target = stop_at() if callable(stop_at) else stop_at
                if not optimal or (target is not None and value >= Fraction(target)):
                    return result(value, cores, hs, ended="stop_at" if optimal else _stopped(deadline))
                H = hs
        while time.perf_counter() < deadline:
            if not fits(H):
                rows_at(H)
                core = core_of(grow(set(H), over_in_growth))
            elif spikes and H and spike_over(H, H):
                # every plan re-running only H's ops fits G_H, but not if it re-runs all of them
                S = grow(set(H), lambda S_: spike_over(S_, H))
                Y = set(H)
                for v in sorted(H):
                    if time.perf_counter() < deadline and spike_over(S, Y - {v}):
                        Y.discard(v)
                core = tuple(v for v in order if v not in S)
                clauses.append((tuple(sorted(core)), tuple(sorted(Y))))
            else:
                # a trap stopped by the deadline answers "fits" too: then it is no fixpoint
                return result(value, cores, H, ended="fixpoint" if time.perf_counter() < deadline else "deadline")
            check_cancel()
            found: list = []
            hs_value, hs, optimal = min_hitting_set([tuple(sorted(c)) for c in minimal], costs, deadline, clauses,
                                                    upper=_known_cost(H, minimal, clauses, costs, cuts), pool=found,
                                                    cuts=cuts)
            if hs_value is None:  # an empty core (the trap of every op that may re-run), or clauses no set meets
                return result(None, cores, infeasible=True, ended="infeasible")
            # more cores never lower the least hitting cost: keep the best bound proved so far
            value = max(value, hs_value)
            target = stop_at() if callable(stop_at) else stop_at
            if target is not None and value >= Fraction(target):
                return result(value, cores, hs, ended="stop_at" if optimal else _stopped(deadline))
            if not optimal:
                if not hs:  # stopped with nothing to show: the last set plus the new core's cheapest op
                    hs = tuple(sorted(set(H) | {min(core, key=lambda v: (Fraction(costs[v]), v))} if core else H))
                return result(value, cores, hs, ended=_stopped(deadline))
            H = hs
            # the sets the solver passed on its way meet every core too and cost little more:
            # their cores, found now, spare the solves that would propose them next
            # (MaxSAT solvers' several cores per hitting set)
            # (forward-trap levels only: a "no" from the pair or scheduler level costs seconds)
            for other in [h for h in dict.fromkeys(reversed(found)) if h != hs and level[0] <= 1][:POOL_CORES]:
                if time.perf_counter() < deadline and over_in_growth(other):
                    rows_at(other)
                    core_of(grow(set(other), over_in_growth))
        return result(value, cores, H, ended="deadline")
    except _Cancelled:
        return result(value, cores, H, ended="deadline")


def _stopped(deadline: float) -> str:
    """How a bound whose hitting-set solver was stopped ended: at the deadline, or on the
    solver's own limit."""
    return "deadline" if time.perf_counter() >= deadline else "hitting_set_time"
