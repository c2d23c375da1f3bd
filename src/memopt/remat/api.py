"""``memopt.remat(graph, ...)``: capped selective recomputation, the one entry point.

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 8), Tensor("d", 2), Tensor("c", 1, output=True)],
...     [Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("k", ("b",), ("d",)),
...      Op("h", ("a", "d"), ("c",))])
>>> r = remat(g, memory_limit=12, cap=1, time_limit=10)
>>> r.status, r.peak, r.extra_cost, r.cost_lower_bound
('optimal', 12, 3, 3)
>>> remat(g, memory_ratio=0.5, cap=1).status          # 0.5 x 14 = 7 < the footprint of k (8 + 2)
'infeasible'
>>> [(p.extra_cost, p.peak) for p in remat(g, pareto=True, cap=1).points]
[(0, 14), (3, 12)]

Questions (exactly one):

* ``memory_limit=M`` (bytes) or ``memory_ratio=R`` (``M = floor(R x P0)``, ``P0`` the optimal
  no-recomputation peak found by :func:`memopt.schedule`; ``stats["baseline"]`` says whether
  the scheduler proved it): the minimum extra cost of a plan with peak ``<= M``;
* ``cost_budget=B``: the minimum peak of a plan with extra cost ``<= B``;
* ``pareto=True``: the frontier between them, as a :class:`ParetoResult` whose ``points``
  are ``min_peak`` results of strictly decreasing peak and increasing cost (exact when
  every point is ``optimal`` and ``complete`` is true; anytime otherwise).

``method``: ``auto`` (default), or a registered method (:mod:`memopt.remat.registry`:
``heuristic``, ``cpsat``, ``mip``). ``auto`` starts from the scheduling core's optimal order
(the no-recomputation plan: extra cost 0), runs the heuristic when that does not answer the
question, and gives the time left to the CP-SAT model while its size allows (counted after
cutting each cap to what the best plan's cost, or the budget, can pay for), warm-started
with the best plan; ``min_cost`` on a larger graph gets the extra-cost lower bound of
:func:`memopt.remat.lower_bounds.cost_lower_bound` instead, which proves the plan optimal
when they meet (the share ``auto.bound_alone`` of the time left), and then (if the plan does
not meet it) a CP-SAT model whose caps are kept only on the bound's cheapest hitting set, for
a better plan; time still left then goes to the heuristic's local search on the best plan.
With a cap above 1 left after the cut, the full model gets the share ``auto.cpsat_full_caps``;
when it has not closed by then, the cap-1 model (its plans are plans here; its optimum is no
bound) gets the share ``auto.cpsat_cap1`` of the rest, and the full model runs again from the
best plan: the cap-2 answer then costs at most what the cap-1 model finds.

Time: ``time_limit`` (seconds, :func:`memopt.clock.check_time_limit`) covers the whole call
after the first-call kernel compilation (``stats["compile_seconds"]``) and, when the limit is
above 0, the first import of the CP-SAT solver (``stats["import_seconds"]``, 0 once imported). It becomes one
:class:`memopt.clock.Clock` per call; every part (the baseline order, the peak bound, the
heuristic, the cost bound and its child process, CP-SAT, the local search) gets the clock or
a named share of it from :data:`memopt.time_shares.SHARES`, and stops there with the
best it has. The answer is anytime: the best plan found by then; ``unknown`` only with
``stats["reason"]`` (a time out before any plan within the limit, or no method found one and
none proved that there is none) and the no-recomputation plan (above the limit) or the
heuristic's least-overflow plan; ``stats["parts"]`` records each part's status and seconds.
A time limit of 0 answers at once: the no-recomputation plan, ``optimal`` when it fits the
limit, else ``unknown`` (or ``infeasible`` when the peak bound proves it).

With ``jobs >= 2`` (the default where this process may use two cores), at least
:data:`AUTO_PARALLEL_MIN_SECONDS` and :data:`AUTO_PARALLEL_MIN_OPS` ops, ``min_cost`` runs
the cost bound in a child process (:mod:`memopt.remat.cost_bound_process`) from the start,
beside the heuristic, instead of after it: the bound needs no plan, and both are
single-threaded. Before CP-SAT (which uses both cores) the child is asked for its bound, once
it is done or has had the share ``auto.bound`` of the time the heuristic left (the local
search polishes the plan meanwhile, as below; without a plan it just runs on); on
a graph too large for the models it runs on to the share ``auto.parallel_bound`` of the time
while the local search polishes the plan and tells it every cheaper one. If the child fails, the bound is computed in this process
with the time left, as with ``jobs=1``; ``stats["parts"]["cost_bound"]["where"]`` says which.
The child is ended (terminated, then killed) at the latest at the call's deadline.
``stats["parts"]["cost_bound"]`` says whether the bound ran to completion: ``complete`` and
``status`` (``fixpoint``, ``stop_at``, ``infeasible``; or ``deadline``, the bound cut short).

Every plan returned was checked by the independent checker
(:func:`memopt.remat.check_plan`); a disagreement raises
:class:`~memopt.errors.InternalError`. ``infeasible`` is reported only with a proof: the
lower bound on the peak of every capped plan (``lower_bound``; the larger of
:func:`memopt.remat.model_common.footprint_bound` and
:func:`memopt.remat.lower_bounds.peak_lower_bound`) above the limit, or an exact model
proving that no plan meets it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from memopt.errors import InternalError, OptionError, ScheduleError
from memopt.remat.options import exactly_one, limit_of_ratio, parse_ratio
from memopt.remat.model_common import RematProblem, better, footprint_bound, plan_from_runs as plan_from_runs_of, reduced_caps, within_caps
from memopt.remat.result import RematResult

__all__ = ["remat", "ParetoResult", "resolve_method", "checked_method_result"]

#: CP-SAT is tried by ``auto`` up to this many run slots after the caps are cut to what the
#: incumbent's cost (or the budget) allows (copies x slots grows as its square)
AUTO_EXACT_SLOTS = 600

#: with a second core (``jobs >= 2``), ``auto`` runs the cost bound in a child process beside
#: the heuristic (:mod:`memopt.remat.cost_bound_process`) when the call has at least this many
#: seconds and the graph this many ops: below them the child's start (a fresh interpreter,
#: about a second) costs more than the bound itself
AUTO_PARALLEL_MIN_SECONDS = 10.0
AUTO_PARALLEL_MIN_OPS = 40

#: a call keeps the time of this many evaluations of a plan (at most the share ``call.close``)
#: for what follows its parts: the exact evaluations that end the last search step and the
#: independent check of the answer (O(steps x live tensors): about 24 evaluations; under a load
#: of 11 on two cores 40 left DenseNet-121 at 0.9 ending 61-63 s at 60 s). One evaluation is
#: timed again before each of the last parts (:meth:`_Call.closing`): the load can rise during
#: the call. (Wall per CPU second of the whole call overstates it: the process also waits for
#: the scheduler's and the bound's child processes; DenseNet-121 at 0.9 then ended at 54.9 s.)
CLOSE_EVALUATIONS = 60

#: CPU seconds kept, beside the closing evaluations, for the last solver to stop, times the
#: slowdown (wall per CPU second) of that timed evaluation: CP-SAT's workers end past
#: ``max_time_in_seconds`` when the machine is loaded (real-network GPT-2 at 0.9, cap 2, 60 s,
#: load 12-13: the hitting-set model ended the call at 61.28 s; 4.83 s for a limit of 4.77 s
#: in a traced run)
SOLVER_STOP_CPU = 0.2

#: while the bound's child runs on, the local search polishes the plan in slices of 1, 2, 4...
#: up to this many seconds, so that the child's end (or its proof) is seen within one slice
POLISH_SLICE = 10.0


@dataclass(frozen=True)
class ParetoResult:
    """The frontier that ``memopt.remat(graph, pareto=True)`` returns.

    Attributes
    ----------
    points : list of RematResult
        ``min_peak`` results, peak decreasing, cost increasing.
    complete : bool
        The last point's peak minus one was proved infeasible, or equals the lower bound.
    status : {"optimal", "feasible"}
        ``optimal`` when complete and every point is optimal.
    seconds, cap, method, stats

    Examples
    --------
    >>> ParetoResult(points=[], complete=False, status="feasible", seconds=0.0).to_dict()["points"]
    []
    """

    points: list
    complete: bool
    status: str
    seconds: float
    cap: object = None
    method: str = ""
    stats: dict = field(default_factory=dict)

    def to_dict(self, graph=None, op_labels=None) -> dict:
        return {"points": [p.to_dict(graph, op_labels) for p in self.points], "complete": self.complete,
                "status": self.status, "seconds": round(float(self.seconds), 6), "cap": self.cap,
                "method": self.method, "stats": self.stats}


def resolve_method(method):
    """``(name, None)`` for ``auto`` or a registered name; ``(name, method)`` for a callable with
    the registry signature (named after it, apart from the registered names);
    :class:`OptionError` otherwise."""
    from memopt.remat.registry import get_method, method_names

    if isinstance(method, str):
        if method != "auto":
            get_method(method)
        return method, None
    if not callable(method):
        raise OptionError(f"method must be 'auto', a registered name or a callable, got {type(method).__name__}")
    name = getattr(method, "__name__", None) or type(method).__name__
    if name in method_names() or name == "auto":
        name += " (callable)"
    return name, method


def checked_method_result(name: str, res, problem: RematProblem, common: dict) -> RematResult:
    """What a user's callable method returned, checked before anything of it is used: a
    :class:`RematResult` (else :class:`OptionError`) whose plan passes the independent checker
    with the peak and extra cost it claims, within the question's limit or budget (else
    :class:`ScheduleError`). Its claims of optimality or infeasibility and its bounds are
    dropped: ``feasible`` with a plan, ``unknown`` without one."""
    from memopt.errors import MemoptError
    from memopt.remat.checker import check_plan
    from memopt.remat.plan import RematPlan

    if not isinstance(res, RematResult):
        raise OptionError(f"method {name!r} returned {type(res).__name__}, not a RematResult "
                          "(memopt.remat.result.RematResult)")
    stats = dict(res.stats) if isinstance(res.stats, dict) else {}
    if res.plan is None:
        return RematResult(plan=None, peak=None, extra_cost=None, status="unknown", stats=stats, **common)
    if not isinstance(res.plan, RematPlan):
        raise OptionError(f"method {name!r} returned a plan of type {type(res.plan).__name__}, not a RematPlan")
    try:
        pk, c = check_plan(problem.graph, res.plan, cap=list(problem.caps), claimed_peak=res.peak,
                           claimed_extra_cost=res.extra_cost)
    except (MemoptError, TypeError, ValueError) as exc:  # a claim that is no number is a bad plan too
        raise ScheduleError(f"method {name!r} returned an invalid plan: {exc}") from None
    if common["question"] == "min_cost" and pk > common["memory_limit"]:
        raise ScheduleError(f"method {name!r} returned a plan of peak {pk}, above the memory limit "
                            f"{common['memory_limit']}")
    if common["question"] == "min_peak" and Fraction(c) > Fraction(common["cost_budget"]):
        raise ScheduleError(f"method {name!r} returned a plan of extra cost {c}, above the budget "
                            f"{common['cost_budget']}")
    # extra cost 0 is the least there is (costs are >= 0): the only optimality known without a bound
    optimal = common["question"] == "min_cost" and Fraction(c) == 0
    return RematResult(plan=res.plan, peak=pk, extra_cost=c, status="optimal" if optimal else "feasible",
                       cost_lower_bound=0 if common["question"] == "min_cost" else None, stats=stats, **common)


def _graph_of(model):
    from memopt.core.instance import Instance
    from memopt.core.nxgraph import from_networkx, is_networkx_graph
    from memopt.core.tensor_graph import TensorGraph

    if is_networkx_graph(model):
        model = from_networkx(model)
    if isinstance(model, Instance):
        model = model.graph
    if not isinstance(model, TensorGraph):
        raise OptionError("recomputation needs a tensor graph (a memopt-graph or a published node-link graph); "
                          f"got {type(model).__name__}")
    return model


def plan_from_runs(graph, runs):
    """The :class:`~memopt.remat.RematPlan` that runs ``runs`` in that order and frees every
    tensor as early as possible: each production serves the reads up to the next production
    of the same tensor and is freed right after the last of them; the last production of a
    graph output stays live; graph inputs nobody reads are freed at the start. This is how a
    recomputation schedule from another tool (Checkmate's or Moccasin's order of runs) enters
    memopt's model; measure it with :func:`~memopt.remat.check_plan`.

    Parameters
    ----------
    graph : TensorGraph, Instance or networkx.DiGraph
    runs : sequence of int or str
        Op names or ids, repetitions allowed.

    Returns
    -------
    RematPlan

    Raises
    ------
    ScheduleError
        An unknown op, or a run that reads a tensor not produced before it.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 2, output=True)],
    ...                       [Op("A", (), ("a",), cost=3), Op("B", ("a",), ("b",), cost=5)])
    >>> plan = plan_from_runs(g, ["A", "B", "A", "B"])
    >>> plan.to_doc(g)
    [{'run': 'A'}, {'run': 'B'}, {'free': 'a'}, {'free': 'b'}, {'run': 'A'}, {'run': 'B'}, {'free': 'a'}]
    >>> from memopt.remat import check_plan
    >>> check_plan(g, plan, cap=1)          # (peak, extra cost)
    (6, 8)
    """
    from memopt.remat.plan import _resolve

    g = _graph_of(graph)
    ids = [_resolve(x, g.op_index, g.num_ops, "op", i, place="run") for i, x in enumerate(runs)]
    counts = np.bincount(np.asarray(ids, dtype=np.int64), minlength=g.num_ops)
    # caps do not shape the plan; the problem is built with the caps these runs use
    return plan_from_runs_of(RematProblem.of(g, np.maximum(counts - 1, 0).tolist()), ids)


class _Call:
    """One ``remat`` call: the problem, its clock, the scheduling baseline, the bound."""

    def __init__(self, graph, cap, time_limit, seed, method, jobs=1, func=None, initial=None):
        from memopt import _jit
        from memopt.clock import Clock
        from memopt.time_shares import SHARES

        t0 = time.perf_counter()
        self.p = RematProblem.of(graph, cap)
        # kernels are compiled (or loaded) before the clock starts (stats["compile_seconds"])
        self.compile_seconds = _jit.warm("remat", self.p.graph.num_ops + self.p.graph.num_tensors)
        # so is the first import of the CP-SAT solver (1-2 s on a loaded machine), which the
        # bounds and models use, unless the call has no time to use it (stats["import_seconds"])
        self.import_seconds = _import_solver() if time_limit > 0 else 0.0
        self.t0 = t0 + self.compile_seconds + self.import_seconds
        self.close_plan = None  # the plan whose evaluation is timed for the closing reserve
        self.close_most = 0.0   # the share call.close of the question's time, in seconds
        # the call's one clock: every part below gets it or a share of it
        self.clock = Clock(time_limit, shares=SHARES, now=self.t0)
        from memopt.remat.warm_start import checked_initial

        # the caller's plans (memopt.remat.warm_start), evaluated on the call's clock
        self.seeds = checked_initial(self.p, initial)
        self.seed = seed
        self.method = method
        self.func = func  # a user's callable method, run under the name ``method``
        self.jobs = jobs
        self._base = None
        self._lower = None
        self.timings = {}   # the call's shared parts (baseline order, peak bound): status and seconds

    def left(self) -> float:
        return self.clock.left()

    def close_reserve(self) -> float:
        """Wall seconds the parts leave before the call's deadline to hand the answer back:
        :data:`CLOSE_EVALUATIONS` evaluations of a plan, timed now, and
        :data:`SOLVER_STOP_CPU` times that evaluation's wall per CPU second; at most
        ``close_most``. The evaluation is timed twice and the faster timing kept: one
        preemption in an evaluation of a small plan (under a millisecond) reads as a slowdown
        of 60 or more, and the reserve then took its whole cap (Checkmate segnet and MobileNet at
        cap 2 ended 9 s early, unproved, under load 10)."""
        from memopt.remat.model_common import evaluate

        if self.close_plan is None:
            return 0.0
        timings = []
        for _ in range(2):
            t, c = time.perf_counter(), time.process_time()
            evaluate(self.p, self.close_plan)
            timings.append((time.perf_counter() - t, time.process_time() - c))
        wall, cpu = min(timings)
        slowdown = max(1.0, wall / cpu) if cpu > 0.0 else 1.0
        return min(self.close_most, CLOSE_EVALUATIONS * wall + SOLVER_STOP_CPU * slowdown)

    def closing(self, clock):
        """``clock``, ending :meth:`close_reserve` before the call's deadline (or earlier)."""
        return clock.until(self.clock.end - self.close_reserve())

    def base(self):
        """``(plan, peak, status)`` of the scheduling core's best no-recomputation order."""
        if self._base is None:
            from memopt.schedule import schedule

            # the scheduler's least time (its first order) even at time limit 0: the plan a call
            # with no time returns
            t = time.perf_counter()
            res = schedule(self.p.graph, time_limit=max(0.05, self.clock.seconds("auto.baseline")), seed=self.seed)
            self._base = (plan_from_runs_of(self.p, res.order.tolist()), int(res.peak), res.status)
            self.timings["baseline"] = {"status": res.status, "seconds": round(time.perf_counter() - t, 3)}
        return self._base

    def lower(self) -> int:
        """A lower bound on the peak of every plan within the caps."""
        if self._lower is None:
            from memopt.remat.lower_bounds import peak_lower_bound

            caps = list(self.p.caps)
            t = time.perf_counter()
            # trap=True: the relaxed-graph trap of the ops that may re-run (a few cuts per op)
            self._lower = max(footprint_bound(self.p),
                              int(peak_lower_bound(self.p.graph, caps, trap=True,
                                                   trap_time_limit=self.clock.seconds("auto.peak_bound"))))
            if all(k == 0 for k in caps):
                # no recomputation: the plan is an order, and the scheduler's bound applies
                plan, pk, status = self.base()
                if status in ("certified", "optimal"):
                    self._lower = max(self._lower, pk)
            self.timings["peak_bound"] = {"status": "done", "value": self._lower,
                                          "seconds": round(time.perf_counter() - t, 3)}
        return self._lower

    # ---------------------------------------------------------------- one question
    def solve(self, question: str, memory_limit=None, cost_budget=None, *, share: str | None = None) -> RematResult:
        """Answer one question within the call's clock (``share``: a named share of the time left)."""
        from memopt.remat.model_common import check_question
        from memopt.remat.registry import get_method

        memory_limit, cost_budget = check_question(question, memory_limit, cost_budget)
        t_start = time.perf_counter()
        clock = self.clock if share is None else self.clock.child(share)
        p = self.p
        lower = self.lower()
        if question == "min_peak":
            # the trap cuts under the budget: the bytes its re-runs can uncover at each trap
            # (proofs/remat_cost_bounds.md, Corollary 7')
            from memopt.remat.trap_cuts import budget_peak_bound

            lower = budget_peak_bound(p.graph, cost_budget, list(p.caps), floor=lower,
                                      clock=clock.child("auto.budget_peak_bound"))
        common = dict(question=question, memory_limit=memory_limit, cost_budget=cost_budget, cap=list(p.caps),
                      method=self.method)
        if question == "min_cost" and lower > memory_limit:
            return RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", lower_bound=lower,
                               stats={"proof": f"every plan within the caps peaks at >= {lower} bytes "
                                               f"(lower bound on the peak)"}, seconds=time.perf_counter() - t_start,
                               **common)
        if self.method != "auto":
            return self._method(question, memory_limit, cost_budget, clock, lower, common, t_start)
        # auto: the no-recomputation optimum, the heuristic, then CP-SAT while it can prove something
        plan, pk, _ = self.base()
        from memopt.remat.model_common import evaluate

        base_cost = evaluate(p, plan)[1]
        # the parts stop early enough to hand the plan back in time: the last search step's exact
        # evaluations and the independent check after them cost about CLOSE_EVALUATIONS
        # evaluations of a plan (DenseNet-121's training graph: 0.1 s each, the check 2.6 s)
        self.close_plan, self.close_most = plan, clock.seconds("call.close")
        clock = self.closing(clock)
        # within the limit, the no-recomputation plan is the least extra cost there is (costs are >= 0)
        best = RematResult(plan=plan, peak=pk, extra_cost=base_cost,
                           status="optimal" if question == "min_cost" else "feasible",
                           lower_bound=lower, cost_lower_bound=0 if question == "min_cost" else None, **common)
        base_short = question == "min_cost" and pk > memory_limit
        if base_short:
            best = None
        best, starts = self._seeded(best, question, memory_limit, cost_budget, lower, common)
        parts = dict(self.timings)
        # the bound needs no plan: with a second core it runs beside the heuristic from the start
        # (for as long as the heuristic runs where CP-SAT certainly follows: the bound's levels are
        # paced by its time limit, so it is told the time it will have)
        bg = None
        if base_short:
            models = sum(1 + k for k in p.caps) <= AUTO_EXACT_SLOTS
            bg = self._bound_process(memory_limit, clock, "auto.heuristic" if models else "auto.parallel_bound")
        try:
            if (base_short or (question == "min_peak" and best.peak > lower)) and not clock.expired():
                # without any plan within the limit the heuristic is what the rest builds on: more time
                sub = clock.child("auto.heuristic" if base_short else "auto.heuristic_min_peak")
                h = _timed(parts, "heuristic", lambda: get_method("heuristic").load()(
                    p, question=question, memory_limit=memory_limit, cost_budget=cost_budget, cap=list(p.caps),
                    time_limit=sub.left(), incumbent=plan, seed=self.seed, clock=sub, starts=starts))
                best = _merge(question, best, h)
            inc = best.plan if best is not None and best.status != "unknown" else None
            if bg is not None and inc is not None:
                bg.stop_at(best.extra_cost)
            # the slot models only hold the ops that an optimal answer can afford to re-run
            budget = cost_budget if question == "min_peak" else (best.extra_cost if inc is not None else None)
            slots = sum(1 + k for k in reduced_caps(p, budget))
            if _open(best, lower) and slots <= AUTO_EXACT_SLOTS and not clock.expired():
                cb = None
                if question == "min_cost":
                    if bg is not None and inc is not None:
                        # a heuristic that ended early leaves the child short of the time the bound
                        # would get after it (random layered n100, 2026-12-01: 20 s of 135, bound
                        # 389 instead of 444): it runs on for up to that share while the local search polishes
                        best = self._polish(best, memory_limit, clock.child("auto.bound"), common, parts, beside=bg)
                        inc = best.plan
                    elif bg is not None:
                        # no plan to polish: the bound runs on for that share all the same (it
                        # may prove that no plan exists; its cores are CP-SAT's clauses)
                        bg.wait(clock.child("auto.bound"))
                    # CP-SAT needs both cores: the bound's child stops here
                    cb = self._cost_bound(bg, memory_limit, best, clock, "auto.bound", parts, wait=False)
                clock = self.closing(clock)
                # above cap 1, the cap-1 model is the fallback when the full model has not closed
                # in its share: every cap-1 plan is a plan here and its model is much smaller (under
                # load the full model alone can miss the cap-1 optimum); run first, it delays the
                # full model's proofs
                staged = question == "min_cost" and any(k > 1 for k in reduced_caps(p, budget))

                from memopt.remat.cpsat import solve_cpsat

                def full_model(part, within, incumbent, restrict=True):
                    # restrict=False: the bound's restricted model already ran in an earlier call
                    return _timed(parts, part, lambda: solve_cpsat(
                        p, question, memory_limit=memory_limit, cost_budget=cost_budget, cap=list(p.caps),
                        time_limit=within.left(), incumbent=incumbent, seed=self.seed, cost_bound=cb,
                        decompose=True, restrict=restrict, clock=within))

                best = _merge(question, best, full_model(
                    "cpsat", clock.child("auto.cpsat_full_caps") if staged else clock, inc))
                clock = self.closing(clock)
                if staged and _open(best, lower) and not clock.expired():
                    # the cap-1 model's share is its own search: the bound's restricted model (caps
                    # within the full model's, already tried) and the decomposition (a cap-1 bound,
                    # no bound here) ran in the full model. Under load (segnet at 0.9, two busy
                    # loops) they took 10 s of its 12 and the cap-1 optimum 5,080 was missed
                    best = self._smaller_caps(best, [min(k, 1) for k in p.caps], memory_limit,
                                              clock.child("auto.cpsat_cap1"), common, parts, "cpsat_cap1",
                                              "cpsat (cap 1)", cost_bound=cb, restrict=False)
                    clock = self.closing(clock)
                    if _open(best, lower) and clock.left() >= 1.0:
                        # the full model again, from the cap-1 plan, with what is left
                        inc = best.plan if best is not None and best.status != "unknown" else None
                        best = _merge(question, best, full_model("cpsat_after_cap1", clock, inc, restrict=False))
            elif _open(best, lower) and question == "min_cost" and not clock.expired():
                # too large for the models: the cost bound alone may still prove the plan optimal
                if bg is not None and best is not None and best.status != "unknown":
                    # the child has most of the time: the local search polishes the plan meanwhile
                    best = self._polish(best, memory_limit, clock, common, parts, beside=bg)
                cb = self._cost_bound(bg, memory_limit, best, clock, "auto.bound_alone", parts, wait=True)
                clock = self.closing(clock)
                if cb.infeasible:
                    if inc is not None:
                        raise InternalError("remat-cost-bound", "the cost bound proves infeasible what a plan solves")
                    best = RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", lower_bound=lower,
                                       stats={"proof": "the relaxed graph of every op that may re-run has a trap "
                                                       "above the limit (proofs/remat_cost_bounds.md)"}, **common)
                else:
                    best = self._restricted(best, cb, memory_limit, clock, common, parts)
                    if best is not None:
                        best = _merge(question, best, best.with_(cost_lower_bound=cb.value))
        finally:
            if bg is not None:
                bg.close()
        best = self._polish(best, memory_limit, self.closing(clock), common, parts)
        if best is None:
            # no plan within the limit: the no-recomputation plan, as the best plan so far
            best = RematResult(plan=plan, peak=pk, extra_cost=evaluate(p, plan)[1], status="unknown",
                               lower_bound=lower, cost_lower_bound=0, **{**common, "method": "schedule"})
        stats = {**best.stats, "parts": parts}
        if best.status == "unknown":
            stats["reason"] = _reason(clock, parts)
        best = best.with_(stats=stats)
        return self._close(best, lower, t_start)

    def _seeded(self, best, question, memory_limit, cost_budget, lower, common):
        """``(best merged with the best caller's plan that answers the question, the caller's
        seeds the heuristic also starts from, checked once)`` (:mod:`memopt.remat.warm_start`)."""
        from memopt.remat.warm_start import best_answer, heuristic_starts

        got = best_answer(self.seeds, question, memory_limit, cost_budget)
        starts = heuristic_starts(self.seeds, question, memory_limit, cost_budget)
        if got is not None:
            given = RematResult(plan=got.plan, peak=got.peak, extra_cost=got.extra_cost, status="feasible",
                                lower_bound=lower, cost_lower_bound=0 if question == "min_cost" else None,
                                **{**common, "method": "initial plan"})
            best = _merge(question, best, given)
        return best, starts

    def _method(self, question, memory_limit, cost_budget, clock, lower, common, t_start) -> RematResult:
        """A registered method (given the clock) or a user's callable (given ``time_limit``)."""
        from memopt.remat.registry import get_method

        p = self.p
        # the method ends the closing reserve before the deadline, as auto's parts do (a solver
        # stopped at the deadline took the check past it); any plan times the evaluation
        self.close_plan = plan_from_runs_of(p, p.graph.topological_order().tolist())
        self.close_most = clock.seconds("call.close")
        clock = self.closing(clock)
        inc = None
        seeded, starts = self._seeded(None, question, memory_limit, cost_budget, lower, common)
        if self.func is None and get_method(self.method).kind == "exact":
            # warm start: the no-recomputation optimum, or the heuristic's plan when that
            # does not fit the limit (a share of the time)
            plan, pk, _ = self.base()
            inc = plan if question == "min_peak" or pk <= memory_limit else None
            if inc is None:
                sub = clock.child("method.warm_start")
                h = get_method("heuristic").load()(p, question=question, memory_limit=memory_limit,
                                                   cost_budget=cost_budget, cap=list(p.caps), time_limit=sub.left(),
                                                   incumbent=plan, seed=self.seed, clock=sub)
                inc = h.plan if h.status in ("optimal", "feasible") else None
            if seeded is not None:
                from memopt.remat.model_common import evaluate

                # the better of the two warm starts (a min_peak incumbent only has to be within the budget)
                if inc is None or better(question, (seeded.peak, seeded.extra_cost), evaluate(p, inc)):
                    inc = seeded.plan
        elif starts:
            inc = starts[0].plan  # the heuristic (or a callable) starts from the caller's best plan
        kw = dict(question=question, memory_limit=memory_limit, cost_budget=cost_budget, cap=list(p.caps),
                  time_limit=clock.left(), incumbent=inc, seed=self.seed)
        if self.func is None:
            res = get_method(self.method).load()(p, clock=clock, **kw)
        else:
            res = checked_method_result(self.method, self.func(p, **kw), p, common)
        if seeded is not None:
            res = _merge(question, res, seeded)  # never worse than the caller's best plan
        if res.status == "unknown" and "reason" not in res.stats:
            res = res.with_(stats={**res.stats, "reason": _reason(clock, {})})
        return self._close(res, lower, t_start)

    def _bound_process(self, memory_limit: int, clock, share: str):
        """The cost bound's child process (:mod:`memopt.remat.cost_bound_process`), started now
        with the share ``share`` of the time left, when this call may use a second core and has
        the time for it; else ``None``."""
        if self.jobs < 2 or clock.left() < AUTO_PARALLEL_MIN_SECONDS or self.p.n < AUTO_PARALLEL_MIN_OPS:
            return None
        from memopt.remat.cost_bound_process import CostBoundProcess

        return CostBoundProcess(self.p.graph, memory_limit, list(self.p.caps), clock=clock.child(share))

    def _cost_bound(self, bg, memory_limit: int, best, clock, share: str, parts: dict, *, wait: bool):
        """The extra-cost lower bound: the child's (``wait``: at its own deadline, else asked
        for now), or, without a child or when it failed, computed here with the share
        ``share`` of the time left."""
        from memopt.remat.lower_bounds import cost_lower_bound

        t = time.perf_counter()
        stop_at = best.extra_cost if best is not None and best.plan is not None and best.status != "unknown" else None
        cb = None if bg is None else bg.result(stop=not wait, clock=clock)
        where = "process" if cb is not None else "here"
        if cb is None:
            sub = clock.child(share)
            cb = cost_lower_bound(self.p.graph, memory_limit, list(self.p.caps), time_limit=sub.left(), clock=sub,
                                  stop_at=stop_at)
        parts["cost_bound"] = {"value": cb.value, "cores": len(cb.cores), "complete": cb.complete,
                               "status": cb.ended, "where": where,
                               "seconds": round(time.perf_counter() - (bg.started if where == "process" else t), 3)}
        if bg is not None and where == "here":
            parts["cost_bound"]["process_error"] = bg.error or "no answer"
        return cb

    def _polish(self, best, memory_limit, clock, common: dict, parts: dict, beside=None):
        """Time the steps above left unused (the models did not run, or ended early) goes to
        the heuristic's local search on the best ``min_cost`` plan not yet proved optimal.
        ``beside``: the cost bound's child process; the search then runs in slices of
        :data:`POLISH_SLICE` seconds until the child ends, telling it each cheaper plan."""
        from memopt.remat.heuristic import improve_by_lns

        if (best is None or best.question != "min_cost" or best.status != "feasible" or best.plan is None
                or clock.left() < 1.0):
            return best
        t0 = time.perf_counter()
        if beside is not None:
            clock = clock.until(beside.clock.end)
        runs, c0, rounds = best.plan.runs().tolist(), best.extra_cost, 0
        found = None   # (plan, peak, extra cost) of the cheapest polished plan
        while clock.left() >= 1.0 and (beside is None or not beside.done()):
            stop = clock.end if beside is None else clock.part(1.0, most=min(POLISH_SLICE, 2.0 ** rounds)).end
            _, plan, pk, c, _ = improve_by_lns(self.p, runs, memory_limit, seed=self.seed + 1 + rounds, deadline=stop)
            rounds += 1
            if found is None or Fraction(c) < Fraction(found[2]):
                found, runs = (plan, pk, c), plan.runs().tolist()
                if beside is not None and Fraction(c) < Fraction(c0):
                    beside.stop_at(c)
            if beside is None:
                break
        if found is None:
            return best
        plan, pk, c = found
        key = "polish" if beside is None else "polish_beside_bound"
        parts[key] = {"extra_cost": c, "seconds": round(time.perf_counter() - t0, 3), "rounds": rounds,
                      "status": "feasible"}
        # _close checks the winner's peak, cost and limit with the independent checker
        polished = RematResult(plan=plan, peak=pk, extra_cost=c, status="feasible", lower_bound=best.lower_bound,
                               cost_lower_bound=0, **{**common, "method": "heuristic (local search)"})
        return _merge("min_cost", best, polished)

    def _restricted(self, best, cb, memory_limit: int, clock, common: dict, parts: dict):
        """A plan from CP-SAT with caps only on the cost bound's cheapest hitting set (and the
        zero-cost ops), when that model is small enough and the best plan does not meet the
        bound: a better plan, never a bound (the model is restricted)."""
        p = self.p
        if not cb.hitting_set or (best is not None and best.plan is not None and best.status != "unknown"
                                  and Fraction(best.extra_cost) <= Fraction(cb.value)):
            return best
        inside = set(cb.hitting_set) | {v for v in range(p.n) if p.caps[v] > 0 and p.costs[v] == 0}
        caps = [p.caps[v] if v in inside else 0 for v in range(p.n)]
        if sum(1 + k for k in caps) > AUTO_EXACT_SLOTS or clock.expired():
            return best
        from memopt.remat.lower_bounds import CostBound

        return self._smaller_caps(best, caps, memory_limit, clock, common, parts, "restricted_cpsat",
                                  "cpsat (hitting-set caps)", cost_bound=CostBound(0, ()), restrict=False)

    def _smaller_caps(self, best, caps, memory_limit: int, clock, common: dict, parts: dict, part: str,
                      label: str, **options):
        """The best plan of CP-SAT's ``min_cost`` model under ``caps`` (each at most the call's
        cap), warm-started with ``best`` when it fits them, merged into ``best``: every plan
        within smaller caps is a plan within the call's, so this gives plans, never a bound
        (its optimum may cost more than the call's). ``part``: its name in ``parts``;
        ``label``: the method named on a plan it wins with; ``options``: more arguments of
        :func:`~memopt.remat.cpsat.solve_cpsat`."""
        from memopt.remat.cpsat import solve_cpsat

        p = self.p
        inc = best.plan if best is not None and best.plan is not None and best.status != "unknown" else None
        if inc is not None and not within_caps(inc, caps):
            inc = None
        r = _timed(parts, part, lambda: solve_cpsat(
            p.graph, "min_cost", memory_limit=memory_limit, cap=caps, incumbent=inc, seed=self.seed,
            time_limit=clock.left(), clock=clock, **options))
        if r.plan is None or r.status not in ("optimal", "feasible"):
            return best
        found = RematResult(plan=r.plan, peak=r.peak, extra_cost=r.extra_cost, status="feasible",
                            lower_bound=self.lower(), cost_lower_bound=0, **{**common, "method": label})
        return found if best is None or best.status == "unknown" else _merge("min_cost", best, found)

    def _close(self, res: RematResult, lower: int, t_start: float) -> RematResult:
        """Check the plan independently, fold in the call's bound, fix the status."""
        from memopt.remat.checker import check_plan

        p = self.p
        lb = max(lower, res.lower_bound or 0)
        status = res.status
        if res.plan is not None:
            try:
                pk, c = check_plan(p.graph, res.plan, cap=list(p.caps))
            except ScheduleError as exc:
                raise InternalError("remat-checked-plan", f"the independent checker rejects the plan of "
                                                          f"{res.method}: {exc}") from None
            if pk != res.peak or Fraction(c) != Fraction(res.extra_cost):
                raise InternalError("remat-checked-plan", f"the checker measures peak {pk}, extra cost {c}; "
                                                          f"{res.method} claimed {res.peak}, {res.extra_cost}")
            if status != "unknown":
                if res.question == "min_cost" and pk > res.memory_limit:
                    raise InternalError("remat-limit", f"plan peaks at {pk} above the limit {res.memory_limit}")
                if res.question == "min_peak" and Fraction(c) > Fraction(res.cost_budget):
                    raise InternalError("remat-budget", f"plan costs {c} above the budget {res.cost_budget}")
            if res.question == "min_peak":
                if lb > pk:
                    raise InternalError("remat-bound", f"a lower bound ({lb}) exceeds a checked peak ({pk})")
                status = "optimal" if pk <= lb else status
        elif status == "infeasible" and res.question == "min_cost" and lb <= res.memory_limit \
                and "proof" not in res.stats:
            raise InternalError("remat-infeasible", "infeasible without a proof")
        return res.with_(lower_bound=lb, status=status, method=self.method if self.method != "auto" else
                         f"auto ({res.method})" if not res.method.startswith("auto") else res.method,
                         seconds=time.perf_counter() - t_start)


def _import_solver() -> float:
    """Seconds to import CP-SAT (0 once imported)."""
    t = time.perf_counter()
    from ortools.sat.python import cp_model  # noqa: F401

    return time.perf_counter() - t


def _timed(parts: dict, name: str, run):
    """``run()``'s result, with its status and seconds recorded in ``parts[name]``."""
    t = time.perf_counter()
    res = run()
    parts[name] = {"status": res.status, "seconds": round(time.perf_counter() - t, 3)}
    return res


def _reason(clock, parts: dict) -> str:
    """Why a question ends without a plan: the time, and what ran for how long."""
    ran = ", ".join(f"{k} {v.get('seconds', 0):g} s ({v.get('status', 'ended')})" for k, v in parts.items()
                    if isinstance(v, dict)) or "nothing but the no-recomputation order"
    if clock.expired():
        return f"time out before any plan within the limit; ran: {ran}"
    return f"no method found a plan within the limit, and none proved that there is none; ran: {ran}"


def _jobs(value) -> int:
    if value is None:
        from memopt.remat.cost_bound_process import usable_cores

        return min(2, usable_cores())
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OptionError(f"jobs must be an integer >= 1, got {value!r}")
    return int(value)


def _open(res: RematResult | None, lower: int) -> bool:
    """Is there anything left to prove?"""
    if res is None:
        return True
    if res.status in ("optimal", "infeasible"):
        return False
    if res.question == "min_peak":
        return res.peak > lower
    return True


def _merge(question: str, a: RematResult | None, b: RematResult) -> RematResult:
    """The better plan of two results on the same question, with the stronger bounds."""
    if a is None:
        return b
    if b.status == "infeasible":
        if a.plan is not None and a.status != "unknown":
            raise InternalError("remat-merge", f"{b.method} proved infeasible what {a.method} solved")
        return b
    cand = [r for r in (a, b) if r.plan is not None and r.status != "unknown"]
    if cand:
        win = cand[0]
        for r in cand[1:]:
            if better(question, (r.peak, r.extra_cost), (win.peak, win.extra_cost)):
                win = r
    else:
        win = a if (a.plan is not None and (b.plan is None or a.peak <= b.peak)) else b
    lb = max(a.lower_bound or 0, b.lower_bound or 0)
    if question == "min_cost":
        clb = max(Fraction(a.cost_lower_bound or 0), Fraction(b.cost_lower_bound or 0))
        clb = int(clb) if clb.denominator == 1 else clb
        status = win.status
        if win.plan is not None and win.status != "unknown":
            status = "optimal" if Fraction(win.extra_cost) <= Fraction(clb) else "feasible"
        return win.with_(lower_bound=lb, cost_lower_bound=clb, status=status)
    status = "optimal" if win.peak <= lb else "feasible"
    return win.with_(lower_bound=lb, status=status)


def remat(graph, *, memory_limit=None, memory_ratio=None, cost_budget=None, pareto: bool = False, cap=1,
          method="auto", time_limit: float = 10.0, seed: int = 0, jobs: int | None = None, initial=None):
    """The implementation of :func:`memopt.remat` (same parameters, documented there; the
    strategy of ``auto`` in the module docstring)."""
    from memopt.clock import check_time_limit, full_collections_held

    time_limit = check_time_limit(time_limit)
    exactly_one(memory_limit=memory_limit, memory_ratio=memory_ratio, cost_budget=cost_budget,
                **{"pareto=True": pareto or None})
    method, func = resolve_method(method)
    # no full garbage collection during the call: one in the closing reserve overran the deadline
    with full_collections_held():
        return _remat(graph, memory_limit, memory_ratio, cost_budget, pareto, cap, method, func, time_limit, seed,
                      jobs, initial)


def _remat(graph, memory_limit, memory_ratio, cost_budget, pareto, cap, method, func, time_limit, seed, jobs,
           initial):
    """:func:`remat` once its arguments are checked."""
    call = _Call(_graph_of(graph), cap, time_limit, seed, method, _jobs(jobs), func=func, initial=initial)
    if pareto:
        return _pareto(call)
    stats = {}
    if memory_ratio is not None:
        r = parse_ratio(memory_ratio)
        _, p0, status = call.base()
        memory_limit = limit_of_ratio(r, p0)
        stats = {"baseline": {"peak": p0, "status": status, "ratio": str(r)}}
    if cost_budget is not None:
        res = call.solve("min_peak", cost_budget=cost_budget)
    else:
        res = call.solve("min_cost", memory_limit=memory_limit)
    stats["compile_seconds"] = round(call.compile_seconds, 6)
    stats["import_seconds"] = round(call.import_seconds, 6)
    return res.with_(seconds=time.perf_counter() - call.t0, stats={**res.stats, **stats})


def _with_point(points: list, q: RematResult) -> list:
    """``points`` (peak decreasing, cost increasing) with ``q`` appended, whose peak is below
    every point's, and without the points it dominates: an earlier point with a cost ``>=``
    q's (found when time ran short, before a cheaper plan with a lower peak turned up)."""
    if points and q.peak >= points[-1].peak:
        raise InternalError("pareto-order", f"a frontier point (peak {q.peak}) is not below the last one "
                                            f"(peak {points[-1].peak})")
    return [p for p in points if p.extra_cost < q.extra_cost] + [q]


def _pareto(call: _Call) -> ParetoResult:
    """Points from cost 0 upwards: min peak at budget 0, then repeatedly the cheapest plan
    below the last peak, tightened to the least peak at that cost."""
    points = []
    complete = False
    r = call.solve("min_peak", cost_budget=0, share="pareto.first")
    points.append(r)
    while not call.clock.expired():
        last = points[-1]
        if last.peak <= call.lower():
            complete = True
            break
        c = call.solve("min_cost", memory_limit=last.peak - 1, share="pareto.point")
        if c.status == "infeasible":
            complete = last.status == "optimal"
            break
        if c.plan is None or c.status == "unknown":
            break
        q = call.solve("min_peak", cost_budget=c.extra_cost, share="pareto.point")
        if q.peak >= last.peak:  # a heuristic may not improve on its own cost point
            q = c.with_(question="min_peak", cost_budget=c.extra_cost,
                        status="feasible" if c.status != "optimal" else "feasible")
        if c.status == "optimal" and q.status != "optimal":
            q = q.with_(status="feasible")
        points = _with_point(points, q)
    status = "optimal" if complete and all(p.status == "optimal" for p in points) else "feasible"
    return ParetoResult(points=points, complete=complete, status=status, seconds=time.perf_counter() - call.t0,
                        cap=list(call.p.caps), method=call.method,
                        stats={"compile_seconds": round(call.compile_seconds, 6),
                               "import_seconds": round(call.import_seconds, 6)})
