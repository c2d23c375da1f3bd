"""3-PARTITION -> decision version of capped recomputation, every fixed cap k >= 1, on
forests (treewidth 1 <= 2) (``proofs/remat_np_hardness.md``).

3-PARTITION: ``3m`` positive integers ``a_0..a_{3m-1}`` with ``sum a = A = m B`` and
``B/4 < a_j < B/2``; can they be split into ``m`` triples of sum ``B`` each? Strongly
NP-complete (Garey & Johnson 1975), so a reduction whose numbers are bounded by a
polynomial in ``m + B`` proves strong NP-hardness of the target.

Construction (:func:`three_partition_to_remat`), global cap ``k``, ``delta = A + 1``:

* op ``item{j}``: no inputs, output ``x{j}`` of size ``a_j`` (a graph output), cost 1;
* ``N = m + k - 1`` *humps*, in this order: ``burn1 .. burn{k-1}`` then ``hump1 .. hump{m}``;
  a hump reads nothing but its own *clock* and has workspace ``K delta + rho`` with
  ``rho = A`` for a burn and ``rho = B`` for a hump (``K`` below);
* before every hump a *checkpoint round* ``s = 0..N-1``: op ``check{s}_{j}`` reads ``x{j}``
  and its own clock, workspace ``K delta``;
* every checkpoint and every hump ``v`` reads a private graph input ``clock.v`` of size
  ``delta``; ``K`` = the number of clocks of the rounds and humps before ``v``'s epoch
  (epochs: round 0, hump 1, round 1, hump 2, ...);
* memory limit ``M = T delta + A`` (``T = N (3m + 1)`` clocks), budget ``3 m k``; all other
  costs 0.

Why it works (the proof file has the details). A clock is a graph input: live from the
start, gone for good once freed. A reader of an epoch-``e`` clock does not fit while fewer
than ``K`` clocks are freed (``delta > A``), so the clocks are freed epoch by epoch and every
op runs in its own epoch: this orders the humps and the rounds without a single edge between
them. At a hump exactly ``T - K`` clocks are live, so the live items weigh at most
``A - rho``: a burn wants every item absent, a hump a set of weight ``>= B``. An item absent
at a hump is read again by the next round (or is an output), so each absence costs a re-run;
with ``k`` re-runs, ``k - 1`` burns and total demand ``k A = sum_j k a_j``, every item is
absent at exactly one ``hump{t}``: a 3-partition. Conversely a 3-partition gives a plan of
peak ``M`` and extra cost ``3 m k``.

The op graph is a forest (``item{j}`` with its checkpoints is a star; humps are isolated):
treewidth 1, even counting tensors as vertices. Sizes: ``3m (N + 1) + N`` ops and as many
tensors, numbers at most ``M = O((m + k) m^2 B)``: polynomial in the unary size ``m + B``.
With ``clocks="source"`` one op ``start`` (cost above the budget) writes the clocks instead:
no graph inputs, treewidth exactly 2 once ``N >= 2`` (a forest for ``N = 1``), the same
answer for plans within the budget (it needs the budget: re-running ``start`` breaks it).

Example (``m = 1``, cap 1: 3 items, 3 checkpoints, 1 hump; the plan of the partition):

>>> inst = ThreePartitionInstance((3, 3, 4))
>>> red = three_partition_to_remat(inst, cap=1)
>>> red.graph.num_ops, red.memory_limit, red.cost_budget
(7, 54, 3)
>>> plan = partition_to_plan(inst, red, solve_three_partition(inst))
>>> evaluate_plan(red.graph, plan, cap=1)[:2], plan_to_partition(inst, red, plan)
((54, 3), [[0, 1, 2]])
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.errors import InternalError, OptionError
from memopt.remat.plan import FREE, RUN, RematPlan, evaluate_plan


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
    ``extra cost <= cost_budget`` under the global ``cap``?

    ``epochs`` lists the forced epochs in order: ``("round", (check ops...))`` or
    ``("burn" | "hump", op)``; ``delta`` is the size of every clock."""

    graph: TensorGraph
    cap: int
    memory_limit: int
    cost_budget: int
    delta: int
    epochs: tuple[tuple[str, object], ...]

    @property
    def humps(self) -> tuple[str, ...]:
        """The ``m`` ordinary humps ``hump1..hump{m}`` (not the burns), in order."""
        return tuple(name for kind, name in self.epochs if kind == "hump")


def three_partition_to_remat(inst: ThreePartitionInstance, cap: int = 1, clocks: str = "inputs") -> ThreePartitionRemat:
    """Build the instance for the global cap ``k = cap >= 1`` (see the module docstring).

    ``clocks="inputs"`` (default): every clock is a graph input; the op graph is a forest and
    every plan with peak ``<= M`` (whatever its cost) yields a 3-partition.
    ``clocks="source"``: no graph inputs; one op ``start`` (no inputs, cost ``3 m k + 1``,
    more than the budget) writes every clock. The op graph has treewidth exactly 2 when ``N >= 2`` (``start``
    and ``item{j}`` joined by the ``N`` checkpoints of ``j``: a ``K_{2,N}``), and plans within
    the budget run ``start`` once, so the same proof holds for them (proof file, §5)."""
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
        raise OptionError(f"the 3-partition reduction needs a cap k >= 1, got {cap!r}")
    if clocks not in ("inputs", "source"):
        raise OptionError(f"clocks must be 'inputs' or 'source', got {clocks!r}")
    k = int(cap)
    m, B, a = inst.m, inst.target, inst.numbers
    n, A = len(a), sum(a)
    delta = A + 1  # > A: one clock outweighs every item together
    humps = [("burn", f"burn{r}", A) for r in range(1, k)] + [("hump", f"hump{t}", B) for t in range(1, m + 1)]
    T = len(humps) * (n + 1)
    tensors = [Tensor(f"x{j}", a[j], output=True) for j in range(n)]
    ops = [Op(f"item{j}", (), (f"x{j}",), cost=1) for j in range(n)]
    epochs: list[tuple[str, object]] = []
    freed_before = 0  # K: clocks of the epochs before the current one

    def clocked(name: str, reads: tuple[str, ...], workspace: int) -> str:
        tensors.append(Tensor(f"clock.{name}", delta))
        ops.append(Op(name, reads + (f"clock.{name}",), (), workspace=workspace, cost=0))
        return name

    for s, (kind, name, rho) in enumerate(humps):
        epochs.append(("round", tuple(clocked(f"check{s}_{j}", (f"x{j}",), freed_before * delta)
                                      for j in range(n))))
        freed_before += n
        epochs.append((kind, clocked(name, (), freed_before * delta + rho)))
        freed_before += 1
    if clocks == "source":
        ops.append(Op("start", (), tuple(t.name for t in tensors[n:]), cost=3 * m * k + 1))
    g = TensorGraph.build(tensors, ops, name=f"3partition-m{m}-k{k}" + ("-source" if clocks == "source" else ""))
    return ThreePartitionRemat(graph=g, cap=k, memory_limit=T * delta + A, cost_budget=3 * m * k,
                               delta=delta, epochs=tuple(epochs))


def partition_to_plan(inst: ThreePartitionInstance, red: ThreePartitionRemat, triples) -> RematPlan:
    """The plan of a 3-partition ``triples`` (m lists of item indices): run every item; then,
    epoch by epoch, run a round's checkpoints and free their clocks; at a burn drop every
    item, at ``hump{t}`` the items of triple ``t``, run the hump, free its clock and re-run
    the dropped items. Peak ``M``, extra cost ``3 m k``."""
    g = red.graph
    m, n = inst.m, len(inst.numbers)
    triples = [list(map(int, tr)) for tr in triples]
    if len(triples) != m or sorted(itertools.chain.from_iterable(triples)) != list(range(n)):
        raise OptionError("triples must split the items into m groups")
    for t, tr in enumerate(triples):
        if len(tr) != 3 or sum(inst.numbers[j] for j in tr) != inst.target:
            raise OptionError(f"triple {t} {tr} is not 3 items summing to B = {inst.target}")
    op, ts = g.op_index, g.tensor_index
    hump_items = {name: triples[t] for t, name in enumerate(red.humps)}
    steps = [(RUN, op[f"item{j}"]) for j in range(n)]
    if "start" in op:
        steps.append((RUN, op["start"]))
    for kind, what in red.epochs:
        if kind == "round":
            steps.extend((RUN, op[c]) for c in what)
            steps.extend((FREE, ts[f"clock.{c}"]) for c in what)
            continue
        dropped = list(range(n)) if kind == "burn" else hump_items[what]
        steps.extend((FREE, ts[f"x{j}"]) for j in dropped)
        steps += [(RUN, op[what]), (FREE, ts[f"clock.{what}"])]
        steps.extend((RUN, op[f"item{j}"]) for j in dropped)
    return RematPlan.from_pairs(steps)


def plan_to_partition(inst: ThreePartitionInstance, red: ThreePartitionRemat, plan: RematPlan) -> list[list[int]]:
    """The 3-partition of a valid plan under ``red.cap`` with peak ``<= red.memory_limit``
    (whatever its extra cost; within ``red.cost_budget`` for ``clocks="source"``): triple ``t`` = the items whose ``x`` is not live at the first
    run of ``hump{t}`` (``proofs/remat_np_hardness.md``, Theorem).

    Raises :class:`~memopt.errors.ScheduleError` for an invalid plan and
    :class:`~memopt.errors.OptionError` for one above the limit."""
    g = red.graph
    peak, extra = evaluate_plan(g, plan, cap=red.cap)[:2]
    if peak > red.memory_limit:
        raise OptionError(f"the plan peaks at {peak} > the memory limit {red.memory_limit}: it proves nothing")
    if "start" in g.op_index and extra > red.cost_budget:
        # with clocks="source" the proof needs the budget: it keeps `start` from re-running
        raise OptionError(f"the plan's extra cost {extra} exceeds the budget {red.cost_budget}: it proves nothing")
    item_of = {g.tensor_index[f"x{j}"]: j for j in range(len(inst.numbers))}
    wanted = {g.op_index[name]: t for t, name in enumerate(red.humps)}
    live: set[int] = set()
    triples: dict[int, list[int]] = {}
    for kind, x in zip(plan.kind.tolist(), plan.index.tolist()):
        if kind == FREE:
            live.discard(x)
            continue
        if x in wanted and wanted[x] not in triples:
            triples[wanted[x]] = sorted(j for t, j in item_of.items() if t not in live)
        live.update(int(t) for t in g.outputs_of(x))
    result = [triples[t] for t in range(inst.m)]
    B = inst.target
    if sorted(itertools.chain.from_iterable(result)) != list(range(len(inst.numbers))) or any(
            len(tr) != 3 or sum(inst.numbers[j] for j in tr) != B for tr in result):
        raise InternalError(f"a plan within the limit gave {result}, not a 3-partition (the proof is broken)")
    return result


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
