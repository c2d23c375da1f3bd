"""The registry of scheduling methods: one signature for all of them.

Like networkx's ``flow_func`` for maximum flow, every scheduling method is a function::

    method(problem, *, time_limit, incumbent=None, lower_bound=None, seed=0) -> MethodResult

* ``problem``: a :class:`~memopt.core.problem.SchedulingProblem` (the model, its signed DAG
  and the input order);
* ``time_limit``: seconds; a method returns its best result by then (and never hangs);
* ``incumbent``: an order in the problem's ids that the method may start from (a warm start);
* ``lower_bound``: a proven bound the method may use to stop early ("proved" as soon as it
  reaches it) — it must never report a bound it did not prove itself;
* ``seed``: for randomized methods (results are deterministic for a given seed);
* returns a :class:`~memopt.schedule.result.MethodResult` (order, peak, what it proved).

A method that does not apply to the problem (Liu's algorithm on a graph that is not a tree,
a tensor-graph baseline on a bare DAG) raises :class:`~memopt.registry.NotApplicable`.
The registry machinery itself (:class:`~memopt.registry.Registry`, lazy targets) is shared
with the recomputation methods in :mod:`memopt.registry`.

The registry maps names to ``"module:function"`` targets that are imported only when the
method runs, so reading the registry (``memopt --help``) imports no solver and no kernel.
Adding a method is one module with such a function plus one :func:`register` line below;
a function with this signature can also be passed directly, unregistered, as
``memopt.schedule(model, method=function)`` (its order is checked like any method's, and the
bound it claims is not used).
The portfolios ``auto`` and ``exact`` (:mod:`memopt.schedule.portfolio`) are registered the
same way but decide what to run themselves from the instance.
"""

from __future__ import annotations

from memopt.registry import Method, NotApplicable, Registry, TimeLimitReached, deadline_checker

__all__ = ["Method", "NotApplicable", "TimeLimitReached", "deadline_checker", "register", "get_method",
           "method_names", "methods", "REGISTRY", "KINDS"]

KINDS = ("portfolio", "baseline", "class", "heuristic", "anytime", "exact")

_registry = Registry("", KINDS)
#: name -> :class:`Method`, in registration order (the registry's own table)
REGISTRY: dict[str, Method] = _registry.entries


# the family's functions are the registry's own methods
register = _registry.register
get_method = _registry.get
method_names = _registry.names
methods = _registry.of_kind


_S = "memopt.schedule."
for _m in (
    Method("auto", _S + "portfolio:auto", "portfolio",
           "best of the baselines and heuristics, then bounds and exact search, stopping when proved"),
    Method("exact", _S + "portfolio:exact", "portfolio",
           "like auto, with the time given to proving optimality"),
    Method("input", _S + "baselines:input_method", "baseline", "the order of the input file"),
    Method("lpmf", _S + "inductor:lpmf_method", "baseline", "PyTorch Inductor's LPMF heuristic", ("graph",)),
    Method("bfs", _S + "inductor:bfs_method", "baseline", "PyTorch Inductor's BFS heuristic", ("graph",)),
    Method("dfs", _S + "inductor:dfs_method", "baseline", "PyTorch Inductor's DFS heuristic", ("graph",)),
    Method("inductor", _S + "inductor:inductor_method", "baseline",
           "PyTorch Inductor's reorder_for_peak_memory (best of input, LPMF, BFS, DFS)", ("graph",)),
    Method("liu", _S + "trees:liu_method", "class", "Liu's algorithm, optimal on in- and out-trees", ("graph",)),
    Method("series-parallel", _S + "series_parallel:series_parallel_method", "class",
           "Kayaaslan et al., optimal on series-parallel graphs", ("graph",)),
    Method("greedy", _S + "greedy:greedy_method", "heuristic", "list scheduling by several memory rules"),
    Method("local-search", _S + "local_search:local_search_method", "anytime",
           "iterated local search with closure moves"),
    Method("ideal-search", _S + "ideal_search:ideal_search_method", "exact",
           "decision searches on the ideal lattice with dominance and min-cut bounds"),
    Method("cpsat", _S + "cpsat:cpsat_method", "exact", "OR-Tools CP-SAT model"),
    Method("scip", _S + "scip:scip_method", "exact", "SCIP MIP model"),
):
    register(_m)
del _m
