"""memopt.schedule: operator orders with the lowest peak memory.

Heuristics and baselines (``inductor``, ``greedy``, ``local_search``), algorithms optimal on
a class (``trees``: Liu; ``series_parallel``: Kayaaslan et al.), exact solvers
(``ideal_search``, ``cpsat``, ``scip``) and the one entry point :func:`schedule`.
"""

from memopt.schedule.api import METHODS, ScheduleResult, compute_bounds, schedule, schedule_instance

__all__ = ["schedule", "schedule_instance", "compute_bounds", "ScheduleResult", "METHODS"]


class _CallableModule(type(__import__("sys"))):
    """Lets ``memopt.schedule(graph, ...)`` call :func:`schedule` while ``memopt.schedule.greedy``
    and the other submodules stay reachable as attributes of the package."""

    def __call__(self, *args, **kwargs):
        return schedule(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
