"""The registry of recomputation methods: one signature for all of them.

Modelled on :mod:`memopt.schedule.registry`. Every method is a function::

    method(problem, *, question, memory_limit=None, cost_budget=None, cap, time_limit,
           incumbent=None, seed=0) -> RematResult

* ``problem``: a :class:`~memopt.core.TensorGraph` (or a
  :class:`~memopt.remat.model_common.RematProblem`);
* ``question``: ``"min_cost"`` (minimum extra cost with peak ``<= memory_limit`` bytes) or
  ``"min_peak"`` (minimum peak with extra cost ``<= cost_budget``);
* ``cap``: one ``k`` for every op, a list (one per op) or a mapping ``{op: k}``;
* ``time_limit``: seconds; the method returns its best plan by then and never hangs; the
  registered methods also take ``clock=`` (a :class:`memopt.clock.Clock`), which
  :func:`memopt.remat` passes them in place of the seconds (``time_limit`` then only says
  what is left on it); a user's callable gets ``time_limit`` alone;
* ``incumbent``: a valid :class:`~memopt.remat.plan.RematPlan` it may start from;
* ``seed``: for randomized parts (CP-SAT's search, SCIP's permutation);
* returns a :class:`~memopt.remat.result.RematResult` whose plan (when there is one) is valid
  and was re-evaluated exactly; ``infeasible`` only with a proof.

A method outside its class raises :class:`NotApplicable` (from the scheduling registry, so
one exception means "does not apply" everywhere). Targets are ``"module:function"`` strings
imported when the method runs, so reading the registry imports no solver. Adding a method
is one module plus one :func:`register` line below; a function with this signature can also
be passed directly as ``memopt.remat(graph, ..., method=function)`` (its plan is checked,
its claims of optimality or infeasibility are not used). ``auto`` is not a method here: it is the
portfolio of :func:`memopt.remat.api.remat` (heuristic, then the exact models while they can
prove something).
"""

from __future__ import annotations

from memopt.registry import Method, NotApplicable, Registry

__all__ = ["RematMethod", "NotApplicable", "register", "get_method", "method_names", "methods", "REGISTRY"]

KINDS = ("heuristic", "exact")

#: a recomputation method is a :class:`memopt.registry.Method` of this registry
RematMethod = Method

_registry = Registry("recomputation", KINDS, extra_names=("auto",))
REGISTRY: dict[str, Method] = _registry.entries


# the family's functions are the registry's own methods
register = _registry.register
get_method = _registry.get
method_names = _registry.names
methods = _registry.of_kind


_R = "memopt.remat."
for _m in (
    RematMethod("heuristic", _R + "heuristic:heuristic_method", "heuristic",
                "optimal no-recomputation order, then re-runs of cheap values held across the peak"),
    RematMethod("cpsat", _R + "cpsat:cpsat_method", "exact", "CP-SAT retention-interval model over run slots"),
    RematMethod("mip", _R + "mip:mip_method", "exact", "time-indexed MIP over run slots, solved by SCIP"),
    RematMethod("treedp", _R + "treedp:treedp_method", "exact",
                "exact frontier DP, A* with a forced-re-run bound (exponential in DAG width, open ops and live sets)"),
):
    register(_m)
del _m
