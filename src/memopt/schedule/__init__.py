"""memopt.schedule: operator orders with the lowest peak memory.

Every method is reached through the registry (:mod:`memopt.schedule.registry`, one
signature for all): baselines (``baselines``: the input order; ``inductor``: PyTorch
Inductor's heuristics), algorithms optimal on a class (``trees``: Liu; ``series_parallel``:
Kayaaslan et al.), heuristics (``greedy``, ``local_search``), exact solvers
(``ideal_search``, ``cpsat``, ``scip``), and the portfolios ``auto``/``exact``
(``portfolio``). :func:`schedule` is the one entry point; the package itself is callable
(``memopt.schedule(graph, ...)``).

Submodules are imported on first use, so that reading the registry imports no solver.
"""

import sys as _sys

__all__ = ["schedule", "schedule_instance", "compute_bounds", "ScheduleResult", "METHODS"]

_SUBMODULES = ("api", "baselines", "brute_force", "cpsat", "greedy", "ideal_search", "inductor", "local_search",
               "ordering_model", "portfolio", "registry", "result", "scip", "series_parallel", "trees")

_LAZY = {
    "schedule": ("memopt.schedule.api", "schedule"),
    "schedule_instance": ("memopt.schedule.api", "schedule_instance"),
    "compute_bounds": ("memopt.schedule.api", "compute_bounds"),
    "ScheduleResult": ("memopt.schedule.result", "ScheduleResult"),
}


def __getattr__(name):
    if name == "METHODS":
        from memopt.schedule.registry import method_names

        return method_names()
    if name in _SUBMODULES:
        from importlib import import_module

        return import_module(f"memopt.schedule.{name}")
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'memopt.schedule' has no attribute {name!r}")


class _CallableModule(type(_sys)):
    """Lets ``memopt.schedule(graph, ...)`` call :func:`schedule` while ``memopt.schedule.greedy``
    and the other submodules stay reachable as attributes of the package."""

    def __call__(self, *args, **kwargs):
        from memopt.schedule.api import schedule

        return schedule(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
