"""memopt.remat: capped selective recomputation (``docs/remat.md``).

* :class:`RematPlan` — a plan of ``run``/``free`` steps (int arrays), to/from JSON steps;
* :func:`evaluate_plan` — the one evaluator: validates and returns ``(peak, extra_cost, profile)``;
* :func:`plan_from_order` — the no-recomputation plan of an order, frees as early as
  possible (its peak is :func:`memopt.core.peak` of the order);
* :func:`check_plan` — the independent checker;
* :func:`plan_from_runs` — the plan of a run sequence (repeats allowed), frees as early as
  possible: how another tool's recomputation schedule enters the model.

The exhaustive solvers in :mod:`memopt.remat.brute_force` serve the tests and are not
part of any public solver list.

:func:`remat` (:mod:`memopt.remat.api`) answers the three questions through the method
registry (:mod:`memopt.remat.registry`); :func:`memopt.remat` is the plain function of the
top-level package that calls it. This package is reached with ``from memopt.remat import
check_plan`` (``memopt.remat`` is the function).
"""

__all__ = ["RematPlan", "PlanEvaluation", "evaluate_plan", "plan_from_order", "check_plan", "exact_costs",
           "resolve_caps", "resolve_aliases", "RUN", "FREE", "remat", "RematResult", "ParetoResult", "plan_from_runs"]

# every public name is imported on first use, so that reading the method registry (the
# ``memopt`` command's parser) imports neither numpy nor ``memopt.core``
_LAZY = {"remat": ("memopt.remat.api", "remat"), "plan_from_runs": ("memopt.remat.api", "plan_from_runs"),
         "ParetoResult": ("memopt.remat.api", "ParetoResult"),
         "RematResult": ("memopt.remat.result", "RematResult"), "check_plan": ("memopt.remat.checker", "check_plan"),
         **{name: ("memopt.remat.plan", name) for name in ("FREE", "RUN", "PlanEvaluation", "RematPlan",
                                                           "evaluate_plan", "exact_costs", "plan_from_order",
                                                           "resolve_aliases", "resolve_caps")}}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    if not name.startswith("__"):
        from importlib import import_module

        try:  # submodules: memopt.remat.cpsat, ...
            return import_module(f"memopt.remat.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"memopt.remat.{name}":
                raise
    raise AttributeError(f"module 'memopt.remat' has no attribute {name!r}")
