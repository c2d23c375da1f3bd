"""``memopt verify``: check a plan or certificate file against an instance, every claim included.

:func:`verify_document` is the one entry point (the CLI's ``verify`` calls it). It returns a
:class:`VerifyOutcome` only when **every claim in the file is checked**; anything else is
refused with one :class:`~memopt.errors.CertificateError` line naming the reason (a file
that is not a plan or certificate at all, or has an unsupported version, is a
:class:`~memopt.errors.FormatError`). What is checked:

* **Certificate** (``"format": "memopt-certificate"``): its embedded DAG must equal the
  instance's signed DAG field by field (the first difference is named), then
  :func:`memopt.bounds.checker.verify_certificate` checks the order, the peak, the bound's
  witness (forcing included) and the ``certified`` claim.
* **Plan** (``"format": "memopt-plan"``, written by ``memopt schedule -o``):

  - only the fields of the format are allowed (an unknown field would be an unchecked
    claim); ``instance`` must name the instance, ``method`` must be a string (a label);
  - the order must be a valid op order of the instance; its peak is measured by the
    checker's own loop on the instance's DAG, and a claimed ``peak`` must equal it;
  - a claimed ``lower_bound`` must not exceed the peak and must be proven: by the plan's
    ``bound`` witness (``{"name", "value", "witness"}``, exactly as in a certificate, checked
    against the instance's DAG), or else re-derived by the checker itself from its
    solver-free bounds (base, end memory, node relaxations);
  - ``status`` must be one of ``certified``, ``optimal`` (both: a proven bound equals the
    peak, and a claimed ``lower_bound`` equals it too), ``feasible`` (always true of a
    valid order); ``infeasible`` contradicts the order the plan carries; anything else is
    unknown and refused;
  - a ``bound`` witness, when present, is checked even if nothing else leans on it.

Builds the DAG with :mod:`memopt.core` only; imports nothing from :mod:`memopt.schedule`.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> from memopt.io import Instance
>>> import numpy as np
>>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", (), ("x",)), Op("g", ("x",), ("y",))])
>>> inst = Instance(name="", schema="memopt-graph", labels=("f", "g"), input_order=np.arange(2), graph=g)
>>> verify_document(inst, {"format": "memopt-plan", "version": 1, "order": ["f", "g"], "peak": 6}).peak
6
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memopt.bounds.certificate import FORMAT as CERTIFICATE_FORMAT
from memopt.bounds.certificate import dag_to_doc
from memopt.bounds.checker import (INT_LIMIT, _r, record_from_dict, record_to_dict, solver_free_bound, verify_certificate,
                                   verify_plan)
from memopt.core import dag_order_from_op_order, graph_to_dag, validate_order
from memopt.errors import CertificateError, FormatError, MemoptError, OptionError

PLAN_FORMAT = "memopt-plan"
PLAN_VERSION = 1
STATUSES = ("certified", "optimal", "feasible", "infeasible")
PLAN_KEYS = ("format", "version", "instance", "order", "peak", "lower_bound", "status", "method", "bound")

__all__ = ["VerifyOutcome", "verify_document", "dag_difference", "STATUSES"]


@dataclass
class VerifyOutcome:
    """What ``memopt verify`` established (returned only when every claim holds).

    ``peak`` is the measured peak of the file's order; ``lower_bound`` the proven bound
    (the plan's own claim when it makes one, else what its witness proves; for a
    certificate the witness's value); ``status`` the verified status (``certified`` when
    the proven bound meets the peak, else ``feasible``; a plan's own claim when it makes
    one); ``proof`` says where the bound comes from (``witness``, ``re-derived``, or
    ``None`` when nothing is claimed).
    """

    ok: bool
    kind: str                       # "plan" | "certificate"
    peak: int
    lower_bound: int | None = None
    status: str | None = None
    certified: bool = False
    claimed_peak: int | None = None
    bound_name: str = ""
    witness_kind: str | None = None
    proof: str | None = None
    same_graph: bool = True
    checked: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "VerifyOutcome":
        return record_from_dict(cls, d, "verify outcome", FormatError)

    # dict-like read access, for callers of the former ``verify_plan_document``
    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def get(self, key: str, default=None):
        return self.to_dict().get(key, default)

    def keys(self):
        return self.to_dict().keys()

    def items(self):
        return self.to_dict().items()


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _instance_dag(inst):
    """(signed DAG, GraphDAG or None) of a loaded instance, built by :mod:`memopt.core`."""
    graph = getattr(inst, "graph", None)
    program = getattr(inst, "program", None)
    if graph is not None:
        gd = graph_to_dag(graph)
        return gd.dag, gd
    if program is not None:
        return program.to_dag(), None
    raise OptionError(f"verify needs a loaded instance (memopt.io.Instance), got {type(inst).__name__}")


def dag_difference(doc_dag, expected: dict) -> str | None:
    """The first difference between a certificate's ``dag`` and ``expected`` (``dag_to_doc``), or None.

    Integers compare strictly (``true`` is not ``1``); edges compare as sets of pairs.
    """
    if not isinstance(doc_dag, dict):
        return "the certificate has no 'dag' object"
    for key in doc_dag:
        if key not in expected:
            return f"the certificate's DAG has an unexpected field {_r(key)}"
    if doc_dag.get("name", "") != expected["name"]:
        return f"DAG name {_r(doc_dag.get('name'))} differs from the instance's {expected['name']!r}"
    if not (_is_int(doc_dag.get("base")) and doc_dag["base"] == expected["base"]):
        return f"base memory {_r(doc_dag.get('base'))} differs from the instance's {expected['base']}"
    names = expected["names"]
    for key in ("names", "delta", "transient"):
        got, want = doc_dag.get(key), expected[key]
        if not isinstance(got, list):
            return f"DAG field {key!r} is not a list"
        if len(got) != len(want):
            return f"the DAG has {len(got)} entries in {key!r}, the instance's has {len(want)} nodes"
        for k, (a, b) in enumerate(zip(got, want)):
            same = a == b and (isinstance(a, str) if key == "names" else _is_int(a))
            if not same:
                return f"DAG {key}[{k}] (node {names[k]!r}) is {_r(a)}, the instance's is {b!r}"
    got = doc_dag.get("edges")
    if not isinstance(got, list):
        return "DAG field 'edges' is not a list"
    have = set()
    for k, e in enumerate(got):
        if not (isinstance(e, list) and len(e) == 2 and _is_int(e[0]) and _is_int(e[1])):
            return f"DAG edges[{k}] = {_r(e)} is not a pair of node ids"
        have.add((e[0], e[1]))
    want = {(a, b) for a, b in expected["edges"]}
    extra, missing = sorted(have - want), sorted(want - have)
    n = len(names)

    def lab(x):
        return f"{names[x]!r} ({x})" if 0 <= x < n else _r(x)

    if extra:
        a, b = extra[0]
        return f"the DAG has an edge {lab(a)} -> {lab(b)} that the instance does not"
    if missing:
        a, b = missing[0]
        return f"the DAG lacks the instance's edge {lab(a)} -> {lab(b)}"
    return None


def _verify_certificate_doc(inst, doc: dict, where: str) -> VerifyOutcome:
    dag, _ = _instance_dag(inst)
    diff = dag_difference(doc.get("dag"), dag_to_doc(dag))
    if diff is not None:
        raise CertificateError(f"{where}: the certificate is for a different graph: {diff}")
    rep = verify_certificate(doc, strict=False)
    if rep.errors:
        raise CertificateError(f"{where}: certificate rejected: " + "; ".join(rep.errors))
    wit = doc["bound"]["witness"]
    return VerifyOutcome(ok=True, kind="certificate", peak=int(rep.peak), lower_bound=int(rep.bound),
                         status="certified" if rep.certified else "feasible", certified=bool(rep.certified),
                         claimed_peak=rep.claimed_peak, bound_name=rep.bound_name, witness_kind=wit["kind"],
                         proof="witness", same_graph=True,
                         checked=["dag", "order", "peak", "bound", "certified"])


def _plan_op_ids(inst, order, where: str) -> np.ndarray:
    labels = getattr(inst, "labels", None)
    lookup = {str(lab): i for i, lab in enumerate(labels)}
    ids = np.empty(len(order), np.int64)
    for k, lab in enumerate(order):
        if not (isinstance(lab, str) or (_is_int(lab) and -INT_LIMIT < lab < INT_LIMIT)) or str(lab) not in lookup:
            raise CertificateError(f"{where}: order[{k}] names unknown op {_r(lab)}")
        ids[k] = lookup[str(lab)]
    return ids


def _verify_plan_doc(inst, doc: dict, where: str) -> VerifyOutcome:
    version = doc.get("version")
    if not _is_int(version) or version != PLAN_VERSION:
        raise FormatError(f"{where}: memopt-plan version {_r(version)} is not supported (this memopt reads "
                          f"version {PLAN_VERSION})")
    for key in doc:
        if key not in PLAN_KEYS:
            raise CertificateError(f"{where}: the plan has an unexpected field {_r(key)}, which verify cannot "
                                   f"check (allowed: {', '.join(PLAN_KEYS)})")
    if "instance" in doc and doc["instance"] != inst.name:
        raise CertificateError(f"{where}: the plan is for instance {_r(doc['instance'])}, not {inst.name!r}")
    if "method" in doc and not isinstance(doc["method"], str):
        raise CertificateError(f"{where}: field 'method' must be a string, got {_r(doc['method'])}")
    order = doc.get("order")
    if not isinstance(order, list):
        raise FormatError(f"{where}: missing field 'order' (a list of op names)" if "order" not in doc
                          else f"{where}: field 'order' must be a list of op names")
    for key in ("peak", "lower_bound"):
        if key in doc and not _is_int(doc[key]):
            raise CertificateError(f"{where}: field {key!r} must be a whole number of bytes, got {_r(doc[key])}")
        if key in doc and not -INT_LIMIT < doc[key] < INT_LIMIT:
            raise CertificateError(f"{where}: field {key!r} is outside the 64-bit range memopt handles "
                                   f"({_r(doc[key])})")
    status = doc.get("status")
    if "status" in doc:
        if not isinstance(status, str) or status not in STATUSES:
            raise CertificateError(f"{where}: unknown status {_r(status)} (a plan's status is one of "
                                   f"certified, optimal, feasible)")
        if status == "infeasible":
            raise CertificateError(f"{where}: the plan claims status 'infeasible' but carries an order")
    bound = doc.get("bound")
    if "bound" in doc and not isinstance(bound, dict):
        raise CertificateError(f"{where}: field 'bound' must be an object with name, value and witness")

    dag, gd = _instance_dag(inst)
    ids = _plan_op_ids(inst, order, where)
    if gd is not None:
        try:
            validate_order(inst.graph, ids)
        except MemoptError as exc:
            raise CertificateError(f"{where}: {exc}") from None
        full = dag_order_from_op_order(gd, ids)
    else:
        full = ids
    dag_doc = dag_to_doc(dag)
    rep = verify_plan(dag_doc, [int(v) for v in full], bound=bound, strict=False)
    if rep.errors:
        raise CertificateError(f"{where}: plan rejected: " + "; ".join(rep.errors))
    measured = int(rep.peak)
    checked = ["order", "peak"]
    claimed = doc.get("peak")
    if claimed is not None and claimed != measured:
        raise CertificateError(f"{where}: the plan claims peak {claimed}, but its order has peak {measured}")
    claimed_lb = doc.get("lower_bound")
    if claimed_lb is not None and claimed_lb > measured:
        raise CertificateError(f"{where}: the plan claims lower bound {claimed_lb} above its own peak {measured}")
    if status in ("certified", "optimal") and claimed_lb is not None and claimed_lb != measured:
        raise CertificateError(f"{where}: the plan claims status {status!r} but its lower bound {claimed_lb} "
                               f"does not equal its peak {measured}")
    proven = int(rep.bound) if bound is not None else None
    witness_kind = bound["witness"]["kind"] if bound is not None else None
    if bound is not None:
        checked.append("bound witness")
    need = None
    if claimed_lb is not None:
        need = claimed_lb
    if status in ("certified", "optimal"):
        need = measured
    proof = "witness" if bound is not None else None
    if need is not None and (proven is None or proven < need):
        value, wit = solver_free_bound(dag_doc, at_least=need)
        if value < need:
            what = f"status {status!r}" if status in ("certified", "optimal") else f"lower bound {claimed_lb}"
            if proven is not None:
                why = f"its witness proves only {proven} and the checker's own bounds {value}"
            else:
                why = f"it carries no witness (field 'bound') and the checker's own bounds prove only {value}"
            raise CertificateError(f"{where}: the plan claims {what}, but {why}")
        proven, proof, witness_kind = value, "re-derived", wit["kind"]
    if need is not None:
        checked.append("lower_bound" if status not in ("certified", "optimal") else "status")
    certified = proven is not None and proven >= measured
    return VerifyOutcome(ok=True, kind="plan", peak=measured, claimed_peak=claimed,
                         lower_bound=claimed_lb if claimed_lb is not None else proven,
                         status=status if status is not None else ("certified" if certified else None),
                         certified=certified, bound_name=rep.bound_name, witness_kind=witness_kind, proof=proof,
                         checked=checked)


def verify_document(inst, doc, where: str = "<plan>") -> VerifyOutcome:
    """Check a plan or certificate document against a loaded instance (module docstring).

    Returns a :class:`VerifyOutcome` (``ok`` is always true: every claim was checked);
    raises :class:`CertificateError` naming the first false or unchecked claim, or
    :class:`FormatError` for a document that is neither format.
    """
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt == CERTIFICATE_FORMAT:
        return _verify_certificate_doc(inst, doc, where)
    if fmt == PLAN_FORMAT:
        return _verify_plan_doc(inst, doc, where)
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: expected a JSON object (a memopt-plan or memopt-certificate), "
                          f"got {type(doc).__name__}")
    raise FormatError(f"{where}: neither a memopt-plan nor a memopt-certificate file"
                      + (f" (format {_r(fmt)})" if fmt is not None else ""))
