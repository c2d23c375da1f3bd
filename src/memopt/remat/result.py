"""What every recomputation method returns: :class:`RematResult`.

One type for the registry methods (:mod:`memopt.remat.registry`) and for
:func:`memopt.remat` (which checks the plan with :func:`memopt.remat.check_plan` before it
returns it). Fields:

* ``plan`` — a :class:`~memopt.remat.plan.RematPlan`, or ``None`` (no plan: ``infeasible``,
  or nothing found in the time);
* ``peak``, ``extra_cost`` — the plan's exact peak (bytes) and extra cost (an ``int``, or a
  ``Fraction`` for non-integral costs);
* ``question`` — ``"min_cost"`` (minimum extra cost with ``peak <= memory_limit``) or
  ``"min_peak"`` (minimum peak with ``extra_cost <= cost_budget``);
* ``lower_bound`` — a proven lower bound on the peak of every plan within the caps (and,
  for ``min_peak``, within the budget); ``cost_lower_bound`` — for ``min_cost``, a proven
  lower bound on the extra cost of every plan within the limit;
* ``status`` — ``optimal`` (the answer meets its proven bound), ``feasible`` (a plan that
  answers the question, gap open), ``infeasible`` (proved: no plan within the caps meets the
  limit; ``plan`` is ``None``), ``unknown`` (no plan meeting the limit was found in the time
  and none is proven impossible; ``plan`` is the lowest-peak plan found, above the limit);
* ``seconds``, ``method``, ``cap``, ``memory_limit``, ``cost_budget``, ``stats``.

:meth:`RematResult.to_dict` is what ``memopt remat --json`` prints (steps in the graph's
names, or in the file's op labels when ``op_labels`` is given); :meth:`from_dict` reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from memopt.io._json import exact_json, exact_value, plain_data

from memopt.errors import FormatError

__all__ = ["RematResult", "STATUSES", "QUESTIONS", "json_number", "exact_number"]

STATUSES = ("optimal", "feasible", "infeasible", "unknown")
QUESTIONS = ("min_cost", "min_peak")


def json_number(x):
    """An exact cost as JSON data (:func:`memopt.io._json.exact_json`): an ``int`` stays one, a
    ``Fraction`` becomes a JSON number whose text is exactly its value (``0.1``) or, when no
    short decimal is, the string ``"p/q"``."""
    return exact_json(x)


def exact_number(x):
    """Inverse of :func:`json_number` for reading (:func:`memopt.io._json.exact_value`): ints
    stay ints, numbers are read from their decimal text, ``"p/q"`` strings as fractions."""
    if x is None:
        return None
    return exact_value(x, "cost")


@dataclass(frozen=True)
class RematResult:
    """What :func:`memopt.remat` and every recomputation method return (fields: module docstring).

    Attributes
    ----------
    plan : RematPlan or None
    peak : int or None
    extra_cost : int, Fraction or None
    status : {"optimal", "feasible", "infeasible", "unknown"}
    question : {"min_cost", "min_peak"}
    lower_bound, cost_lower_bound, memory_limit, cost_budget, cap, method, seconds, stats

    Examples
    --------
    >>> r = RematResult(plan=None, peak=None, extra_cost=None, status="infeasible", question="min_cost",
    ...                 lower_bound=10, memory_limit=8)
    >>> r.to_dict()["status"], r.gap
    ('infeasible', None)
    """

    plan: object
    peak: int | None
    extra_cost: object
    status: str
    question: str
    lower_bound: int | None = None
    cost_lower_bound: object = None
    memory_limit: int | None = None
    cost_budget: object = None
    cap: object = None
    method: str = ""
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    def with_(self, **changes) -> "RematResult":
        return replace(self, **changes)

    @property
    def gap(self):
        """``peak - lower_bound`` (min_peak) or ``extra_cost - cost_lower_bound`` (min_cost)."""
        if self.plan is None:
            return None
        if self.question == "min_peak":
            return None if self.lower_bound is None else self.peak - self.lower_bound
        return None if self.cost_lower_bound is None else self.extra_cost - self.cost_lower_bound

    def to_dict(self, graph=None, op_labels=None) -> dict:
        """Plain JSON data. With ``graph`` the plan is written as steps ``{"run": op}`` /
        ``{"free": tensor}`` in the graph's names (``op_labels[v]`` for ops when given: the
        input file's own ids); without it, as ``[[kind, id], ...]`` pairs (0 run, 1 free)."""
        plan = None
        if self.plan is not None:
            if graph is not None:
                steps = []
                for k, i in zip(self.plan.kind.tolist(), self.plan.index.tolist()):
                    if k == 0:
                        steps.append({"run": op_labels[i] if op_labels is not None else graph.op_names[i]})
                    else:
                        steps.append({"free": graph.tensor_names[i]})
                plan = steps
            else:
                plan = [[int(k), int(i)] for k, i in zip(self.plan.kind.tolist(), self.plan.index.tolist())]
        out = {"question": self.question, "plan": plan,
               "peak": None if self.peak is None else int(self.peak),
               "extra_cost": json_number(self.extra_cost), "status": self.status}
        if self.question == "min_cost":
            out["cost_lower_bound"] = json_number(self.cost_lower_bound)
            out["lower_bound"] = None if self.lower_bound is None else int(self.lower_bound)
            out["memory_limit"] = None if self.memory_limit is None else int(self.memory_limit)
        else:
            out["lower_bound"] = None if self.lower_bound is None else int(self.lower_bound)
            out["cost_budget"] = json_number(self.cost_budget)
        out.update({"cap": self.cap if not isinstance(self.cap, np.ndarray) else self.cap.tolist(),
                    "method": self.method, "seconds": round(float(self.seconds), 6),
                    "stats": plain_data(self.stats, _fraction_leaf)})
        return out

    @classmethod
    def from_dict(cls, doc: dict, graph=None, op_labels=None) -> "RematResult":
        """Inverse of :meth:`to_dict` (pass the same ``graph`` / ``op_labels`` to read named steps)."""
        from memopt.remat.plan import RematPlan

        if not isinstance(doc, dict):
            raise FormatError("not a recomputation result: expected a JSON object")
        try:
            plan = doc.get("plan")
            if plan is not None:
                if graph is not None:
                    if op_labels is not None:
                        lookup = {str(lab): i for i, lab in enumerate(op_labels)}
                        plan = [{"run": lookup.get(str(s["run"]), s["run"])} if "run" in s else s for s in plan]
                    plan = RematPlan.from_steps(graph, plan)
                else:
                    plan = RematPlan.from_pairs((int(k), int(i)) for k, i in plan)
            question = str(doc["question"])
            if question not in QUESTIONS:
                raise FormatError(f"unknown question {question!r}")
            status = str(doc["status"])
            if status not in STATUSES:
                raise FormatError(f"unknown status {status!r}")
            return cls(plan=plan, peak=None if doc.get("peak") is None else int(doc["peak"]),
                       extra_cost=exact_number(doc.get("extra_cost")), status=status, question=question,
                       lower_bound=None if doc.get("lower_bound") is None else int(doc["lower_bound"]),
                       cost_lower_bound=exact_number(doc.get("cost_lower_bound")),
                       memory_limit=None if doc.get("memory_limit") is None else int(doc["memory_limit"]),
                       cost_budget=exact_number(doc.get("cost_budget")), cap=doc.get("cap"),
                       method=str(doc.get("method", "")), seconds=float(doc.get("seconds", 0.0)),
                       stats=dict(doc.get("stats") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"not a recomputation result: {type(exc).__name__}: {exc}") from None


def _fraction_leaf(x):
    """Exact costs in stats (``Fraction``) as JSON numbers (:func:`json_number`)."""
    return json_number(x) if isinstance(x, Fraction) else x
