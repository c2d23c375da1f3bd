"""Recomputation plan files (``"format": "memopt-remat-plan"``) and their verification.

``memopt remat -o PLAN`` writes :func:`remat_plan_doc`; ``memopt verify GRAPH PLAN``
dispatches such a file to :func:`verify_remat_document`, which checks **every claim** in it
or refuses it with one :class:`~memopt.errors.CertificateError` line:

* the steps (``{"run": op label}`` / ``{"free": tensor name}``, in the input file's ids) are a
  valid plan under the file's ``cap`` — by the independent checker
  :func:`memopt.remat.check_plan`, which also re-measures ``peak`` and ``extra_cost`` (both
  must be claimed, and equal);
* ``memory_limit`` (if claimed): the peak is at most it; ``cost_budget``: the extra cost is
  at most it;
* ``lower_bound`` (if claimed) must not exceed the bound re-derived here from the graph
  alone: ``max(start, max_v F(v), R + s(outputs))`` (``docs/remat.md``, "Infeasibility"),
  and ``status`` is ``feasible``, or ``optimal`` only where that is re-derivable (a
  ``min_peak`` plan whose peak equals the re-derived bound, a ``min_cost`` plan of extra
  cost 0). Proofs by exhausted search have no witness a file could carry, so the writer
  states them as ``feasible`` (the ``--json`` output keeps the solver's status).

``question`` must be ``min_cost`` or ``min_peak``; the limit of the other question
(``cost_budget`` on a ``min_cost`` plan, ``memory_limit`` on a ``min_peak`` one) is refused, and
a ``status`` needs its question's own limit. Costs are compared exactly: ``extra_cost`` and
``cost_budget`` are JSON integers, JSON numbers read from their decimal text (``0.1`` is
1/10) or strings ``"p/q"`` (``docs/formats.md``). Unknown fields are refused (an unknown
field would be an unchecked claim).
"""

from __future__ import annotations

from memopt.errors import CertificateError, FormatError, MemoptError
from memopt.io._json import byte_count, exact_json, exact_value, show_number
from memopt.remat.result import QUESTIONS

__all__ = ["FORMAT", "VERSION", "remat_plan_doc", "verify_remat_document", "rederived_bound"]

FORMAT = "memopt-remat-plan"
VERSION = 1
KEYS = ("format", "version", "instance", "question", "cap", "plan", "peak", "extra_cost", "memory_limit",
        "cost_budget", "lower_bound", "status", "method")


def rederived_bound(graph) -> int:
    """The footprint bound, computed here from the graph's public lookups (independently of
    the solvers' :func:`memopt.remat.model_common.footprint_bound`)."""
    size = [int(s) for s in graph.tensor_size.tolist()]
    res = [bool(r) for r in graph.tensor_resident.tolist()]
    prod = [int(p) for p in graph.tensor_producer.tolist()]
    out = [bool(o) for o in graph.tensor_output.tolist()]
    R = sum(s for s, r in zip(size, res) if r)
    pinned = {t for t in range(len(size)) if prod[t] < 0 and out[t] and not res[t]}
    best = R + sum(size[t] for t in range(len(size)) if prod[t] < 0 and not res[t])
    for v in range(graph.num_ops):
        ts = {int(t) for t in graph.inputs_of(v)} | {int(t) for t in graph.outputs_of(v)} | pinned
        best = max(best, R + sum(size[t] for t in ts if not res[t]) + int(graph.op_workspace[v]))
    if graph.num_ops:
        best = max(best, R + sum(size[t] for t in range(len(size)) if out[t] and not res[t]))
    return best


def remat_plan_doc(inst, res) -> dict:
    """The plan file of a :class:`~memopt.remat.result.RematResult` on a loaded instance: only
    claims :func:`verify_remat_document` can check (see the module docstring)."""
    if res.plan is None:
        raise FormatError("there is no plan to write (the question is infeasible or no plan was found)")
    d = res.to_dict(inst.graph, inst.labels)
    bound = rederived_bound(inst.graph)
    status = "feasible"
    if (res.question == "min_peak" and res.peak <= bound) or (res.question == "min_cost" and res.extra_cost == 0
                                                               and res.status != "unknown"):
        status = "optimal"
    doc = {"format": FORMAT, "version": VERSION, "instance": inst.name, "question": res.question,
           "cap": d["cap"], "plan": d["plan"], "peak": int(res.peak), "extra_cost": exact_json(res.extra_cost),
           "lower_bound": min(int(res.lower_bound or 0), bound), "method": res.method}
    if res.status != "unknown":
        doc["status"] = status
        if res.question == "min_cost":
            doc["memory_limit"] = int(res.memory_limit)
        else:
            doc["cost_budget"] = exact_json(res.cost_budget)
    return doc


def verify_remat_document(inst, doc: dict, where: str = "<plan>") -> dict:
    """Check every claim of a remat plan document against ``inst``; returns a report dict
    (``ok`` true) or raises :class:`CertificateError` / :class:`FormatError`."""
    from memopt.remat.checker import check_plan
    from memopt.remat.plan import RematPlan

    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError(f"{where}: not a {FORMAT} file")
    if isinstance(doc.get("version"), bool) or doc.get("version") != VERSION:
        raise FormatError(f"{where}: unsupported {FORMAT} version {doc.get('version')!r} (expected {VERSION})")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise CertificateError(f"{where}: unknown field {unknown[0]!r} (it would be an unchecked claim)")
    if inst.graph is None:
        raise FormatError(f"{where}: recomputation plans are for tensor graphs, not statement programs")
    g = inst.graph
    for key in ("instance", "method"):
        if key in doc and not isinstance(doc[key], str):
            raise FormatError(f"{where}: field {key!r} must be a string, got {show_number(doc[key])}")
    if "instance" in doc and doc["instance"] != inst.name:
        raise CertificateError(f"{where}: the plan is for instance {doc['instance']!r}, not {inst.name!r}")
    for key in ("question", "peak", "extra_cost", "plan"):
        if key not in doc:
            raise CertificateError(f"{where}: field {key!r} is missing")
    question = doc["question"]
    if question not in QUESTIONS:
        raise CertificateError(f"{where}: unknown question {show_number(question)} (min_cost or min_peak)")
    # the limit of the other question would be a claim about a plan this file does not answer
    other = "cost_budget" if question == "min_cost" else "memory_limit"
    if doc.get(other) is not None:
        raise CertificateError(f"{where}: field {other!r} does not belong to a {question} plan")
    own = "memory_limit" if question == "min_cost" else "cost_budget"
    if doc.get("status") is not None and doc.get(own) is None:
        raise CertificateError(f"{where}: status {show_number(doc['status'])} of a {question} plan needs its "
                               f"field {own!r} (the status is a claim about that question)")
    steps = doc["plan"]
    if not isinstance(steps, list):
        raise FormatError(f"{where}: 'plan' must be a list of steps")
    lookup = {str(lab): i for i, lab in enumerate(inst.labels)}
    mapped = []
    for i, s in enumerate(steps):
        if isinstance(s, dict) and len(s) == 1 and "run" in s:
            if isinstance(s["run"], (bool, dict, list)) or str(s["run"]) not in lookup:
                raise CertificateError(f"{where}: step {i}: unknown op {show_number(s['run'])}")
            mapped.append({"run": lookup[str(s["run"])]})
        else:
            mapped.append(s)
    cap = doc.get("cap")
    if cap is not None and not (isinstance(cap, int) and not isinstance(cap, bool)) and not isinstance(cap, list):
        raise FormatError(f"{where}: 'cap' must be an integer or a list of integers")
    for key in ("peak", "memory_limit", "lower_bound"):
        if key in doc and doc[key] is not None:
            if isinstance(doc[key], bool) or not isinstance(doc[key], int):
                raise FormatError(f"{where}: field {key!r} must be an integer number of bytes")
            byte_count(doc[key], f"{where}: field {key!r}")
    claimed = {key: exact_value(doc[key], f"{where}: field {key!r}")
               for key in ("extra_cost", "cost_budget") if doc.get(key) is not None}
    for key, val in claimed.items():
        if val < 0:
            raise FormatError(f"{where}: field {key!r} is negative: {show_number(val)}")
    try:
        plan = RematPlan.from_steps(g, mapped)
        peak, extra = check_plan(g, plan, cap=cap, claimed_peak=doc["peak"],
                                 claimed_extra_cost=claimed["extra_cost"])
    except CertificateError as exc:
        raise CertificateError(f"{where}: {exc}") from None
    except MemoptError as exc:
        raise CertificateError(f"{where}: invalid plan: {exc}") from None
    if doc.get("memory_limit") is not None and peak > doc["memory_limit"]:
        raise CertificateError(f"{where}: the plan peaks at {peak} B, above its claimed memory limit "
                               f"{doc['memory_limit']} B")
    if "cost_budget" in claimed and extra > claimed["cost_budget"]:
        raise CertificateError(f"{where}: the plan's extra cost {extra} is above its claimed budget "
                               f"{claimed['cost_budget']}")
    bound = rederived_bound(g)
    lb = doc.get("lower_bound")
    if lb is not None and lb > bound:
        raise CertificateError(f"{where}: claimed lower bound {lb} B cannot be re-derived (the checker's bound "
                               f"is {bound} B)")
    if lb is not None and lb > peak:
        raise CertificateError(f"{where}: claimed lower bound {lb} B is above the plan's peak {peak} B")
    status = doc.get("status")
    if status is not None:
        if status == "optimal":
            ok = (question == "min_peak" and peak <= bound) or (question == "min_cost" and extra == 0)
            if not ok:
                raise CertificateError(f"{where}: status 'optimal' cannot be re-derived from the plan and the graph")
        elif status != "feasible":
            raise CertificateError(f"{where}: status {status!r} is not a claim a plan can carry "
                                   "(feasible, or optimal where re-derivable)")
    return {"ok": True, "kind": "remat-plan", "question": question, "peak": peak, "extra_cost": exact_json(extra),
            "lower_bound": lb if lb is not None else bound,
            "status": status or "feasible", "steps": len(steps), "runs": int((plan.kind == 0).sum()),
            "cap": cap}
