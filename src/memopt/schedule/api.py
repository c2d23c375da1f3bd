"""``memopt.schedule``: one call from a graph to a verified plan with its bound and status.

The ``auto`` method runs, within one time limit:

1. the named baselines (the input order; Inductor's ``lpmf``, ``bfs``, ``dfs`` and its
   best-of selection) and the algorithms that are optimal on their class when the graph is
   in it (Liu's algorithm for trees, Kayaaslan et al. for series-parallel graphs);
2. the greedy list scheduler and the local search, seeded with the best order so far;
3. the lower bounds (simple bounds, forward and reverse trap bounds; the pair trap bound
   when a gap remains);
4. the exact ideal-lattice search when a gap still remains, warm-started with the
   incumbent and the best bound.

Whatever wins is re-checked by the independent certificate checker before it is returned,
so the reported peak is never worse than any baseline's and never unverified. Status:
``certified`` (a lower bound with a checkable witness equals the peak), ``optimal`` (an
exact solver proved it), ``feasible`` (the gap stays open).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from memopt._progress import Progress
from memopt.core import (Program, SignedDAG, TensorGraph, dag_order_from_op_order, dag_peak, graph_to_dag,
                         op_order_from_dag_order, peak, validate_node_order, validate_order)
from memopt.errors import CertificateError, MemoptError, ScheduleError

BASELINES = ("input", "lpmf", "bfs", "dfs", "inductor")
METHODS = ("auto", "exact", "input", "lpmf", "bfs", "dfs", "inductor", "greedy", "local-search",
           "liu", "series-parallel", "ideal-search", "cpsat", "scip")


@dataclass(frozen=True)
class ScheduleResult:
    """A verified plan: ``order`` (op ids of a tensor graph, statement ids of a program, node
    ids of a signed DAG), its exact ``peak``, a proven ``lower_bound`` and the ``status``."""

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


class _Model:
    """The three models behind one interface: orders in the model's own ids, a signed DAG."""

    def __init__(self, model):
        self.model = model
        if isinstance(model, TensorGraph):
            self.graph, self.gd = model, graph_to_dag(model)
            self.dag = self.gd.dag
        elif isinstance(model, Program):
            self.graph, self.gd, self.dag = None, None, model.to_dag()
        elif isinstance(model, SignedDAG):
            self.graph, self.gd, self.dag = None, None, model
        else:
            raise MemoptError(f"cannot schedule a {type(model).__name__}: expected a TensorGraph, Program or SignedDAG")

    def peak(self, order) -> int:
        if self.graph is not None:
            return peak(self.graph, order)
        return dag_peak(self.dag, order)

    def validate(self, order) -> None:
        if self.graph is not None:
            validate_order(self.graph, order)
        else:
            validate_node_order(self.dag, order)

    def to_full(self, order) -> np.ndarray:
        """Full signed-DAG node order of a model order."""
        order = np.asarray(order, np.int64)
        return dag_order_from_op_order(self.gd, order) if self.gd is not None else order

    def from_full(self, full) -> np.ndarray:
        full = np.asarray(full, np.int64)
        return op_order_from_dag_order(self.gd, full) if self.gd is not None else full

    def default_order(self) -> np.ndarray:
        return (self.graph.topological_order() if self.graph is not None
                else np.arange(self.dag.n, dtype=np.int64) if isinstance(self.model, Program)
                else self.dag.topological_order())


def _baseline_orders(m: _Model, input_order) -> dict[str, Callable[[], np.ndarray]]:
    """Named baselines: the input order and, on tensor graphs, Inductor's heuristics."""
    out: dict[str, Callable[[], np.ndarray]] = {
        "input": lambda: np.asarray(input_order if input_order is not None else m.default_order(), np.int64)}
    if m.graph is not None:
        from memopt.schedule import inductor

        base = out["input"]
        out["lpmf"] = lambda: inductor.lpmf_order(m.graph, base())
        out["bfs"] = lambda: inductor.bfs_order(m.graph, base())
        out["dfs"] = lambda: inductor.dfs_order(m.graph, base())
        out["inductor"] = lambda: inductor.inductor_best_order(m.graph, base())
    return out


def _class_orders(m: _Model) -> dict[str, Callable[[], np.ndarray | None]]:
    """Algorithms optimal on a graph class; each returns None when the graph is not in it."""
    if m.graph is None:
        return {}
    from memopt.schedule import series_parallel, trees

    def liu():
        try:
            return trees.liu_tree_order(m.graph)
        except ScheduleError:
            return None

    def sp():
        try:
            return series_parallel.series_parallel_order(m.graph)
        except ScheduleError:
            return None

    return {"liu": liu, "series-parallel": sp}


def compute_bounds(model, *, time_limit: float = 10.0, target: int | None = None, pair: bool = True) -> dict:
    """Every lower bound memopt has, by name (bytes). The pair trap runs only if it can help."""
    return {b.name: b.value for b in _bounds(_Model(_unwrap(model)), time_limit=time_limit, target=target, pair=pair)}


def _trap_bounds(m: _Model, *, time_limit: float, reverse: bool) -> list:
    """The simple bounds and the forward trap (and, as a cross-check, the reverse trap, which
    equals it node by node: proofs/trap_bounds.md section 2)."""
    from memopt.bounds import trap

    t0 = time.perf_counter()
    out = list(trap.simple_bounds(m.graph)) if m.graph is not None else []
    out += list(trap.simple_dag_bounds(m.dag))
    out.append(trap.forward_trap_bound(m.dag, time_limit=time_limit))
    if reverse:
        out.append(trap.reverse_trap_bound(m.dag, time_limit=max(0.0, time_limit - (time.perf_counter() - t0))))
    return out


def _bounds(m: _Model, *, time_limit: float, target: int | None, pair: bool) -> list:
    from memopt.bounds import trap

    t0 = time.perf_counter()
    out = _trap_bounds(m, time_limit=time_limit / 2, reverse=True)
    best = max(b.value for b in out)
    if pair and (target is None or best < target):
        remaining = max(0.0, time_limit - (time.perf_counter() - t0))
        if remaining > 0:
            out.append(trap.pair_trap_bound(m.dag, time_limit=remaining, target=target))
    return out


def _unwrap(model):
    from memopt.io.instance import Instance

    if isinstance(model, Instance):
        return model.graph if model.graph is not None else model.program
    return model


def schedule(model, method: str = "auto", time_limit: float = 10.0, *, input_order=None, seed: int = 0,
             progress: bool = False) -> ScheduleResult:
    """Schedule a :class:`TensorGraph`, :class:`Program` or :class:`SignedDAG` (or a loaded
    :class:`~memopt.io.Instance`) for the lowest peak memory.

    ``method`` is ``auto`` (everything below, best wins, then bounds and exact search),
    ``exact`` (the same with the whole budget given to proving optimality), a baseline name
    (``input``, ``lpmf``, ``bfs``, ``dfs``, ``inductor``), ``greedy``, ``local-search``,
    ``liu``, ``series-parallel``, or an exact solver (``ideal-search``, ``cpsat``, ``scip``).
    Returns a :class:`ScheduleResult` verified by the independent checker.

    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> r = schedule(g, time_limit=1)
    >>> (r.peak, r.lower_bound, r.status)
    (6, 6, 'certified')
    """
    from memopt.io.instance import Instance

    if isinstance(model, Instance):
        if input_order is None:
            input_order = model.input_order
        model = _unwrap(model)
    if method not in METHODS:
        raise MemoptError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not (time_limit >= 0):
        raise MemoptError(f"time limit must be >= 0 seconds, got {time_limit!r}")
    from memopt.schedule._warmup import warm_up

    warm_up()  # compile the kernels before the clock starts: results must not depend on numba's cache
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit)
    m = _Model(model)
    if input_order is not None:
        input_order = np.asarray(input_order, np.int64)
        m.validate(input_order)

    candidates: dict[str, tuple[np.ndarray, int]] = {}
    baselines: dict[str, int] = {}
    stats: dict = {}

    def consider(name, order):
        order = np.asarray(order, np.int64)
        candidates[name] = (order, m.peak(order))

    def best():
        name = min(candidates, key=lambda k: candidates[k][1])  # first found wins a tie
        return name, candidates[name][0], candidates[name][1]

    with Progress(None, f"memopt {method}", enabled=progress) as bar:
        base_fns = _baseline_orders(m, input_order)
        if method in ("auto", "exact") or method in base_fns:
            for name, fn in base_fns.items():
                if method not in ("auto", "exact") and name != method and name != "input":
                    continue
                bar.set_status(f"baseline {name}")
                order = fn()
                consider(name, order)
                baselines[name] = candidates[name][1]
        class_fns = _class_orders(m)
        if method in ("auto", "exact") or method in class_fns:
            for name, fn in class_fns.items():
                if method not in ("auto", "exact", name):
                    continue
                bar.set_status(f"{name}")
                order = fn()
                if order is not None:
                    consider(name, order)
                elif name == method:
                    raise ScheduleError(f"method {method!r} does not apply: the graph is not in its class")
        if method in ("auto", "exact", "greedy"):
            from memopt.schedule.greedy import greedy_dag_order

            bar.set_status("greedy")
            # the input order is greedy's reference: it never returns anything worse than it
            ref = m.to_full(input_order) if input_order is not None else None
            consider("greedy", m.from_full(greedy_dag_order(m.dag, reference=ref)))

        from memopt.bounds import trap

        def remaining():
            return max(0.0, deadline - time.perf_counter())

        # every method reports its lower bound; a huge graph's cuts get a share of the time
        bar.set_status("trap bounds")
        bound_list = _trap_bounds(m, time_limit=remaining() * 0.3, reverse=False)
        lb = max([int(m.dag.base)] + [b.value for b in bound_list])

        if method in ("auto", "exact", "local-search"):
            from memopt.schedule.local_search import local_search_dag

            if not candidates:
                from memopt.schedule.greedy import greedy_dag_order

                consider("greedy", m.from_full(greedy_dag_order(m.dag)))
            _, order, pk = best()
            if pk > lb:
                # a short first pass: on small graphs the exact search closes the gap faster
                share = remaining() * {"auto": 0.1, "exact": 0.05}.get(method, 1.0)
                bar.set_status(f"local search (gap {pk - lb})")
                full, lpk = local_search_dag(m.dag, m.to_full(order), time_limit=share, seed=seed, lower_bound=lb)
                consider("local-search", m.from_full(full))

        if method in ("auto", "exact"):
            _, _, pk = best()
            if pk > lb and remaining() > 0:
                bar.set_status(f"pair trap bound (gap {pk - lb})")
                pb = trap.pair_trap_bound(m.dag, time_limit=remaining() * 0.15, target=pk)
                bound_list.append(pb)
                lb = max(lb, pb.value)

        proven_lb = None
        if method in ("auto", "exact", "ideal-search", "cpsat", "scip"):
            _, order, pk = best() if candidates else (None, None, None)
            if pk is None or pk > lb:
                solver = {"cpsat": "cpsat", "scip": "scip"}.get(method, "ideal-search")
                bar.set_status(f"exact search {solver} (gap {(pk or lb) - lb})")
                # auto keeps half of what is left for a second local-search pass if the gap stays
                res = _exact(solver, m.dag, time_limit=remaining() * (0.5 if method == "auto" else 1.0),
                             initial=m.to_full(order) if order is not None else None, lower_bound=lb)
                stats["exact"] = {"solver": res.solver, "optimal": res.optimal, "seconds": round(res.seconds, 4),
                                  **{k: v for k, v in res.stats.items() if isinstance(v, (int, float, bool, str))}}
                if res.order is not None:
                    consider(solver, m.from_full(res.order))
                if res.lower_bound > lb:
                    proven_lb = lb = int(res.lower_bound)

        if method == "auto":
            _, order, pk = best()
            if pk > lb and remaining() > 0:
                from memopt.schedule.local_search import local_search_dag

                bar.set_status(f"local search (gap {pk - lb})")
                full, _ = local_search_dag(m.dag, m.to_full(order), time_limit=remaining(), seed=seed + 1,
                                           lower_bound=lb)
                consider("local-search", m.from_full(full))
        if method in candidates:
            # a named method returns its own order, even where a baseline computed alongside is better
            name, (order, pk) = method, candidates[method]
        else:
            name, order, pk = best()

    bounds = {}
    for b in bound_list:
        bounds[b.name] = max(bounds.get(b.name, 0), int(b.value))
    from memopt.bounds.certificate import CERTIFIABLE

    # the strongest bound whose witness a certificate can carry (the trap cuts dominate the rest)
    certifiable = [b for b in bound_list if b.witness.get("kind") in CERTIFIABLE]
    witnessed = max(certifiable, key=lambda b: b.value) if certifiable else None
    if proven_lb is not None:
        bounds["exact_search"] = proven_lb
    lower = max([int(m.dag.base)] + list(bounds.values()))
    if lower > pk:
        # the best order is here too, so no sound bound can exceed its peak: this is a bug
        raise CertificateError(f"internal error: a lower bound ({lower}) exceeds a verified peak ({pk})")
    if witnessed is not None and witnessed.value >= pk:
        status = "certified"
    elif lower >= pk:
        status = "optimal"
    else:
        status = "feasible"
    cert, verified = _verify(m, order, pk, witnessed)
    return ScheduleResult(order=np.asarray(order, np.int64), peak=int(pk), lower_bound=int(lower), status=status,
                          method=name, seconds=time.perf_counter() - t0, baselines=baselines, bounds=bounds,
                          certificate=cert, verified=verified, stats=stats)


def _exact(solver: str, dag: SignedDAG, *, time_limit: float, initial, lower_bound: int):
    if solver == "cpsat":
        from memopt.schedule.cpsat import solve_cpsat as fn
    elif solver == "scip":
        from memopt.schedule.scip import solve_scip as fn
    else:
        from memopt.schedule.ideal_search import ideal_search as fn
    return fn(dag, time_limit=time_limit, initial_order=initial, lower_bound=lower_bound)


def _verify(m: _Model, order, pk: int, bound) -> tuple[dict | None, bool]:
    """Certificate of the plan and its strongest witnessed bound, checked independently."""
    from memopt.bounds.certificate import make_certificate
    from memopt.bounds.checker import verify_certificate

    full = m.to_full(order)
    cert = make_certificate(m.dag, full, bound) if bound is not None else None
    if cert is None:
        return None, False
    report = verify_certificate(cert)
    if not report.peak_ok or report.peak != pk:
        raise CertificateError(f"internal error: the independent checker measured peak {report.peak}, "
                               f"the scheduler claimed {pk}")
    if not report.bound_ok:
        raise CertificateError("internal error: the lower bound's witness failed independent verification")
    return cert, True


def schedule_instance(inst, *, method: str = "auto", time_limit: float = 10.0, seed: int = 0,
                      progress: bool = False) -> ScheduleResult:
    """:func:`schedule` on a loaded :class:`~memopt.io.Instance` (its input order is the baseline)."""
    return schedule(inst, method=method, time_limit=time_limit, input_order=inst.input_order, seed=seed,
                    progress=progress)


def verify_plan_document(inst, doc: dict, where: str = "<plan>") -> dict:
    """Check a plan or certificate JSON against an instance with the independent checker."""
    from memopt.bounds.checker import verify_certificate
    from memopt.io.formats import PLAN_FORMAT, plan_order

    if isinstance(doc, dict) and doc.get("format") == "memopt-certificate":
        report = verify_certificate(doc)
        m = _Model(_unwrap(inst))
        from memopt.bounds.certificate import dag_to_doc

        same = doc.get("dag") == dag_to_doc(m.dag)
        ok = bool(report.peak_ok and report.bound_ok and same)
        return {"ok": ok, "kind": "certificate", "same_graph": same, "peak": report.peak,
                "lower_bound": report.bound, "certified": bool(report.certified and ok)}
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise CertificateError(f"{where}: neither a memopt-plan nor a memopt-certificate file")
    order, _ = plan_order(inst, doc, where)
    m = _Model(_unwrap(inst))
    m.validate(order)
    full = m.to_full(order)
    from memopt.bounds.certificate import make_certificate
    from memopt.bounds.trap import simple_dag_bounds

    # the checker's own evaluation loop, through a certificate carrying the trivial base bound
    base_bound = next(b for b in simple_dag_bounds(m.dag) if b.name == "base_memory")
    report = verify_certificate(make_certificate(m.dag, full, base_bound))
    if not report.peak_ok:
        raise CertificateError(f"{where}: " + "; ".join(report.errors))
    measured = int(report.peak)
    claimed = doc.get("peak")
    for key in ("peak", "lower_bound"):
        val = doc.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int)):
            raise CertificateError(f"{where}: field {key!r} must be a whole number of bytes, got {val!r}")
    if claimed is not None and claimed != measured:
        raise CertificateError(f"{where}: the plan claims peak {claimed}, but its order has peak {measured}")
    claimed_lb = doc.get("lower_bound")
    if claimed_lb is not None and claimed_lb > measured:
        raise CertificateError(f"{where}: the plan claims lower bound {claimed_lb} above its own peak {measured}")
    if doc.get("status") in ("certified", "optimal") and claimed_lb != measured:
        raise CertificateError(f"{where}: the plan claims status {doc.get('status')!r} but its lower bound "
                               f"{claimed_lb} does not equal its peak {measured}")
    return {"ok": True, "kind": "plan", "peak": measured, "claimed_peak": claimed,
            "lower_bound": doc.get("lower_bound"), "status": doc.get("status"),
            "note": "a plan carries no witness for its lower bound; verify its certificate to check that"}
