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
  no-recomputation peak applies: memopt's trap bounds (:func:`memopt.bounds.best_bound`).

Under an extra-cost budget ``B`` (``cost_budget=B``) an op costing more than ``B`` cannot
re-run, so it counts as cap 0 (proof §4). All sums are exact integers. ``O(n · (n + T))`` for the first-run terms (a descendant set
per op), plus the trap bound's minimum cuts when every cap is 0.
"""

from __future__ import annotations

from typing import NamedTuple

from memopt.core.tensor_graph import TensorGraph
from memopt.remat.plan import resolve_caps

__all__ = ["PeakBound", "infeasibility_witness", "peak_lower_bound", "peak_lower_bound_details"]


class PeakBound(NamedTuple):
    """``value`` (bytes) and the term that attains it: ``kind`` in ``start``, ``end``,
    ``first_run`` (with ``op`` and the forced ``tensors``), ``order`` (trap bound name)."""

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
        costs = graph.op_cost.tolist()
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
    desc = _descendants(graph)
    # ancestors (strict): u is a strict ancestor of v iff v in desc[u] and u != v
    cons = [{int(u) for u in graph.consumers_of(t)} for t in range(T)]
    # non-recomputable, non-resident tensors
    fixed = [t for t in range(T) if not resident[t] and (producer[t] < 0 or (caps is not None and caps[producer[t]] == 0))]
    for v in range(n):
        forced = {int(t) for t in graph.inputs_of(v) if not resident[int(t)]}
        dv = desc[v]
        for t in fixed:
            p = producer[t]
            if p == v or (p >= 0 and v not in desc[p]):
                continue  # not produced before v's first run
            if output[t] or (cons[t] & dv):
                forced.add(t)
        own = [int(t) for t in graph.outputs_of(v)]
        val = R + sum(size[t] for t in forced) + sum(size[t] for t in own) + int(graph.op_workspace[v])
        if val > best.value:
            best = PeakBound(val, "first_run", v, tuple(sorted(forced)))
    if trap and caps is not None and all(k == 0 for k in caps):
        from memopt.bounds import best_bound

        b = best_bound(graph, time_limit=trap_time_limit)
        if int(b.value) > best.value:
            best = PeakBound(int(b.value), "order", None, (), b.name)
    return best


def peak_lower_bound(graph: TensorGraph, cap=1, **kw) -> int:
    """A lower bound (bytes) on the peak of every valid plan within the caps."""
    return peak_lower_bound_details(graph, cap, **kw).value


def infeasibility_witness(graph: TensorGraph, memory_limit: int, cap=1, **kw) -> PeakBound | None:
    """A bound term above ``memory_limit`` (a proof that no plan meets it), or ``None``."""
    b = peak_lower_bound_details(graph, cap, **kw)
    return b if b.value > memory_limit else None
