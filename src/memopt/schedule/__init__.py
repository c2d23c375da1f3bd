"""memopt.schedule: operator orders with the lowest peak memory.

Every method is reached through the registry (:mod:`memopt.schedule.registry`, one
signature for all): baselines (``baselines``: the input order; ``inductor``: PyTorch
Inductor's heuristics), algorithms optimal on a class (``trees``: Liu; ``series_parallel``:
Kayaaslan et al.), heuristics (``greedy``, ``local_search``), exact solvers
(``ideal_search``, ``cpsat``, ``scip``), and the portfolios ``auto``/``exact``
(``portfolio``). :func:`memopt.schedule` (a plain function of the top-level package, with
:func:`schedule` here as its implementation) is the one entry point; this package is reached
with ``from memopt.schedule.registry import ...`` (``memopt.schedule`` is the function).

Submodules are imported on first use, so that reading the registry imports no solver.
"""

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
