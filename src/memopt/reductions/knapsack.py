"""0/1 knapsack <-> capped recomputation on a series-parallel graph (``proofs/remat_knapsack.md``).

Knapsack instance: items ``i = 0..n-1`` with weight ``w_i >= 0`` and value ``p_i >= 0``
(integers), capacity ``W >= 0``; maximise the value of a packing of weight ``<= W``.

Construction (:func:`knapsack_to_remat`), with ``Q = sum_i w_i``:

* op ``make{i}``: no inputs, outputs ``x{i}`` (size ``w_i``) and ``e{i}`` (size 0), cost ``p_i``;
* op ``hold``: reads every ``e{i}``, outputs ``h`` (size 0), workspace ``Q``, cost 0;
* op ``use{i}``: reads ``x{i}`` and ``h``, outputs ``y{i}`` (size 0, graph output), cost 0;
* memory limit ``M = Q + W``, any cap ``k >= 1``.

Every ``make{i}`` must run before ``hold`` (it needs ``e{i}``) and every ``use{i}`` after it
(it needs ``h``), so ``x{i}`` is either live while ``hold`` runs (it "is packed": it costs
``w_i`` bytes of the ``W`` left beside the workspace) or it is recomputed after ``hold``
(it costs ``p_i``). Hence

    min extra cost under M  =  sum_i p_i  -  max knapsack value,

and :func:`plan_to_packing` / :func:`packing_to_plan` map solutions both ways
(value of the packing ``>= sum p - extra cost`` of the plan; extra cost of the plan
``= sum p - value`` of the packing). The op graph's underlying undirected graph is a set of
triangles ``{make{i}, hold, use{i}}`` sharing ``hold``: series-parallel, treewidth <= 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.errors import OptionError, ScheduleError
from memopt.remat.plan import FREE, RUN, RematPlan, evaluate_plan


@dataclass(frozen=True)
class KnapsackInstance:
    weights: tuple[int, ...]
    values: tuple[int, ...]
    capacity: int

    def __post_init__(self):
        w, p = tuple(self.weights), tuple(self.values)
        if len(w) != len(p):
            raise OptionError("knapsack: one weight and one value per item")
        for name, seq in (("weight", w), ("value", p)):
            for i, x in enumerate(seq):
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
                    raise OptionError(f"knapsack: {name} of item {i} must be an integer >= 0, got {x!r}")
                if x >= 2**62:
                    # a weight is a tensor size and a value an op cost: both below memopt's exact limit
                    raise OptionError(f"knapsack: {name} of item {i} is {int(x)}, beyond memopt's limit of 2**62")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, (int, np.integer)) or self.capacity < 0:
            raise OptionError(f"knapsack: capacity must be an integer >= 0, got {self.capacity!r}")
        object.__setattr__(self, "weights", tuple(int(x) for x in w))
        object.__setattr__(self, "values", tuple(int(x) for x in p))
        object.__setattr__(self, "capacity", int(self.capacity))

    @property
    def n(self) -> int:
        return len(self.weights)


@dataclass(frozen=True)
class KnapsackRemat:
    """The constructed instance: ``graph``, ``memory_limit``, the value offset ``sum p``
    (``min extra cost = offset - max value``), and the op ids of the gadgets."""

    graph: TensorGraph
    memory_limit: int
    offset: int
    make: tuple[int, ...]
    hold: int
    use: tuple[int, ...]


def knapsack_to_remat(inst: KnapsackInstance) -> KnapsackRemat:
    """Build the recomputation instance (size O(n), numbers of the source's size)."""
    n = inst.n
    Q = sum(inst.weights)
    tensors = [Tensor("h", 0)]
    ops = []
    for i in range(n):
        tensors += [Tensor(f"x{i}", inst.weights[i]), Tensor(f"e{i}", 0), Tensor(f"y{i}", 0, output=True)]
        ops.append(Op(f"make{i}", (), (f"x{i}", f"e{i}"), cost=inst.values[i]))
    ops.append(Op("hold", tuple(f"e{i}" for i in range(n)), ("h",), workspace=Q, cost=0))
    for i in range(n):
        ops.append(Op(f"use{i}", (f"x{i}", "h"), (f"y{i}",), cost=0))
    g = TensorGraph.build(tensors, ops, name=f"knapsack-{n}")
    return KnapsackRemat(graph=g, memory_limit=Q + inst.capacity, offset=sum(inst.values),
                         make=tuple(range(n)), hold=n, use=tuple(range(n + 1, 2 * n + 1)))


def knapsack_optimum(inst: KnapsackInstance) -> tuple[int, tuple[int, ...]]:
    """``(max value, packed items)`` by the O(n W) dynamic program (tests only)."""
    W = inst.capacity
    best = [0] * (W + 1)
    take = [[False] * (W + 1) for _ in range(inst.n)]
    for i, (w, p) in enumerate(zip(inst.weights, inst.values)):
        for c in range(W, w - 1, -1):
            if best[c - w] + p > best[c]:
                best[c] = best[c - w] + p
                take[i][c] = True
    items, c = [], W
    for i in range(inst.n - 1, -1, -1):
        if take[i][c]:
            items.append(i)
            c -= inst.weights[i]
    return best[W], tuple(sorted(items))


def packing_to_plan(inst: KnapsackInstance, red: KnapsackRemat, items) -> RematPlan:
    """The plan of a packing: packed items stay live across ``hold``; the others are freed
    right after their first run and recomputed once after ``hold``. Its peak is
    ``Q + weight(items) <= M`` when the packing fits, its extra cost ``sum p - value(items)``."""
    packed = set(int(i) for i in items)
    if any(not 0 <= i < inst.n for i in packed):
        raise OptionError("packing names an unknown item")
    g = red.graph
    t = g.tensor_index
    steps = []
    for i in range(inst.n):
        steps.append((RUN, red.make[i]))
        if i not in packed:
            steps.append((FREE, t[f"x{i}"]))
    steps.append((RUN, red.hold))
    for i in range(inst.n):
        steps.append((FREE, t[f"e{i}"]))
        if i not in packed:
            steps.append((RUN, red.make[i]))
            steps.append((FREE, t[f"e{i}"]))
        steps.append((RUN, red.use[i]))
        steps.append((FREE, t[f"x{i}"]))
    steps.append((FREE, t["h"]))
    return RematPlan.from_pairs(steps)


def plan_to_packing(inst: KnapsackInstance, red: KnapsackRemat, plan: RematPlan) -> tuple[int, ...]:
    """The packing of a valid plan: the items whose ``x{i}`` is live while ``hold`` first
    runs. If the plan's peak is at most ``M`` the packing fits, and its value is at least
    ``sum p - extra cost`` (``proofs/remat_knapsack.md``, Lemma 2)."""
    evaluate_plan(red.graph, plan)  # raises ScheduleError on an invalid plan
    g = red.graph
    xs = {g.tensor_index[f"x{i}"]: i for i in range(inst.n)}
    live: set[int] = set()
    for k, x in zip(plan.kind.tolist(), plan.index.tolist()):
        if k == RUN:
            if x == red.hold:
                return tuple(sorted(xs[t] for t in live))
            live.update(int(t) for t in g.outputs_of(x) if int(t) in xs)
        else:
            live.discard(x)
    raise ScheduleError("plan never runs 'hold'")  # unreachable for a valid plan
