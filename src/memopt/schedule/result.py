"""Result types shared by every scheduling method.

* :class:`MethodResult` — what one registered method returns (registry signature, see
  :mod:`memopt.schedule.registry`): an order in the problem's own ids, its peak, what the
  method proved, and statistics.
* :class:`ExactResult` — what an exact solver returns on a bare signed DAG (full node orders).
* :class:`ScheduleResult` — what :func:`memopt.schedule` returns: a plan re-checked by the
  independent checker, with its bound, status, baselines and certificate. Its
  :meth:`~ScheduleResult.to_dict` is what ``memopt schedule --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memopt.io._json import plain_data

STATUSES = ("certified", "optimal", "feasible", "infeasible")


@dataclass(frozen=True)
class ExactResult:
    """Outcome of an exact solver on a signed DAG.

    ``order`` is a full node order (releases included) whose peak is ``peak``;
    ``lower_bound`` is what the solver proved; ``optimal`` is true iff it proved
    ``peak == lower_bound`` (the search finished, or the bound met the incumbent).
    """

    order: np.ndarray | None
    peak: int | None
    lower_bound: int
    optimal: bool
    solver: str
    seconds: float
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MethodResult:
    """Outcome of one registered scheduling method.

    ``order`` is in the problem's own ids (op ids, statement ids or DAG node ids), or
    ``None`` when the method found none in its time; ``peak`` its exact peak;
    ``lower_bound`` a bound the method *proved* (``None``: it proves nothing);
    ``optimal`` is true iff it proved that ``peak`` is the minimum.
    """

    order: np.ndarray | None
    peak: int | None
    lower_bound: int | None = None
    optimal: bool = False
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ScheduleResult:
    """A verified plan: what :func:`memopt.schedule` returns.

    Attributes
    ----------
    order : numpy.ndarray
        Op ids of a tensor graph, statement ids of a program, node ids of a signed DAG.
    peak : int
        Its exact peak (bytes).
    lower_bound : int
        A proven lower bound on the peak of every order.
    status : {"certified", "optimal", "feasible"}
        ``certified``: a bound with a checkable witness equals the peak; ``optimal``: an
        exact method proved it; ``feasible``: the gap stays open.
    method : str
        The method whose order won.
    seconds : float
        The call's own seconds, on its clock: what a first call in the process spends
        compiling kernels and importing modules is not in it (:attr:`first_use_seconds`).
    baselines : dict
        Peaks of the named baselines computed alongside.
    bounds : dict
        Every lower bound by name.
    certificate : dict
        A self-contained certificate of the plan and its strongest witnessed bound, checked by
        :func:`memopt.bounds.checker.verify_certificate` before the result was returned.
    verified : bool
    stats : dict

    Examples
    --------
    >>> import memopt
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> r = memopt.schedule(TensorGraph.build([Tensor("y", 2, output=True)], [Op("f", (), ("y",))]), time_limit=1)
    >>> r.to_dict(labels=["f"])["order"], r.gap, r.verified
    (['f'], 0, True)
    """

    order: np.ndarray
    peak: int
    lower_bound: int
    status: str
    method: str
    seconds: float
    baselines: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)
    certificate: dict | None = None
    verified: bool = False
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> int:
        return self.peak - self.lower_bound

    @property
    def first_use_seconds(self) -> float:
        """Seconds the call spent outside its clock: kernels compiled or loaded and modules
        imported on their first use in the process (``stats["compile_seconds"]`` plus
        ``stats["import_seconds"]``; 0 once both are done)."""
        return float(self.stats.get("compile_seconds", 0.0)) + float(self.stats.get("import_seconds", 0.0))

    def to_dict(self, labels=None, *, certificate: bool = False) -> dict:
        """Plain JSON data. ``labels`` maps ids to the file's own names (``order`` is then
        written in those); ``certificate=True`` includes the certificate."""
        order = [int(i) for i in self.order]
        if labels is not None:
            order = [labels[i] for i in order]
        out = {"order": order, "peak": int(self.peak), "lower_bound": int(self.lower_bound),
               "gap": int(self.gap), "status": self.status, "method": self.method,
               "seconds": round(float(self.seconds), 6), "baselines": plain_data(self.baselines),
               "bounds": plain_data(self.bounds), "verified": bool(self.verified), "stats": plain_data(self.stats)}
        if certificate:
            out["certificate"] = self.certificate
        return out

    @classmethod
    def from_dict(cls, doc: dict, labels=None) -> "ScheduleResult":
        """Inverse of :meth:`to_dict` (``labels``: the same list, to map names back to ids)."""
        from memopt.errors import FormatError

        try:
            order = doc["order"]
            if labels is not None:
                index = {lab: i for i, lab in enumerate(labels)}
                order = [index[x] for x in order]
            return cls(order=np.asarray(order, np.int64), peak=int(doc["peak"]),
                       lower_bound=int(doc["lower_bound"]), status=str(doc["status"]),
                       method=str(doc["method"]), seconds=float(doc.get("seconds", 0.0)),
                       baselines=dict(doc.get("baselines", {})), bounds=dict(doc.get("bounds", {})),
                       certificate=doc.get("certificate"), verified=bool(doc.get("verified", False)),
                       stats=dict(doc.get("stats", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"not a schedule result: {type(exc).__name__}: {exc}") from None


def order_result(problem, order, *, lower_bound: int | None = None, optimal: bool = False,
                 **stats) -> MethodResult:
    """:class:`MethodResult` of a model order of ``problem`` (its peak evaluated exactly here)."""
    if order is None:
        return MethodResult(order=None, peak=None, lower_bound=lower_bound, optimal=False, stats=stats)
    order = np.asarray(order, np.int64)
    return MethodResult(order=order, peak=int(problem.peak(order)), lower_bound=lower_bound, optimal=optimal,
                        stats=stats)


def exact_result(problem, res: ExactResult) -> MethodResult:
    """:class:`MethodResult` of an exact solver's :class:`ExactResult` (full DAG order) on ``problem``."""
    stats = {"solver": res.solver, "seconds": round(float(res.seconds), 6),
             **{k: v for k, v in res.stats.items() if isinstance(v, (int, float, bool, str))}}
    if res.order is None:
        return MethodResult(order=None, peak=None, lower_bound=int(res.lower_bound), optimal=False, stats=stats)
    order = problem.from_full(res.order)
    return MethodResult(order=order, peak=int(problem.peak(order)), lower_bound=int(res.lower_bound),
                        optimal=bool(res.optimal), stats=stats)
