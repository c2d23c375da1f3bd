"""Exact minimum-peak order of a signed DAG with a CP-SAT model (OR-Tools).

Model (``docs/design.md``, signed DAG). Releases run as soon as they are ready, so only the order of the
allocating nodes ``A`` is decided:

* ``pos[v]`` for ``v`` in ``A``, all different, ``pos[u] < pos[v]`` along the edges of the
  order that ``A`` inherits from the DAG (paths through releases included);
* an order literal ``b[u, v]`` ("``u`` runs before ``v``") for every *incomparable* pair of
  allocating nodes, tied to the positions by two half-reified inequalities; pairs ordered
  by reachability are constants, never variables;
* for a release ``r`` and an allocating ``v`` incomparable with it, a literal ``c[r, v]``
  ("``r`` has run when ``v`` starts") with ``c[r, v] <= [p before v]`` for every
  predecessor ``p`` of ``r`` — ``r`` can only have run if all its predecessors have, and
  since ``delta[r] <= 0`` the minimisation sets it whenever it may, which is what running
  releases early does;
* the memory while ``v`` runs, ``base + delta[v] + transient[v] + sum_u delta[u] [u before v]
  + sum_r delta[r] c[r, v]``, is at most ``peak``; minimise ``peak`` (at least ``base``).

O(|A|^2 + |R| |A|) literals: meant for a few hundred nodes. Values are divided by the gcd
of all deltas to keep coefficients small. The model is hinted with an incumbent order and
bounded by a known lower bound; :func:`cpsat_peak_at_most` is the decision version
("is there an order with peak <= B?"), whose infeasibility for ``B = incumbent - 1``
certifies the incumbent optimal.

Example
-------
>>> from memopt.core.signed_dag import SignedDAG
>>> d = SignedDAG.build(["a", "b", "c", "free_a"], [4, 3, 2, -4], edges=[(0, 3), (1, 2), (3, 2)])
>>> solve_cpsat(d, time_limit=5).peak
5
"""

from __future__ import annotations

import time

import numpy as np

from memopt.clock import solve_by
from memopt.core.signed_dag import SignedDAG, complete_order, dag_peak, validate_node_order
from memopt.schedule.ordering_model import (MAX_LITERALS, OrderingStructure, ordering_structure,
                                            trivial_result)
from memopt.schedule.result import ExactResult


class _BuildTimeout(Exception):
    """The time limit ran out while the model was being built."""


def _build(dag: SignedDAG, st: OrderingStructure, *, lower: int, upper: int | None, minimise: bool, hint_order=None,
           deadline: float = float("inf")):
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    A, R, sc = st.alloc, st.reach, st.scale
    na = A.shape[0]
    delta = dag.delta.astype(np.int64) // sc
    trans = dag.transient.astype(np.int64) // sc
    base = int(dag.base) // sc
    pos = [m.new_int_var(0, max(na - 1, 0), f"pos{int(v)}") for v in A]
    if na > 1:
        m.add_all_different(pos)
    for j, ps in enumerate(st.alloc_parents):
        for i in ps:
            m.add(pos[i] < pos[j])
    # before[i][j]: literal / constant "A[i] runs before A[j]"
    lits: dict = {}
    for i in range(na):
        if time.perf_counter() > deadline:
            raise _BuildTimeout
        u = int(A[i])
        for j in range(i + 1, na):
            v = int(A[j])
            if R[u, v] or R[v, u]:
                continue
            b = m.new_bool_var(f"b{u}_{v}")
            m.add(pos[i] < pos[j]).only_enforce_if(b)
            m.add(pos[i] > pos[j]).only_enforce_if(b.negated())
            lits[(i, j)] = b

    def before(i: int, j: int):
        """True, False or a literal: does alloc slot i run before alloc slot j."""
        u, v = int(A[i]), int(A[j])
        if R[u, v]:
            return True
        if R[v, u] or i == j:
            return False
        return lits[(i, j)] if i < j else lits[(j, i)].negated()

    slot = np.full(dag.n, -1, np.int64)
    slot[A] = np.arange(na)
    is_rel = dag.is_release
    # every upper limit on the level uses an integer peak variable
    most = base + int(np.maximum(delta, 0).sum()) + int(trans.max(initial=0))  # no order exceeds this
    hi_val = int(upper) // sc if upper is not None else most
    lo_val = max(base, -(-int(lower) // sc))  # ceil: the peak is a multiple of sc
    if lo_val > hi_val:
        return None
    peak = m.new_int_var(lo_val, hi_val, "peak")
    topo_rels = [int(r) for r in dag.topological_order() if is_rel[int(r)]]
    c_hint_src = {}
    for j in range(na):
        if time.perf_counter() > deadline:
            raise _BuildTimeout
        v = int(A[j])
        terms, coefs = [], []
        const = base + int(delta[v]) + int(trans[v])
        for i in range(na):
            if i == j or delta[A[i]] == 0:
                continue
            b = before(i, j)
            if b is True:
                const += int(delta[A[i]])
            elif b is not False:
                terms.append(b)
                coefs.append(int(delta[A[i]]))
        # releases (all, in topological order, so that release predecessors are known)
        rel_state: dict = {}
        for r in topo_rels:
            if R[v, r]:
                rel_state[r] = False
                continue
            if R[r, v]:
                rel_state[r] = True
                if delta[r]:
                    const += int(delta[r])
                continue
            conds = []
            dead = False
            for p in dag.pred(r):
                p = int(p)
                if is_rel[p]:
                    s = rel_state[p]
                else:
                    s = before(int(slot[p]), j)
                if s is False:
                    dead = True
                    break
                if s is not True:
                    conds.append(s)
            if dead:
                rel_state[r] = False
                continue
            if not conds:
                rel_state[r] = True
                if delta[r]:
                    const += int(delta[r])
                continue
            c = m.new_bool_var(f"c{r}_{v}")
            for s in conds:
                m.add_implication(c, s)
            rel_state[r] = c
            c_hint_src[(r, j)] = c
            if delta[r]:
                terms.append(c)
                coefs.append(int(delta[r]))
        if terms:
            m.add(cp_model.LinearExpr.weighted_sum(terms, coefs) + const <= peak)
        else:
            m.add(peak >= const)
    if minimise:
        m.minimize(peak)
    if hint_order is not None:
        order = np.asarray(hint_order, np.int64)
        where = np.empty(dag.n, np.int64)
        where[order] = np.arange(order.shape[0])
        arank = np.argsort(np.argsort(where[A]))
        for j in range(na):
            m.add_hint(pos[j], int(arank[j]))
        for (i, j), b in lits.items():
            m.add_hint(b, bool(where[A[i]] < where[A[j]]))
        for (r, j), c in c_hint_src.items():
            m.add_hint(c, bool(where[r] < where[A[j]]))
        m.add_hint(peak, min(hi_val, max(lo_val, dag_peak(dag, order, validate=False) // sc)))
    return m, pos, peak


def _solver(num_workers: int, seed: int):
    """A CP-SAT solver; its time comes from :func:`memopt.clock.solve_by`."""
    from ortools.sat.python import cp_model

    s = cp_model.CpSolver()
    s.parameters.num_workers = int(num_workers)
    s.parameters.random_seed = int(seed)
    s.parameters.log_search_progress = False
    return s


def _order_from_positions(dag: SignedDAG, st: OrderingStructure, solver, pos) -> np.ndarray:
    p = np.array([solver.value(x) for x in pos], np.int64)
    alloc_order = st.alloc[np.argsort(p, kind="stable")]
    return complete_order(dag, alloc_order)


def solve_cpsat(dag: SignedDAG, *, time_limit: float = 10.0, initial_order=None, lower_bound: int | None = None,
                num_workers: int = 2, seed: int = 0) -> ExactResult:
    """Minimum-peak order of ``dag`` by CP-SAT; the best order found, its peak, the proven bound.

    ``initial_order`` (full node order; default: the greedy order) hints the solver and
    caps the peak; ``lower_bound`` (a valid bound) is added as a constraint. Deterministic
    for a fixed ``seed`` and ``num_workers=1``; with several workers the order found may
    vary between runs (the optimal peak does not). Models with more than ``MAX_LITERALS``
    literals are not built: the incumbent comes back with status ``model_too_large``.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    triv = trivial_result(dag, t0, "cpsat")
    if triv is not None:
        return triv
    st = ordering_structure(dag)
    if initial_order is None:
        # an incumbent, so that a valid order comes back even when the time runs out first
        from memopt.schedule.greedy import greedy_dag_order

        initial_order = greedy_dag_order(dag)
    inc_order = np.asarray(initial_order, np.int64)
    validate_node_order(dag, inc_order)
    inc_peak = dag_peak(dag, inc_order)
    lo = max(int(dag.base), int(lower_bound or 0))
    if inc_peak is not None and lo >= inc_peak:
        return ExactResult(inc_order, inc_peak, inc_peak, True, "cpsat", time.perf_counter() - t0, {"status": "bound"})
    stats = {"scale": st.scale, "literals": st.literals()}
    if stats["literals"] > MAX_LITERALS:
        stats["status"] = "model_too_large"
        return ExactResult(inc_order, inc_peak, lo, False, "cpsat", time.perf_counter() - t0, stats)
    try:
        built = _build(dag, st, lower=lo, upper=inc_peak, minimise=True, hint_order=inc_order, deadline=t0 + time_limit)
    except _BuildTimeout:
        stats["status"] = "time_limit_while_building"
        return ExactResult(inc_order, inc_peak, lo, False, "cpsat", time.perf_counter() - t0, stats)
    if built is None:
        return ExactResult(inc_order, inc_peak, inc_peak, True, "cpsat", time.perf_counter() - t0, stats)
    m, pos, peak = built
    stats["variables"] = len(m.proto.variables)
    solver = _solver(num_workers, seed)
    status = solve_by(solver, m, t0 + time_limit)
    stats["status"] = "dropped_at_deadline" if status is None else solver.status_name(status)
    best_order, best = inc_order, inc_peak
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        order = _order_from_positions(dag, st, solver, pos)
        p = dag_peak(dag, order)
        if best is None or p < best:
            best_order, best = order, p
        bound = int(round(solver.best_objective_bound)) * st.scale
        lo = max(lo, bound if status != cp_model.OPTIMAL else min(p, best))
    elif status == cp_model.INFEASIBLE:
        # peak <= incumbent is always feasible; infeasible only if the lower bound exceeds it
        lo = max(lo, best if best is not None else lo)
    if best is None:
        return ExactResult(None, None, lo, False, "cpsat", time.perf_counter() - t0, stats)
    lo = min(lo, best)
    return ExactResult(best_order, int(best), int(lo), bool(lo == best), "cpsat", time.perf_counter() - t0, stats)


def cpsat_peak_at_most(dag: SignedDAG, bound: int, *, time_limit: float = 10.0, num_workers: int = 2,
                       seed: int = 0, hint_order=None):
    """Decision version: ``(True, order)`` if an order has peak ``<= bound``, ``(False, None)``
    if CP-SAT proves none does, ``(None, None)`` when the time limit ran out first (or the
    model is too large to build)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    if bound < dag.base:
        return False, None
    triv = trivial_result(dag, t0, "cpsat")
    if triv is not None:
        return (triv.peak <= bound, triv.order if triv.peak <= bound else None)
    st = ordering_structure(dag)
    if st.literals() > MAX_LITERALS:
        return None, None
    try:
        built = _build(dag, st, lower=int(dag.base), upper=int(bound), minimise=False, hint_order=hint_order,
                       deadline=t0 + time_limit)
    except _BuildTimeout:
        return None, None
    if built is None:
        return False, None
    m, pos, _ = built
    solver = _solver(num_workers, seed)
    status = solve_by(solver, m, t0 + time_limit)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        order = _order_from_positions(dag, st, solver, pos)
        return True, order
    if status == cp_model.INFEASIBLE:
        return False, None
    return None, None


def cpsat_method(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0):
    """Registry method ``cpsat``: :func:`solve_cpsat` warm-started with the incumbent."""
    from memopt.schedule.result import exact_result

    init = problem.to_full(incumbent) if incumbent is not None else None
    return exact_result(problem, solve_cpsat(problem.dag, time_limit=time_limit, initial_order=init,
                                             lower_bound=lower_bound, seed=seed))
