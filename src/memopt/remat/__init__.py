"""memopt.remat: capped selective recomputation (DESIGN 1.5, ``docs/remat.md``).

* :class:`RematPlan` — a plan of ``run``/``free`` steps (int arrays), to/from JSON steps;
* :func:`evaluate_plan` — the one evaluator: validates and returns ``(peak, extra_cost, profile)``;
* :func:`plan_from_order` — the no-recomputation plan of an order, frees as early as
  possible (its peak is :func:`memopt.core.peak` of the order);
* :func:`check_plan` — the independent checker.

The exhaustive solvers in :mod:`memopt.remat.brute_force` serve the tests and are not
part of any public solver list.
"""

from memopt.remat.checker import check_plan
from memopt.remat.plan import (FREE, RUN, PlanEvaluation, RematPlan, evaluate_plan, exact_costs, plan_from_order,
                               resolve_aliases, resolve_caps)

__all__ = ["RematPlan", "PlanEvaluation", "evaluate_plan", "plan_from_order", "check_plan", "exact_costs",
           "resolve_caps", "resolve_aliases", "RUN", "FREE"]
