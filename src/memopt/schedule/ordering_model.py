"""What the CP-SAT and SCIP ordering models share: structure, size limits, trivial cases.

Both exact models (:mod:`memopt.schedule.cpsat`, :mod:`memopt.schedule.scip`) decide the
relative order of the *allocating* nodes of a signed DAG and let every release run as early
as it can. They share: the allocating and releasing nodes, the reachability matrix (pairs it
orders are constants, never variables), each allocating node's nearest allocating ancestors
through release-only paths (these precedences imply all others by transitivity), the gcd of
all byte counts (the models work in units of it), the size limit :data:`MAX_LITERALS`, and
the trivial case of a DAG with nothing to order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from memopt.core.signed_dag import SignedDAG, complete_order, dag_peak
from memopt.core.structure import reachability
from memopt.schedule.result import ExactResult

__all__ = ["MAX_LITERALS", "OrderingStructure", "ordering_structure", "trivial_result"]


# models with more order/release literals than this are not built (the build alone would
# take minutes in Python); the solvers then return their incumbent, status "model_too_large"
MAX_LITERALS = 1_500_000


@dataclass
class OrderingStructure:
    """The pieces of an ordering model that do not depend on the solver."""

    alloc: np.ndarray          # allocating node ids
    rels: np.ndarray           # release node ids with delta < 0
    reach: np.ndarray          # reach[u, v]: path u -> v
    alloc_parents: list        # per alloc slot: alloc slots that must directly precede it
    scale: int

    def literals(self) -> int:
        """Number of order and release literals of the model (incomparable pairs)."""
        A, Rl, R = self.alloc, self.rels, self.reach
        sub = R[np.ix_(A, A)]
        pairs = int((~(sub | sub.T)).sum() - A.shape[0]) // 2
        if Rl.size:
            rs = R[np.ix_(Rl, A)] | R[np.ix_(A, Rl)].T
            pairs += int((~rs).sum())
        return pairs


def ordering_structure(dag: SignedDAG) -> OrderingStructure:
    """Allocating nodes, releases, reachability, direct allocating parents and the gcd scale of ``dag``."""
    is_rel = dag.is_release
    alloc = np.flatnonzero(~is_rel)
    rels = np.flatnonzero(is_rel & (dag.delta < 0))
    reach = reachability(dag)
    slot = np.full(dag.n, -1, np.int64)
    slot[alloc] = np.arange(alloc.shape[0])
    # nearest allocating ancestors through release-only paths: these precedences imply all
    # others among A by transitivity of the positions
    parents: list = []
    for v in alloc:
        seen, stack, ps = set(), [int(p) for p in dag.pred(int(v))], set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if is_rel[p]:
                stack.extend(int(q) for q in dag.pred(p))
            else:
                ps.add(int(slot[p]))
        parents.append(sorted(ps))
    vals = [int(x) for x in dag.delta] + [int(x) for x in dag.transient] + [int(dag.base)]
    g = 0
    for x in vals:
        g = math.gcd(g, abs(x))
    return OrderingStructure(alloc, rels, reach, parents, max(g, 1))


def trivial_result(dag: SignedDAG, t0: float, name: str) -> ExactResult | None:
    """The answer without a model when ``dag`` has no allocating node (else ``None``)."""
    if np.count_nonzero(~dag.is_release) == 0:
        order = complete_order(dag, [])
        p = dag_peak(dag, order)
        return ExactResult(order, p, p, True, name, time.perf_counter() - t0, {})
    return None
