"""Moves on the order of a run sequence for the recomputation heuristic: least overflow.

Model: a run sequence (op ids; an op's first run is its computation, later runs are
re-runs) is the plan :func:`~memopt.remat.model_common.plan_from_runs` makes of it (every
production freed after its last read); its *overflow* above a memory limit ``M`` is
``sum_runs max(0, memory(run) - M)`` (the score :mod:`memopt.remat.heuristic`'s greedy drives
to zero by inserting re-runs). The scheduling core's orders have the least *peak*, which is
not the least overflow: on ``random_layered_n250`` at ``M = floor(0.9 P0)`` the scheduler's
order overflows by 364,868 byte-runs over 64 runs, and moving single ops brings that to
161,030, after which the greedy needs re-runs costing 4,637 instead of 7,126 (n500: 8,108 ->
5,032). So :func:`least_overflow_order` is a starting-order transform for the heuristic's
multi-start.

The move: take one run and put it anywhere within :data:`ORDER_WINDOW` positions (first
improvement, runs in a random order, only runs near the overflowing ones), keep it if the
score ``(overflow, peak)`` drops; a move that makes a run read a tensor not produced
before it is skipped. This is single-job relocation local search for a sequencing problem
with a resource profile (the "insertion" neighbourhood of permutation scheduling, e.g.
Taillard, "Some efficient heuristic methods for the flow shop sequencing problem", EJOR 47,
1990), written for memopt's plan model; it is no published algorithm for recomputation.

Example
-------
``fa`` makes ``a`` (read last, by ``fc``), ``fb`` makes ``b`` (read at once, by ``fd``):
running ``fb, fd`` first never holds ``a`` and ``b`` together.

>>> from memopt.core import Op, Tensor, TensorGraph
>>> from memopt.remat.model_common import RematProblem
>>> g = TensorGraph.build(
...     [Tensor("a", 10), Tensor("b", 10), Tensor("d", 1, output=True), Tensor("c", 1, output=True)],
...     [Op("fa", (), ("a",)), Op("fb", (), ("b",)), Op("fd", ("b",), ("d",)), Op("fc", ("a",), ("c",))])
>>> p = RematProblem.of(g, 1)
>>> least_overflow_order(p, [0, 1, 2, 3], 15, deadline=float("inf"))   # overflow 11 before
([1, 2, 0, 3], 0, 12)
"""

from __future__ import annotations

import time

import numpy as np

from memopt.errors import ScheduleError

__all__ = ["overflow", "least_overflow_order", "ORDER_WINDOW"]

#: a run is moved at most this many positions (a wider window finds little more on the
#: random layered graphs and costs linear time per run)
ORDER_WINDOW = 40


def overflow(prof, memory_limit: int) -> int:
    """Memory above ``memory_limit`` summed over the runs of a per-run profile."""
    return sum(m - memory_limit for m in prof if m > memory_limit)


def least_overflow_order(p, runs, memory_limit: int, *, deadline: float, window: int = ORDER_WINDOW, seed: int = 0):
    """``(runs, overflow, peak)``: ``runs`` with single runs moved (within ``window``
    positions, first improvement) while that lowers ``(overflow, peak)`` above
    ``memory_limit``, until no move does or the deadline. The same runs (so the same extra
    cost), in another valid order; never a higher score than the given sequence."""
    from memopt.remat.heuristic import _profile

    rng = np.random.default_rng(seed)
    runs = [int(v) for v in runs]
    _, peak, _, prof = _profile(p, runs)
    score = (overflow(prof, memory_limit), peak)
    improved = True
    while improved and score[0] > 0 and time.perf_counter() < deadline:
        improved = False
        over = [i for i, m in enumerate(prof) if m > memory_limit]
        # only runs that can reach an overflowing run move
        near = [q for q in range(max(0, over[0] - window), min(len(runs), over[-1] + window + 1))]
        for q in rng.permutation(near).tolist():
            if time.perf_counter() >= deadline:
                break
            rest = runs[:q] + runs[q + 1:]
            best = None
            for d in range(max(0, q - window), min(len(runs), q + window + 1)):
                if d == q:
                    continue
                new = rest[:d] + [runs[q]] + rest[d:]
                try:
                    _, pk, _, pr = _profile(p, new)
                except ScheduleError:
                    continue  # a read moved before every production of its tensor
                sc = (overflow(pr, memory_limit), pk)
                if sc < score and (best is None or sc < best[0]):
                    best = (sc, new, pr)
            if best is not None:
                score, runs, prof = best
                improved = True
                if score[0] == 0:
                    break
    return runs, score[0], score[1]
