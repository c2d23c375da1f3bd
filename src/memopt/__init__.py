"""memopt: exact memory scheduling and recomputation for ML computation graphs.

>>> import memopt
>>> g = memopt.load_graph("instances/diamond.json")      # doctest: +SKIP
>>> result = memopt.schedule(g, time_limit=10)           # doctest: +SKIP
>>> result.peak, result.lower_bound, result.status       # doctest: +SKIP

Every public name is imported on first use (PEP 562), so that ``import memopt`` (and the
``memopt`` command's ``--help``) imports neither numpy nor numba nor any solver.

:func:`memopt.schedule` and :func:`memopt.remat` are plain functions (defined here, with
their real signatures; each imports its package when called). The packages of the same
names are reached with ``from memopt.schedule.registry import get_method`` or
``from memopt.remat import check_plan``: an attribute chain such as ``memopt.remat.check_plan``
(or ``import memopt.remat.api as api``) reads the function, not the package.
"""

from __future__ import annotations

import sys as _sys
from types import ModuleType as _ModuleType

__version__ = "0.1.0"

__all__ = [
    "Op", "Tensor", "TensorGraph", "Program", "Statement", "SignedDAG", "peak", "memory_profile",
    "load_graph", "load_instance", "from_networkx", "schedule", "ScheduleResult", "compute_bounds",
    "remat", "RematResult", "ParetoResult",
    "MemoptError", "GraphError", "ScheduleError", "FormatError", "CertificateError",
]

#: public name -> module it lives in
_LAZY = {
    "Op": "memopt.core", "Tensor": "memopt.core", "TensorGraph": "memopt.core",
    "Program": "memopt.core", "Statement": "memopt.core", "SignedDAG": "memopt.core",
    "peak": "memopt.core", "memory_profile": "memopt.core",
    "load_graph": "memopt.io", "load_instance": "memopt.io",
    "from_networkx": "memopt.core.nxgraph",
    "ScheduleResult": "memopt.schedule.result", "compute_bounds": "memopt.schedule.api",
    "RematResult": "memopt.remat.result", "ParetoResult": "memopt.remat.api",
    "MemoptError": "memopt.errors", "GraphError": "memopt.errors", "ScheduleError": "memopt.errors",
    "FormatError": "memopt.errors", "CertificateError": "memopt.errors",
}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        module = _LAZY[name]
        value = getattr(import_module(module), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'memopt' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def schedule(model, method="auto", time_limit: float = 10.0, *, input_order=None, seed: int = 0,
             progress: bool = False) -> ScheduleResult:
    """Schedule a model for the lowest peak memory; the result is independently verified.

    Runs one method of the scheduling registry (:mod:`memopt.schedule.registry`) — by default
    the ``auto`` portfolio, which stops as soon as the result is proved — within one deadline
    covering the whole call. The winning order is re-evaluated and its certificate checked by
    the independent checker before it is returned.

    Parameters
    ----------
    model : TensorGraph, Program, SignedDAG, Instance or networkx.DiGraph
        What to schedule. A ``networkx.DiGraph`` is read by :func:`from_networkx`; an
        :class:`~memopt.io.Instance` (from :func:`load_instance`) brings its input order.
    method : str or callable, default "auto"
        A registered name (:func:`memopt.schedule.registry.method_names`): ``auto``,
        ``exact``, a baseline (``input``, ``lpmf``, ``bfs``, ``dfs``, ``inductor``),
        ``greedy``, ``local-search``, ``liu``, ``series-parallel``, ``ideal-search``,
        ``cpsat``, ``scip``. Or a callable with the registry's signature
        ``method(problem, *, time_limit, incumbent=None, lower_bound=None, seed=0)``
        returning a :class:`~memopt.schedule.result.MethodResult`: its order is
        re-evaluated and checked like any method's, and the bound it claims is not used
        (memopt computes its own).
    time_limit : float, default 10.0
        Seconds for the whole call, in ``[0, 1e6]``, apart from what a first call in the
        process spends compiling memopt's kernels and importing its modules (reported in
        ``stats["compile_seconds"]`` and ``stats["import_seconds"]``).
    input_order : sequence of int, optional
        The order of the ``input`` baseline (default: the instance's, else topological).
    seed : int, default 0
        Seed of the randomized methods; a call is deterministic for a given seed.
    progress : bool, default False
        Show a progress line on stderr.

    Returns
    -------
    ScheduleResult
        ``order`` (the model's own ids), exact ``peak``, proven ``lower_bound``, ``status``
        (``certified``, ``optimal`` or ``feasible``), the winning ``method``, the baselines'
        peaks, every bound by name and the checked certificate.

    Raises
    ------
    OptionError
        Unknown method, a time limit out of range, a callable method that returns no
        :class:`~memopt.schedule.result.MethodResult`.
    GraphError
        A malformed model (cycle, negative size...), naming the item.
    ScheduleError
        The named method does not apply to the model or found no order in time, or a
        callable method returned an invalid order (never reported as a result).

    Exceptions raised inside a callable ``method`` propagate unchanged.

    Examples
    --------
    >>> import memopt
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> r = memopt.schedule(g, time_limit=1)
    >>> r.peak, r.lower_bound, r.status
    (6, 6, 'certified')
    """
    from memopt.schedule.api import schedule as run

    return run(model, method, time_limit, input_order=input_order, seed=seed, progress=progress)


def remat(graph, *, memory_limit=None, memory_ratio=None, cost_budget=None, pareto: bool = False, cap=1,
          method="auto", time_limit: float = 10.0, seed: int = 0, jobs: int | None = None, initial=None):
    """Capped selective recomputation: plans that re-run ops to lower the peak memory.

    Answers exactly one question (``docs/remat.md``); every plan returned was
    checked by the independent checker (:func:`memopt.remat.check_plan`), and
    ``infeasible`` is reported only with a proof. The strategy of ``auto`` is described in
    :mod:`memopt.remat.api`.

    Parameters
    ----------
    graph : TensorGraph, Instance or networkx.DiGraph
        The tensor graph (a ``networkx.DiGraph`` is read by :func:`from_networkx`).
    memory_limit : int, optional
        Bytes: the minimum extra cost of a plan with peak ``<= memory_limit``.
    memory_ratio : float, str or Decimal, optional
        As ``memory_limit = floor(memory_ratio x P0)``, ``P0`` the best no-recomputation peak
        found by :func:`schedule`.
    cost_budget : int or Fraction, optional
        The minimum peak of a plan with extra cost ``<= cost_budget``.
    pareto : bool, default False
        The frontier between peak and extra cost.
    cap : int, list of int or dict, default 1
        Re-runs allowed per op: one ``k`` for every op, one per op, or ``{op name: k}``.
    method : str or callable, default "auto"
        ``auto``, a registered name (:mod:`memopt.remat.registry`: ``heuristic``, ``cpsat``,
        ``mip``, ``treedp``), or a callable with the registry's signature
        ``method(problem, *, question, memory_limit=None, cost_budget=None, cap, time_limit,
        incumbent=None, seed=0)`` returning a :class:`~memopt.remat.result.RematResult`; its
        plan is checked like any method's, and its claims of optimality or infeasibility
        are not used.
    time_limit : float, default 10.0
        Seconds for the whole call.
    seed : int, default 0
        Seed of the randomized parts.
    jobs : int, optional
        Processes ``auto`` may run at once (default: 2 where two cores are usable, else 1).
    initial : list, optional
        Warm starts: plans (:class:`~memopt.remat.RematPlan`, or run sequences of op names or
        ids) to start from (:mod:`memopt.remat.warm_start`); each is validated under the caps
        (else :class:`OptionError`). The answer is never worse than the best of them that
        answers the question.

    Returns
    -------
    RematResult or ParetoResult
        ``plan``, ``peak``, ``extra_cost``, ``status`` (``optimal``, ``feasible``,
        ``infeasible``, ``unknown``) and the bounds; a :class:`ParetoResult` with
        ``pareto=True``.

    Raises
    ------
    OptionError
        Not exactly one question, an unknown method, an option out of range, a callable
        method that returns no :class:`~memopt.remat.result.RematResult`.
    GraphError
        A malformed graph.
    ScheduleError
        A callable method returned an invalid plan, or one whose peak, cost or limit is
        not what it claims (never reported as a result).

    Exceptions raised inside a callable ``method`` propagate unchanged.

    Examples
    --------
    >>> import memopt
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
    ...     [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
    ...      Op("h", ("a", "d"), ("c",))])
    >>> r = memopt.remat(g, memory_limit=12, cap=1, time_limit=10)
    >>> r.status, r.peak, r.extra_cost
    ('optimal', 12, 3)
    """
    from memopt.remat.api import remat as run

    return run(graph, memory_limit=memory_limit, memory_ratio=memory_ratio, cost_budget=cost_budget, pareto=pareto,
               cap=cap, method=method, time_limit=time_limit, seed=seed, jobs=jobs,
               initial=initial)


class _Package(_ModuleType):
    """``memopt`` itself: keeps :func:`schedule` and :func:`remat` bound when their packages
    are imported (the import system then sets ``memopt.schedule`` to the subpackage)."""

    def __setattr__(self, name, value):
        if name in ("schedule", "remat") and isinstance(value, _ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
