"""Constructive starting plans for a training step's recomputation: min-cut saved sets.

The partitioner of AOTAutograd (``min_cut_rematerialization_partition``) chooses what the
forward saves by a minimum s-t cut: every tensor the backward needs is either saved (its
bytes are cut) or rebuilt in the backward from saved tensors by ops allowed to re-run; ops not
allowed are tied to the source. This module builds that cut in memopt's own realizable model
(:func:`memopt.adapters.training_plan.realizable_graph`) and turns each cut into a run
sequence memopt's solver can start from (``memopt.remat(..., initial=...)``):

* flow network: per tensor ``t`` an arc ``t_in -> t_out`` of capacity ``size(t)`` (0 for a
  resident tensor: parameters and inputs stay live anyway); per op ``v`` a node with infinite
  arcs ``v -> t_in`` for its outputs and ``t_out -> v`` for its inputs; every backward op (it
  reads the barrier) tied to the sink, every op not allowed to re-run (and the barrier) to the
  source; solved with ``ortools.graph.python.max_flow``;
* the ops on the sink side that the forward needs (ancestors of the barrier) are *recomputed*:
  run in the forward, and once more in the backward right before their first backward use
  (their own recomputed inputs first); sink-side ops the forward does not need are *moved*:
  run once, in the backward, at no extra cost.

Which ops may re-run is a ladder (:data:`TIERS`), as PyTorch's rules and then its memory
budget widen it: the ops without a FLOP formula (element-wise, views, normalizations' cheap
parts) except reductions (an output 4x smaller than its inputs: saving it is cheaper), then
those reductions, then the FLOP-counted ops (matrix products, convolutions, attention) up to a
rising cost threshold. A wider set gives a smaller saved set at more extra cost. The *priced*
cuts (:data:`PRICES`) let every op re-run but charge each one the forward needs its extra cost
times a price in bytes (an arc from the source, cut when it re-runs): the cut then minimizes
saved bytes plus priced extra cost, a trade-off PyTorch's cut leaves to its knapsack. The
solver gets every distinct plan and starts from the cheapest that fits its limit.
"""

from __future__ import annotations

from fractions import Fraction

from memopt.adapters.training import TrainingGraph, op_flop_counts
from memopt.adapters.training_plan import BARRIER

__all__ = ["mincut_recomputed", "runs_with_recomputation", "seed_runs", "reordered_runs", "with_reordered", "cheap_caps",
           "within", "TIERS"]

#: the ladder of re-runnable ops: cheap ops without reductions, with them, then FLOP-counted
#: ops whose cost is at most these quantiles of the forward FLOP-counted ops' costs
TIERS = ("cheap", "cheap+reductions", 0.25, 0.5, 0.75, 1.0)

#: an op whose output is this many times smaller than its inputs is a reduction (PyTorch's
#: ``ban_if_reduction`` rule: saving its output is cheaper than re-running it)
REDUCTION_RATIO = 4


def _structure(graph):
    """Per op: input and output tensor ids; per tensor: consumer op ids."""
    ins = [graph.inputs_of(v).tolist() for v in range(graph.num_ops)]
    outs = [graph.outputs_of(v).tolist() for v in range(graph.num_ops)]
    return ins, outs


def _forward_needed(graph, barrier: int, ins) -> set:
    """Ops the barrier depends on (the loss and the buffer updates need them)."""
    producer = graph.tensor_producer
    need, stack = set(), [barrier]
    while stack:
        v = stack.pop()
        for t in ins[v]:
            u = int(producer[t])
            if u >= 0 and u not in need:
                need.add(u)
                stack.append(u)
    return need


def mincut_recomputed(graph, allowed: set, price: Fraction | None = None) -> set:
    """Sink-side op ids of the minimum cut (see the module docstring) when only the ops in
    ``allowed`` may run in the backward besides the backward ops: the ops that run (again) in
    the backward; the tensors cut are the saved ones. ``price``: bytes per unit of extra cost;
    an allowed op the forward needs then also has an arc from the source of ``price`` times its
    cost (cut when it re-runs), so the cut minimizes saved bytes plus priced extra cost."""
    from ortools.graph.python import max_flow

    names = graph.op_names
    barrier = graph.op_index[BARRIER]
    bar_t = graph.tensor_index[BARRIER]
    T, N = graph.num_tensors, graph.num_ops
    source, sink = 2 * T + N, 2 * T + N + 1
    sizes = graph.tensor_size
    num, den = (0, 1) if price is None else (price.numerator, price.denominator)
    costs = graph.op_cost_exact
    needed = _forward_needed(graph, barrier, [graph.inputs_of(v).tolist() for v in range(N)]) if num else set()
    inf = int(sizes.sum()) * den + sum(int(-(-Fraction(costs[v]) * num // 1)) for v in needed) + 1
    tails, heads, caps = [], [], []

    def arc(a, b, c):
        tails.append(a)
        heads.append(b)
        caps.append(c)

    for t in range(T):
        arc(2 * t, 2 * t + 1, 0 if graph.tensor_resident[t] else int(sizes[t]) * den)
        if graph.tensor_producer[t] < 0:
            arc(source, 2 * t, inf)
        for u in graph.consumers_of(t).tolist():
            arc(2 * t + 1, 2 * T + u, inf)
    for v in range(N):
        for t in graph.outputs_of(v).tolist():
            arc(2 * T + v, 2 * t, inf)
        backward = bar_t in graph.inputs_of(v).tolist()
        if backward:
            arc(2 * T + v, sink, inf)
        elif v == barrier or names[v] not in allowed:
            arc(source, 2 * T + v, inf)
        elif v in needed:
            arc(source, 2 * T + v, int(-(-Fraction(costs[v]) * num // 1)))  # its cost, rounded up
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(tails, heads, caps)
    if flow.solve(source, sink) != flow.OPTIMAL:
        return set()
    src = set(flow.get_source_side_min_cut())
    return {v for v in range(N) if 2 * T + v not in src and bar_t not in graph.inputs_of(v).tolist()}


def runs_with_recomputation(graph, backward_side: set) -> list[int]:
    """The run sequence of a saved set: the captured order, except that each op of
    ``backward_side`` (forward ops on the cut's sink side) runs again right before its first
    backward use, its own such inputs first; one the forward does not need runs there only."""
    ins, outs = _structure(graph)
    barrier = graph.op_index[BARRIER]
    bar_t = graph.tensor_index[BARRIER]
    needed = _forward_needed(graph, barrier, ins)
    producer = graph.tensor_producer
    runs = [v for v in range(graph.num_ops) if bar_t not in ins[v] and (v not in backward_side or v in needed)]
    done: set = set()

    def rebuild(v):
        # iterative depth-first: inputs rebuilt before the op (graphs have thousands of ops)
        stack = [(v, False)]
        while stack:
            u, ready = stack.pop()
            if u in done:
                continue
            if ready:
                done.add(u)
                runs.append(u)
                continue
            stack.append((u, True))
            for t in ins[u]:
                w = int(producer[t])
                if w >= 0 and w in backward_side and w not in done:
                    stack.append((w, False))

    for v in range(graph.num_ops):
        if bar_t in ins[v]:
            for t in ins[v]:
                w = int(producer[t])
                if w >= 0 and w in backward_side:
                    rebuild(w)
            runs.append(v)
    # a moved op nothing in the backward reads (an assertion on metadata) still runs once
    for v in sorted(set(backward_side) - needed - done):
        rebuild(v)
    return runs


def reordered_runs(graph, runs: list[int], time_limit: float) -> list[int]:
    """The runs of ``runs`` (each op as often) in the least-peak order memopt's scheduler finds
    in ``time_limit`` seconds: each second run becomes an op of its own (a copy reading the
    copies of its re-run inputs and writing copies of its outputs, which the later runs read),
    so the question is one of order alone. The scheduler starts from the runs' own order, so
    the peak is never higher; a seed whose saved set is right but whose order peaks just above
    the limit may fit after this."""
    import memopt
    from memopt.core import Op, Tensor, TensorGraph

    seen: set = set()
    second = [i for i, v in enumerate(runs) if v in seen or seen.add(v)]
    if not second:
        return list(runs)
    tn, names = graph.tensor_names, graph.op_names
    tensors = [Tensor(tn[t], int(graph.tensor_size[t]), output=bool(graph.tensor_output[t]),
                      resident=bool(graph.tensor_resident[t])) for t in range(graph.num_tensors)]
    copy_of: dict = {}   # tensor id -> name of its copy, once its producer has run again
    ops, source = [], []
    costs = graph.op_cost_exact
    again = set(second)
    for i, v in enumerate(runs):
        ins = tuple(copy_of.get(t, tn[t]) for t in graph.inputs_of(v).tolist())
        outs = graph.outputs_of(v).tolist()
        if i in again:
            for t in outs:
                copy_of[t] = f"{tn[t]}#again"
                tensors.append(Tensor(copy_of[t], int(graph.tensor_size[t]), output=bool(graph.tensor_output[t])))
            name = f"{names[v]}#again"
        else:
            name = names[v]
        ops.append(Op(name, ins, tuple(copy_of[t] if i in again else tn[t] for t in outs),
                      workspace=int(graph.op_workspace[v]), cost=costs[v]))
        source.append(v)
    g2 = TensorGraph.build(tensors, ops, name=graph.name)
    res = memopt.schedule(g2, method="auto", time_limit=time_limit, input_order=list(range(len(ops))))
    if res.order is None:
        return list(runs)
    return [source[i] for i in res.order.tolist()]


def with_reordered(graph, seeds: list[list[int]], clock) -> list[list[int]]:
    """``seeds`` followed by each one's :func:`reordered_runs` that differs from it, the
    clock's time split equally between the seeds (``clock``: a :class:`memopt.clock.Clock`).
    A call takes longer than the time it is given (the scheduler's set-up and check on a graph
    of thousands of ops): the longest such excess so far is taken off each later slice, and no
    call starts that the excess would take past the clock's end."""
    import time

    out, seen = list(seeds), {tuple(r) for r in seeds}
    excess = 0.0
    for k, runs in enumerate(seeds):
        given = clock.part(1 / (len(seeds) - k)).left() - excess
        if given <= 0 or clock.left() <= excess:
            break
        t0 = time.perf_counter()
        again = reordered_runs(graph, runs, given)
        excess = max(excess, time.perf_counter() - t0 - given)
        if tuple(again) not in seen:
            seen.add(tuple(again))
            out.append(again)
    return out


def _allowed_sets(tg: TrainingGraph, graph, caps: dict) -> list[set]:
    """The re-runnable op names of each tier of :data:`TIERS` (forward ops with cap >= 1)."""
    sizes = graph.tensor_size
    flops = op_flop_counts(tg)
    cheap, reductions, counted = set(), set(), {}
    for v, name in enumerate(graph.op_names):
        if caps.get(name, 0) < 1 or tg.phase.get(name) != "forward":
            continue
        if name in flops:
            counted[name] = flops[name]
            continue
        out_b = int(sizes[graph.outputs_of(v)].sum())
        in_b = int(sizes[graph.inputs_of(v)].sum())
        (reductions if out_b * REDUCTION_RATIO < in_b else cheap).add(name)
    costs = sorted(counted.values())
    sets = []
    for tier in TIERS:
        if tier == "cheap":
            sets.append(set(cheap))
        elif tier == "cheap+reductions":
            sets.append(cheap | reductions)
        else:
            limit = costs[min(len(costs) - 1, int(tier * len(costs)))] if costs else 0
            sets.append(cheap | reductions | {n for n, c in counted.items() if c <= limit})
    return sets


def cheap_caps(tg: TrainingGraph, graph, caps: dict) -> dict:
    """``caps`` with every op of a FLOP formula at 0: the ops the first tier of :data:`TIERS`
    (and its reductions) may re-run, for a search in that smaller space first."""
    allowed = _allowed_sets(tg, graph, caps)[TIERS.index("cheap+reductions")]
    return {n: (k if n in allowed else 0) for n, k in caps.items()}


def within(graph, runs: list[int], caps: dict) -> bool:
    """Does the run sequence ``runs`` (op ids) re-run each op at most ``caps[name]`` times?"""
    from collections import Counter

    return all(k - 1 <= caps[graph.op_names[v]] for v, k in Counter(runs).items())


def _narrow_points(graph, forward: list[int], k: int) -> list[int]:
    """``k - 1`` positions of the forward order ``forward``, one in each of ``k`` equal windows
    (the first and last quarter of each window left out), each where the fewest bytes are
    live across it: block boundaries found without knowing the model's blocks."""
    pos = {v: i for i, v in enumerate(forward)}
    n = len(forward)
    delta = [0] * (n + 1)
    sizes = graph.tensor_size
    for v in forward:
        for t in graph.outputs_of(v).tolist():
            if graph.tensor_resident[t]:
                continue
            last = max((pos[u] for u in graph.consumers_of(t).tolist() if u in pos), default=pos[v])
            # live across every position p with pos[v] < p <= last
            delta[pos[v] + 1] += int(sizes[t])
            delta[last + 1] -= int(sizes[t])
    live, run = [], 0
    for i in range(n):
        run += delta[i]
        live.append(run)
    points = []
    for j in range(1, k):
        lo, hi = (j * n) // k - n // (4 * k), (j * n) // k + n // (4 * k)
        lo, hi = max(1, lo), min(n - 1, max(lo + 1, hi))
        points.append(min(range(lo, hi), key=lambda p: (live[p], p)))
    return points


def _segment_allowed(graph, caps: dict, forward: list[int], k: int) -> set:
    """Every forward op with cap >= 1 may re-run, except the producers of what is live across
    the :func:`_narrow_points` of ``k`` segments: those are saved, as block checkpointing
    saves each block's inputs."""
    pos = {v: i for i, v in enumerate(forward)}
    keep = set()
    for p in _narrow_points(graph, forward, k):
        for v in forward[:p]:
            for t in graph.outputs_of(v).tolist():
                if any(pos.get(u, -1) >= p for u in graph.consumers_of(t).tolist()):
                    keep.add(v)
    return {graph.op_names[v] for v in forward if caps.get(graph.op_names[v], 0) >= 1 and v not in keep}


#: prices (bytes per unit of extra cost) of the priced cuts: an element-wise op re-making a
#: float32 tensor costs 1 per 4 bytes, so 4 and above re-run it when that saves its bytes; a
#: matrix product frees about 2 / k bytes per FLOP (k its inner size), hence the range
PRICES = tuple(Fraction(4, 2 ** j) for j in range(0, 15))

#: segment counts of the block-checkpointing seeds (:func:`_segment_allowed`)
SEGMENTS = (2, 4, 8, 16, 32)


def seed_runs(tg: TrainingGraph, graph, caps: dict) -> list[list[int]]:
    """The distinct run sequences of the min-cut saved sets of every tier and segment count
    (op ids of ``graph``, the :func:`~memopt.adapters.training_plan.realizable_graph` of
    ``tg``)."""
    out, seen = [], set()
    bar_t = graph.tensor_index[BARRIER]
    forward = [v for v in range(graph.num_ops) if bar_t not in graph.inputs_of(v).tolist()
               and graph.op_names[v] != BARRIER]
    sets = _allowed_sets(tg, graph, caps) + [_segment_allowed(graph, caps, forward, k) for k in SEGMENTS
                                             if k < len(forward)]
    every = {n for n in graph.op_names if caps.get(n, 0) >= 1}
    cuts = [(allowed, None) for allowed in sets] + [(every, price) for price in PRICES]
    for allowed, price in cuts:
        runs = runs_with_recomputation(graph, mincut_recomputed(graph, allowed, price))
        if tuple(runs) not in seen:
            seen.add(tuple(runs))
            out.append(runs)
    return out
