"""The ``auto`` and ``exact`` portfolios: decide from the instance what to run, stop when proved.

A :class:`Session` is one scheduling call's shared state: the problem, one deadline, the
candidate orders found so far (each re-evaluated exactly), the named baselines, every lower
bound (with its witness), and what exact search proved. Registered methods
(:mod:`memopt.schedule.registry`) run inside it through :meth:`Session.run`, which hands each
the best order so far as its incumbent and the best bound as its target, so that every
anytime or exact method stops as soon as its result is proved.

``auto`` (the default of :func:`memopt.schedule`):

1. the named baselines (input order; Inductor's ``lpmf``, ``bfs``, ``dfs``, best-of) and the
   algorithms optimal on a class (Liu's for trees, series-parallel) when they apply, then
   the greedy list scheduler — all near-linear;
2. the simple bounds and the forward trap bound (one minimum cut per node, pruned); most
   real training graphs are **certified** here, in milliseconds;
3. on small instances (at most :data:`SMALL_EXACT` allocating nodes) the exact ideal-lattice
   search, which proves them in milliseconds;
4. otherwise, or if a gap remains: local search (a tenth of the time left; it stops
   early at the bound), the pair trap bound (only while a gap remains), the exact
   search warm-started with the incumbent and the bound (half of the time left up to
   :data:`MID_EXACT` allocating nodes, a tenth above), and local search again from the
   best order with all the time left (no exhaustion stop: on large graphs its improvements
   come after long plateaus).

``exact`` is the same with the time given to proof: a shorter local search, then exact
search with everything left. The time shares are caps, not reservations: every stage stops
early when the gap closes, and later stages get what earlier ones did not use.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from memopt.errors import OptionError, ScheduleError
from memopt.schedule.registry import NotApplicable, get_method, methods
from memopt.schedule.result import MethodResult

__all__ = ["Session", "auto", "exact", "checked_method_result", "SMALL_EXACT"]

#: allocating nodes up to which ``auto`` runs the exact search right after the first bounds
SMALL_EXACT = 200
#: allocating nodes up to which ``auto`` gives the exact search half of the time left after
#: the pair bound (a tenth above)
MID_EXACT = 600
#: CPU seconds per DAG node and edge that the independent check of the result takes (the
#: certificate built and checked, pure Python: 0.6e-5 to 1.2e-5 measured on 2,000 to 10,000
#: ops); the time kept for it is this times :meth:`Session.slowdown`
VERIFY_SECONDS_PER_ITEM = 1.5e-5
#: seconds by which the independent check may take the call past its time limit
CHECK_OVERRUN = 1.0
#: CPU seconds per pair of allocating nodes that the ideal search spends on its setup before
#: it first looks at its deadline (reachability and its per-state bound tables, dense in the
#: allocating nodes: 0.8e-7 to 1.0e-7 measured on 500 to 2,000 of them)
IDEAL_SETUP_SECONDS_PER_PAIR = 1e-7


class Session:
    """One scheduling call: a problem, a deadline, candidates, baselines, bounds.

    ``progress`` is a :class:`memopt._progress.Progress` (or ``None``).
    """

    def __init__(self, problem, time_limit: float, *, seed: int = 0, progress=None, start: float | None = None):
        self.problem = problem
        self.t0 = time.perf_counter() if start is None else start
        # the independent check of the result is part of the call: keep time for it (it is
        # linear in the DAG, about VERIFY_SECONDS_PER_ITEM CPU seconds per node and edge, in pure
        # Python; at most half of the time: beyond it the check is skipped and the result says so)
        #: the expected CPU seconds of the independent check (times slowdown(): what the call's
        #: end compares with)
        self.check_seconds = VERIFY_SECONDS_PER_ITEM * (problem.dag.n + int(problem.dag.pred_ptr[-1]))
        self._reserve_cap = 0.5 * float(time_limit)
        # the call's own end, the check included; the methods' time ends check_reserve() before it
        self.end = self.t0 + float(time_limit)
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        self.seed = seed
        self.progress = progress
        self.candidates: dict[str, tuple[np.ndarray, int]] = {}
        self.baselines: dict[str, int] = {}
        self.bounds: list = []          # Bound objects with their witnesses
        self.proven: int | None = None  # a bound proved by an exact method (no witness)
        self.stats: dict = {}
        #: seconds spent compiling (or loading) kernels since the clock started, each phase's
        #: kernels right before it runs; the call's end is moved by as much
        self.compile_seconds = 0.0
        #: seconds spent importing a phase's modules on their first use in the process (Python
        #: compiles them, like the kernels); the call's end is moved by as much
        self.import_seconds = 0.0

    # -------------------------------------------------------------- clock and state
    def remaining(self) -> float:
        """Seconds left for the methods: the time left, less the time kept for the independent
        check (:meth:`check_reserve`)."""
        return max(0.0, self.end - self.check_reserve() - time.perf_counter())

    def check_reserve(self) -> float:
        """Wall seconds kept for the independent check: its CPU seconds times :meth:`slowdown`,
        at most half of the limit, and none when even that cannot hold it (the check will be
        skipped then, so its time goes to the methods)."""
        needs = self.check_seconds * self.slowdown()
        return min(self._reserve_cap, needs) if needs <= self._reserve_cap + CHECK_OVERRUN else 0.0

    def slowdown(self) -> float:
        """Wall seconds per CPU second of this process since the session started (at least 1;
        1 during its first 50 ms): on a machine shared with other jobs, a part that needs
        ``c`` CPU seconds and cannot look at the clock meanwhile (a setup, the independent
        check) ends about ``c * slowdown()`` wall seconds later."""
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        if wall < 0.05 or cpu <= 0.0:
            return 1.0
        return max(1.0, wall / cpu)

    def status(self, text: str) -> None:
        if self.progress is not None:
            self.progress.set_status(text)

    def best(self) -> tuple[str | None, np.ndarray | None, int | None]:
        """The best candidate (the first found wins a tie)."""
        if not self.candidates:
            return None, None, None
        name = min(self.candidates, key=lambda k: self.candidates[k][1])
        order, peak = self.candidates[name]
        return name, order, peak

    def lower(self) -> int:
        """The best lower bound so far (witnessed or proved)."""
        vals = [int(self.problem.dag.base)] + [int(b.value) for b in self.bounds]
        if self.proven is not None:
            vals.append(self.proven)
        return max(vals)

    def closed(self) -> bool:
        """True when the best order's peak meets the best bound: nothing left to do."""
        _, _, pk = self.best()
        return pk is not None and pk <= self.lower()

    def gap(self) -> int | None:
        _, _, pk = self.best()
        return None if pk is None else pk - self.lower()

    # -------------------------------------------------------------- compiling phase by phase
    @contextlib.contextmanager
    def phase(self, name: str, modules: tuple = ()):
        """Run the block as phase ``name`` of the call: first import ``modules`` (the phase's
        own, on their first use in the process) and compile (or load) the kernels the phase
        runs compiled at this size (:func:`memopt._jit.warm` of ``"schedule:" + name``), then
        move the call's end by the seconds that took, so that the phase's time limit is its
        solve's. Kernels compiled mid-phase at the ski-rental switch of
        :func:`memopt._jit.choose` are given back the same way once the phase ends. A call
        therefore compiles only the phases it reaches; a phase never compiles on its clock."""
        from memopt import _jit

        imported = import_first(modules)
        self.import_seconds += imported
        self.end += imported
        kind = "schedule:" + name
        spent = _jit.warm(kind, self.problem.dag.n)
        before = _jit.escalation_seconds()
        try:
            with _jit.phase(kind):
                yield
        finally:
            spent += _jit.escalation_seconds() - before
            self.compile_seconds += spent
            self.end += spent

    # -------------------------------------------------------------- running methods
    def consider(self, name: str, order) -> int:
        order = np.asarray(order, np.int64)
        pk = int(self.problem.peak(order))  # validates and evaluates exactly, whatever the method claimed
        self.candidates[name] = (order, pk)
        return pk

    def run(self, name: str, time_limit: float | None = None, *, baseline: bool = False,
            seed: int | None = None, func=None, **options) -> MethodResult | None:
        """Run registered method ``name`` with the best order as incumbent and the best bound as
        target; record its order (and, for exact methods, what it proved). ``None`` when the
        method does not apply to the problem. ``options`` go to the method (its own keywords
        beyond the registry signature). ``func``: a user's callable with the registry
        signature, run under ``name``; its order is checked (:func:`checked_method_result`)
        and the bound it claims is not used."""
        method = get_method(name) if func is None else None
        _, incumbent, _ = self.best()
        self.status(f"{name}" + (f" (gap {self.gap()})" if self.gap() else ""))
        modules = () if method is None else (method.target.partition(":")[0],)
        with self.phase(name if func is None else "callable", modules):
            budget = self.remaining() if time_limit is None else max(0.0, min(float(time_limit), self.remaining()))
            t = time.perf_counter()
            try:
                res = (method.load() if func is None else func)(
                    self.problem, time_limit=budget, incumbent=incumbent, lower_bound=self.lower(),
                    seed=self.seed if seed is None else seed, **options)
            except NotApplicable as exc:
                self.stats.setdefault("not_applicable", {})[name] = str(exc)
                return None
        if func is not None:
            res = checked_method_result(name, res, self.problem)
        entry = {"seconds": round(time.perf_counter() - t, 6)}
        entry.update({k: v for k, v in res.stats.items() if isinstance(v, (int, float, bool, str))})
        self.stats.setdefault("methods", {})[name] = entry
        if res.order is not None:
            pk = self.consider(name, res.order)
            if baseline:
                self.baselines[name] = pk
        if method is not None and method.kind == "exact" and res.lower_bound is not None:
            _, _, best_pk = self.best()
            proven = int(res.lower_bound) if best_pk is None else min(int(res.lower_bound), best_pk)
            if proven > self.lower():
                self.proven = proven
        return res

    def run_baselines(self, *, only: str | None = None) -> None:
        """The named baselines: all of them, or the input order and ``only``."""
        for m in methods("baseline"):
            if (only is None or m.name in ("input", only)) and m.name not in self.baselines:
                if m.name != "input" and m.name != only and self.remaining() <= 0:
                    # out of time: the reference baselines are skipped, not the call's deadline
                    self.stats.setdefault("skipped", []).append(m.name)
                    continue
                self.run(m.name, baseline=True)

    # -------------------------------------------------------------- bounds
    def add_trap_bounds(self, time_limit: float) -> None:
        """Simple bounds and the forward trap bound (within ``time_limit``)."""
        self.status("trap bounds")
        with self.phase("trap", (TRAP_MODULE,)):
            from memopt.bounds import trap

            t = time.perf_counter()
            if self.problem.graph is not None:
                self.bounds += trap.simple_bounds(self.problem.graph)
            self.bounds += trap.simple_dag_bounds(self.problem.dag)
            if not self._met():
                self.bounds.append(trap.forward_trap_bound(self.problem.dag,
                                                           time_limit=min(time_limit, self.remaining())))
            self.stats["trap_seconds"] = round(time.perf_counter() - t, 6)

    def add_pair_bound(self, time_limit: float) -> None:
        """The pair trap bound, aimed at the best peak (it stops when it reaches it)."""
        _, _, pk = self.best()
        if self.closed() or self.remaining() <= 0:
            return
        self.status(f"pair trap bound (gap {self.gap()})")
        with self.phase("pair", (TRAP_MODULE,)):
            from memopt.bounds import trap

            self.bounds.append(trap.pair_trap_bound(self.problem.dag, time_limit=min(time_limit, self.remaining()),
                                                    target=pk))

    def run_exact(self, name: str, time_limit: float) -> MethodResult | None:
        """Run exact method ``name`` unless its setup alone (:data:`SETUP_SECONDS`, times
        :meth:`slowdown`) would overrun ``time_limit``: it would then have no time to search,
        and the call would end late. ``None`` when skipped (said in ``stats["skipped"]``)."""
        budget = max(0.0, min(float(time_limit), self.remaining()))
        setup = SETUP_SECONDS.get(name, lambda problem: 0.0)(self.problem) * self.slowdown()
        if setup > budget:
            self.stats.setdefault("skipped", []).append(f"{name} (its setup needs about {setup:.2g} s, "
                                                        f"{budget:.2g} s were left for it)")
            return None
        return self.run(name, time_limit=budget)

    def _met(self) -> bool:
        _, _, pk = self.best()
        return pk is not None and max([int(b.value) for b in self.bounds] + [int(self.problem.dag.base)]) >= pk

    def result(self, winner: str | None = None) -> MethodResult:
        """The best order (or ``winner``'s own) as a :class:`MethodResult`."""
        if winner is not None and winner in self.candidates:
            name, (order, pk) = winner, self.candidates[winner]
        else:
            name, order, pk = self.best()
        if order is None:
            raise ScheduleError("no method produced an order within the time limit")
        lo = min(self.lower(), pk)
        return MethodResult(order=order, peak=pk, lower_bound=lo, optimal=pk <= self.lower(),
                            stats={"winner": name})


#: the module of the trap bounds, imported by the phases that compute them
TRAP_MODULE = "memopt.bounds.trap"

#: method name -> the seconds its setup takes on a problem before the method first looks at
#: its deadline (methods not listed: negligible)
SETUP_SECONDS = {
    "ideal-search": lambda problem: IDEAL_SETUP_SECONDS_PER_PAIR * int(problem.num_allocating) ** 2,
}


def import_first(modules) -> float:
    """Import ``modules`` (names) not yet imported in this process; the seconds that took."""
    import sys
    from importlib import import_module

    todo = [m for m in modules if m not in sys.modules]
    if not todo:
        return 0.0
    t = time.perf_counter()
    for m in todo:
        import_module(m)
    return time.perf_counter() - t


def checked_method_result(name: str, res, problem) -> MethodResult:
    """What a user's callable method returned, as a :class:`MethodResult` whose order (if any)
    is a valid order of ``problem``: :class:`OptionError` for another type,
    :class:`ScheduleError` for an invalid order. Its claims (peak, bound, optimality) are
    dropped: the session measures the peak itself and proves its own bounds."""
    if not isinstance(res, MethodResult):
        raise OptionError(f"method {name!r} returned {type(res).__name__}, not a MethodResult "
                          "(memopt.schedule.result.MethodResult)")
    stats = dict(res.stats) if isinstance(res.stats, dict) else {}
    if res.order is None:
        return MethodResult(order=None, peak=None, stats=stats)
    order = np.asarray(res.order)
    if order.ndim != 1 or (order.size and order.dtype.kind not in "iu"):
        raise ScheduleError(f"method {name!r} returned an invalid order: not a flat list of integer ids "
                            f"(got {order.dtype} of shape {order.shape})")
    try:
        problem.validate(order)
    except ScheduleError as exc:
        raise ScheduleError(f"method {name!r} returned an invalid order: {exc}") from None
    return MethodResult(order=order.astype(np.int64), peak=None, stats=stats)


def _start(problem, time_limit, seed, session) -> Session:
    from memopt.core.problem import SchedulingProblem

    if session is not None:
        return session
    return Session(SchedulingProblem.of(problem), time_limit, seed=seed)


def _first_orders(s: Session) -> None:
    """Input order, greedy, class algorithms, Inductor's baselines: near-linear. The Inductor
    baselines (pure Python, about 25 us per op each) are skipped once the time is out."""
    s.run("input", baseline=True)
    s.run("greedy")
    for m in methods("class"):
        s.run(m.name, time_limit=s.remaining() * 0.2)
    s.run_baselines()


def _opening(s: Session, incumbent) -> bool:
    """What both portfolios do first: the orders of :func:`_first_orders`, the simple and
    forward trap bounds, and on small instances the exact search. True when that proved it."""
    if incumbent is not None:
        s.consider("incumbent", incumbent)
    _first_orders(s)
    s.add_trap_bounds(s.remaining() * 0.3)
    if not s.closed() and s.problem.num_allocating <= SMALL_EXACT:
        s.run_exact("ideal-search", s.remaining() * 0.5)
    return s.closed()


def auto(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0,
         session: Session | None = None) -> MethodResult:
    """Registry portfolio ``auto`` (module docstring). ``session``: an existing
    :class:`Session` to run in (what :func:`memopt.schedule` passes)."""
    s = _start(problem, time_limit, seed, session)
    if _opening(s, incumbent):
        return s.result()
    s.run("local-search", time_limit=s.remaining() * 0.1, patience=None)
    if s.closed():
        return s.result()
    s.add_pair_bound(s.remaining() * 0.35)
    if s.closed():
        return s.result()
    # the exact search proves mid-sized instances; on large ones its states are too many to
    # finish, and the time buys more as local search
    s.run_exact("ideal-search", s.remaining() * (0.5 if s.problem.num_allocating <= MID_EXACT else 0.1))
    # the last stage: everything left goes to local search from the best order, without the
    # exhaustion stop (on large graphs its improvements come after long plateaus)
    if not s.closed() and s.remaining() > 0:
        s.run("local-search", seed=s.seed + 1, patience=None)
    return s.result()


def exact(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0,
          session: Session | None = None) -> MethodResult:
    """Registry portfolio ``exact``: like :func:`auto`, with the time given to proof."""
    s = _start(problem, time_limit, seed, session)
    if _opening(s, incumbent):
        return s.result()
    s.run("local-search", time_limit=s.remaining() * 0.05)
    if s.closed():
        return s.result()
    s.add_pair_bound(s.remaining() * 0.15)
    if not s.closed():
        s.run_exact("ideal-search", s.remaining())
    return s.result()
