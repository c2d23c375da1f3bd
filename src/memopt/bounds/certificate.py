"""Optimality certificates: a plan, its peak, a lower bound and the bound's witnesses, as JSON.

A certificate is self-contained: it carries the signed DAG (names, deltas, transients,
base, edges), the full node order of the plan, the claimed peak and the bound with its
witnesses, so that :func:`memopt.bounds.checker.verify_certificate` can check everything
without the original graph file and without any solver.

Format (``"format": "memopt-certificate", "version": 1``)::

    {
      "format": "memopt-certificate", "version": 1,
      "dag":   {"name": str, "base": int, "names": [str], "delta": [int],
                "transient": [int], "edges": [[p, x], ...]},
      "plan":  {"order": [node ids, every node once]},
      "peak":  int,                      # claimed peak of the plan
      "bound": {"name": str, "value": int, "witness": WITNESS},
      "certified": bool                  # claimed: bound value == peak
    }

Witness kinds (``proofs/trap_bounds.md`` proves each):

* ``{"kind": "base"}``: the memory at the start, ``base``.
* ``{"kind": "end_memory"}``: ``base + sum(delta)``, live after the last node.
* ``{"kind": "node_relaxation", "node": v}``: ``base + w(anc v) + neg(free) + delta(v) + transient(v)``.
* ``{"kind": "cut", "program": "forward"|"reverse", "node": v, "force_in": [..],
  "force_out": [..], "value": int, "flow": [[tail, head, flow], ...]}``: a feasible flow
  on the network of the trap of ``v`` (rebuilt by the checker from the DAG, see
  :func:`memopt.bounds.trap._arcs`: node ``n`` is the source, ``n + 1`` the sink, arcs
  not listed carry 0); by weak duality ``constant + flow value`` bounds the memory while
  ``v`` runs, for every order consistent with the forcing. Forcing is therefore accepted
  only where it is *implied*: at top level and inside a refutation, ``force_in`` may name
  only ancestors of ``v`` and ``force_out`` only ``v`` or its descendants (in the cut's
  program and DAG, hypothesis and derived edges included); other forcing (say, a plan's own
  prefix and suffix) would bound that plan alone and is refused by the checker.
* ``{"kind": "pair", "u": u, "v": v, "value": int, "cases": [{"case": "u_before_v", "cut":
  CUT}, {"case": "u_after_v", "cut": CUT}]}``: each case's cut must be implied by the case
  (``u_before_v``: the trap of ``v`` with ``u`` forced in, or of ``u`` with ``v`` forced
  out; ``u_after_v``: of ``v`` with ``u`` out, or of ``u`` with ``v`` in; beyond that, only
  implied forcing); the bound is the smaller case value.
* ``{"kind": "refutation", "limit": L, "value": L + 1, "steps": [{"edge": [a, b], "on": k,
  "cut": CUT with "extra_edges": [[b, a]]}, ...], "final": {"kind": "cut", "on": k, "cut":
  CUT} | {"kind": "cycle"}}``: no schedule has peak ``<= L``. Each step derives the
  precedence ``a -> b`` from a cut above ``L`` on the DAG plus the first ``k`` derived
  edges plus the opposite hypothesis ``b -> a``; the final cut (or a cycle among the
  derived edges) contradicts the limit.

Every field above is checked; a field the format does not define is refused (it would be
an unchecked claim). Plan files (``memopt-plan``) may carry the ``bound`` object of a
certificate; :mod:`memopt.bounds.verify` checks it against the instance.

Example
-------
>>> from memopt.core import SignedDAG
>>> from memopt.bounds.trap import forward_trap_bound
>>> d = SignedDAG.build(["a", "b", "free_a"], [4, 2, -4], edges=[(0, 1), (1, 2)])
>>> cert = make_certificate(d, [0, 1, 2], forward_trap_bound(d))
>>> cert["peak"], cert["bound"]["value"], cert["certified"]
(6, 6, True)
"""

from __future__ import annotations

import json
import os

import numpy as np

from memopt.core.signed_dag import GraphDAG, SignedDAG, dag_order_from_op_order, dag_peak, graph_to_dag
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import CertificateError

FORMAT = "memopt-certificate"
VERSION = 1
CERTIFIABLE = ("base", "end_memory", "node_relaxation", "cut", "pair", "refutation")

__all__ = ["FORMAT", "VERSION", "make_certificate", "certify", "dag_to_doc", "save_certificate", "load_certificate"]


def dag_to_doc(dag: SignedDAG) -> dict:
    """The signed DAG as plain JSON data (edges in lexicographic order)."""
    e = dag.edges()
    if e.size:
        e = e[np.lexsort((e[:, 1], e[:, 0]))]
    return {"name": dag.name, "base": int(dag.base), "names": list(dag.names),
            "delta": [int(x) for x in dag.delta], "transient": [int(x) for x in dag.transient],
            "edges": [[int(a), int(b)] for a, b in e.tolist()]}


def make_certificate(model, order, bound) -> dict:
    """Certificate of ``order`` on ``model`` (a :class:`SignedDAG` or a :class:`TensorGraph`).

    ``order`` is a full node order of the DAG, or an op order when ``model`` is a tensor
    graph (it is completed with the release nodes of :func:`graph_to_dag`). ``bound`` is a
    :class:`~memopt.bounds.trap.Bound` computed on the same DAG; its witness must be one of
    the certifiable kinds (the tensor-graph op footprint is dominated by the forward trap:
    certify that instead).
    """
    if isinstance(model, TensorGraph):
        gd: GraphDAG = graph_to_dag(model)
        dag = gd.dag
        full = dag_order_from_op_order(gd, np.asarray(order, np.int64))
    elif isinstance(model, SignedDAG):
        dag = model
        full = np.asarray(order, np.int64)
    else:
        raise CertificateError(f"cannot certify a {type(model).__name__}: expected a SignedDAG or TensorGraph")
    witness = bound.witness if hasattr(bound, "witness") else bound["witness"]
    value = int(bound.value if hasattr(bound, "value") else bound["value"])
    name = bound.name if hasattr(bound, "name") else bound.get("name", "")
    if not isinstance(witness, dict) or witness.get("kind") not in CERTIFIABLE:
        kind = witness.get("kind") if isinstance(witness, dict) else witness
        raise CertificateError(f"bound {name!r} has a witness of kind {kind!r}, which a certificate cannot carry; "
                               f"certifiable kinds: {', '.join(CERTIFIABLE)}")
    peak = dag_peak(dag, full)  # validates the order
    return {
        "format": FORMAT,
        "version": VERSION,
        "dag": dag_to_doc(dag),
        "plan": {"order": [int(v) for v in full]},
        "peak": int(peak),
        "bound": {"name": name, "value": value, "witness": witness},
        "certified": bool(value == peak),
    }


def certify(model, order, *, time_limit: float = 10.0) -> dict:
    """Certificate of ``order`` with the strongest bound found within ``time_limit``.

    Runs :func:`memopt.bounds.trap.best_bound` with the order's peak as target (it stops as
    soon as the bound meets the peak: the order is then certified optimal).
    """
    from memopt.bounds.trap import best_bound

    if isinstance(model, TensorGraph):
        gd = graph_to_dag(model)
        dag, full = gd.dag, dag_order_from_op_order(gd, np.asarray(order, np.int64))
    elif isinstance(model, SignedDAG):
        dag, full = model, np.asarray(order, np.int64)
    else:
        raise CertificateError(f"cannot certify a {type(model).__name__}: expected a SignedDAG or TensorGraph")
    bound = best_bound(dag, time_limit=time_limit, target=dag_peak(dag, full))
    return make_certificate(dag, full, bound)


def save_certificate(cert: dict, path: str | os.PathLike) -> None:
    with open(path, "w") as fh:
        json.dump(cert, fh, separators=(",", ":"))
        fh.write("\n")


def load_certificate(path: str | os.PathLike) -> dict:
    """Read a certificate JSON file (not checked: see :func:`memopt.bounds.checker.verify_certificate`)."""
    from memopt.errors import FormatError

    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise FormatError(f"{path}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
