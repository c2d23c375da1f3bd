"""Trap cuts: how many bytes the re-runs of a plan must take off each trap (``proofs/remat_cost_bounds.md`` §7).

Model (``docs/remat.md``). A plan that re-runs only ops of ``S`` peaks at least at the
least no-recomputation peak of the relaxed graph ``G_S`` (Theorem 1), in which every tensor
made by an op of ``S`` weighs 0 except at its producer and its readers. Compared with ``G``
itself, the memory of ``G_S`` while op ``v`` runs in an order loses at most the bytes of
the ``S``-made tensors that can be live *across* ``v``: made before it, read after it (or a
graph output), not an input of ``v`` (those stay counted, as ``v``'s workspace). Per op
``w`` that is

    A_w(v) = sum of s(t) over the non-resident outputs t of w with s(t) > 0 and t not read by v,
             where w is neither v nor a descendant of v, and t is a graph output or has a
             reader that is not an ancestor of v

(a tensor all of whose readers precede ``v`` in every order is never live across it). The
forward trap ``T(v)`` of ``G`` bounds the memory at ``v`` in every order, so every plan
``P`` whose peak is at most ``M`` has, for every op ``v`` (Theorem 7),

    sum over w in RR(P) of A_w(v)  >=  T(v) - M,           RR(P): the ops P re-runs,

a *knapsack cover* inequality over the re-run set: the re-runs together must uncover at
least ``T(v) - M`` bytes at ``v``. The cost lower bound
(:func:`memopt.remat.lower_bounds.cost_lower_bound`) gives these rows to its hitting-set
solver beside the cores. A core only says "some op of this set re-runs", so a limit that
needs several re-runs at one trap is learnt one excluded combination at a time; the row says
how many bytes they need, and the linear relaxation of the hitting set sees it at once. On
the Checkmate training graphs at 0.8 of the optimal no-recomputation peak (MobileNet,
ResNet50, segnet: peaks at the turn from the forward to the backward pass), the rows alone
give the optimum. A set whose relaxed graph has no forward trap above ``M`` meets every row
already (Lemma 7a over all orders), so the rows never change the value the cost bound
converges to: they change how soon it gets there.

``base`` (a set ``S0``): the same argument from ``G_{S0}`` instead of ``G`` (``T_{S0}`` only
falls as ``S0`` grows, and the bytes uncovered are additive over the producers):
``sum over w in RR(P) \\ S0 of A_w(v) >= T_{S0}(v) - M`` for *every* plan within ``M``.

Under an extra-cost budget ``B`` the same inequalities bound the peak (Corollary 7'): every plan
of extra cost at most ``B`` re-runs a set ``R`` with ``sum of c(w) over R <= B``, so its peak is
at least ``min over such R of max over v of T(v) - sum over w in R of A_w(v)``, one small
CP-SAT model (:func:`budget_peak_bound`); the ``min_peak`` question and the Pareto frontier
take it as their lower bound on the peak.

Each coefficient is capped at the row's ``need`` (a re-run that uncovers at least ``need``
bytes meets the row alone either way). Ops with cap 0 never re-run and get no coefficient;
a row whose coefficients sum below ``need`` proves that no plan within the caps meets ``M``.

Example (``a`` is made first and read last; the big ``B`` runs in between):

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 6), Tensor("m", 1), Tensor("b", 5), Tensor("c", 1),
...     Tensor("z", 1, output=True)], [Op("A", (), ("a",), cost=5), Op("M", ("a",), ("m",), cost=1),
...     Op("B", ("m",), ("b",), cost=1), Op("C", ("b",), ("c",), cost=1), Op("Z", ("a", "c"), ("z",), cost=1)])
>>> [(g.op_names[c.op], c.need, {g.op_names[w]: b for w, b in zip(c.ops, c.bytes)}) for c in trap_cuts(g, 11, 1)]
[('B', 1, {'A': 1}), ('C', 1, {'A': 1})]
>>> trap_cuts(g, 11, 0)[0].ops          # with cap 0 nothing can re-run: the row cannot be met
()
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from memopt.clock import solve_by
from memopt.core.tensor_graph import TensorGraph
from memopt.remat.plan import resolve_caps

__all__ = ["TrapCut", "trap_cuts", "last_run_cuts", "uncovered_bytes", "cut_met", "restrict_cuts", "budget_peak_bound", "scaled_row",
           "add_row", "CUT_SCALE_ABOVE"]

#: a trap cut's bytes above this are scaled down for the CP-SAT models that take it
CUT_SCALE_ABOVE = 2**40


class TrapCut(NamedTuple):
    """Every plan within the limit re-runs ops of ``ops`` whose ``bytes`` sum to at least
    ``need`` (``bytes[i]`` belongs to ``ops[i]``; ops sorted). ``op``: the op whose trap it is;
    ``base``: the set ``S0`` it was derived from (its ops have no coefficient)."""

    op: int
    need: int
    ops: tuple
    bytes: tuple
    base: tuple = ()
    #: the trap it comes from: ``"forward"`` (the first run of ``op`` in ``G_base``, Theorem 7),
    #: ``"last run"`` or ``"first run"`` (an event of the last-run trap of ``base``, Theorem 7F)
    kind: str = "forward"


def _reader_masks(graph: TensorGraph, anc: np.ndarray, tensors: np.ndarray) -> np.ndarray:
    """``later[v, i]``: tensor ``tensors[i]`` has a reader that is not an ancestor of ``v``,
    or is a graph output (it can be live across ``v``)."""
    n = graph.num_ops
    later = np.zeros((n, tensors.shape[0]), bool)
    for i, t in enumerate(tensors.tolist()):
        if graph.tensor_output[t]:
            later[:, i] = True
            continue
        readers = graph.consumers_of(t)
        if readers.shape[0]:
            later[:, i] = ~np.all(anc[:, readers], axis=1)
    return later


def uncovered_bytes(graph: TensorGraph, ops_at, rerunnable=None) -> dict[int, np.ndarray]:
    """``{v: A(v)}`` for each op ``v`` of ``ops_at``: ``A(v)[w]`` = the bytes a re-run set
    containing ``w`` can take off the memory at ``v`` (``A_w(v)`` of the module docstring);
    0 for ops outside ``rerunnable`` (a bool mask; default every op)."""
    ops_at = [int(v) for v in ops_at]
    ok = rerunnable if rerunnable is not None else np.ones(graph.num_ops, bool)
    return dict(zip(ops_at, _bytes_live_across(graph, [(v, True) for v in ops_at], ok)))


def _bytes_live_across(graph: TensorGraph, at, ok: np.ndarray, base=None) -> list[np.ndarray]:
    """Per ``(v, below)`` of ``at``: per op ``w`` with ``ok[w]``, ``w != v``, the bytes of its
    non-resident outputs of positive size that ``v`` does not read and that are graph outputs or
    have a reader that is not an ancestor of ``v`` (or, with ``base``, a bool mask over the ops,
    a reader in it); ``below``: only for ``w`` not a descendant of ``v``. ``A_w(v)`` (Theorem 7)
    is ``(v, True)`` without ``base``; ``C_w(e)`` (Theorem 7F) takes ``base``."""
    from memopt.remat.lower_bounds import _op_ancestors

    n = graph.num_ops
    anc = _op_ancestors(graph)                   # anc[v, u]: u is a proper ancestor of v
    prod = graph.tensor_producer
    tensors = np.flatnonzero((prod >= 0) & ~graph.tensor_resident & (graph.tensor_size > 0))
    tensors = tensors[ok[prod[tensors]]]
    later = _reader_masks(graph, anc, tensors)
    p, size = prod[tensors], graph.tensor_size[tensors].astype(np.int64)
    base_reader = None if base is None else \
        np.asarray([bool(base[graph.consumers_of(t)].any()) for t in tensors.tolist()], bool)
    out = []
    for v, below in at:
        mask = (later[v] if base_reader is None else later[v] | base_reader) & (p != v)
        if below:
            mask &= ~anc[p, v]                   # w = p(t) not a descendant of v (v is no ancestor of w)
        reads = graph.inputs_of(v)
        if reads.shape[0]:
            mask &= ~np.isin(tensors, reads)
        a = np.zeros(n, np.int64)
        np.add.at(a, p[mask], size[mask])
        out.append(a)
    return out


def _rerunnable(graph: TensorGraph, cap, base) -> tuple[np.ndarray, tuple]:
    """The ops that get a coefficient (cap > 0, not in ``base``) and ``base`` sorted."""
    n = graph.num_ops
    caps = resolve_caps(graph, cap)
    ok = np.ones(n, bool) if caps is None else np.asarray([caps[v] > 0 for v in range(n)], bool)
    base = tuple(sorted({int(v) for v in base}))
    ok[list(base)] = False
    return ok, base


def _row(v: int, need: int, a: np.ndarray, base: tuple, kind: str = "forward") -> TrapCut:
    """The row of op ``v`` with right-hand side ``need`` and bytes ``a`` per op, each capped at ``need``."""
    ops = np.flatnonzero(a)
    return TrapCut(v, need, tuple(ops.tolist()), tuple(min(int(b), need) for b in a[ops].tolist()), base, kind)


def _trap_rows(graph: TensorGraph, limit: int, ok: np.ndarray, base: tuple, deadline: float):
    """``(traps, rows)``: the ops whose forward trap in ``G_base`` exceeds ``limit`` (op ->
    trap) and, for each, ``A_w(v)`` over the ops ``w`` with ``ok[w]`` (:func:`uncovered_bytes`).
    The one setup that the rows (:func:`trap_cuts`) and the peak under a budget
    (:func:`budget_peak_bound`) share."""
    from memopt.bounds.trap import traps_above
    from memopt.remat.lower_bounds import _op_ancestors, _relaxed_dag, relaxed_graph

    dag = _relaxed_dag(relaxed_graph(graph, base), _op_ancestors(graph))
    traps = traps_above(dag, int(limit), np.arange(graph.num_ops), deadline=deadline)
    return traps, uncovered_bytes(graph, sorted(traps), ok)


def trap_cuts(graph: TensorGraph, memory_limit: int, cap=1, *, base=(), deadline: float = float("inf")) -> list[TrapCut]:
    """The trap cuts of ``graph`` at ``memory_limit``: one row per op whose forward trap in
    ``G_base`` (the relaxed graph of ``base``; ``G`` itself by default) exceeds the limit,
    ordered by op. Ops with cap 0 (``cap``: one int or one per op) and ops of ``base`` get no
    coefficient. At the deadline the ops not reached yet get no row (fewer rows: still sound)."""
    n = graph.num_ops
    if n == 0:
        return []
    M = int(memory_limit)
    ok, base = _rerunnable(graph, cap, base)
    traps, rows = _trap_rows(graph, M, ok, base, deadline)
    cuts = []
    for v in sorted(traps):
        cuts.append(_row(v, traps[v] - M, rows[v], base))
        if time.perf_counter() > deadline:
            break
    return cuts


def last_run_cuts(graph: TensorGraph, memory_limit: int, cap=1, *, base=(),
                  deadline: float = float("inf")) -> list[TrapCut]:
    """The trap cuts of the last-run traps of ``base`` (``proofs/remat_cost_bounds.md`` §7,
    Theorem 7F): one row per event ``e`` of :mod:`memopt.remat.last_runs` (first and last runs,
    ``S = base``) whose trap ``L(e)`` exceeds the limit. Every valid plan ``P`` within the limit
    re-runs ops ``w`` outside ``base`` with

        sum of C_w(e) over w in RR(P) \\ base  >=  L(e) - memory_limit,

    ``C_w(e)`` the bytes of the non-resident outputs ``t`` of ``w`` (``s(t) > 0``, not read by
    the op ``v`` of ``e``) that are graph outputs or have a reader that is not an ancestor of
    ``v`` or is in ``base``; ``w != v``, and ``w`` not a descendant of ``v`` unless ``e`` is the
    last run of an op of ``base`` (an op that may re-run: its last run may follow its
    descendants' first runs). A re-run the order of first runs lets go of (``G_S``, Theorem 7)
    may still be held here: a cheap op of ``base`` that re-runs late keeps its inputs until
    its last run, so where those traps decide (the ViT training step) only the ops outside
    ``base`` can take the bytes off, and the row says how many.

    Ops with cap 0 and ops of ``base`` get no coefficient; coefficients are capped at ``need``.
    At the deadline the events not reached yet get no row."""
    from memopt.remat.last_runs import last_run_traps_above

    n = graph.num_ops
    if n == 0:
        return []
    M = int(memory_limit)
    ok, base = _rerunnable(graph, cap, base)
    in_base = np.zeros(n, bool)
    in_base[list(base)] = True
    events = last_run_traps_above(graph, in_base, M, deadline=deadline)
    if not events:
        return []
    # an event at a first run (a first-run node, or the only run of an op outside base): the
    # descendants of v come after it; the last run of an op of base may follow their first runs
    rows = _bytes_live_across(graph, [(v, first or not in_base[v]) for v, first, _ in events], ok, in_base)
    return [_row(v, value - M, a, base, "first run" if first else "last run")
            for (v, first, value), a in zip(events, rows)]


def cut_met(cut: TrapCut, rerun) -> bool:
    """Does a re-run set meet the row (its coefficients sum to at least ``need``)?"""
    rerun = set(rerun)
    return sum(b for w, b in zip(cut.ops, cut.bytes) if w in rerun) >= cut.need


def restrict_cuts(cuts, *, rerun=(), never=()) -> list[TrapCut]:
    """The rows over the plans that re-run every op of ``rerun`` and no op of ``never``: the
    bytes of ``rerun`` count as uncovered (``need`` drops by them; a row met that way goes),
    the ops of ``never`` lose their coefficient. Every such plan within the limit meets the
    rows returned; a row left with ``need > sum of bytes`` proves there is none."""
    rerun, never = set(rerun), set(never)
    out = []
    for cut in cuts:
        need = cut.need - sum(b for w, b in zip(cut.ops, cut.bytes) if w in rerun)
        if need <= 0:
            continue
        pairs = [(w, min(b, need)) for w, b in zip(cut.ops, cut.bytes) if w not in rerun and w not in never]
        out.append(cut._replace(need=need, ops=tuple(w for w, _ in pairs), bytes=tuple(b for _, b in pairs)))
    return out


def scaled_row(coefs, need) -> tuple[list[int], int]:
    """``(ceil(b / f) for b in coefs), ceil(need / f)`` with ``f`` the least power of two that
    brings the scaled ``need`` to at most :data:`CUT_SCALE_ABOVE`: every set meeting the row
    meets the scaled one (``sum ceil(b/f) >= sum b / f >= need / f``, and the left side is an
    integer), so a model with the scaled row keeps every plan the row keeps."""
    f = 1
    while -(-int(need) // f) > CUT_SCALE_ABOVE:
        f *= 2
    return [-(-int(b) // f) for b in coefs], -(-int(need) // f)


def add_row(model, literal, cut: TrapCut) -> bool:
    """Add ``cut`` to a CP-SAT ``model`` over the literals ``literal[w]`` ("``w`` re-runs"),
    scaled by :func:`scaled_row`; every op of the row must have a literal (restrict the row
    first, :func:`restrict_cuts`). Returns ``False`` (and makes the model infeasible) when no
    set meets the row."""
    from ortools.sat.python import cp_model

    coefs, need = scaled_row(cut.bytes, cut.need)
    if sum(coefs) < need:
        model.add_bool_or([])
        return False
    model.add(cp_model.LinearExpr.weighted_sum([literal[w] for w in cut.ops], coefs) >= need)
    return True


def budget_peak_bound(graph: TensorGraph, cost_budget, cap=1, *, time_limit: float = 5.0, floor: int = 0,
                      clock=None) -> int:
    """A lower bound on the peak of every plan within the caps whose extra cost is at most
    ``cost_budget`` (Corollary 7'): the least, over op sets ``R`` of cost at most the budget
    (ops with cap 0 excluded), of ``max_v T(v) - sum_{w in R} A_w(v)``, solved by CP-SAT within
    ``time_limit`` seconds (its proven objective bound when stopped). Only ops whose forward
    trap exceeds ``floor`` (a bound known already) take part: the others cannot raise it.
    Returns ``floor`` when no trap exceeds it. ``clock``: the caller's
    :class:`memopt.clock.Clock` (else one of ``time_limit`` seconds)."""
    from fractions import Fraction

    from ortools.sat.python import cp_model

    from memopt.remat.lower_bounds import _scaled_costs, bound_units
    from memopt.remat.plan import exact_costs

    n = graph.num_ops
    floor = int(floor)
    if n == 0:
        return floor
    from memopt.time_shares import remat_clock

    deadline = remat_clock(time_limit, clock).end
    caps = resolve_caps(graph, cap)
    budget = Fraction(cost_budget)
    costs = exact_costs(graph)
    ok = np.asarray([(caps is None or caps[w] > 0) and Fraction(costs[w]) <= budget for w in range(n)], bool)
    traps, rows = _trap_rows(graph, floor, ok, (), deadline)
    if not traps:
        return floor
    ops = sorted({int(w) for a in rows.values() for w in np.flatnonzero(a)})
    if not ops:
        return max(floor, max(traps.values()))
    # integer costs floor(c f) <= c f: every set of cost <= B keeps scaled cost <= floor(B f)
    scaled, factor = _scaled_costs([costs[w] for w in ops])
    m = cp_model.CpModel()
    y = {w: m.new_bool_var(f"y{w}") for w in ops}
    m.add(cp_model.LinearExpr.weighted_sum([y[w] for w in ops], scaled) <= math.floor(budget * factor))
    top = max(traps.values())
    P = m.new_int_var(floor, top, "P")
    for v, T in traps.items():
        ws = [w for w in ops if rows[v][w]]
        m.add(P + cp_model.LinearExpr.weighted_sum([y[w] for w in ws], [int(rows[v][w]) for w in ws]) >= T)
    m.minimize(P)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    st = solve_by(solver, m, deadline)
    if st == cp_model.OPTIMAL:
        return max(floor, int(solver.value(P)))
    if st == cp_model.FEASIBLE:
        return max(floor, bound_units(solver.best_objective_bound))
    return floor
