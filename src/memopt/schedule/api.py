"""``memopt.schedule``: one call from a graph to a verified plan with its bound and status.

:func:`schedule` runs one method of the registry (:mod:`memopt.schedule.registry`) — by
default the ``auto`` portfolio (:mod:`memopt.schedule.portfolio`), which decides from the
instance what to run and stops as soon as the result is proved — inside one
:class:`~memopt.schedule.portfolio.Session` with one deadline that covers the whole call.

Whatever wins is re-checked by the independent certificate checker before it is returned,
so the reported peak is never worse than any baseline's and never unverified. Status:
``certified`` (a lower bound with a checkable witness equals the peak), ``optimal`` (an
exact solver proved it), ``feasible`` (the gap stays open).
"""

from __future__ import annotations

import time

import numpy as np

from memopt._progress import Progress
from memopt.clock import MAX_SECONDS, check_time_limit as check_clock_time_limit
from memopt.core.problem import SchedulingProblem
from memopt.errors import InternalError, OptionError, ScheduleError
from memopt.schedule.portfolio import CHECK_OVERRUN
from memopt.schedule.registry import get_method, method_names
from memopt.schedule.result import ScheduleResult

__all__ = ["schedule", "schedule_instance", "compute_bounds", "check_time_limit", "resolve_method", "ScheduleResult",
           "MAX_TIME_LIMIT"]

#: the longest time limit accepted (about 11.6 days): anything longer is a typo or ``inf``
MAX_TIME_LIMIT = MAX_SECONDS


def __getattr__(name):
    if name == "METHODS":
        return method_names()
    raise AttributeError(name)


def check_time_limit(time_limit) -> float:
    """``time_limit`` as a float, or :class:`OptionError` unless it is finite and in
    ``[0, MAX_TIME_LIMIT]`` seconds (:func:`memopt.clock.check_time_limit`, the library's one check)."""
    return check_clock_time_limit(time_limit)


def compute_bounds(model, *, time_limit: float = 10.0, target: int | None = None, pair: bool = True) -> dict:
    """Every lower bound memopt has on the peak of every order, by name (bytes).

    The simple bounds, the forward and reverse trap bounds (minimum cuts) and, when it can
    help, the pair trap bound; each is sound (never above the optimal peak).

    Parameters
    ----------
    model : TensorGraph, Program, SignedDAG, Instance or networkx.DiGraph
        The model (a ``networkx.DiGraph`` is read by :func:`memopt.from_networkx`).
    time_limit : float, default 10.0
        Seconds for all bounds together, in ``[0, 1e6]``.
    target : int, optional
        A peak to reach: the pair trap bound is skipped when a cheaper bound already
        reaches it, and stops once it does.
    pair : bool, default True
        Whether to compute the pair trap bound (``O(n^2)`` minimum cuts at most).

    Returns
    -------
    dict
        Bound name -> bytes (Python ints).

    Raises
    ------
    OptionError
        A time limit out of range.
    GraphError
        A malformed model.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> max(compute_bounds(g, time_limit=1).values())
    6
    """
    from memopt.bounds import trap

    time_limit = check_time_limit(time_limit)
    t0 = time.perf_counter()
    p = SchedulingProblem.of(_unwrap(model))
    out = list(trap.simple_bounds(p.graph)) if p.graph is not None else []
    out += list(trap.simple_dag_bounds(p.dag))
    out.append(trap.forward_trap_bound(p.dag, time_limit=time_limit / 2))
    out.append(trap.reverse_trap_bound(p.dag, time_limit=max(0.0, time_limit / 2 - (time.perf_counter() - t0))))
    best = max(b.value for b in out)
    if pair and (target is None or best < target):
        remaining = max(0.0, time_limit - (time.perf_counter() - t0))
        if remaining > 0:
            out.append(trap.pair_trap_bound(p.dag, time_limit=remaining, target=target))
    return {b.name: b.value for b in out}


def _unwrap(model):
    """The model of a loaded instance or of a ``networkx.DiGraph``; any other model as it is."""
    from memopt.core.instance import Instance
    from memopt.core.nxgraph import from_networkx, is_networkx_graph

    if is_networkx_graph(model):
        return from_networkx(model)
    if isinstance(model, Instance):
        return model.graph if model.graph is not None else model.program
    return model


def schedule(model, method="auto", time_limit: float = 10.0, *, input_order=None, seed: int = 0,
             progress: bool = False) -> ScheduleResult:
    """The implementation of :func:`memopt.schedule` (same parameters, documented there).

    A named method returns its own order; the simple and forward trap bounds are computed
    alongside so that its status is known. A callable ``method`` runs like a heuristic: its
    order is validated and re-evaluated, its claims are not used.

    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> r = schedule(g, time_limit=1)
    >>> (r.peak, r.lower_bound, r.status)
    (6, 6, 'certified')
    """
    from memopt.core.instance import Instance
    from memopt.schedule.portfolio import Session, import_first

    t0 = time.perf_counter()
    method, spec, func = resolve_method(method)
    kind = "heuristic" if spec is None else spec.kind
    time_limit = check_time_limit(time_limit)
    if isinstance(model, Instance) and input_order is None:
        input_order = model.input_order
    model = _unwrap(model)
    problem = SchedulingProblem(model, input_order)
    from memopt import _jit
    from memopt.clock import full_collections_held

    # no full garbage collection during the call (it could land after the time kept for the check)
    with full_collections_held(), Progress(None, f"memopt {method}", enabled=progress) as bar, \
            _jit.compile_notes(bar.enabled):
        # compile (or load) the kernels the call runs outside its phases before its clock starts,
        # each phase's right before it (Session.phase): the time limit is the solve's,
        # compilation is reported apart (stats["compile_seconds"])
        compile_seconds = _jit.warm("schedule:base", problem.dag.n)
        # so is the first import of the modules every call ends with (the certificate and its
        # checker): importing is Python's compilation, reported apart (stats["import_seconds"])
        import_seconds = import_first(CHECK_MODULES)
        t0 += compile_seconds + import_seconds
        s = Session(problem, time_limit, seed=seed, progress=bar, start=t0)
        if kind == "portfolio":
            res = spec.load()(problem, time_limit=time_limit, seed=seed, session=s)
            winner = res.stats.get("winner")
        else:
            # the input order (and, for a baseline, itself) is the reference; every method
            # reports a lower bound, and anytime/exact methods stop when they reach it
            s.run_baselines(only=method if kind == "baseline" else "input")
            if kind in ("anytime", "exact"):
                s.add_trap_bounds(s.remaining() * 0.3)
            if method not in s.candidates:
                if s.run(method, func=func) is None:
                    raise ScheduleError(f"method {method!r} does not apply: "
                                        f"{s.stats.get('not_applicable', {}).get(method, 'outside its class')}")
            if method not in s.candidates:
                raise ScheduleError(f"method {method!r} found no order within the time limit ({time_limit:g} s)")
            if kind not in ("anytime", "exact"):
                s.add_trap_bounds(s.remaining())
            winner = method  # a named method returns its own order, even where a baseline is better
    s.stats["compile_seconds"] = round(compile_seconds + s.compile_seconds, 6)
    s.stats["import_seconds"] = round(import_seconds + s.import_seconds, 6)
    return _finish(s, winner, t0 + s.compile_seconds + s.import_seconds)


def resolve_method(method):
    """``(name, registry entry, None)`` for a registered name; ``(name, None, method)`` for a
    callable with the registry signature (named after it, apart from every registered name
    and the session's own candidates); :class:`OptionError` otherwise."""
    if isinstance(method, str):
        return method, get_method(method), None
    if not callable(method):
        raise OptionError(f"method must be a registered name or a callable, got {type(method).__name__}")
    name = getattr(method, "__name__", None) or type(method).__name__
    if name in method_names() or name in ("incumbent", "auto"):
        name += " (callable)"
    return name, None, method


def _finish(s, winner: str, t0: float) -> ScheduleResult:
    """Status, bounds by name, and the independent check of the winning order."""
    from memopt.bounds.certificate import CERTIFIABLE

    order, pk = s.candidates[winner]
    bounds: dict = {}
    for b in s.bounds:
        bounds[b.name] = max(bounds.get(b.name, 0), int(b.value))
    if s.proven is not None:
        bounds["exact_search"] = int(s.proven)
    lower = max([int(s.problem.dag.base)] + list(bounds.values()))
    if lower > pk:
        raise InternalError("bound-above-peak", f"a lower bound ({lower}) exceeds a verified peak ({pk})")
    # the strongest bound whose witness a certificate can carry (the trap cuts dominate the rest)
    certifiable = [b for b in s.bounds if b.witness.get("kind") in CERTIFIABLE]
    witnessed = max(certifiable, key=lambda b: b.value) if certifiable else None
    if witnessed is not None and witnessed.value >= pk:
        status = "certified"
    elif lower >= pk:
        status = "optimal"
    else:
        status = "feasible"
    # in wall seconds: on a loaded machine the check takes longer than its CPU seconds
    needs, left = s.check_seconds * s.slowdown(), s.end - time.perf_counter()
    if needs > max(0.0, left) + CHECK_OVERRUN:
        # the order's peak was evaluated exactly when it became a candidate; the certificate's
        # independent check would overrun the time limit: skipped, and said so
        cert, verified = None, False
        s.stats["verification"] = (f"skipped: the independent check of the certificate needs about "
                                   f"{needs:.1f} s, {max(0.0, left):.1f} s of the time limit were left")
        if status == "certified":
            status = "optimal"
    else:
        cert, verified = _verify(s.problem, order, pk, witnessed)
    return ScheduleResult(order=np.asarray(order, np.int64), peak=int(pk), lower_bound=int(lower), status=status,
                          method=winner, seconds=time.perf_counter() - t0, baselines=dict(s.baselines),
                          bounds=bounds, certificate=cert, verified=verified, stats=s.stats)


#: the modules of the independent check, imported before the call's clock starts
CHECK_MODULES = ("memopt.bounds.certificate", "memopt.bounds.checker")


def _verify(problem: SchedulingProblem, order, pk: int, bound) -> tuple[dict | None, bool]:
    """Certificate of the plan and its strongest witnessed bound, checked independently."""
    from memopt.bounds.certificate import make_certificate
    from memopt.bounds.checker import verify_certificate

    if bound is None:
        raise InternalError("witnessed-bound", "no bound with a certifiable witness (the base bound always has one)")
    cert = make_certificate(problem.dag, problem.to_full(order), bound)
    report = verify_certificate(cert, strict=False)
    if not report.peak_ok or report.peak != pk:
        raise InternalError("verified-peak", f"the independent checker measured peak {report.peak}, "
                                             f"the scheduler claimed {pk}")
    if not report.bound_ok:
        raise InternalError("verified-bound", "the lower bound's witness failed independent verification: "
                                              + "; ".join(report.errors))
    return cert, True


def schedule_instance(inst, *, method: str = "auto", time_limit: float = 10.0, seed: int = 0,
                      progress: bool = False) -> ScheduleResult:
    """:func:`memopt.schedule` on a loaded :class:`~memopt.io.Instance` (its input order is the
    baseline); the parameters and errors are those of :func:`memopt.schedule`.

    Returns
    -------
    ScheduleResult
    """
    return schedule(inst, method=method, time_limit=time_limit, input_order=inst.input_order, seed=seed,
                    progress=progress)
