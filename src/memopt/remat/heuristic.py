"""A fast recomputation heuristic for graphs too large for the exact models (thousands of ops).

Start: the scheduling core's optimal no-recomputation order (``memopt.schedule(graph)``, or
the runs of an ``incumbent`` plan) as a *run sequence*. A run sequence is turned into a plan
by :func:`~memopt.remat.model_common.plan_from_runs` (every production freed right after its
last read, so a sequence is always a valid plan) and evaluated exactly in O(steps + edges).

Moves: at the run where memory is highest, every tensor ``x`` that is live there only to be
read later (produced before, next read after, not touched by the peak run; its producer
``u`` below its cap; positive size) is a candidate: *insert a re-run of ``u`` right before
the next read of ``x``*, which frees ``x`` across the peak (its earlier reads are served by
the first production, the later ones by the re-run) at the price of ``c(u)`` and of keeping
``u``'s inputs live until the re-run. Candidates are tried cheapest per byte first, and the
best move by the question's score is taken:

* ``min_cost`` (limit ``M``): the total overflow ``sum_runs max(0, memory - M)``, then the
  peak; stop as soon as the plan fits, then drop every re-run that is not needed to fit
  (costliest first);
* ``min_peak`` (budget ``B``): the peak, then the number of runs at the peak; only moves
  within the budget.

It stops when no candidate improves the score, or at the time limit, and it never returns an
invalid plan: the result is re-evaluated (and :func:`memopt.remat` checks it independently).
It proves nothing beyond the footprint bound (:func:`~memopt.remat.model_common.footprint_bound`).
"""

from __future__ import annotations

import time
from fractions import Fraction

from memopt.remat.model_common import (RematProblem, evaluate, finish_result, plan_from_runs, start_result)

__all__ = ["heuristic_method", "improve_runs"]

#: candidates evaluated per move (the cheapest per byte)
CANDIDATES = 8


def _profile(p: RematProblem, runs):
    """``(plan, peak, cost, memory of each run)`` of a run sequence."""
    from memopt.core.remat import RUN, evaluate_steps

    plan = plan_from_runs(p, runs)
    ev = evaluate_steps(p.graph, plan.kind, plan.index, list(p.caps))
    prof = ev.profile[1:][plan.kind == RUN].tolist()
    return plan, ev.peak, ev.extra_cost, prof


def _score(question, memory_limit, peak, prof):
    if question == "min_cost":
        return (sum(m - memory_limit for m in prof if m > memory_limit), peak)
    return (peak, sum(1 for m in prof if m == peak))


def _candidates(p: RematProblem, runs, idx, counts):
    """``[(ratio, x, u, j)]``: re-run ``u`` before run ``j`` to free ``x`` across run ``idx``."""
    prod = {}
    for i in range(idx):
        for x in p.outs[runs[i]]:
            prod[x] = i
    busy = set(p.ins[runs[idx]]) | set(p.outs[runs[idx]])
    first_read: dict = {}
    again: set = set()
    for i in range(idx + 1, len(runs)):
        v = runs[i]
        for x in p.ins[v]:
            if x in prod and x not in again and x not in first_read:
                first_read[x] = i
        again.update(p.outs[v])
    out = []
    for x, j in first_read.items():
        if x in busy or p.size[x] == 0:
            continue
        u = p.producer[x]
        if counts[u] >= 1 + p.caps[u]:
            continue
        out.append((Fraction(p.costs[u]) / p.size[x], -p.size[x], x, u, j))
    out.sort()
    return out


def improve_runs(p: RematProblem, runs, question: str, *, memory_limit=None, cost_budget=None,
                 deadline: float = float("inf")):
    """Improve a run sequence by inserting re-runs (see the module docstring); returns the
    best ``(runs, plan, peak, extra_cost)`` found."""
    runs = [int(v) for v in runs]
    plan, peak, cost, prof = _profile(p, runs)
    score = _score(question, memory_limit, peak, prof)
    counts = [0] * p.n
    for v in runs:
        counts[v] += 1
    while time.perf_counter() < deadline:
        if question == "min_cost" and peak <= memory_limit:
            break
        idx = max(range(len(runs)), key=lambda i: prof[i]) if runs else None
        if idx is None:
            break
        best = None
        tried = 0
        for _, _, x, u, j in _candidates(p, runs, idx, counts):
            if question == "min_peak" and Fraction(cost) + Fraction(p.costs[u]) > Fraction(cost_budget):
                continue
            new = runs[:j] + [u] + runs[j:]
            cand = _profile(p, new)
            sc = _score(question, memory_limit, cand[1], cand[3])
            if sc < score and (best is None or sc < best[0]):
                best = (sc, new, cand, u)
            tried += 1
            if tried >= CANDIDATES or time.perf_counter() >= deadline:
                break
        if best is None:
            break
        score, runs, (plan, peak, cost, prof), u = best
        counts[u] += 1
    if question == "min_cost" and peak <= memory_limit:
        runs, plan, peak, cost = _drop_unneeded(p, runs, memory_limit, deadline)
    return runs, plan, peak, cost


def _drop_unneeded(p: RematProblem, runs, memory_limit, deadline):
    """Remove re-runs (costliest first) while the plan still fits the limit."""
    seen = set()
    rerun_pos = []
    for i, v in enumerate(runs):
        if v in seen:
            rerun_pos.append(i)
        seen.add(v)
    plan, peak, cost, _ = _profile(p, runs)
    for i in sorted(rerun_pos, key=lambda i: -Fraction(p.costs[runs[i]])):
        if time.perf_counter() >= deadline:
            break
        new = runs[:i] + [-1] + runs[i + 1:]
        trial = [v for v in new if v >= 0]
        cand = _profile(p, trial)
        if cand[1] <= memory_limit:
            runs = new
            plan, peak, cost = cand[0], cand[1], cand[2]
    runs = [v for v in runs if v >= 0]
    return runs, plan, peak, cost


def heuristic_method(problem, *, question: str, memory_limit=None, cost_budget=None, cap=1,
                     time_limit: float = 10.0, incumbent=None, seed: int = 0):
    """Registry method ``heuristic`` (see :mod:`memopt.remat.registry`). ``incumbent``: a plan
    whose runs are the starting sequence (default: the order of ``memopt.schedule``)."""
    from memopt.remat.result import RematResult

    t0 = time.perf_counter()
    p = RematProblem.of(problem, cap)
    early = start_result(p, question, memory_limit, cost_budget, None, "heuristic", t0)
    if early.done and early.result.status == "infeasible":
        return early.result
    deadline = t0 + float(time_limit)
    if incumbent is not None:
        runs = incumbent.runs().tolist()
        evaluate(p, incumbent)  # a bad incumbent is the caller's error, named here
    else:
        from memopt.schedule import schedule

        order = schedule(p.graph, time_limit=max(0.0, 0.3 * float(time_limit))).order
        runs = order.tolist()
    runs, plan, peak, cost = improve_runs(p, runs, question, memory_limit=early.memory_limit,
                                          cost_budget=early.cost_budget, deadline=deadline)
    stats = {"runs": len(runs)}
    if question == "min_cost" and peak > early.memory_limit:
        # no plan within the limit: the lowest-overflow plan, status unknown
        return RematResult(plan=plan, peak=peak, extra_cost=cost, status="unknown", question=question,
                           lower_bound=early.lower, cost_lower_bound=0, memory_limit=early.memory_limit,
                           cap=list(p.caps), method="heuristic", seconds=time.perf_counter() - t0,
                           stats={**stats, "within_limit": False})
    return finish_result(p, early, plan, None, "heuristic", t0, stats)
