"""How a call splits its time: the library's one table of shares.

The entries every solve of the library uses (``solver.*``: :func:`memopt.clock.solve_by`, the
CP-SAT calls of :mod:`memopt.schedule`, :mod:`memopt.remat` and :mod:`memopt.cache`) come
first, then recomputation's. Every recomputation method, bound and solver gets a
:class:`memopt.clock.Clock` (or one made here from its ``time_limit`` when called directly:
:func:`remat_clock`) and takes its parts' sub-deadlines from it by name, :meth:`Clock.child`.
No module keeps a share of its own. Each entry is a :class:`~memopt.clock.Share`: a fraction of the time left
when the part starts (of the clock's whole time with ``of_total``), at most ``most`` seconds.

>>> c = remat_clock(10.0)
>>> 5.9 < c.child("heuristic.search").left() <= 6.0
True
>>> sorted(SHARES)[:2]
['auto.baseline', 'auto.bound']
"""

from __future__ import annotations

from memopt.clock import Clock, Share

__all__ = ["SHARES", "remat_clock"]

SHARES: dict[str, Share] = {
    # ---- every CP-SAT solve of the library (memopt.clock.solve_by)
    # of the time a solve is given: kept between CP-SAT's own time limit and the moment its
    # answer is dropped, for a solver that obeys its limit to stop and hand back its answer
    "solver.stop": Share(0.05, most=1.0),
    # ---- memopt.remat(..., method="auto") and the call around every method (remat/api.py)
    # the scheduling core's least-peak order without recomputation (the baseline P0 and the
    # first plan; the scheduler stops early when it proves its order optimal)
    "auto.baseline": Share(0.25),
    # the most a call keeps for handing its answer back (the last search step, the solver's
    # stop, the independent check; api.CLOSE_EVALUATIONS, api.SOLVER_STOP_CPU)
    "call.close": Share(0.15, most=15.0),
    # the lower bound on the peak of every capped plan (the trap of the ops that may re-run)
    "auto.peak_bound": Share(0.1, most=5.0),
    # min_peak: the trap cuts under the cost budget (proofs/remat_cost_bounds.md, Corollary 7')
    "auto.budget_peak_bound": Share(0.1, most=5.0),
    # the heuristic when no plan fits the limit yet: everything after builds on its plan (0.6
    # before the cost bound got its own share: on ResNet50 at 0.9 CP-SAT then lacked the time
    # to find its 440 plan)
    "auto.heuristic": Share(0.45),
    # the heuristic on min_peak, when the no-recomputation plan is not yet proved least
    "auto.heuristic_min_peak": Share(0.3),
    # the cost lower bound before CP-SAT (which would give it a quarter of its own time): with
    # the scheduler as its last oracle the bound is what decides the random layered graphs
    # (proofs/remat_cost_bounds.md §5); with a child process, how long it runs on beside the
    # local search once the heuristic is done
    "auto.bound": Share(0.4),
    # CP-SAT on the full caps when some cap above 1 is left (the caps cut to the plan's cost);
    # if it has not closed by then, the cap-1 model gets its share of the rest (every cap-1
    # plan is a plan: under load the cap-2 model alone missed the cap-1 optimum), then the
    # full model again from the best plan. Quiet, the full model proves the Checkmate graphs
    # at cap 2 within this share (MobileNet 5 s, ResNet50 17-22 s of 60)
    "auto.cpsat_full_caps": Share(0.5),
    "auto.cpsat_cap1": Share(0.5),
    # the cost bound alone, on a graph too large for the models, computed in this process
    "auto.bound_alone": Share(0.7),
    # the bound's child process on a graph too large for the models; the rest is for the
    # CP-SAT model over the bound's hitting set and the local search
    "auto.parallel_bound": Share(0.85),
    # an exact method's warm start by the heuristic, when the no-recomputation plan does not fit
    "method.warm_start": Share(0.2),
    # --pareto: the first point (least peak at cost 0), then each later question
    "pareto.first": Share(0.3),
    "pareto.point": Share(0.5),
    # ---- heuristic.py
    # the scheduler's starting order when the heuristic is given no incumbent
    "heuristic.start_order": Share(0.3),
    # the multi-start search, once a plan fits (the rest: the caller's next parts)
    "heuristic.search": Share(0.6),
    # the batched greedy's first plan on graphs under heuristic.BATCH_MIN_OPS ops (feasibility
    # first: kept only when the single-move greedy fits nothing)
    "heuristic.quick": Share(0.25),
    # the held-tensor moves' start (held_tensors.py), before the greedy and the search
    "heuristic.held_tensors": Share(0.25),
    # the search's first part: the greedy from other starting orders
    "heuristic.orders": Share(0.25),
    # the scheduler's time for one more starting order
    "heuristic.schedule": Share(0.2, most=10.0),
    # the least-overflow version of a starting order (order_search)
    "heuristic.overflow": Share(0.25),
    # the local search from a start found in the time the search left over
    "heuristic.restart": Share(0.5),
    # ---- cpsat.py
    # the cost lower bound when the caller gave none (a quarter of CP-SAT's time)
    "cpsat.bound": Share(0.25, of_total=True),
    # the model restricted to the bound's cheapest hitting set: a quick incumbent
    "cpsat.restrict": Share(0.1, most=20.0, of_total=True),
    # the reduced-cost fixing of the caps (on the cores, then on the no-goods)
    "cpsat.fix": Share(0.1, of_total=True),
    # the implicit-hitting-set decomposition before the full model gets the rest
    "cpsat.decompose": Share(0.5, of_total=True),
    # the decomposition's no-good growing; the rest is kept for the master (a no-good the
    # master never sees raises no bound)
    "cpsat.grow": Share(0.9),
    # the check of the master's own cap vector (at least CHECK_SECONDS): its answer decides the
    # round, while a growth check that cannot answer only weakens the no-good
    # (random_layered_n100 at 0.9: 4.4 s to prove that re-running op 68 alone does not fit)
    "cpsat.main_check": Share(0.25),
    # ---- lower_bounds.cost_lower_bound
    # the trap cuts (§7) before the cores: a few cuts per op whose trap may exceed the limit
    "bound.cuts": Share(0.25, of_total=True),
    # after this share G_S^+ joins the oracle even if the forward trap of G_S alone still finds
    # cores. 0 since the oracle got cheap (cached reachability, hinted traps): on
    # random_layered_n250 G_S^+ from the start reached 824 at 60 s where a third of the time on
    # G_S alone reached 786 (G_S alone was once the faster oracle on the Checkmate graphs)
    "bound.escalate": Share(0.0, of_total=True),
    # one pair-trap question (seconds each), and one scheduler bound on a relaxed graph
    "bound.pair_question": Share(0.05, of_total=True),
    "bound.exact_question": Share(0.1, of_total=True),
    # ---- treedp.py: the method's last-run bound before the search
    "treedp.last_runs": Share(0.1, of_total=True),
    # ---- feasibility.py: the last-run bound before the feasibility search
    "feasibility.last_runs": Share(0.2, of_total=True),
    # ---- adapters/training_plan.py, realize="sac": memopt.remat on the two-program instance
    # (its plan seeds the save set); the rest is the greedy search on the exact SAC evaluation
    "train.sac_seed": Share(0.5),
    # ---- adapters/training_plan.py, seeds=True: memopt.remat with only the ops without a FLOP
    # formula allowed to re-run first (a smaller search space; its plan seeds the full call):
    # DenseNet-121 at 51.25 MB, the full call alone re-ran 154 MFLOP where a plan at 0 exists
    "train.cheap_first": Share(1 / 3),
    # the seeds' runs put in the scheduler's least-peak order (training_seeds.with_reordered),
    # split equally between the seeds: ViT's min-cut saved set at PyTorch's 0.6 budget peaked
    # 24 kB above that point's limit in the captured order, 2.6 MB below it reordered
    "train.seed_order": Share(0.15),
    # kept at the end of plan()'s one clock (capture and measurement included) for building the
    # two programs from the plan and the report
    "train.close": Share(0.05, most=3.0),
}


def remat_clock(time_limit: float | None = None, clock: Clock | None = None) -> Clock:
    """The clock a method (or bound) runs on: ``clock``'s deadline, started now (its shares
    ``of_total`` count from the method's start, not the caller's), or without ``clock`` a new
    clock of ``time_limit`` seconds with :data:`SHARES` (a method called on its own, not
    through :func:`memopt.remat`).

    Parameters
    ----------
    time_limit : float, optional
        Seconds (already checked by the caller); ``None``: no limit (a very distant deadline).
    clock : Clock, optional

    Returns
    -------
    Clock

    Examples
    --------
    >>> c = remat_clock(3)
    >>> d = remat_clock(99, c)
    >>> d.end == c.end and d.start >= c.start, c.shares is SHARES
    (True, True)
    """
    if clock is not None:
        return clock.part(1.0)
    return Clock(1e9 if time_limit is None else float(time_limit), shares=SHARES)
