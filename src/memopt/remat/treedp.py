"""Exact capped recomputation by dynamic programming over the lattice of ideals.

Answers the two questions of ``docs/remat.md`` exactly: the least extra cost of a plan whose peak
is at most ``M`` (:func:`min_extra_cost`) and the least peak of a plan whose extra cost is
at most ``B`` (:func:`min_peak`, bisection over ``M``). Every returned plan is validated by
:func:`memopt.remat.evaluate_plan` and by the independent :func:`memopt.remat.check_plan`.
Proofs: ``proofs/remat_treedp.md``.

What this is, plainly
---------------------
One might want a dynamic program over a *tree decomposition*. The problem is strongly
NP-hard for every fixed cap at treewidth 2, so no algorithm polynomial in ``n`` (and in the
numbers written in unary) for fixed treewidth and cap exists unless P = NP; any exact DP is
exponential in something more. This module does **not** implement a DP over an arbitrary
tree decomposition: after weighing it (the memory at every moment is a sum over the whole
graph, so a bag-local DP has to carry a whole memory *profile*, exponential in the plan
length) we chose a DP whose exponential part is explicit and measurable, the *frontier*, searched
in A* order (below):

* **State.** ``(live, count)``: the set of live tensors and, per op, ``0`` (not run yet),
  ``1..k`` (ran that many times and may still usefully run again: *open*) or ``CLOSED``
  (ran, and will provably never need to run again). The ops that ran form an *ideal*
  (down-set) of the op DAG, because first runs follow a topological order.
* **Value.** The least extra cost of reaching the state within the memory limit
  (a shortest-path search over the state graph, exact integers / Fractions).
* **Transition.** Run one op ``v`` (inputs live, cap not reached, no positive-size output
  live, memory ``resident + live + out(v) + w(v) <= M``); size-0 outputs still live are
  freed just before; after the run, every tensor that is *not potential* (no future run
  can read it and it is not a graph output, see below) is freed, every op that can never
  usefully run again is closed, and any subset of the remaining positive-size tensors that
  ``v`` touched may be freed.
* **Potential.** ``avail`` (forward over a topological order): a tensor is available when it
  is live or resident, or its producer can still run (not run yet, or open) with all its
  inputs available. ``useful(u)`` (backward): ``u`` ran, is under its cap, has a
  positive-size output, all its inputs are available, and some output is potential;
  ``pot(t)``: ``t`` is a graph output, or some consumer has not run yet or is useful. All
  three only ever switch from true to false as a plan proceeds (proved), so closing and
  freeing by them loses no plan (proofs/remat_treedp.md, Lemma 3). A state in which an op
  that has not run yet, or a graph output, is no longer available is a dead end and is
  dropped.

Search order: A* (proofs/remat_treedp.md, Lemma 4 and Theorem 1)
-----------------------------------------------------------------
States are popped by ``extra cost so far + h``, where ``h`` (:meth:`_Instance.rerun_bound`)
is the total cost of a set of ops each of which must run again in every completion of a
*normal-form* plan: the producer of every tensor that is not live but still needed, the one
consumer that can still re-run of every live tensor nobody still to run reads (a normal-form
plan frees a tensor right after its last read, so keeping one announces another read), and,
closing the set, the producers of the missing inputs of those ops. Some optimal plan is in
normal form, so ``h`` never overestimates along it and A* (with re-opening) returns the
optimum. Plain Dijkstra (``use_astar=False``) gives the same optimum with more states. The
bound is what makes the search practical: an early free of a still-needed tensor and a kept
tensor are charged at once instead of when the re-run happens, so the search no longer
enumerates every keep/free combination at extra cost 0.

Memory at the first runs ahead (proofs/remat_treedp.md §2.1, Lemmas 6 and 7): the first run
of every op ``v`` that has not run is still ahead, and some tensors must be live across it: a
live tensor whose possible readers all descend from ``v`` (a normal-form plan keeps a tensor
only for a later read), and a tensor still to be made by an ancestor of ``v`` and read only by
descendants of ``v`` unless its producer re-runs after ``v``. If the first kind (with ``v``'s
own inputs, outputs and workspace, and the second kind where the producer cannot re-run) does
not fit under the limit, the state is a dead end (Lemma 6); if the second kind does not fit,
the bytes that must be dropped are re-made by re-runs of their producers, at least one and at
least the overflow times the least cost per byte, added to ``h`` (Lemma 7). Both only apply
to states after their frees; ``prune_held=False`` turns them off.

Branch and bound (proofs/remat_treedp.md, Lemma 5): given an incumbent plan within the limit
(the registry method ``treedp`` takes the ``heuristic`` method's) only strictly cheaper
plans are searched for (a successor whose key reaches the incumbent's cost is not pushed),
the incumbent is optimal when the heap runs empty and is the answer on a time-out; given a
proven lower bound ``l`` on the answer (:func:`memopt.remat.lower_bounds.cost_lower_bound`),
keys are raised to ``l`` and an incumbent of cost ``l`` is optimal at once. Ties on the key
go to the deeper state, then to the one with fewer live bytes: when the optimum equals the
lower bound this turns the search into a dive that finds it without sweeping the layers
below.

Example: a cheap early value ``a`` read again at the end; under 15 bytes it must be
recomputed (cost 1):

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build(
...     tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
...     ops=[Op("A", (), ("a",), cost=1), Op("B", ("a",), ("b",), cost=5), Op("C", ("b",), ("c",), cost=5),
...          Op("D", ("c",), ("d",), cost=5), Op("Z", ("a", "d"), ("z",), cost=5)])
>>> r = min_extra_cost(g, 15, cap=1)
>>> r.status, r.extra_cost, r.peak
('optimal', 1, 15)

Running time
------------
Let ``S`` be the number of states expanded, ``d`` the largest number of positive-size
tensors an op touches, ``E`` the number of (op, tensor) incidences, ``Δ`` the most consumers
of a tensor. Each expansion tries at most ``n`` ops and ``2^d`` free subsets each, and settles
every successor by one forward and one backward pass and the bound, ``O(n + T + E)``, plus
Lemmas 6-7, ``O(n · T · Δ)``; so the time is ``O(S · n · 2^d · (n · T · Δ + E) + S log S)``
after ``O(n² + n · T · Δ)`` preprocessing, and the memory ``O(S · (n + T) + n² + n · T)``.
The expansion runs compiled (:mod:`memopt.remat._treedp_kernel`, numba through
:mod:`memopt._jit`; its pure-Python twin on graphs of up to 12 ops); Python keeps the heap
and the table of states (rows of ``T / 8 + n`` bytes). A* expands
only states whose key is at most the optimum ``OPT`` (a state is re-expanded only when it is
reached again with a smaller extra cost, at most once per distinct extra-cost value
``<= OPT``). The reachable states are at most

    #ideals(G) · (k + 1)^{#open ops} · #live sets per (ideal, run counts),

maximised over the reachable frontiers, with ``#ideals(G) <= (n / W + 1)^W`` for an op DAG
of width ``W`` (largest antichain; Dilworth). Plain Dijkstra counts ``2^{#potential
tensors}`` live sets; under A*, when every tensor has one consumer (the series-parallel
graphs of the benchmark) and op costs are at least ``c_min > 0``, a state with key ``<= OPT``
differs from the live set forced by its ideal only in tensors charged to at most
``q = floor(OPT / c_min)`` ops, so at most ``sum_{i <= q} C(n, i) 2^{i d}`` live sets. So the
DP is **exponential in the width W, in the number of open ops, and, under those two
conditions, in the number q of re-runs an optimal plan can afford** (otherwise, and for
Dijkstra, in the number of potentially needed tensors) — not in the treewidth, which the
strong NP-hardness at treewidth 2 rules out as the only parameter. With cap 0 no op is ever open and the live set is forced by the ideal, so
the DP *is* the ideal-lattice DP of the scheduling core: ``S <= #ideals``.

Where it stands (``python benchmarks/remat_treedp.py --ops 60 --graphs 6 --time-limit 10
--warm``: cap 2, limits 0.9 and 0.8 of the proven no-recomputation optimum, random
series-parallel graphs; run 2026-11-30 on the 2-core machine shared with other jobs, figures in
proofs/remat_treedp.md §4.3-4.4): on **60 ops**, half the limits are proved infeasible at once
by :mod:`memopt.remat.lower_bounds`; of the other six the registry method proved **five**
optimal within the 10 s limit (at most 26 000 states each), and Lemmas 6-7 cut the states
2-23x (state counts do not depend on the machine). One of the five (seed 2 at 0.8) needs the
cost lower bound to reach the optimum within its share of the limit, so under a heavier load
it may stay open. The sixth (seed 5 at 0.9, limit 51) is infeasible: the DP expands a million states
without a goal and no search exhausts it, but the last-run bound
:func:`memopt.remat.feasibility.last_run_bound` (proofs/remat_treedp.md, Lemma 10: whichever
of two heavy ops feeding the sink runs last holds a cut of the other's branch) shows that every
plan peaks at 54 or more, and :func:`min_extra_cost` and :func:`treedp_method` answer
``infeasible`` at once.

Registered as the exact method ``treedp`` of :mod:`memopt.remat.registry` (:func:`treedp_method`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import OptionError, require
from memopt.remat.checker import check_plan
from memopt.remat.plan import (
    FREE,
    RUN,
    RematPlan,
    evaluate_plan,
    exact_costs,
    plan_from_order,
    resolve_caps,
)

__all__ = ["CLOSED", "TreeDPResult", "min_extra_cost", "min_peak"]

CLOSED = -1
_UNLIMITED = 1 << 62


class TreeDPResult(NamedTuple):
    """``status``: ``optimal`` (proved), ``infeasible`` (no plan within the caps meets the
    limit), or ``time_limit`` (stopped; ``plan`` is the incumbent given to
    :func:`min_extra_cost`, not proved optimal, or ``None``). ``states``: states expanded."""

    status: str
    extra_cost: object
    peak: int | None
    plan: RematPlan | None
    states: int


def strict_descendants(graph: TensorGraph, outs, cons) -> list[int]:
    """Per op, its strict descendants in the op DAG as a bit mask (``outs[v]``: the output
    tensors of op ``v``; ``cons[t]``: the consumers of tensor ``t``)."""
    below = [0] * graph.num_ops
    for v in reversed([int(u) for u in graph.topological_order()]):
        for w in {w for t in outs[v] for w in cons[t]}:
            below[v] |= below[w] | (1 << w)
    return below


class _Instance:
    """Flat arrays of a tensor graph for the search and its compiled expansion step
    (:mod:`memopt.remat._treedp_kernel`): CSR incidence lists, per-tensor and per-op flags,
    costs scaled to integers."""

    def __init__(self, graph: TensorGraph, cap, prune_held: bool = True):
        caps = resolve_caps(graph, cap)
        n, T = graph.num_ops, graph.num_tensors
        self.n, self.T = n, T
        size = [int(s) for s in graph.tensor_size]
        resident = [bool(r) for r in graph.tensor_resident]
        output = [bool(o) for o in graph.tensor_output]
        ins = [sorted({int(t) for t in graph.inputs_of(v)}) for v in range(n)]
        outs = [sorted({int(t) for t in graph.outputs_of(v)}) for v in range(n)]
        cons = [sorted({int(u) for u in graph.consumers_of(t)}) for t in range(T)]
        self.size, self.ins, self.outs, self.cons = size, ins, outs, cons
        # strict descendants of every op (Lemmas 6-7 here, and the feasibility search's
        # memory of the first runs ahead)
        below = self.below = strict_descendants(graph, outs, cons)
        self.zero_out = [[t for t in outs[v] if size[t] == 0] for v in range(n)]
        self.inputs = [t for t in range(T) if graph.tensor_producer[t] < 0 and not resident[t]]
        self.const = graph.resident_bytes
        touch = [sorted({t for t in ins[v] + outs[v] if size[t] > 0 and not resident[t]}) for v in range(n)]
        # counts past 254 (caps above 253, or none) need 4 bytes per op in a state row
        limit = [_UNLIMITED if caps is None else caps[v] + 1 for v in range(n)]
        self.cw = 1 if max(limit, default=1) <= 254 else 4
        limit = [min(x, (1 << 31) - 2) for x in limit]
        self.lb = (T + 7) // 8
        self.row_len = self.lb + self.cw * n
        self.goal = sum(1 << t for t in range(T) if output[t] and not resident[t])
        # exact costs as integers in units of 1/D (D = lcm of the denominators); when they do
        # not fit in int64 the kernel returns the bound's op set and Python sums exact costs
        self.cost = exact_costs(graph)
        D = 1
        for c in self.cost:
            if isinstance(c, Fraction):
                D = D * c.denominator // math.gcd(D, c.denominator)
        scaled = [int(c * D) for c in self.cost]
        self.scaled = sum(scaled) < (1 << 40)
        self.D = D if self.scaled else 1

        def csr(lists):
            ptr = np.zeros(len(lists) + 1, dtype=np.int64)
            ptr[1:] = np.cumsum([len(x) for x in lists])
            idx = np.array([x for xs in lists for x in xs], dtype=np.int64)
            return ptr, idx

        def flags(xs):
            return np.array(xs, dtype=np.uint8)

        in_ptr, in_idx = csr(ins)
        out_ptr, out_idx = csr(outs)
        cons_ptr, cons_idx = csr(cons)
        touch_ptr, touch_idx = csr(touch)
        run_mem = [self.const + sum(size[t] for t in outs[v]) + int(graph.op_workspace[v]) for v in range(n)]
        # Lemma 6: the memory of an op's first run without anything held across it, and the
        # strict-descendant relation (all zero: the rule is off)
        first_mem = [run_mem[v] + sum(size[t] for t in ins[v] if not resident[t]) for v in range(n)]
        desc = np.zeros((n, n), dtype=np.uint8)
        across: list[list[int]] = [[] for _ in range(n)]
        if prune_held:
            for v in range(n):
                desc[v] = [(below[v] >> w) & 1 for w in range(n)]
            # Lemma 7: tensors made by a strict ancestor of v and read only by strict
            # descendants of v (held across v's first run, or re-made after it)
            for y in range(T):
                p = int(graph.tensor_producer[y])
                if p < 0 or size[y] == 0 or output[y] or resident[y] or not cons[y]:
                    continue
                for v in range(n):
                    if below[p] >> v & 1 and all(below[v] >> w & 1 for w in cons[y]):
                        across[v].append(y)
        self.arrays = (
            n, T, self.lb, self.cw, np.array([int(v) for v in graph.topological_order()], dtype=np.int64),
            in_ptr, in_idx, out_ptr, out_idx, cons_ptr, cons_idx,
            np.array([int(p) for p in graph.tensor_producer], dtype=np.int64), np.array(size, dtype=np.int64),
            flags(resident), flags(output),
            # positive-size, non-output, non-resident: the tensors a normal-form plan frees right
            # after their last read (C5), so that keeping one announces a later read
            flags([size[t] > 0 and not output[t] and not resident[t] for t in range(T)]),
            flags([output[t] and not resident[t] for t in range(T)]),
            np.array(limit, dtype=np.int64),
            flags([any(size[t] > 0 for t in outs[v]) for v in range(n)]),
            flags([any(output[t] for t in outs[v]) for v in range(n)]),
            np.array(scaled if self.scaled else [1] * n, dtype=np.int64),
            np.array(run_mem, dtype=np.int64), touch_ptr, touch_idx, not self.scaled,
            np.array(first_mem, dtype=np.int64), desc, *csr(across))
        # at most 2^|touch(v)| successors per op and state (the free subsets)
        cap_succ = sum(1 << len(x) for x in touch)
        require_size = cap_succ * max(self.row_len, n)
        if require_size > 1 << 30:
            worst = max(range(n), key=lambda v: len(touch[v]))
            raise OptionError(f"op {graph.op_names[worst]!r} touches {len(touch[worst])} tensors: the DP would "
                              f"try 2^{len(touch[worst])} free subsets per state; use another method")
        def i64(k):
            return np.zeros(k, dtype=np.int64)

        def u8(k):
            return np.zeros(k, dtype=np.uint8)

        self.work = (u8(T), i64(n), u8(T), i64(n), u8(T), i64(n),  # live0/count0, live1/count1, live2/count2
                     u8(T), u8(n), u8(n), u8(n), u8(T), u8(T), u8(n), i64(T + len(in_idx) + 1),
                     i64(T + 1 + max((len(x) for x in touch), default=0)))
        self.out = (np.zeros((cap_succ, self.row_len), dtype=np.uint8), i64(cap_succ), i64(cap_succ),
                    i64(cap_succ), i64(cap_succ), np.zeros((cap_succ if not self.scaled else 1, n), dtype=np.uint8))
        from memopt import _jit
        from memopt.remat import _treedp_kernel as K

        self.expand = _jit.Adaptive(K.expand, size=n)
        self.settle_fn = _jit.choose(K.settle, n)
        self.kernel = K

    def exact(self, c):
        """A cost in kernel units back to the exact number."""
        return c if self.D == 1 else Fraction(c, self.D)

    def row(self, live: int, count) -> bytes:
        """The state row of a live mask and run counts (CLOSED = -1)."""
        row = np.zeros(self.row_len, dtype=np.uint8)
        self._pack(live, count, row)
        return row.tobytes()

    def _pack(self, live, count, row):
        n, T = self.n, self.T
        lv = np.array([(live >> t) & 1 for t in range(T)], dtype=np.uint8)
        self.kernel.pack.py_func(lv, np.array(count, dtype=np.int64), n, T, self.lb, self.cw, row)

    def live_of(self, row: bytes) -> int:
        """The live mask of a state row."""
        return int.from_bytes(row[:self.lb], "little")

    def is_goal(self, row: bytes) -> bool:
        """Every op ran and every graph output is live."""
        if (self.live_of(row) & self.goal) != self.goal:
            return False
        counts = np.frombuffer(row, dtype=np.uint8 if self.cw == 1 else "<u4", offset=self.lb)
        return not (counts == 0).any()

    def settle_start(self, live: int, memory_limit: int):
        """Settle the start state (no op run): ``(row, live mask, h)`` or ``None`` (dead end)."""
        lv = np.array([(live >> t) & 1 for t in range(self.T)], dtype=np.uint8)
        count = np.zeros(self.n, dtype=np.int64)
        dead, h = self._settle(lv, count, memory_limit)
        if dead:
            return None
        row = np.zeros(self.row_len, dtype=np.uint8)
        self.kernel.pack.py_func(lv, count, self.n, self.T, self.lb, self.cw, row)
        return row.tobytes(), sum(1 << t for t in range(self.T) if lv[t]), h

    def _settle(self, lv, count, memory_limit):
        a = self.arrays
        fset = np.zeros(self.n, dtype=np.uint8)
        w = self.work
        dead, h = self.settle_fn(lv, count, a[0], a[1], a[4], *a[5:21], memory_limit, *a[25:29], True, *w[6:14],
                                 a[24], fset)
        if not dead and not self.scaled:
            h = sum((self.cost[u] for u in range(self.n) if fset[u]), 0)
        return bool(dead), h

    def rerun_bound(self, live: int, count) -> object:
        """The bound of Lemma 4 (proofs/remat_treedp.md) of a settled state, exact: the total
        cost of a set ``F`` of ops each of which must run again in every normal-form
        completion (computed by the kernel's ``_rerun_bound``; for tests and inspection)."""
        a, w = self.arrays, self.work
        lv = np.array([(live >> t) & 1 for t in range(self.T)], dtype=np.uint8)
        fset = np.zeros(self.n, dtype=np.uint8)
        self.kernel._rerun_bound.py_func(lv, np.array(count, dtype=np.int64), a[0], a[1], *a[5:12], a[13], a[14],
                                         a[15], a[17], a[20], w[10], w[11], w[12], w[13], True, fset)
        return sum((self.cost[u] for u in range(self.n) if fset[u]), 0)

    def successors(self, row: bytes, memory_limit: int):
        """The successors of a state: ``(rows, re-run costs, bounds, ops, live bytes)``, the
        rows as one ``bytes`` of ``row_len`` per successor, the rest as lists (kernel units;
        exact values when the costs are not scaled)."""
        out = self.out
        k = self.expand(np.frombuffer(row, dtype=np.uint8), memory_limit, *self.arrays, *self.work, *out)
        rows = out[0][:k].tobytes()
        if self.scaled:
            return rows, out[1][:k].tolist(), out[2][:k].tolist(), out[3][:k].tolist(), out[4][:k].tolist()
        cost = self.cost
        ops = out[3][:k].tolist()
        dc = [cost[ops[i]] if out[1][i] else 0 for i in range(k)]
        hs = [sum((cost[u] for u in range(self.n) if out[5][i][u]), 0) for i in range(k)]
        return rows, dc, hs, ops, out[4][:k].tolist()


def min_extra_cost(graph: TensorGraph, memory_limit: int, cap=1, *, time_limit: float | None = None,
                   max_states: int | None = None, verify: bool = True, use_bound: bool = True,
                   use_astar: bool = True, incumbent: RematPlan | None = None, cost_lower=0,
                   prune_held: bool = True, use_last_run: bool = True) -> TreeDPResult:
    """The least extra cost of a plan with peak ``<= memory_limit`` within the caps.

    Returns a :class:`TreeDPResult`; ``status == "optimal"`` with a plan that passed the
    evaluator and the independent checker, ``"infeasible"`` (proved: the search space is
    exhausted), or ``"time_limit"`` when ``time_limit`` seconds or ``max_states`` expanded
    states ran out first (never raises on a hard instance). ``use_bound``: answer
    ``infeasible`` at once when :func:`memopt.remat.lower_bounds.peak_lower_bound` (without
    trap cuts) or the last-run bound :func:`memopt.remat.feasibility.last_run_bound`
    (proofs/remat_treedp.md, Lemma 10) exceeds the limit (the tests turn it off to exercise
    the search alone; ``use_last_run=False`` skips only the last-run bound, for callers that
    tried it already).
    ``use_astar``: order the search by extra cost + :meth:`_Instance.rerun_bound` (A*);
    ``False`` is plain Dijkstra (the same optimum, more states: for comparison).

    ``incumbent``: a known plan (e.g. from :mod:`memopt.remat.heuristic`); if its peak is
    within the limit, only strictly cheaper plans are searched for (branch and bound: a state
    whose key reaches the incumbent's cost is not pushed), the incumbent is returned as
    optimal when none exists, and it is the plan returned on a time-out (status still
    ``time_limit``). ``cost_lower``: a proven lower bound on the answer (e.g.
    :func:`memopt.remat.lower_bounds.cost_lower_bound`); an incumbent that meets it is
    optimal at once, and keys are raised to it (ties go to the deepest state: a dive towards
    a plan of that cost). Neither changes the optimum (proofs/remat_treedp.md, Lemma 5).
    """
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int):
        raise OptionError(f"memory limit must be an integer number of bytes, got {memory_limit!r}")
    inst = _Instance(graph, cap, prune_held)
    if use_bound:
        from memopt.remat.feasibility import last_run_bound
        from memopt.remat.lower_bounds import peak_lower_bound
        share = None if time_limit is None else 0.2 * float(time_limit)
        if peak_lower_bound(graph, cap, trap=False) > memory_limit or \
                (use_last_run and last_run_bound(graph, memory_limit, time_limit=share).value > memory_limit):
            return TreeDPResult("infeasible", None, None, None, 0)
    deadline = None if time_limit is None else time.perf_counter() + float(time_limit)
    upper, inc = None, None
    if incumbent is not None:
        ev = evaluate_plan(graph, incumbent, cap)
        if ev.peak <= memory_limit:
            upper, inc = ev.extra_cost, (incumbent, ev)
            if upper <= cost_lower:
                return _finish(graph, cap, incumbent, upper, memory_limit, 0, verify)
    start_live = sum(1 << t for t in inst.inputs)
    if inst.const + sum(inst.size[t] for t in inst.inputs) > memory_limit:
        return TreeDPResult("infeasible", None, None, None, 0)
    first = inst.settle_start(start_live, memory_limit)
    if first is None:
        return TreeDPResult("infeasible", None, None, None, 0)
    start, live0, h0 = first
    start_free = [t for t in inst.inputs if not live0 >> t & 1]
    # costs in kernel units (exact integers: 1/D of a cost unit; see _Instance)
    D = inst.D
    if upper is not None:
        upper = upper * D
    floor = (math.ceil(cost_lower * D) if inst.scaled else cost_lower) if use_astar else 0
    best = {start: 0}
    parent: dict = {start: None}
    tie = itertools.count()
    # A*: key = max(extra cost so far + admissible bound on what is left (Lemma 4), proven
    # lower bound on the answer (Lemma 5)); ties on the key go to the state with more runs
    # behind it (deeper, closer to a goal): with many states at key OPT this finds the goal
    # without sweeping the whole layer
    heap = [(max(h0, floor) if use_astar else 0, 0, (0, next(tie)), 0, start)]
    expanded = 0
    while heap:
        _, depth, _, c, state = heapq.heappop(heap)
        if best[state] != c:
            continue
        if inst.is_goal(state):
            plan = _rebuild(inst, parent, state, start_free)
            return _finish(graph, cap, plan, inst.exact(c), memory_limit, expanded, verify)
        expanded += 1
        if (max_states is not None and expanded > max_states) or \
                (deadline is not None and expanded % 64 == 0 and time.perf_counter() > deadline):
            return _stopped(inc, expanded)
        rows, dcost, hs, ops, nbytes = inst.successors(state, memory_limit)
        width = inst.row_len
        for i, h2 in enumerate(hs):
            nc = c + dcost[i]
            if upper is not None and nc + h2 >= upper:
                continue
            nstate = rows[i * width:(i + 1) * width]
            old = best.get(nstate)
            if old is None or nc < old:
                best[nstate] = nc
                parent[nstate] = (state, ops[i])
                key = max(nc + h2, floor) if use_astar else nc
                # ties: more runs behind (closer to a goal), then fewer live bytes (more room)
                heapq.heappush(heap, (key, depth - 1, (nbytes[i], next(tie)), nc, nstate))
    if inc is not None:
        # no plan cheaper than the incumbent exists (Lemma 5): it is optimal
        plan, ev = inc
        return _finish(graph, cap, plan, ev.extra_cost, memory_limit, expanded, verify)
    return TreeDPResult("infeasible", None, None, None, expanded)


def _stopped(inc, expanded) -> TreeDPResult:
    """Out of time or states: ``time_limit``, with the incumbent plan (not proved) if any."""
    if inc is None:
        return TreeDPResult("time_limit", None, None, None, expanded)
    plan, ev = inc
    return TreeDPResult("time_limit", ev.extra_cost, ev.peak, plan, expanded)


def _rebuild(inst: _Instance, parent, state, start_free) -> RematPlan:
    """The plan along the parent pointers. A move ``prev -> state`` by op ``v`` is: free the
    size-0 outputs of ``v`` still live, run ``v``, free whatever of ``prev``'s live set and
    ``v``'s outputs is not live in ``state`` (proofs/remat_treedp.md §2)."""
    moves = []
    while parent[state] is not None:
        prev, v = parent[state]
        before, after = inst.live_of(prev), inst.live_of(state)
        pre = [t for t in inst.zero_out[v] if before >> t & 1]
        made = before | sum(1 << t for t in inst.outs[v])
        drop = made & ~after
        moves.append((v, pre, [t for t in range(inst.T) if drop >> t & 1]))
        state = prev
    steps = [(FREE, t) for t in start_free]
    for v, pre, drop in reversed(moves):
        steps.extend((FREE, t) for t in pre)
        steps.append((RUN, v))
        steps.extend((FREE, t) for t in drop)
    return RematPlan.from_pairs(steps)


def _finish(graph, cap, plan, c, memory_limit, expanded, verify) -> TreeDPResult:
    ev = evaluate_plan(graph, plan, cap)
    require(ev.extra_cost == c and ev.peak <= memory_limit, "remat-treedp-plan",
            f"the DP's plan evaluates to peak {ev.peak}, extra cost {ev.extra_cost}; "
            f"the DP claimed extra cost {c} within {memory_limit}")
    if verify:
        check_plan(graph, plan, cap, claimed_peak=ev.peak, claimed_extra_cost=ev.extra_cost)
    return TreeDPResult("optimal", ev.extra_cost, ev.peak, plan, expanded)


def min_peak(graph: TensorGraph, cost_budget, cap=1, *, time_limit: float | None = None,
             max_states: int | None = None, lower: int | None = None, upper: int | None = None) -> TreeDPResult:
    """The least peak of a plan with extra cost ``<= cost_budget`` (bisection over the limit
    with :func:`min_extra_cost`; the least extra cost is non-increasing in the limit).

    ``lower`` / ``upper``: a known lower bound on the answer and the peak of a known plan
    within the budget (defaults: :func:`memopt.remat.lower_bounds.peak_lower_bound`, raised by
    :func:`memopt.remat.feasibility.last_run_bound`, and the
    no-recomputation plan of the graph's topological order). Returns ``status`` ``optimal``
    (peak proved least), or ``time_limit`` with the best plan found so far (``peak`` is then
    an upper bound).
    """
    if cost_budget < 0:
        raise OptionError(f"cost budget must be >= 0, got {cost_budget}")
    deadline = None if time_limit is None else time.perf_counter() + float(time_limit)
    base_plan = plan_from_order(graph, graph.topological_order())
    base = evaluate_plan(graph, base_plan)
    if upper is None or upper > base.peak:
        upper = base.peak
    tried = lower is None  # then lower includes the last-run bound: the searches need not retry it
    if lower is None:
        from memopt.remat.feasibility import last_run_bound
        from memopt.remat.lower_bounds import peak_lower_bound
        lower = peak_lower_bound(graph, cap, cost_budget=cost_budget)
        share = None if time_limit is None else 0.2 * float(time_limit)
        lower = last_run_bound(graph, lower, time_limit=share).value  # Lemma 10 holds for every plan
    best = TreeDPResult("feasible", base.extra_cost, base.peak, base_plan, 0) if upper == base.peak else None
    lo, hi = lower, upper
    expanded = 0
    while lo < hi:
        mid = (lo + hi) // 2
        left = None if deadline is None else max(0.0, deadline - time.perf_counter())
        r = min_extra_cost(graph, mid, cap, time_limit=left, max_states=max_states, use_last_run=not tried)
        expanded += r.states
        if r.status == "time_limit":
            if best is None:
                return TreeDPResult("time_limit", None, None, None, expanded)
            return TreeDPResult("time_limit", best.extra_cost, best.peak, best.plan, expanded)
        if r.status == "optimal" and r.extra_cost <= cost_budget:
            best = r
            hi = r.peak  # the plan found may already be below mid
        else:
            lo = mid + 1
    if best is None or best.peak != hi:
        left = None if deadline is None else max(0.0, deadline - time.perf_counter())
        r = min_extra_cost(graph, hi, cap, time_limit=left, max_states=max_states)
        expanded += r.states
        if r.status != "optimal":
            return TreeDPResult("time_limit", None, None, None, expanded)
        best = r
    return TreeDPResult("optimal", best.extra_cost, best.peak, best.plan, expanded)


def treedp_method(problem, *, question: str, memory_limit=None, cost_budget=None, cap=1, time_limit: float = 10.0,
                  incumbent=None, seed: int = 0, warm_start: float = 0.3, feasibility_share: float = 0.4,
                  clock=None):
    """Registry method ``treedp`` (see :mod:`memopt.remat.registry`): :func:`min_extra_cost` or
    :func:`min_peak`, with the common start and finish of every recomputation method (the
    footprint bound, the incumbent, exact re-evaluation of the plan).

    ``min_cost`` first tries the last-run bound of
    :func:`memopt.remat.feasibility.last_run_bound` (proofs/remat_treedp.md, Lemma 10; at most
    a tenth of the time limit): above the limit, ``infeasible`` at once (stats
    ``last_run_bound``: the witness). It is then warm-started with up to ``warm_start`` of the
    time limit: the cost lower bound of :func:`memopt.remat.lower_bounds.cost_lower_bound`
    and, without an incumbent that fits, the plan of the ``heuristic`` method; the DP then searches only for cheaper
    plans (an incumbent meeting the bound is optimal at once), and on a time-out the answer
    is the incumbent (``feasible``) with the cost lower bound. When no plan within the limit
    is known after the warm start, :func:`memopt.remat.feasibility.feasible_plan` runs first
    with ``feasibility_share`` of the time left: ``infeasible`` is then the answer (proved by
    exhaustion), a plan it finds is the DP's incumbent. ``clock``: the caller's
    :class:`memopt.clock.Clock` (its time left is the time limit)."""
    from memopt.remat.model_common import RematProblem, finish_result, start_result
    from memopt.time_shares import remat_clock

    t0 = time.perf_counter()
    clock = remat_clock(time_limit, clock)
    time_limit = clock.left()
    p = RematProblem.of(problem, cap)
    st = start_result(p, question, memory_limit, cost_budget, incumbent, "treedp", t0)
    if st.done:
        return st.result
    caps = list(p.caps)
    stats: dict = {}
    if question == "min_cost":
        from memopt.remat.feasibility import last_run_bound
        from memopt.remat.lower_bounds import cost_lower_bound
        from memopt.remat.registry import get_method

        # the last runs before a read (proofs/remat_treedp.md Lemma 10): a peak bound that
        # the footprint bound of start_result does not see, cheap enough to try first
        bound = last_run_bound(p.graph, st.memory_limit, clock=clock.child("treedp.last_runs"))
        if bound.value > st.memory_limit:
            st.lower = max(st.lower, bound.value)
            return finish_result(p, st, None, ("infeasible",), "treedp", t0, {"last_run_bound": bound.proof})

        share = max(0.0, float(warm_start)) * float(time_limit)
        lower = 0
        plan = st.incumbent
        if share > 0:
            # two thirds to the bound (it stops as soon as it is done; a tight bound is what
            # settles an A* layer), one third to the heuristic's incumbent
            sub = clock.part(1.0, most=2 * share / 3)
            cb = cost_lower_bound(p.graph, st.memory_limit, caps, time_limit=sub.left(), clock=sub)
            if cb.infeasible:
                return finish_result(p, st, None, ("infeasible",), "treedp", t0, {"proof": "cost lower bound"})
            lower = cb.value
            if plan is None:
                sub = clock.part(1.0, most=share / 3)
                h = get_method("heuristic").load()(p.graph, question="min_cost", memory_limit=st.memory_limit,
                                                  cap=caps, time_limit=sub.left(), clock=sub)
                if h.plan is not None and h.peak is not None and h.peak <= st.memory_limit:
                    plan = h.plan
            stats["warm_start"] = {"cost_lower_bound": str(lower),
                                   "incumbent_cost": None if plan is None else str(evaluate_plan(p.graph, plan,
                                                                                                 caps).extra_cost)}
        from memopt.remat.feasibility import MAX_LEVELS, feasible_plan

        if plan is None and max(caps, default=0) + 1 <= MAX_LEVELS:
            # no plan within the limit is known: decide feasibility first with part of the
            # time (proofs/remat_treedp.md §2.2: exhaustion proves infeasible, which the cost
            # DP cannot do cheaply since it tells states apart by cost)
            # (the last-run bound was tried above)
            fz = feasible_plan(p.graph, st.memory_limit, caps, clock=clock.part(feasibility_share), use_bound=False)
            stats["feasibility"] = {"status": fz.status, "states": fz.states, "pruned": fz.pruned}
            if fz.status == "infeasible":
                stats["feasibility"]["proof"] = (f"feasibility search exhausted {fz.states} states (dominance, "
                                                 "proofs/remat_treedp.md Theorem 4)")
                return finish_result(p, st, None, ("infeasible",), "treedp", t0, stats)
            plan = fz.plan
        remaining = clock.left()
        r = min_extra_cost(p.graph, st.memory_limit, caps, time_limit=remaining, incumbent=plan, cost_lower=lower,
                           use_last_run=False)  # tried above
        proven = {"optimal": ("cost", r.extra_cost), "infeasible": ("infeasible",)}.get(r.status, ("cost", lower))
    else:
        remaining = clock.left()
        r = min_peak(p.graph, st.cost_budget, caps, time_limit=remaining)
        proven = ("peak", r.peak) if r.status == "optimal" else None
    return finish_result(p, st, r.plan, proven, "treedp", t0,
                         {**stats, "states": int(r.states), "dp_status": r.status})
