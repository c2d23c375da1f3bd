"""The registry of scheduling methods: one signature for all of them.

Like networkx's ``flow_func`` for maximum flow, every scheduling method is a function

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
a tensor-graph baseline on a bare DAG) raises :class:`~memopt.schedule.registry.NotApplicable`.

The registry maps names to ``"module:function"`` targets that are imported only when the
method runs, so reading the registry (``memopt --help``) imports no solver and no kernel.
Adding a method is one module with such a function plus one :func:`register` line below.
The portfolios ``auto`` and ``exact`` (:mod:`memopt.schedule.portfolio`) are registered the
same way but decide what to run themselves from the instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from memopt.errors import OptionError, ScheduleError

__all__ = ["Method", "NotApplicable", "TimeLimitReached", "deadline_checker", "register", "get_method", "method_names", "methods", "REGISTRY"]

KINDS = ("portfolio", "baseline", "class", "heuristic", "anytime", "exact")


class NotApplicable(ScheduleError):
    """The method does not apply to this problem (it is outside the method's class)."""


class TimeLimitReached(Exception):
    """Control flow inside a method: its time limit ran out (the method then returns its best
    result so far, or none). Never escapes a registered method."""


def deadline_checker(deadline: float | None):
    """A cheap check for long pure-Python loops: the returned function raises
    :class:`TimeLimitReached` once ``time.perf_counter()`` passes ``deadline`` (it looks at the
    clock every 1024 calls). ``None``: no deadline."""
    if deadline is None:
        return lambda: None
    import time

    count = [0]

    def check():
        count[0] += 1
        if count[0] & 1023 == 0 and time.perf_counter() > deadline:
            raise TimeLimitReached("time limit reached")

    return check


@dataclass(frozen=True)
class Method:
    """A registered scheduling method.

    ``kind``: ``portfolio`` (decides what to run), ``baseline`` (a named reference order),
    ``class`` (optimal on a graph class, :class:`NotApplicable` outside it), ``heuristic``
    (one pass), ``anytime`` (improves until proved, exhausted or out of time), ``exact``
    (proves optimality given time). ``models``: which models it accepts (``graph``,
    ``program``, ``dag``).
    """

    name: str
    target: str
    kind: str
    summary: str
    models: tuple = ("graph", "program", "dag")

    def load(self):
        """The method's function (imports its module on first use)."""
        module, _, attr = self.target.partition(":")
        return getattr(import_module(module), attr)


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add (or replace) a method; returns it."""
    if method.kind not in KINDS:
        raise OptionError(f"method {method.name!r}: unknown kind {method.kind!r}; choose from {', '.join(KINDS)}")
    REGISTRY[method.name] = method
    return method


def get_method(name: str) -> Method:
    try:
        return REGISTRY[name]
    except KeyError:
        raise OptionError(f"unknown method {name!r}; choose from {', '.join(method_names())}") from None


def method_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def methods(kind: str | None = None) -> list[Method]:
    return [m for m in REGISTRY.values() if kind is None or m.kind == kind]


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
