"""Warm starts of ``memopt.remat``: plans given by the caller (``initial=[...]``).

A caller with a constructive plan (a min-cut saved set, block checkpointing; see
:mod:`memopt.adapters.training_seeds`) hands it over as a :class:`~memopt.remat.RematPlan` or
as a run sequence (op names or ids, repetitions allowed; freed as early as possible, as
:func:`memopt.remat.plan_from_runs`). Each is validated and measured by the exact evaluator
under the call's caps; an invalid one is the caller's error (:class:`~memopt.errors.OptionError`,
one line). ``auto`` then starts from them: the best one that answers the question is the
incumbent every later part must beat (so the answer is never worse than it), and the
heuristic's search also starts from every one that answers it (or, when none fits a memory
limit, from the one with the least peak), beside the scheduler's order. Their status is ``feasible``: a
seed proves nothing beyond itself. The plan returned is checked by the independent checker
like every answer.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

from memopt.errors import MemoptError, OptionError

__all__ = ["Seed", "checked_initial", "best_answer", "heuristic_starts"]


class Seed(NamedTuple):
    plan: object
    peak: int
    extra_cost: object


def checked_initial(p, initial) -> list[Seed]:
    """``initial`` (``None`` or a list of plans or run sequences) as evaluated seeds of the
    problem ``p`` (:class:`~memopt.remat.model_common.RematProblem`)."""
    from memopt.remat.api import plan_from_runs
    from memopt.remat.model_common import evaluate
    from memopt.remat.plan import RematPlan

    if initial is None:
        return []
    if isinstance(initial, (RematPlan, str)) or not hasattr(initial, "__iter__"):
        raise OptionError("initial must be a list of plans (RematPlan or run sequences), "
                          f"got {type(initial).__name__}")
    out = []
    for i, x in enumerate(initial):
        try:
            plan = x if isinstance(x, RematPlan) else plan_from_runs(p.graph, list(x))
            pk, c = evaluate(p, plan)
        except (MemoptError, TypeError, ValueError) as exc:
            raise OptionError(f"initial plan {i} is not a plan within the caps: {exc}") from None
        out.append(Seed(plan, int(pk), c))
    return out


def best_answer(seeds: list[Seed], question: str, memory_limit=None, cost_budget=None) -> Seed | None:
    """The best seed that answers the question (within the limit, or the budget), or ``None``."""
    from memopt.remat.model_common import answers, better

    best = None
    for s in seeds:
        if answers(question, s.peak, s.extra_cost, memory_limit, cost_budget) and \
                better(question, (s.peak, s.extra_cost), None if best is None else (best.peak, best.extra_cost)):
            best = s
    return best


def heuristic_starts(seeds: list[Seed], question: str, memory_limit=None, cost_budget=None) -> list[Seed]:
    """The seeds the heuristic also starts from (beside the scheduler's order), already checked
    (:func:`checked_initial`): every seed that answers the question, best first; else
    (``min_cost``) the one with the least peak; none without seeds (or none within a budget).
    A start that does not fit may take the greedy all the time left, hence only one."""
    from memopt.remat.model_common import answers

    ok = [s for s in seeds if answers(question, s.peak, s.extra_cost, memory_limit, cost_budget)]
    if ok:
        key = (lambda s: (Fraction(s.extra_cost), s.peak)) if question == "min_cost" else \
            (lambda s: (s.peak, Fraction(s.extra_cost)))
        return sorted(ok, key=key)
    if question != "min_cost" or not seeds:
        return []
    return [min(seeds, key=lambda s: (s.peak, Fraction(s.extra_cost)))]
