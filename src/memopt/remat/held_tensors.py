"""Constructive recomputation moves for tensors held across the memory peak.

The model
---------
A plan is a *run sequence* (op ids, repetitions allowed) made into a plan by
:func:`~memopt.remat.model_common.plan_from_runs`: each production of a tensor serves the
reads up to the next production and is freed right after the last of them. Real networks
reach their peak at one or two runs while a few large tensors are *held* across it: skip
connections, the inputs of a late concatenation or stack, global residuals. Their producers
are often cheap (unsqueeze, reshape, pooling, a stem convolution).

The move
--------
For a tensor ``x`` whose current production is live across a peak run without being read
there (its last read before the peak at ``a``, its next read at ``j``; ``j`` is the end for a
graph output), *insert a re-make of ``x`` right before run ``j``*: ``x`` is then freed after
run ``a``, and the inserted runs are a **closure** of producers: the producer of ``x``, and,
for every input not live at ``j``, either its producer too (re-made) or nothing (the input's
production is then held until ``j``). Three closures are tried per move: re-make every input
that can be (the producer below its cap, at most :data:`MAX_CLOSURE` ops), hold every input of
the producer of ``x``, and the *min-cost* one: hold an input where holding it keeps the memory
over its extended span at or below the level sought (the limit, or the peak less one byte),
re-make it otherwise. A *group move* does the same for every held tensor that the same run
``j`` reads next (the inputs of a concatenation or stack): freeing one of them may not lower
the peak when re-making it needs an input as large as itself held, while freeing all of them
needs that input only once.

Moves are evaluated exactly (:func:`memopt.remat.heuristic._profile`) and ranked by the drop
of the peak, over every run at the peak, per unit of extra cost (for ``min_cost`` only the
drop down to the limit counts; a move that lowers some of several runs at the peak is ranked
by how many it lowers), free moves first; the best is applied and the search goes on until the
plan fits the limit (``min_cost``), no move within the budget improves (``min_peak``), no
move improves, or the deadline. Caps hold: a re-run counts against its op's cap.

This is the usual peak-driven rematerialization step with a producer closure instead of a
single producer (cf. Chen et al., "Training deep nets with sublinear memory cost", 2016, and
Kirisame et al., "Dynamic tensor rematerialization", ICLR 2021, whose evictions pick the
held tensor with the best memory saved per unit of recompute), written for memopt's plan
model; it proves nothing. :func:`memopt.remat.heuristic.heuristic_method` uses its answer as
one more start of its greedy and search.

Example
-------
Two tensors ``b``, ``c`` made from the graph input ``x`` early and read together at the end,
a large temporary ``w`` in between (peak 31 at ``fe``): re-making either alone means holding
``x`` (larger than each) across the peak, re-making both holds ``x`` once (peak 27).

>>> from memopt.core import Op, Tensor, TensorGraph
>>> from memopt.remat.model_common import RematProblem
>>> g = TensorGraph.build(
...     [Tensor("x", 6), Tensor("b", 5), Tensor("c", 5), Tensor("d", 1), Tensor("w", 20),
...      Tensor("e", 1), Tensor("y", 1, output=True)],
...     [Op("fb", ("x",), ("b",), cost=1), Op("fc", ("x",), ("c", "d"), cost=1),
...      Op("fw", ("d",), ("w",), cost=9), Op("fe", ("w",), ("e",), cost=9),
...      Op("fy", ("b", "c", "e"), ("y",), cost=1)])
>>> p = RematProblem.of(g, 1)
>>> runs = held_tensor_moves(p, [0, 1, 2, 3, 4], "min_cost", memory_limit=27, deadline=float("inf"))
>>> runs
[0, 1, 2, 3, 0, 1, 4]
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from fractions import Fraction

import numpy as np

from memopt.remat.heuristic import _profile, _reads_and_productions
from memopt.remat.model_common import RematProblem

__all__ = ["held_tensor_moves", "held_moves"]

#: the most ops one closure re-runs
MAX_CLOSURE = 64
#: moves evaluated exactly per step (the best by estimated drop per unit of cost)
EVALUATED = 32
#: single moves per step: the largest held tensors (closures cost time on large graphs)
SINGLES = 48


def _current(made_t, i: int) -> int:
    """Index in ``made_t`` of the production of a tensor current before run ``i`` (-1: the
    graph input's initial value, or none)."""
    return bisect_left(made_t, i) - 1


def _live_at(p: RematProblem, reads, made, outputs, t: int, j: int) -> bool:
    """Whether tensor ``t`` is live right before run ``j`` without any move: its current
    production is read at ``j`` or later (before the next production), or it is the last
    production of a graph output (or a graph input that is an output)."""
    k = _current(made[t], j)
    if k < 0 and p.producer[t] >= 0:
        return False
    nxt = made[t][k + 1] if k + 1 < len(made[t]) else None
    r = bisect_left(reads[t], j)
    if r < len(reads[t]) and (nxt is None or reads[t][r] < nxt):
        return True
    return t in outputs and nxt is None


def _held(p: RematProblem, runs, reads, made, outputs, steps):
    """``{(x, j): a}``: tensors held across a run of ``steps`` (live there, not read or made
    there), with ``a`` the run after which they would be freed (their last read before it, or
    their production) and ``j`` their next read (``len(runs)``: a graph output held to the end)."""
    out = {}
    for i in steps:
        busy = set(p.ins[runs[i]]) | set(p.outs[runs[i]])
        for x in range(p.num_tensors):
            if p.size[x] == 0 or x in busy or p.producer[x] < 0 or not made[x]:
                continue
            k = _current(made[x], i)
            if k < 0:
                continue
            m = made[x][k]
            nxt = made[x][k + 1] if k + 1 < len(made[x]) else len(runs) + 1
            r = bisect_right(reads[x], i)
            if r < len(reads[x]) and reads[x][r] < nxt:
                j = reads[x][r]
            elif x in outputs and nxt > len(runs):
                j = len(runs)
            else:
                continue
            a = reads[x][r - 1] if r and reads[x][r - 1] > m else m
            out[(x, j)] = a
    return out


def _closure(p: RematProblem, runs, reads, made, outputs, first, counts, targets, j: int, mode: str,
             prof, level: int, freed):
    """The ops to insert before run ``j`` (in a topological order) that re-make ``targets``:
    ``mode`` ``"remake"`` re-makes every input not live at ``j`` that can be, ``"hold"`` only
    the targets' producers, ``"min"`` holds an input where that keeps the estimated memory of
    its extended span within ``level`` (``prof`` less the ``freed`` spans). ``None`` if a
    target's producer is at its cap or the closure exceeds :data:`MAX_CLOSURE`."""
    est = None
    if mode == "min":
        est = np.array(prof, dtype=np.int64)
        for x, a in freed:
            est[a + 1:j] -= p.size[x]
    ops: list = []
    chosen: set = set()
    made_here: set = set()
    todo = []
    for x in targets:
        u = p.producer[x]
        if u not in chosen:
            if counts[u] >= 1 + p.caps[u]:
                return None
            chosen.add(u)
            todo.append(u)
    while todo:
        v = todo.pop()
        ops.append(v)
        made_here.update(p.outs[v])
        if len(ops) > MAX_CLOSURE:
            return None
        for y in p.ins[v]:
            if y in made_here or p.size[y] == 0 or _live_at(p, reads, made, outputs, y, j):
                continue
            w = p.producer[y]
            if w in chosen:
                continue  # made by the closure already
            can = w >= 0 and counts[w] < 1 + p.caps[w] and mode != "hold"
            if est is not None:
                k = _current(made[y], j)
                r = bisect_left(reads[y], j)
                b = max(made[y][k] if k >= 0 else -1, reads[y][r - 1] if r else -1)
                if not can or b + 1 >= j or int(est[b + 1:j].max()) + p.size[y] <= level:
                    est[b + 1:j] += p.size[y]  # held until j
                    continue
            if can:
                chosen.add(w)
                todo.append(w)
    return sorted(set(ops), key=lambda v: first[v])


def held_moves(p: RematProblem, runs, prof, counts, level: int):
    """``[(estimate, targets, ops, j)]``, best estimate first: the single and group moves at
    the runs where ``prof`` is highest (see the module docstring), of tensors whose producer is
    below its cap; ``estimate`` is the bytes freed at the peak runs per unit of extra cost
    (what holding the closure's inputs costs is left to the exact evaluation).

    Parameters
    ----------
    p : RematProblem
        The problem (graph and caps).
    runs : list of int
        A valid run sequence.
    prof : list of int
        The memory of each run (:func:`memopt.remat.heuristic._profile`).
    counts : list of int
        Runs of each op in ``runs`` (a closure keeps every op within ``1 + cap``).
    level : int
        The memory sought (the limit, or the peak less one): the min-cost closure holds an
        input where its extended span stays within it.

    Returns
    -------
    list of tuple
        ``(estimate, targets, ops, j)``: insert ``ops`` before run ``j`` to re-make ``targets``.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> import numpy as np
    >>> g = TensorGraph.build(
    ...     [Tensor("a", 10), Tensor("b", 20), Tensor("c", 20), Tensor("d", 1, output=True)],
    ...     [Op("fa", (), ("a",), cost=1), Op("fb", ("a",), ("b",), cost=5),
    ...      Op("fc", ("b",), ("c",), cost=5), Op("fd", ("a", "c"), ("d",), cost=5)])
    >>> p = RematProblem.of(g, 1)
    >>> prof = _profile(p, [0, 1, 2, 3])[3]
    >>> prof
    [10, 30, 50, 31]
    >>> [(t, ops, j) for _, t, ops, j in held_moves(p, [0, 1, 2, 3], prof, [1, 1, 1, 1], 40)]
    [([0], [0], 3)]
    """
    peak = max(prof)
    steps = [i for i, m in enumerate(prof) if m == peak]
    outputs = set(p.outputs)
    reads, made = _reads_and_productions(p, runs)
    first: dict = {}
    for i, v in enumerate(runs):
        first.setdefault(v, i)
    held = {k: a for k, a in _held(p, runs, reads, made, outputs, steps).items()
            if counts[p.producer[k[0]]] < 1 + p.caps[p.producer[k[0]]]}
    groups = [[k] for k in sorted(held, key=lambda k: (-p.size[k[0]], k))[:SINGLES]]
    by_reader: dict = {}
    for (x, j) in held:
        by_reader.setdefault(j, []).append((x, j))
    groups += [g for g in by_reader.values() if len(g) > 1]
    out = []
    seen = set()
    for g in groups:
        j = g[0][1]
        targets = [x for x, _ in g]
        freed = [(x, held[(x, j)]) for x, _ in g]
        for mode in ("min", "remake", "hold"):
            ops = _closure(p, runs, reads, made, outputs, first, counts, targets, j, mode, prof, level, freed)
            if ops is None:
                break
            key = (j, tuple(ops))
            if key in seen:
                continue
            seen.add(key)
            gain = sum(p.size[x] * sum(1 for i in steps if a < i < j) for x, a in freed)
            cost = sum((Fraction(p.costs[v]) for v in ops), Fraction(0))
            out.append(((Fraction(gain) / cost) if cost else Fraction(2**80) * gain, targets, ops, j))
    out.sort(key=lambda m: -m[0])
    return out


def held_tensor_moves(p: RematProblem, runs, question: str, *, memory_limit=None, cost_budget=None,
                      deadline: float) -> list:
    """Apply the held-tensor moves greedily to a run sequence; returns the new run sequence.

    Parameters
    ----------
    p : RematProblem
        The problem (graph and caps).
    runs : sequence of int
        A valid run sequence (op ids in order).
    question : {"min_cost", "min_peak"}
        ``min_cost``: stop once the peak is within ``memory_limit``; ``min_peak``: only moves
        that keep the extra cost within ``cost_budget``.
    memory_limit, cost_budget : int or Fraction, optional
        The question's limit or budget.
    deadline : float
        A :func:`time.perf_counter` value; no new step starts after it.

    Returns
    -------
    list of int
        A run sequence within the caps whose peak and count of runs at the peak are no higher
        (lexicographically) than those of ``runs``.

    Examples
    --------
    See the module docstring.
    """
    runs = [int(v) for v in runs]
    _, peak, cost, prof = _profile(p, runs)
    counts = [0] * p.n
    for v in runs:
        counts[v] += 1
    while runs and time.perf_counter() < deadline:
        if question == "min_cost" and peak <= memory_limit:
            break
        if peak > max(prof):
            break  # the start memory is the peak: no move lowers it
        level = memory_limit if question == "min_cost" else peak - 1
        floor = memory_limit if question == "min_cost" else 0
        at_peak = sum(1 for m in prof if m == peak)
        best = None
        for _, targets, ops, j in held_moves(p, runs, prof, counts, level)[:EVALUATED]:
            extra = sum((Fraction(p.costs[v]) for v in ops), Fraction(0))
            if question == "min_peak" and Fraction(cost) + extra > Fraction(cost_budget):
                continue
            new = runs[:j] + ops + runs[j:]
            got = _profile(p, new)
            n_peak = sum(1 for m in got[3] if m == got[1])
            if (got[1], n_peak if got[1] == peak else 0) >= (peak, at_peak):
                continue
            drop = peak - max(got[1], floor)
            fewer = at_peak - (n_peak if got[1] == peak else 0)
            key = (extra != 0, -(Fraction(drop) / extra) if extra else -drop,
                   -(Fraction(fewer) / extra) if extra else -fewer)
            if best is None or key < best[0]:
                best = (key, new, got, ops)
            if time.perf_counter() >= deadline:
                break
        if best is None:
            break
        _, runs, (_, peak, cost, prof), ops = best
        for v in ops:
            counts[v] += 1
    return runs
