"""Exact feasibility of capped recomputation under a memory limit, by search with dominance.

Question: is there *any* valid plan (``docs/remat.md``: ``run`` / ``free`` steps, every op run at
least once and at most ``1 + k(op)`` times, graph outputs live at the end) whose peak is at
most ``M``? The cost DP of :mod:`memopt.remat.treedp` answers it only by exhausting states
that differ in extra cost; this search ignores cost and keeps, per set of ops that have run,
only the states no visited state *dominates* (proofs/remat_treedp.md §2.2, Lemma 8 and
Theorem 4):

* **State.** ``(L, κ)`` as in the DP (live set; run count per op, ``closed`` for an op that
  can never usefully run again), settled by the DP's own step (the compiled
  :func:`memopt.remat._treedp_kernel.settle`: availability, usefulness, potential; dead
  ends dropped), taken right *after* a run, with the run's outputs live.
* **Dominance.** ``A = (I, κ_A, L_A)`` dominates ``B = (I, κ_B, L_B)`` (same ideal ``I`` of
  ops that ran) when ``κ_A <= κ_B`` per op (``closed`` counts as the cap) and
  ``L_A ⊇ L_B``: whatever completes ``B`` completes ``A`` after freeing ``L_A \\ L_B``.
* **Transition.** "free a set, then run ``v``": keep a set ``K`` of the live tensors that
  are not ``v``'s inputs or outputs, with ``R + s(in(v)) + s(K) + s(out(v)) + w(v) <= M``.
  Only the *maximal* such ``K`` are tried (keeping more dominates keeping less), which makes
  dominance a simulation, so dropping every state dominated by a visited one loses no plan.

Depth-first, first runs before re-runs; exhaustion proves ``infeasible``, a goal state gives
a plan, which is rebuilt, evaluated and checked (:func:`memopt.remat.checker.check_plan`)
before it is returned. A time limit or a state limit gives ``unknown``.

Before searching, :func:`last_run_bound` (proofs/remat_treedp.md §2.3, Lemma 10) may settle
the limit: take an op ``s`` and two ops ``p``, ``q`` that feed it; whichever of them runs
last before ``s`` does so while a vertex cut between the other one and ``s``'s inputs is
live, so every plan peaks at ``min(m0(q) + cut(p), m0(p) + cut(q))`` or more, whatever the
caps (``m0``: the memory of a run with nothing else live). The order of last runs is what no
per-state dominance sees: the 60-op benchmark limit this search could not exhaust in 400 CPU
seconds (seed 5 at 0.9, limit 51) is infeasible by it at once (peak >= 54).

Example: under 14 bytes the early value ``a`` (10 bytes) cannot be held across ``B``-``D``,
and with cap 0 it cannot be re-made, so no plan exists; with cap 1 one does:

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build(
...     tensors=[Tensor("a", 10), Tensor("b", 4), Tensor("c", 4), Tensor("d", 4), Tensor("z", 1, output=True)],
...     ops=[Op("A", (), ("a",)), Op("B", ("a",), ("b",)), Op("C", ("b",), ("c",)),
...          Op("D", ("c",), ("d",)), Op("Z", ("a", "d"), ("z",))])
>>> feasible_plan(g, 15, cap=0).status, feasible_plan(g, 15, cap=1).status
('infeasible', 'feasible')

Reference: the frontier states and settle step of proofs/remat_treedp.md §2; dominance
pruning in the sense of the "dominance relations" of branch and bound (Ibaraki, *The power of
dominance relations in branch-and-bound algorithms*, J. ACM 24(2), 1977); the cut of Lemma 10
is a minimum vertex cut by max-flow (Ford and Fulkerson, *Flows in Networks*, 1962).
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import NamedTuple

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import OptionError, require
from memopt.remat.checker import check_plan
from memopt.remat.plan import FREE, RUN, RematPlan, evaluate_plan

__all__ = ["MAX_LEVELS", "FeasibilityResult", "LastRunBound", "feasible_plan", "last_run_bound"]

# run counts are compared as bit masks per level (count >= j): one mask per level
MAX_LEVELS = 64


class FeasibilityResult(NamedTuple):
    """``status``: ``feasible`` (``plan`` is within the limit and checked), ``infeasible``
    (proved by exhaustion) or ``unknown`` (time or state limit). ``states``: states expanded;
    ``pruned``: successors dropped as dominated by a visited state; ``proof``: for
    ``infeasible`` without a search, the bound that settled it (:func:`last_run_bound`)."""

    status: str
    plan: RematPlan | None
    peak: int | None
    states: int
    pruned: int
    proof: str | None = None


def _maximal_fits(items, budget):
    """Every maximal subset of ``items`` (``(size, tensor)`` pairs, positive sizes, largest
    first) whose total size is at most ``budget``, as bit masks of the tensors."""
    total = sum(s for s, _ in items)
    if total <= budget:
        return [sum(1 << t for _, t in items)]
    if budget < 0:
        return []
    rest = [0] * (len(items) + 1)
    for i in range(len(items) - 1, -1, -1):
        rest[i] = rest[i + 1] + items[i][0]
    found = []

    def walk(i, room, mask, min_out):
        # every leaf below ends with room >= room - rest[i]; it is maximal only if no
        # left-out item fits in that room
        if min_out <= room - rest[i]:
            return
        if i == len(items):
            found.append(mask)
            return
        s, t = items[i]
        if s <= room:
            walk(i + 1, room - s, mask | (1 << t), min_out)
        walk(i + 1, room, mask, min(min_out, s))

    walk(0, budget, 0, 1 << 62)
    return found


class LastRunBound(NamedTuple):
    """A lower bound on the peak of every valid plan, whatever the caps (proofs/remat_treedp.md,
    Lemma 10). ``value``: the bound; the witness: the op ``reader`` (``None``: the end of the
    plan, which reads the graph outputs), the ops ``ops`` that feed it, and ``later[i]``: the
    memory of the last run of ``ops[i]`` before the read if it is the latest of them
    (``value`` is the least). No witness: ``value`` is the floor it was asked to beat."""

    value: int
    reader: str | None = None
    ops: tuple = ()
    later: tuple = ()

    @property
    def proof(self) -> str | None:
        """One line stating the witness, or ``None``."""
        if not self.ops:
            return None
        at = "the end" if self.reader is None else f"op {self.reader!r}"
        return (f"last runs before {at} (proofs/remat_treedp.md Lemma 10): whichever of "
                f"{', '.join(map(repr, self.ops))} runs last needs {', '.join(map(str, self.later))} bytes "
                f"respectively; peak >= {self.value}")


def _deadline(time_limit, clock) -> float | None:
    """The deadline of ``clock``, else of ``time_limit`` seconds from now, else none."""
    if clock is not None:
        return clock.end
    if time_limit is None:
        return None
    from memopt.time_shares import remat_clock

    return remat_clock(time_limit).end


def last_run_bound(graph: TensorGraph, at_least: int = 0, max_ops: int = 3, *,
                   time_limit: float | None = None, clock=None) -> LastRunBound:
    """The largest bound of Lemma 10 (proofs/remat_treedp.md) above ``at_least`` over sets of
    2 to ``max_ops`` ops, with its witness; ``LastRunBound(at_least)`` when none beats it.
    After ``time_limit`` seconds the best bound found so far is returned (every witness is a
    proof on its own; the bound is polynomial, ``O((n + 1) · h^max_ops)`` max-flows for ``h``
    ops heavy enough to matter, but ``h`` can be large on big graphs). ``clock``: the caller's
    :class:`memopt.clock.Clock`, in place of ``time_limit``.

    For an op ``s`` (or the end of the plan) and a set ``A`` of ops with inputs of ``s``
    descending from each, take the last run of each before a run of ``s``, and the latest
    of those, of ``q``: every path of tensors from another op of ``A`` to ``s``'s inputs has
    a tensor live at it or touched by ``q`` (the productions along the path cover the time
    from that op's last run to ``s``'s), so it needs ``m0(q)`` (its memory with nothing else
    live) plus a minimum vertex cut; the peak is at least the least of these over ``q``.

    Example: three ops with 20 bytes of workspace and a 5-byte result each, read by ``S``:
    the last of them runs next to the other two results (any two ops show only 30):

    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build(
    ...     tensors=[Tensor("x", 5), Tensor("y", 5), Tensor("z", 5), Tensor("s", 1, output=True)],
    ...     ops=[Op("X", (), ("x",), workspace=20), Op("Y", (), ("y",), workspace=20),
    ...          Op("Z", (), ("z",), workspace=20), Op("S", ("x", "y", "z"), ("s",))])
    >>> b = last_run_bound(g)
    >>> b.value, b.reader, b.ops
    (35, 'S', ('X', 'Y', 'Z'))
    """
    from memopt.core.closure import max_flow
    from memopt.remat.treedp import strict_descendants

    n, T = graph.num_ops, graph.num_tensors
    size = [int(x) for x in graph.tensor_size]
    resident = [bool(r) for r in graph.tensor_resident]
    producer = [int(x) for x in graph.tensor_producer]
    output = [bool(o) for o in graph.tensor_output]
    ins = [sorted({int(t) for t in graph.inputs_of(v) if not resident[int(t)]}) for v in range(n)]
    outs = [sorted({int(t) for t in graph.outputs_of(v)}) for v in range(n)]
    cons = [sorted({int(u) for u in graph.consumers_of(t)}) for t in range(T)]
    below = strict_descendants(graph, outs, cons)
    first_mem = [graph.resident_bytes + sum(size[t] for t in ins[v] + outs[v]) + int(graph.op_workspace[v])
                 for v in range(n)]
    touched = [set(ins[v]) | set(outs[v]) for v in range(n)]
    big = sum(size) + 1
    best = LastRunBound(int(at_least))
    deadline = _deadline(time_limit, clock)

    def cut(s, sources, zs, free) -> int:
        """Least bytes outside ``free`` that meet every tensor path from the outputs of the ops
        ``sources`` to ``zs`` (a minimum vertex cut; only tensors made by a source or below one,
        and not by ``s`` or below it, can be on such a path)."""
        reach = 0
        for p in sources:
            reach |= below[p] | 1 << p
        if s is not None:
            reach &= ~(below[s] | 1 << s)
        mine = [x for x in range(T) if producer[x] >= 0 and reach >> producer[x] & 1]
        node = {x: i for i, x in enumerate(mine)}
        src, dst = 2 * len(mine), 2 * len(mine) + 1
        arcs = []
        for x, i in node.items():
            arcs.append((2 * i, 2 * i + 1, 0 if x in free or resident[x] else size[x]))  # R counts residents
            if producer[x] in sources:
                arcs.append((src, 2 * i, big))
            if x in zs:
                arcs.append((2 * i + 1, dst, big))
            for c in cons[x]:
                if c != s:
                    arcs.extend((2 * i + 1, 2 * node[y], big) for y in outs[c] if y in node)
        tails, heads, caps = zip(*arcs)
        return max_flow(dst + 1, src, dst, tails, heads, caps)[0]

    readers = [(s, ins[s]) for s in range(n)] + [(None, [t for t in range(T) if output[t] and not resident[t]])]
    for s, read in readers:
        if deadline is not None and time.perf_counter() > deadline:
            break
        made = {t for t in read if producer[t] >= 0}
        # Z_p: the inputs of s that descend from p (made by p or a strict descendant of p)
        feeds = {}
        for p in range(n):
            zs = {t for t in made if producer[t] == p or below[p] >> producer[t] & 1}
            if zs:
                feeds[p] = zs
        everything = sum(size[t] for t in made)
        pair_cut: dict = {}

        def upper(q, others) -> int:
            """A cut that needs no flow: the separated inputs of s, or the outputs of the
            sources (every path starts at one), or (3 ops or more) the union of the cuts of
            single sources already computed."""
            free = touched[q]
            zs = set().union(*(feeds[p] for p in others))
            heads = set().union(*(outs[p] for p in others))
            ub = min(sum(size[t] for t in zs - free), sum(size[t] for t in heads - free))
            if len(others) > 1 and all((p, q) in pair_cut for p in others):
                ub = min(ub, sum(pair_cut[p, q] for p in others))
            return ub

        for k in range(2, max_ops + 1):
            # a set can beat the best only with ops whose m0 plus all of s's inputs beats it
            heavy = [p for p in feeds if first_mem[p] + everything > best.value]
            for group in itertools.combinations(heavy, k):
                if deadline is not None and time.perf_counter() > deadline:
                    return best
                if any(first_mem[q] + upper(q, [p for p in group if p != q]) <= best.value for q in group):
                    continue
                later = []
                for q in group:
                    others = [p for p in group if p != q]
                    c = cut(s, set(others), set().union(*(feeds[p] for p in others)), touched[q])
                    if k == 2:
                        pair_cut[others[0], q] = c
                    later.append(first_mem[q] + c)
                    if later[-1] <= best.value:
                        break
                else:
                    names = graph.op_names
                    best = LastRunBound(min(later), None if s is None else names[s],
                                        tuple(names[q] for q in group), tuple(later))
    return best


def feasible_plan(graph: TensorGraph, memory_limit: int, cap=1, *, time_limit: float | None = None,
                  max_states: int | None = None, verify: bool = True, use_bound: bool = True,
                  clock=None) -> FeasibilityResult:
    """Decide whether a plan with peak ``<= memory_limit`` exists within the caps (``cap``:
    one global cap or per-op caps, as :func:`memopt.remat.plan.resolve_caps`); never raises
    on a hard instance (``unknown`` after ``time_limit`` seconds or ``max_states``).
    ``use_bound``: ``infeasible`` at once when :func:`last_run_bound` exceeds the limit (the
    tests turn it off to exercise the search alone; it gets the share ``feasibility.last_runs``
    of the time). ``clock``: the caller's :class:`memopt.clock.Clock`, in place of ``time_limit``."""
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int):
        raise OptionError(f"memory limit must be an integer number of bytes, got {memory_limit!r}")
    from memopt.remat.treedp import _Instance

    inst = _Instance(graph, cap, prune_held=False)
    n, T = inst.n, inst.T
    a, w = inst.arrays, inst.work
    limit = [int(x) for x in a[17]]
    levels = max(limit, default=1)
    if levels > MAX_LEVELS:
        raise OptionError(f"the feasibility search needs caps of at most {MAX_LEVELS - 1} (got a cap of "
                          f"{levels - 1} or none); give a finite cap")
    # the last runs before a read (Lemma 10) settle some limits without any search
    if clock is None and time_limit is not None:
        from memopt.time_shares import remat_clock

        clock = remat_clock(time_limit)
    bound = None
    if use_bound:
        bound = last_run_bound(graph, memory_limit, clock=None if clock is None else clock.child("feasibility.last_runs"))
    if bound is not None and bound.value > memory_limit:
        return FeasibilityResult("infeasible", None, None, 0, 0, bound.proof)
    size = inst.size
    resident = [bool(r) for r in a[13]]
    ins, outs, cons = inst.ins, inst.outs, inst.cons
    in_mask = [sum(1 << t for t in ins[v] if not resident[t]) for v in range(n)]
    out_mask = [sum(1 << t for t in outs[v]) for v in range(n)]
    first_mem = [int(x) for x in a[25]]  # Lemma 6's m_0(v)
    topo = [int(v) for v in a[4]]
    fset = np.zeros(n, dtype=np.uint8)
    nbytes = max(1, (T + 7) // 8)
    producer = [int(p) for p in a[11]]
    graph_out = [bool(o) for o in a[16]]
    settle = inst.settle_fn

    def settled(live: int, count: list[int]):
        """Settle ``(live, count)`` (the DP's step, proofs/remat_treedp.md §2) or ``None``."""
        lv = np.unpackbits(np.frombuffer(live.to_bytes(nbytes, "little"), dtype=np.uint8), count=T,
                           bitorder="little")
        cnt = np.array(count, dtype=np.int64)
        dead, _ = settle(lv, cnt, a[0], a[1], a[4], *a[5:21], memory_limit, *a[25:29], False, *w[6:14], False,
                         fset)
        if dead:
            return None
        return int.from_bytes(np.packbits(lv, bitorder="little").tobytes(), "little"), [int(c) for c in cnt]

    full = (1 << ((levels - 1) * n)) - 1

    def signature(live, count):
        """``(ideal mask, word)``: ``word`` packs the live set and the complement of the run
        count levels (bit ``(j - 2) n + v`` of the levels: ``count(v) >= j``, closed counts as the
        cap's level), so that ``A`` dominates ``B`` (same ideal) iff ``word_B & ~word_A == 0``."""
        ideal = lvc = 0
        for v, c in enumerate(count):
            if c == 0:
                continue
            ideal |= 1 << v
            c = limit[v] if c < 0 else c
            for j in range(2, c + 1):
                lvc |= 1 << ((j - 2) * n + v)
        return ideal, live | ((full ^ lvc) << T)

    deadline = None if clock is None else clock.end
    start_live = sum(1 << t for t in inst.inputs)
    if inst.const + sum(size[t] for t in inst.inputs) > memory_limit:
        return FeasibilityResult("infeasible", None, None, 0, 0)
    first = settled(start_live, [0] * n)
    if first is None:
        return FeasibilityResult("infeasible", None, None, 0, 0)
    start_free = [t for t in inst.inputs if not first[0] >> t & 1]
    goal_mask = inst.goal
    # per ideal: the visited states no other visited state dominates (an antichain)
    visited: dict[int, list[tuple[int, tuple]]] = {}
    alive: set = set()  # the keys of the states in the antichains
    parent: dict = {}

    def dominated(ideal, word) -> bool:
        return any(word & ~w2 == 0 for w2, _ in visited.get(ideal, ()))

    def visit(ideal, word, state_key):
        chain = visited.setdefault(ideal, [])
        # drop the visited states the new one dominates; one not expanded yet never will be
        # (transitivity keeps the pruning sound: Theorem 4)
        keep = []
        for entry in chain:
            if entry[0] & ~word == 0:
                alive.discard(entry[1])
            else:
                keep.append(entry)
        keep.append((word, state_key))
        chain[:] = keep
        alive.add(state_key)

    def irreplaceable(t, count) -> bool:
        """Freeing live ``t`` makes the state a dead end: it is still needed (a graph output, or
        read by an op that has not run) and cannot be made again (no producer, or its producer
        is closed or at its cap): such tensors are in every kept set that the settle step keeps."""
        p = producer[t]
        if p >= 0 and 0 <= count[p] < limit[p]:
            return False
        return graph_out[t] or any(count[u] == 0 for u in cons[t])

    below = inst.below  # strict descendants of every op (bit masks), for the first runs ahead
    touched = [in_mask[v] | out_mask[v] for v in range(n)]

    def held_overflow(live, count) -> bool:
        """Some op ``u`` that has not run cannot fit its first run next to the tensors that
        must be live across it: live, positive size, not re-makable (:func:`irreplaceable`),
        and a graph output or read by an op that has not run and descends from ``u`` (it
        runs after ``u``'s first run). Such a state has no completion (proofs/remat_treedp.md,
        Lemma 8 (c))."""
        held = []
        for t in range(T):
            if live >> t & 1 and size[t] > 0 and irreplaceable(t, count):
                readers = sum(1 << u for u in cons[t] if count[u] == 0)
                held.append((t, graph_out[t], readers, size[t]))
        if not held:
            return False
        for u in range(n):
            if count[u] != 0:
                continue
            need = first_mem[u]
            for t, is_out, readers, s_t in held:
                if not touched[u] >> t & 1 and (is_out or readers & below[u]):
                    need += s_t
            if need > memory_limit:
                return True
        return False

    def key(live, count):
        return live, tuple(count)

    def is_goal(live, count):
        return live & goal_mask == goal_mask and all(c != 0 for c in count)

    live0, count0 = first
    parent[key(live0, count0)] = None
    visit(*signature(live0, count0), key(live0, count0))
    # best first by the re-runs behind a state, then deepest: states with fewer re-runs
    # dominate more, and with no re-run this is a dive along one order
    heap = [(0, 0, 0, live0, count0)]
    tie = itertools.count(1)
    expanded = pruned = 0
    while heap:
        reruns, depth, _, live, count = heapq.heappop(heap)
        if key(live, count) not in alive:
            continue  # dominated by a state visited after it
        if is_goal(live, count):
            return _finish(graph, cap, inst, parent, key(live, count), start_free, memory_limit, expanded, pruned,
                           verify)
        expanded += 1
        if (max_states is not None and expanded > max_states) or \
                (deadline is not None and time.perf_counter() > deadline):
            # checked at every expansion: one expansion can be slow (many maximal kept sets)
            return FeasibilityResult("unknown", None, None, expanded, pruned)
        for v in topo:
            k = count[v]
            if k < 0 or k >= limit[v] or in_mask[v] & ~live:
                continue
            budget = memory_limit - first_mem[v]
            if budget < 0:
                continue
            others = live & ~in_mask[v] & ~out_mask[v]
            after = count[:v] + [k + 1] + count[v + 1:]
            forced = 0
            for t in range(T):
                if others >> t & 1 and (size[t] == 0 or irreplaceable(t, after)):
                    forced |= 1 << t
                    budget -= size[t]
            items = sorted(((size[t], t) for t in range(T) if others >> t & 1 and not forced >> t & 1),
                           reverse=True)
            for kept in _maximal_fits(items, budget):
                kept |= forced
                raw = kept | in_mask[v] | out_mask[v]
                nxt = settled(raw, after)
                if nxt is None:
                    continue
                ideal, word = signature(*nxt)
                if dominated(ideal, word):
                    pruned += 1
                    continue
                if held_overflow(*nxt):
                    continue
                nkey = key(*nxt)
                visit(ideal, word, nkey)
                parent[nkey] = (key(live, count), v, live & ~(kept | in_mask[v]), raw & ~nxt[0])
                heapq.heappush(heap, (reruns + (k > 0), depth - 1, next(tie), *nxt))
    return FeasibilityResult("infeasible", None, None, expanded, pruned)


def _finish(graph, cap, inst, parent, state, start_free, memory_limit, expanded, pruned, verify):
    """Rebuild the plan along the parent pointers (each move: free, run, free what the settle
    step freed), evaluate and check it."""
    moves = []
    while parent[state] is not None:
        prev, v, before, after = parent[state]
        moves.append((v, before, after))
        state = prev
    steps = [(FREE, t) for t in start_free]
    for v, before, after in reversed(moves):
        steps.extend((FREE, t) for t in range(inst.T) if before >> t & 1)
        steps.append((RUN, v))
        # the tensors the settle step freed after the run (no longer potential)
        steps.extend((FREE, t) for t in range(inst.T) if after >> t & 1)
    plan = RematPlan.from_pairs(steps)
    ev = evaluate_plan(graph, plan, cap)
    require(ev.peak <= memory_limit, "remat-feasibility-plan",
            f"the feasibility search's plan evaluates to peak {ev.peak} above the limit {memory_limit}")
    if verify:
        check_plan(graph, plan, cap, claimed_peak=ev.peak, claimed_extra_cost=ev.extra_cost)
    return FeasibilityResult("feasible", plan, ev.peak, expanded, pruned)
