"""3-PARTITION -> decision version of capped recomputation, every fixed cap k >= 1
(``proofs/remat_np_hardness.md``).

3-PARTITION: ``3m`` positive integers ``a_0..a_{3m-1}`` with ``sum a = m B`` and
``B/4 < a_j < B/2``; can they be split into ``m`` triples of sum ``B`` each? Strongly
NP-complete (Garey & Johnson 1975), so a reduction whose numbers are bounded by a
polynomial in ``m + B`` proves strong NP-hardness of the target.

Construction (:func:`three_partition_to_remat`), memory limit ``M = m B``, global cap ``k``:

* op ``item{j}``: no inputs, output ``x{j}`` of size ``a_j``, cost 1;
* a *backbone*, a chain of ops each reading the previous one's size-0 token ``<op>.done``
  (the last token is the graph output), all of cost 0:
  ``check0``, then for every item ``j`` and ``r = 1..k-1`` the pair ``private{j}_{r}``,
  ``pcheck{j}_{r}``, then ``hump1, check1, ..., hump{m}, check{m}``;
* a *checkpoint* (``check*``, ``pcheck*``) reads every ``x``; ``hump{t}`` has workspace ``B``;
  ``private{j}_{r}`` reads every ``x`` except ``x{j}`` and has workspace ``a_j``;
* extra-cost budget ``3 m k`` (the yes-plans use exactly that; the no-direction needs no budget).

At ``private{j}_{r}`` all other items are live, so ``x{j}`` must be absent (else
``sum a + a_j > M``); every absence is followed by a checkpoint, so each costs one re-run of
``item{j}``: the private humps use up ``k - 1`` of its ``k`` re-runs, and ``item{j}`` can be
absent at one ordinary hump at most. At ``hump{t}`` the absent items weigh at least ``B``;
they add up to at most ``sum a = m B``, so each hump has exactly ``B`` absent: a 3-partition.
Conversely a 3-partition gives a plan of peak ``m B`` and extra cost ``3 m k``.

What this does **not** give (see the proof file): the graph has treewidth ``>= m + 1``
(every ``item{j}`` is adjacent to every ``check{t}``: a ``K_{3m, m+1}``), not ``<= 2``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.errors import OptionError
from memopt.remat.plan import FREE, RUN, RematPlan


@dataclass(frozen=True)
class ThreePartitionInstance:
    """``3m`` numbers with sum ``m * target`` and every number strictly between ``target/4`` and ``target/2``."""

    numbers: tuple[int, ...]

    def __post_init__(self):
        a = tuple(self.numbers)
        if not a or len(a) % 3:
            raise OptionError(f"3-partition needs 3m > 0 numbers, got {len(a)}")
        for j, x in enumerate(a):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x <= 0:
                raise OptionError(f"3-partition: number {j} must be a positive integer, got {x!r}")
        m = len(a) // 3
        total = sum(int(x) for x in a)
        if total % m:
            raise OptionError(f"3-partition: the sum {total} is not a multiple of m = {m}")
        B = total // m
        for j, x in enumerate(a):
            if not (4 * x > B and 2 * x < B):
                raise OptionError(f"3-partition: number {j} = {x} is not strictly between B/4 and B/2 (B = {B})")
        object.__setattr__(self, "numbers", tuple(int(x) for x in a))

    @property
    def m(self) -> int:
        return len(self.numbers) // 3

    @property
    def target(self) -> int:
        return sum(self.numbers) // self.m


@dataclass(frozen=True)
class ThreePartitionRemat:
    """The decision instance: is there a plan with ``peak <= memory_limit`` and
    ``extra cost <= cost_budget`` under the global ``cap``? ``backbone`` lists the backbone
    ops in their forced order."""

    graph: TensorGraph
    cap: int
    memory_limit: int
    cost_budget: int
    backbone: tuple[str, ...]


def three_partition_to_remat(inst: ThreePartitionInstance, cap: int = 1) -> ThreePartitionRemat:
    """Build the instance for the global cap ``k = cap >= 1``.

    ``(5 + 6(k-1)) m + 1`` ops and as many tensors; every size and workspace is at most ``B``,
    the limit is ``m B``, the budget ``3 m k``: polynomial in the unary size of the source
    for every fixed ``k`` (and for ``k`` given in unary).
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise OptionError(f"the 3-partition reduction needs a cap k >= 1, got {cap!r}")
    k = int(cap)
    m, B, a = inst.m, inst.target, inst.numbers
    n = len(a)
    xs = tuple(f"x{j}" for j in range(n))
    tensors = [Tensor(x, a[j]) for j, x in enumerate(xs)]
    ops = [Op(f"item{j}", (), (xs[j],), cost=1) for j in range(n)]
    backbone: list[str] = []

    def add(name: str, reads: tuple[str, ...], workspace: int = 0) -> None:
        prev = (f"{backbone[-1]}.done",) if backbone else ()
        tensors.append(Tensor(f"{name}.done", 0))
        ops.append(Op(name, reads + prev, (f"{name}.done",), workspace=workspace))
        backbone.append(name)

    add("check0", xs)
    for j in range(n):
        others = xs[:j] + xs[j + 1:]
        for r in range(1, k):
            add(f"private{j}_{r}", others, workspace=a[j])
            add(f"pcheck{j}_{r}", xs)
    for t in range(1, m + 1):
        add(f"hump{t}", (), workspace=B)
        add(f"check{t}", xs)
    last = tensors.pop()
    tensors.append(Tensor(last.name, 0, output=True))
    g = TensorGraph.build(tensors, ops, name=f"3partition-m{m}-k{k}")
    return ThreePartitionRemat(graph=g, cap=k, memory_limit=m * B, cost_budget=3 * m * k,
                               backbone=tuple(backbone))


def partition_to_plan(inst: ThreePartitionInstance, red: ThreePartitionRemat, triples) -> RematPlan:
    """The plan of a 3-partition ``triples`` (m lists of item indices): each item is
    dropped at its ``k - 1`` private humps and at the hump of its triple, and recomputed
    right after each. Peak ``m B``, extra cost ``3 m k``."""
    g = red.graph
    m, n = inst.m, len(inst.numbers)
    triples = [list(map(int, tr)) for tr in triples]
    if len(triples) != m or sorted(itertools.chain.from_iterable(triples)) != list(range(n)):
        raise OptionError("triples must split the items into m groups")
    group = {j: t + 1 for t, tr in enumerate(triples) for j in tr}
    op, ts = g.op_index, g.tensor_index
    steps = [(RUN, op[f"item{j}"]) for j in range(n)]
    prev = None
    for name in red.backbone:
        if name.startswith("private"):
            dropped = [int(name[len("private"):].split("_")[0])]
        elif name.startswith("hump"):
            dropped = [j for j in range(n) if group[j] == int(name[len("hump"):])]
        else:
            dropped = []
        steps.extend((FREE, ts[f"x{j}"]) for j in dropped)
        steps.append((RUN, op[name]))
        if prev is not None:
            steps.append((FREE, ts[f"{prev}.done"]))
        steps.extend((RUN, op[f"item{j}"]) for j in dropped)
        prev = name
    steps.extend((FREE, ts[f"x{j}"]) for j in range(n))
    return RematPlan.from_pairs(steps)


def solve_three_partition(inst: ThreePartitionInstance):
    """A list of ``m`` triples of item indices with sum ``B`` each, or ``None`` (brute force,
    for the tests: the smallest unused item is always placed in the next triple)."""
    a, B = inst.numbers, inst.target

    def rec(left: tuple[int, ...]):
        if not left:
            return []
        first, rest = left[0], left[1:]
        for i in range(len(rest)):
            for k in range(i + 1, len(rest)):
                if a[first] + a[rest[i]] + a[rest[k]] == B:
                    sub = rec(tuple(x for idx, x in enumerate(rest) if idx not in (i, k)))
                    if sub is not None:
                        return [[first, rest[i], rest[k]]] + sub
        return None

    return rec(tuple(range(len(a))))
