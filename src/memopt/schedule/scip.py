"""Exact minimum-peak order of a signed DAG with a MIP in SCIP (pyscipopt): a cross-check.

The same decisions as :mod:`memopt.schedule.cpsat`, written as a mixed-integer program so
that an independent solver (branch and cut on an LP relaxation instead of clause learning)
confirms the optimal peaks (up to SCIP's floating-point tolerances: its orders are re-evaluated
exactly, its bounds are not). Only allocating nodes ``A`` are ordered (releases run early):

* ``x[u, v]`` binary, "``u`` runs before ``v``", for every incomparable pair of ``A``;
  comparable pairs are constants. The order is made transitive either by the linear
  ordering inequalities ``x[u, v] + x[v, w] - x[u, w] <= 1`` (for at most
  ``TRANSITIVITY_LIMIT`` allocating nodes: a tight relaxation) or, for larger DAGs, by
  positions ``pos[u] + 1 <= pos[v] + |A| (1 - x[u, v])`` (big-M, weaker but O(|A|^2));
* ``y[r, v] <= [p before v]`` for a release ``r``, every predecessor ``p`` of ``r`` and an
  allocating ``v`` incomparable with ``r``: ``r`` has run when ``v`` starts;
* ``base + delta[v] + transient[v] + sum delta[u] x[u, v] + sum delta[r] y[r, v] <= peak``;
  minimise ``peak``.

SCIP is silenced (``hideOutput``) and bounded by ``limits/time``.

Example
-------
>>> from memopt.core.signed_dag import SignedDAG
>>> d = SignedDAG.build(["a", "b", "c", "free_a"], [4, 3, 2, -4], edges=[(0, 3), (1, 2), (3, 2)])
>>> solve_scip(d, time_limit=5).peak
5
"""

from __future__ import annotations

import time

import numpy as np

from memopt.core.signed_dag import SignedDAG, complete_order, dag_peak, validate_node_order
from memopt.schedule.ordering_model import MAX_LITERALS, ordering_structure, trivial_result
from memopt.schedule.result import ExactResult

TRANSITIVITY_LIMIT = 30


def solve_scip(dag: SignedDAG, *, time_limit: float = 10.0, initial_order=None, lower_bound: int | None = None,
               seed: int = 0) -> ExactResult:
    """Minimum-peak order of ``dag`` by SCIP; the best order found, its peak, the proven bound.

    ``initial_order`` (full node order; default: the greedy order) is given to SCIP as a
    start solution and caps the peak; ``lower_bound`` (a valid bound) is added as a
    constraint. Models with more than ``MAX_LITERALS`` literals are not built, and the
    build itself stops at the time limit: the incumbent then comes back, not optimal.
    """
    from pyscipopt import Model, quicksum

    t0 = time.perf_counter()
    triv = trivial_result(dag, t0, "scip")
    if triv is not None:
        return triv
    st = ordering_structure(dag)
    A, R, sc = st.alloc, st.reach, st.scale
    na = A.shape[0]
    delta = dag.delta.astype(np.int64) // sc
    trans = dag.transient.astype(np.int64) // sc
    base = int(dag.base) // sc
    if initial_order is None:
        # an incumbent, so that a valid order comes back even when the time runs out first
        from memopt.schedule.greedy import greedy_dag_order

        initial_order = greedy_dag_order(dag)
    inc_order = np.asarray(initial_order, np.int64)
    validate_node_order(dag, inc_order)
    inc_peak = dag_peak(dag, inc_order)
    lo = max(int(dag.base), int(lower_bound or 0))
    if lo >= inc_peak:
        return ExactResult(inc_order, inc_peak, inc_peak, True, "scip", time.perf_counter() - t0, {"status": "bound"})

    stats = {"scale": sc, "literals": st.literals()}
    if stats["literals"] > MAX_LITERALS:
        stats["status"] = "model_too_large"
        return ExactResult(inc_order, inc_peak, lo, False, "scip", time.perf_counter() - t0, stats)
    deadline = t0 + float(time_limit)

    m = Model("min_peak")
    m.hideOutput()
    m.setParam("limits/time", max(0.01, float(time_limit) - (time.perf_counter() - t0)))
    m.setParam("randomization/randomseedshift", int(seed))
    m.setParam("parallel/maxnthreads", 1)

    def out_of_time() -> ExactResult:
        m.freeProb()
        stats["status"] = "time_limit_while_building"
        return ExactResult(inc_order, inc_peak, lo, False, "scip", time.perf_counter() - t0, stats)

    x: dict = {}
    for i in range(na):
        if time.perf_counter() > deadline:
            return out_of_time()
        for j in range(i + 1, na):
            u, v = int(A[i]), int(A[j])
            if not (R[u, v] or R[v, u]):
                x[(i, j)] = m.addVar(vtype="B", name=f"x{u}_{v}")

    def before(i: int, j: int):
        """1, 0 or a linear expression: does alloc slot i run before alloc slot j."""
        u, v = int(A[i]), int(A[j])
        if R[u, v]:
            return 1
        if R[v, u] or i == j:
            return 0
        return x[(i, j)] if i < j else 1 - x[(j, i)]

    use_transitivity = na <= TRANSITIVITY_LIMIT
    if use_transitivity:
        for i in range(na):
            for j in range(na):
                if j == i:
                    continue
                for k in range(na):
                    if k == i or k == j:
                        continue
                    a, b, c = before(i, j), before(j, k), before(i, k)
                    if all(isinstance(t, int) for t in (a, b, c)):
                        continue
                    m.addCons(a + b - c <= 1)
        pos = None
    else:
        pos = [m.addVar(vtype="C", lb=0, ub=na - 1, name=f"pos{int(v)}") for v in A]
        for j, ps in enumerate(st.alloc_parents):
            for i in ps:
                m.addCons(pos[i] + 1 <= pos[j])
        for (i, j), var in x.items():
            if j == i + 1 and time.perf_counter() > deadline:
                return out_of_time()
            m.addCons(pos[i] + 1 <= pos[j] + na * (1 - var))
            m.addCons(pos[j] + 1 <= pos[i] + na * var)

    hi_val = inc_peak // sc
    peak = m.addVar(vtype="C", lb=max(base, -(-lo // sc)), ub=hi_val, name="peak")
    slot = np.full(dag.n, -1, np.int64)
    slot[A] = np.arange(na)
    is_rel = dag.is_release
    topo_rels = [int(r) for r in dag.topological_order() if is_rel[int(r)]]
    y: dict = {}
    for j in range(na):
        if time.perf_counter() > deadline:
            return out_of_time()
        v = int(A[j])
        const = base + int(delta[v]) + int(trans[v])
        expr = []
        for i in range(na):
            if i == j or delta[A[i]] == 0:
                continue
            b = before(i, j)
            if isinstance(b, int):
                const += int(delta[A[i]]) * b
            else:
                expr.append(int(delta[A[i]]) * b)
        state: dict = {}
        for r in topo_rels:
            if R[v, r]:
                state[r] = 0
                continue
            conds, dead = [], False
            for p in dag.pred(r):
                p = int(p)
                s = state[p] if is_rel[p] else before(int(slot[p]), j)
                if isinstance(s, int) and s == 0:
                    dead = True
                    break
                if not isinstance(s, int):
                    conds.append(s)
            if dead:
                state[r] = 0
                continue
            if not conds:
                state[r] = 1
                const += int(delta[r])
                continue
            yv = m.addVar(vtype="B", name=f"y{r}_{v}")
            for s in conds:
                m.addCons(yv <= s)
            state[r] = yv
            y[(r, j)] = yv
            if delta[r]:
                expr.append(int(delta[r]) * yv)
        m.addCons(quicksum(expr) + const <= peak)
    m.setObjective(peak, "minimize")

    if inc_order is not None:
        where = np.empty(dag.n, np.int64)
        where[inc_order] = np.arange(inc_order.shape[0])
        sol = m.createSol()
        for (i, j), var in x.items():
            m.setSolVal(sol, var, float(where[A[i]] < where[A[j]]))
        if pos is not None:
            rank = np.argsort(np.argsort(where[A]))
            for j in range(na):
                m.setSolVal(sol, pos[j], float(rank[j]))
        for (r, j), var in y.items():
            m.setSolVal(sol, var, float(where[r] < where[A[j]]))
        m.setSolVal(sol, peak, float(inc_peak // sc))
        m.addSol(sol, free=True)

    m.setParam("limits/time", max(0.01, deadline - time.perf_counter()))
    m.optimize()
    status = m.getStatus()
    stats.update(status=status, transitivity=use_transitivity)
    best_order, best = inc_order, inc_peak
    if m.getNSols() > 0:
        sol = m.getBestSol()
        # recover the order: count how many allocating nodes run before each one
        score = np.zeros(na, np.int64)
        for i in range(na):
            for j in range(na):
                if i != j:
                    b = before(i, j)
                    val = b if isinstance(b, int) else m.getSolVal(sol, b)
                    score[j] += int(round(val))
        order = complete_order(dag, A[np.argsort(score, kind="stable")])
        p = dag_peak(dag, order)
        if best is None or p < best:
            best_order, best = order, p
    if status == "optimal":
        lo = max(lo, best)
    else:
        dual = m.getDualbound()
        if np.isfinite(dual):
            lo = max(lo, int(np.ceil(dual - 1e-6)) * sc)
    m.freeProb()
    if best is None:
        return ExactResult(None, None, lo, False, "scip", time.perf_counter() - t0, stats)
    lo = min(lo, best)
    return ExactResult(best_order, int(best), int(lo), bool(lo == best), "scip", time.perf_counter() - t0, stats)


def scip_method(problem, *, time_limit: float = 10.0, incumbent=None, lower_bound=None, seed: int = 0):
    """Registry method ``scip``: :func:`solve_scip` warm-started with the incumbent."""
    from memopt.schedule.result import exact_result

    init = problem.to_full(incumbent) if incumbent is not None else None
    return exact_result(problem, solve_scip(problem.dag, time_limit=time_limit, initial_order=init,
                                            lower_bound=lower_bound))
