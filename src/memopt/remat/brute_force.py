"""Exact recomputation by exhaustive search over canonical plans: ground truth for tests.

Not a public solver (no registry entry): exponential, for graphs of a handful of ops.

Search space
------------
A state is ``(live set, run counts)``. From a state, a move runs one op ``v`` (inputs live,
cap not reached, no output of positive size live) and then frees any subset of the
positive-size tensors among ``v``'s inputs and outputs (never a resident tensor). Size-0
outputs of ``v`` that are still live are freed right before it runs (that free is written
into the plan). At the start, positive-size graph inputs that no op reads and that are not
graph outputs are freed. An op whose outputs all have size 0 is never re-run, and a re-run
never frees all of its positive-size outputs right away (rules 3 and 4 below). A state is
final when every op has run and every graph output is live. Memory of a move = resident +
live bytes + outputs + workspace.

Canonical plans lose nothing
---------------------------
*Claim.* For every valid plan ``P`` there is a canonical plan ``P'`` (one the search can
produce) whose runs are a subsequence of ``P``'s runs that keeps every first run — hence
no more extra cost — and, run by run, no more memory; so ``min extra cost under M`` and ``min peak under budget B`` are the
same over canonical plans as over all plans.

*Proof.* Transform ``P`` tensor by tensor; a tensor's frees and productions alternate
(a free needs the tensor live, a run needs its outputs not live), so each free of ``t``
lies in one *segment* between a production of ``t`` (or the start, for a graph input) and
the next production of ``t`` (or the end).

1. *Positive size.* Move each free of ``t`` back to just after the latest run before it that
   reads or writes ``t`` (to the start if there is none — then ``t`` is a graph input that
   no run before the free reads; since a freed graph input never returns and the plan is
   valid, no run reads it at all, and it is not a graph output). Between the new and the
   old position no run reads ``t`` (by the choice of the run) and no run writes it (the
   free still lies in the same segment), so every rule still holds there, and the live
   set at each of those runs shrinks by ``t``: their memory drops by ``s(t) >= 0``. Other
   runs see the same live set.
2. *Size 0.* Move each free of ``t`` forward to just before the next run of ``t``'s
   producer (delete it if there is none). Runs in between that read ``t`` now find it live
   (reading is never forbidden by liveness), no run in between writes ``t``, memory does
   not change (``s(t) = 0``), and at the end ``t`` is live, which no rule forbids.

After both steps every free of a positive-size tensor follows a run touching it (or sits at
the start), and every free of a size-0 tensor precedes a run of its producer: exactly the
moves above.

3. *Useless re-runs.* In such a plan, a size-0 tensor is not live only before its
   producer's first run or right before a re-run of it; so a re-run of an op whose outputs
   all have size 0 leaves the live set as it found it. Delete it (and its pre-frees), and
   move the frees that followed it to just after the previous run touching each freed
   tensor, as in step 1: the plan stays valid and canonical, memory does not rise, and the
   cost drops by ``c(v) >= 0``. So the search never re-runs such an op.
4. *Re-runs whose outputs are dropped at once.* A re-run of ``v`` followed right away by
   frees of all of ``v``'s positive-size outputs leaves the live set as it found it (those
   outputs were not live before the run, size-0 ones were live before and after) except
   for the inputs it frees; delete it exactly as in 3. So a re-run never frees all of its
   positive-size outputs at once. (A *first* run may: its outputs may be needed by nobody
   yet, and it must run anyway.)

Only re-runs are deleted, so every op still runs and caps keep holding; every step keeps
the order of the remaining runs, never raises the memory of any of them, and never raises the cost.
:math:`\\square` Alias constraints are not modelled here (the tests of aliases use the
evaluator and the checker).

The search is Dijkstra on extra cost (exact ints/Fractions) with a memory limit; the
minimum peak under a budget is the least limit whose minimum cost fits the budget (found
by bisection: cost is non-increasing in the limit).
"""

from __future__ import annotations

import heapq
import itertools

from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.errors import OptionError, require
from memopt.remat.plan import FREE, RUN, RematPlan, exact_costs, plan_from_order, evaluate_plan, resolve_caps

MAX_OPS = 24
DEFAULT_MAX_STATES = 2_000_000


def min_extra_cost(graph: TensorGraph, memory_limit: int, cap=1, *, max_states: int = DEFAULT_MAX_STATES):
    """``(extra_cost, plan)`` of a cheapest plan whose peak is at most ``memory_limit``,
    or ``(None, None)`` when no plan within the caps meets the limit."""
    if graph.num_ops > MAX_OPS:
        raise OptionError(f"remat brute force is limited to {MAX_OPS} ops; the graph has {graph.num_ops}")
    caps = resolve_caps(graph, cap)
    n, T = graph.num_ops, graph.num_tensors
    limit = [None if caps is None else caps[v] + 1 for v in range(n)]
    size = [int(s) for s in graph.tensor_size]
    resident = [bool(r) for r in graph.tensor_resident]
    producer = [int(p) for p in graph.tensor_producer]
    ins = [[int(t) for t in graph.inputs_of(v)] for v in range(n)]
    outs = [[int(t) for t in graph.outputs_of(v)] for v in range(n)]
    in_mask = [sum(1 << t for t in ins[v] if not resident[t]) for v in range(n)]
    pos_out_mask = [sum(1 << t for t in outs[v] if size[t] > 0) for v in range(n)]
    zero_out = [[t for t in outs[v] if size[t] == 0] for v in range(n)]
    out_mask = [sum(1 << t for t in outs[v]) for v in range(n)]
    out_bytes = [sum(size[t] for t in outs[v]) for v in range(n)]
    ws = [int(w) for w in graph.op_workspace]
    cost = exact_costs(graph)
    # tensors a run may free: positive-size inputs and outputs, not resident
    freeable = [sorted({t for t in ins[v] + outs[v] if size[t] > 0 and not resident[t]}) for v in range(n)]
    const = graph.resident_bytes
    goal_mask = sum(1 << t for t in range(T) if graph.tensor_output[t] and not resident[t])
    read = set(t for v in range(n) for t in ins[v])
    start_live = 0
    start_free: list[int] = []
    for t in range(T):
        if producer[t] < 0 and not resident[t]:
            start_live |= 1 << t
    start_mem = const + sum(size[t] for t in range(T) if start_live >> t & 1)
    if start_mem > memory_limit:
        return None, None
    for t in range(T):
        if (start_live >> t & 1) and size[t] > 0 and t not in read and not graph.tensor_output[t]:
            start_free.append(t)
            start_live &= ~(1 << t)

    byte_cache: dict[int, int] = {}

    def live_bytes(mask: int) -> int:
        total = byte_cache.get(mask)
        if total is None:
            total, m = 0, mask
            while m:
                low = m & -m
                total += size[low.bit_length() - 1]
                m ^= low
            byte_cache[mask] = total
        return total

    # per op: the subsets a run may free, as (bit mask, tensors); a *re-run* may not free
    # all its positive outputs at once (rule 4 above: such a re-run is useless)
    subsets = []
    for v in range(n):
        first, again = [], []
        for r in range(len(freeable[v]) + 1):
            for drop in itertools.combinations(freeable[v], r):
                mask = sum(1 << t for t in drop)
                first.append((mask, drop))
                if not pos_out_mask[v] or (mask & pos_out_mask[v]) != pos_out_mask[v]:
                    again.append((mask, drop))
        subsets.append((first, again))
    moves = [(v, limit[v], in_mask[v], pos_out_mask[v], out_mask[v], const + out_bytes[v] + ws[v], cost[v],
              subsets[v][0], subsets[v][1]) for v in range(n)]
    start = (start_live, (0,) * n)
    best = {start: 0}
    parent: dict = {start: None}
    tie = itertools.count()
    heap = [(0, next(tie), start)]
    explored = 0
    while heap:
        c, _, state = heapq.heappop(heap)
        if best[state] != c:
            continue
        live, counts = state
        if all(counts) and (live & goal_mask) == goal_mask:
            plan = _rebuild(parent, state, start_free, zero_out)
            ev = evaluate_plan(graph, plan, cap)
            require(ev.extra_cost == c and ev.peak <= memory_limit, "remat-brute-force-plan",
                    f"the brute force's plan evaluates to peak {ev.peak}, extra cost {ev.extra_cost}; "
                    f"the search claimed extra cost {c} within {memory_limit}")
            return c, plan
        explored += 1
        if explored > max_states:
            raise OptionError(f"remat brute force explored more than {max_states} states; use a smaller graph")
        base = live_bytes(live)
        for v, lim, need, pos_out, outs, extra_mem, cv, first, again in moves:
            k = counts[v]
            if lim is not None and k >= lim:
                continue
            if live & need != need or live & pos_out:
                continue
            if k and not pos_out:
                continue  # a re-run that can only re-create size-0 outputs is useless (rule 3)
            if base + extra_mem > memory_limit:
                continue
            after = live | outs
            nc = c + cv if k else c
            ncounts = counts[:v] + (k + 1,) + counts[v + 1:]
            for mask, drop in (again if k else first):
                nstate = (after & ~mask, ncounts)
                old = best.get(nstate)
                if old is None or nc < old:
                    best[nstate] = nc
                    parent[nstate] = (state, v, drop)
                    heapq.heappush(heap, (nc, next(tie), nstate))
    return None, None


def _rebuild(parent, state, start_free, zero_out) -> RematPlan:
    moves = []
    while parent[state] is not None:
        prev, v, drop = parent[state]
        moves.append((prev[0], v, drop))
        state = prev
    steps = [(FREE, t) for t in start_free]
    for live_before, v, drop in reversed(moves):
        steps.extend((FREE, t) for t in zero_out[v] if live_before >> t & 1)
        steps.append((RUN, v))
        steps.extend((FREE, t) for t in drop)
    return RematPlan.from_pairs(steps)


def min_peak(graph: TensorGraph, cost_budget, cap=1, *, max_states: int = DEFAULT_MAX_STATES):
    """``(peak, extra_cost, plan)`` of a plan with the least peak among those whose extra
    cost is at most ``cost_budget`` (``cost_budget >= 0``; running every op once in a
    topological order is always within budget)."""
    if cost_budget < 0:
        raise OptionError(f"cost budget must be >= 0, got {cost_budget}")
    hi = evaluate_plan(graph, plan_from_order(graph, graph.topological_order())).peak
    lo = graph.resident_bytes  # nothing runs below the resident offset
    best = None
    while lo < hi:
        mid = (lo + hi) // 2
        c, plan = min_extra_cost(graph, mid, cap, max_states=max_states)
        if c is not None and c <= cost_budget:
            hi, best = mid, (c, plan)
        else:
            lo = mid + 1
    if best is None or evaluate_plan(graph, best[1]).peak != hi:
        c, plan = min_extra_cost(graph, hi, cap, max_states=max_states)
        best = (c, plan)
    c, plan = best
    return evaluate_plan(graph, plan).peak, c, plan


def random_sp_graph(rng, n_ops: int, max_size: int = 12) -> TensorGraph:
    """A random two-terminal series-parallel op graph for the recomputation tests and
    benchmarks (the shape from :func:`memopt.schedule.brute_force.random_sp_edges`): one
    tensor per edge of size ``[0, max_size)``, a graph output on every sink, integer costs
    1-9."""
    from memopt.schedule.brute_force import random_sp_edges

    edges, n = random_sp_edges(rng, n_ops)
    tensors, ins, outs = [], [[] for _ in range(n)], [[] for _ in range(n)]
    for i, (u, w) in enumerate(edges):
        tensors.append(Tensor(f"e{i}", int(rng.integers(0, max_size))))
        outs[u].append(f"e{i}")
        ins[w].append(f"e{i}")
    for v in range(n):
        if not outs[v]:
            tensors.append(Tensor(f"o{v}", int(rng.integers(0, max_size)), output=True))
            outs[v].append(f"o{v}")
    ops = [Op(f"op{v}", tuple(ins[v]), tuple(outs[v]), cost=float(rng.integers(1, 10))) for v in range(n)]
    return TensorGraph.build(tensors, ops)
