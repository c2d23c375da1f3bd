"""Independent checker of memopt certificates (``memopt verify``).

Deliberately shares no code with the solvers, the bounds or :mod:`memopt.core.evaluate`:
plain Python over the certificate's own data, no numpy, no max-flow solver. It

1. checks the format header and the DAG data (sizes, ranges, non-negative transients/base);
2. checks that the plan is a linear extension of the DAG (every node once, every edge forward);
3. re-evaluates the plan's peak with its own loop: ``level = base``; for each node
   ``level += delta``; the memory while it runs is ``level + transient``; the peak is the
   maximum of ``base`` and those;
4. rebuilds every witness network from the DAG and the witness's node(s) and forcing, and
   checks the flow: each listed arc (``[tail, head, flow]``; unlisted arcs carry 0) must be an
   arc of that network, its flow non-negative and within capacity (closure arcs are
   unbounded), and flow must be conserved at every inner node; then ``constant + flow
   value`` must equal the claimed value. By weak duality (flow value <= every s-t cut, in particular the minimum
   one, which is finite because the forcing is feasible) the value is a lower bound;
5. reports ``peak_ok``, ``bound_ok`` and ``certified`` (bound == peak).

Every failure is a precise sentence; with ``strict=True`` (the default) they are raised
together as one :class:`~memopt.errors.CertificateError`.

Example
-------
>>> from memopt.core import SignedDAG
>>> from memopt.bounds.trap import forward_trap_bound
>>> from memopt.bounds.certificate import make_certificate
>>> d = SignedDAG.build(["a", "b", "free_a"], [4, 2, -4], edges=[(0, 1), (1, 2)])
>>> verify_certificate(make_certificate(d, [0, 1, 2], forward_trap_bound(d))).certified
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memopt.errors import CertificateError

FORMAT = "memopt-certificate"
SUPPORTED_VERSIONS = (1,)

__all__ = ["VerifyReport", "verify_certificate"]


@dataclass
class VerifyReport:
    """Outcome of :func:`verify_certificate`.

    ``peak``/``bound`` are the values the checker recomputed (``None`` when it could not),
    ``claimed_peak``/``claimed_bound`` those the certificate states.
    """

    peak_ok: bool = False
    bound_ok: bool = False
    certified: bool = False
    peak: int | None = None
    bound: int | None = None
    claimed_peak: int | None = None
    claimed_bound: int | None = None
    bound_name: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.peak_ok and self.bound_ok and not self.errors


class _Fail(Exception):
    """A fatal problem: later checks depend on what failed."""


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise _Fail(f"{what} must be an integer, got {x!r}")
    return x


def _int_list(x, what: str) -> list[int]:
    if not isinstance(x, list):
        raise _Fail(f"{what} must be a list")
    return [_int(v, f"{what}[{k}]") for k, v in enumerate(x)]


class _DAG:
    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise _Fail("field 'dag' must be an object")
        self.names = doc.get("names")
        if not isinstance(self.names, list) or not all(isinstance(s, str) for s in self.names):
            raise _Fail("dag.names must be a list of strings")
        n = self.n = len(self.names)
        self.delta = _int_list(doc.get("delta"), "dag.delta")
        self.transient = _int_list(doc.get("transient"), "dag.transient")
        self.base = _int(doc.get("base"), "dag.base")
        if len(self.delta) != n or len(self.transient) != n:
            raise _Fail(f"dag.delta and dag.transient must have one entry per node ({n})")
        for v, t in enumerate(self.transient):
            if t < 0:
                raise _Fail(f"transient bytes of node {self.label(v)} are negative: {t}")
        if self.base < 0:
            raise _Fail(f"dag.base is negative: {self.base}")
        raw = doc.get("edges")
        if not isinstance(raw, list):
            raise _Fail("dag.edges must be a list of [source, target] pairs")
        edges = set()
        for k, e in enumerate(raw):
            if not isinstance(e, list) or len(e) != 2:
                raise _Fail(f"dag.edges[{k}] must be a pair [source, target]")
            a, b = _int(e[0], f"dag.edges[{k}][0]"), _int(e[1], f"dag.edges[{k}][1]")
            if not (0 <= a < n and 0 <= b < n):
                raise _Fail(f"dag.edges[{k}] = {e} names a node out of range (the DAG has {n} nodes)")
            if a == b:
                raise _Fail(f"dag.edges[{k}]: node {self.label(a)} depends on itself")
            edges.add((a, b))
        self._set_edges(edges)

    def _set_edges(self, edges) -> None:
        n = self.n
        self.edge_set = set(edges)
        self.edges = sorted(self.edge_set)
        self.succ = [[] for _ in range(n)]
        self.pred = [[] for _ in range(n)]
        for a, b in self.edges:
            self.succ[a].append(b)
            self.pred[b].append(a)

    def with_edges(self, extra) -> "_DAG":
        """The same nodes with more edges (derived or hypothesised precedences)."""
        other = object.__new__(_DAG)
        other.names, other.n, other.delta, other.transient, other.base = self.names, self.n, self.delta, self.transient, self.base
        other._set_edges(set(self.edges) | set(extra))
        return other

    def has_cycle(self) -> bool:
        indeg = [len(p) for p in self.pred]
        stack = [v for v in range(self.n) if indeg[v] == 0]
        seen = 0
        while stack:
            v = stack.pop()
            seen += 1
            for s in self.succ[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    stack.append(s)
        return seen < self.n

    def label(self, v: int) -> str:
        return f"{self.names[v]!r} ({v})"

    @staticmethod
    def _reach(start, adj, overlay) -> set[int]:
        seen: set[int] = set()
        stack = list(start)
        while stack:
            x = stack.pop()
            for y in adj[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
            for y in overlay.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return seen

    def ancestors(self, v: int, reverse: bool, extra=()) -> set[int]:
        """Proper ancestors of ``v`` in the (reversed) program, with ``extra`` edges added."""
        overlay: dict[int, list[int]] = {}
        for a, b in extra:
            if reverse:
                overlay.setdefault(a, []).append(b)
            else:
                overlay.setdefault(b, []).append(a)
        return self._reach([v], self.succ if reverse else self.pred, overlay)

    def descendants(self, v: int, reverse: bool, extra=()) -> set[int]:
        overlay: dict[int, list[int]] = {}
        for a, b in extra:
            if reverse:
                overlay.setdefault(b, []).append(a)
            else:
                overlay.setdefault(a, []).append(b)
        return self._reach([v], self.pred if reverse else self.succ, overlay)


def _check_order(dag: _DAG, order) -> list[int]:
    order = _int_list(order, "plan.order")
    n = dag.n
    pos = [-1] * n
    for k, v in enumerate(order):
        if not 0 <= v < n:
            raise _Fail(f"plan.order[{k}] = {v} is not a node id (the DAG has {n} nodes)")
        if pos[v] >= 0:
            raise _Fail(f"plan.order runs node {dag.label(v)} twice (positions {pos[v]} and {k})")
        pos[v] = k
    for v in range(n):
        if pos[v] < 0:
            raise _Fail(f"plan.order misses node {dag.label(v)}")
    for a, b in dag.edges:
        if pos[a] > pos[b]:
            raise _Fail(f"plan.order is not topological: node {dag.label(b)} runs before its predecessor {dag.label(a)}")
    return order


def _plan_peak(dag: _DAG, order: list[int]) -> int:
    level = dag.base
    peak = level
    for v in order:
        level += dag.delta[v]
        running = level + dag.transient[v]
        if running > peak:
            peak = running
    return peak


def _edge(e, n: int, what: str) -> tuple[int, int]:
    if not isinstance(e, list) or len(e) != 2:
        raise _Fail(f"{what} must be a pair [before, after]")
    a, b = _int(e[0], f"{what}[0]"), _int(e[1], f"{what}[1]")
    if not (0 <= a < n and 0 <= b < n) or a == b:
        raise _Fail(f"{what} = {e} must name two distinct nodes in range")
    return a, b


def _check_cut(dag: _DAG, wit, where: str, hypothesis: tuple[int, int] | None = None) -> int:
    """Value proven by a cut witness (raises _Fail with a precise reason).

    A cut may assume an extra edge (``extra_edges``) only where the caller justifies it:
    a refutation step hypothesises the opposite of the precedence it derives.
    """
    if not isinstance(wit, dict) or wit.get("kind") != "cut":
        raise _Fail(f"{where}: expected a witness of kind 'cut'")
    extra = wit.get("extra_edges", [])
    if not isinstance(extra, list):
        raise _Fail(f"{where}: extra_edges must be a list of pairs")
    extra = [_edge(e, dag.n, f"{where}.extra_edges[{k}]") for k, e in enumerate(extra)]
    if extra != ([hypothesis] if hypothesis is not None else []):
        raise _Fail(f"{where}: the cut assumes extra edges {extra} where the argument justifies "
                    f"{[hypothesis] if hypothesis is not None else 'none'}")
    program = wit.get("program", "forward")
    if program not in ("forward", "reverse"):
        raise _Fail(f"{where}: program must be 'forward' or 'reverse', got {program!r}")
    reverse = program == "reverse"
    n = dag.n
    v = _int(wit.get("node"), f"{where}.node")
    if not 0 <= v < n:
        raise _Fail(f"{where}: node {v} is out of range")
    fin = _int_list(wit.get("force_in", []), f"{where}.force_in")
    fout = _int_list(wit.get("force_out", []), f"{where}.force_out")
    for u in fin + fout:
        if not 0 <= u < n:
            raise _Fail(f"{where}: forced node {u} is out of range")
    pin = dag.ancestors(v, reverse, extra)
    for u in fin:
        pin |= dag.ancestors(u, reverse, extra) | {u}
    pout = dag.descendants(v, reverse, extra) | {v}
    for u in fout:
        pout |= dag.descendants(u, reverse, extra) | {u}
    clash = pin & pout
    if clash:
        x = min(clash)
        raise _Fail(f"{where}: the forcing is impossible: node {dag.label(x)} would have to run both before and "
                    f"after node {dag.label(v)}")
    w = [-d for d in dag.delta] if reverse else dag.delta
    S, T = n, n + 1
    extra_set = set(extra)

    def is_free(x: int) -> bool:
        return 0 <= x < n and x not in pin and x not in pout

    def nm(x):
        return "source" if x == S else "sink" if x == T else dag.label(x) if 0 <= x < n else repr(x)

    def is_edge(p: int, x: int) -> bool:   # (p, x) an edge of the (reversed) program
        e = (x, p) if reverse else (p, x)
        return e in dag.edge_set or e in extra_set

    flow = wit.get("flow")
    if not isinstance(flow, list):
        raise _Fail(f"{where}: flow must be a list of [tail, head, flow] arcs")
    balance: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    for k, arc in enumerate(flow):
        if not isinstance(arc, list) or len(arc) != 3:
            raise _Fail(f"{where}.flow[{k}] must be [tail, head, flow]")
        a, b, f = (_int(x, f"{where}.flow[{k}]") for x in arc)
        if (a, b) in seen:
            raise _Fail(f"{where}: arc {nm(a)} -> {nm(b)} is listed twice")
        seen.add((a, b))
        if f < 0:
            raise _Fail(f"{where}: flow on arc {nm(a)} -> {nm(b)} is negative: {f}")
        if a == S and is_free(b) and w[b] < 0:
            cap = -w[b]
        elif b == T and is_free(a) and w[a] > 0:
            cap = w[a]
        elif is_free(a) and is_free(b) and is_edge(b, a):
            cap = None  # closure arc: infinite capacity
        else:
            raise _Fail(f"{where}: {nm(a)} -> {nm(b)} is not an arc of the network of node {dag.label(v)}")
        if cap is not None and f > cap:
            raise _Fail(f"{where}: flow on arc {nm(a)} -> {nm(b)} is {f}, above its capacity {cap}")
        balance[a] = balance.get(a, 0) - f
        balance[b] = balance.get(b, 0) + f
    for x, bal in balance.items():
        if x not in (S, T) and bal != 0:
            raise _Fail(f"{where}: flow is not conserved at node {dag.label(x)} (inflow - outflow = {bal})")
    value = -balance.get(S, 0)
    base = dag.base + (sum(dag.delta) if reverse else 0)
    neg_free = sum(w[x] for x in range(n) if w[x] < 0 and x not in pin and x not in pout)
    const = base + sum(w[x] for x in pin) + neg_free + w[v] + dag.transient[v]
    if reverse:
        const += dag.delta[v]
    total = const + value
    if "value" in wit and _int(wit["value"], f"{where}.value") != total:
        raise _Fail(f"{where}: claims {wit['value']} but its flow proves {total}")
    return total


_CASE_CUTS = {
    # case -> allowed (node, forced-in set, forced-out set) patterns, in terms of u and v
    "u_before_v": (("v", {"u"}, set()), ("u", set(), {"v"})),
    "u_after_v": (("v", set(), {"u"}), ("u", {"v"}, set())),
}


def _check_pair(dag: _DAG, wit, where: str) -> int:
    u = _int(wit.get("u"), f"{where}.u")
    v = _int(wit.get("v"), f"{where}.v")
    if not (0 <= u < dag.n and 0 <= v < dag.n) or u == v:
        raise _Fail(f"{where}: u and v must be two distinct node ids")
    cases = wit.get("cases")
    if not isinstance(cases, list) or sorted(c.get("case") for c in cases if isinstance(c, dict)) != sorted(_CASE_CUTS):
        raise _Fail(f"{where}: cases must be exactly 'u_before_v' and 'u_after_v'")
    ids = {"u": u, "v": v}
    values = []
    for c in cases:
        label = c["case"]
        cut = c.get("cut")
        cw = f"{where}.{label}"
        if not isinstance(cut, dict) or cut.get("program", "forward") != "forward":
            raise _Fail(f"{cw}: the cut must be a forward-program cut")
        node = cut.get("node")
        fin = set(cut.get("force_in", [])) if isinstance(cut.get("force_in", []), list) else None
        fout = set(cut.get("force_out", [])) if isinstance(cut.get("force_out", []), list) else None
        ok = any(node == ids[nd] and fin is not None and fout is not None
                 and fin <= {ids[x] for x in ins} and fout <= {ids[x] for x in outs}
                 for nd, ins, outs in _CASE_CUTS[label])
        if not ok:
            raise _Fail(f"{cw}: the cut (node {node!r}, force_in {cut.get('force_in')!r}, force_out "
                        f"{cut.get('force_out')!r}) is not implied by the case {label} of u={u}, v={v}")
        values.append(_check_cut(dag, cut, cw))
    total = min(values)
    if "value" in wit and _int(wit["value"], f"{where}.value") != total:
        raise _Fail(f"{where}: claims {wit['value']} but its cases prove {total}")
    return total


def _check_refutation(dag: _DAG, wit, where: str) -> int:
    """A refutation of ``peak <= limit``: derived precedences, each justified, then a contradiction.

    Step ``i`` derives ``a -> b`` (``a`` before ``b`` in every schedule within the limit) from a
    cut above the limit on the DAG plus the first ``on <= i`` derived edges plus the opposite
    hypothesis ``b -> a``. The final contradiction is a cut above the limit on the DAG plus
    the first ``on`` derived edges, or a cycle among the original and all derived edges.
    """
    limit = _int(wit.get("limit"), f"{where}.limit")
    steps = wit.get("steps")
    if not isinstance(steps, list):
        raise _Fail(f"{where}.steps must be a list")
    derived: list[tuple[int, int]] = []
    prefix: dict[int, _DAG] = {}   # the DAG with the first `on` derived edges, shared by a round's steps
    for i, st in enumerate(steps):
        sw = f"{where}.steps[{i}]"
        if not isinstance(st, dict):
            raise _Fail(f"{sw} must be an object")
        a, b = _edge(st.get("edge"), dag.n, f"{sw}.edge")
        on = _int(st.get("on"), f"{sw}.on")
        if not 0 <= on <= i:
            raise _Fail(f"{sw}: 'on' = {on} must count earlier derived edges only (0..{i})")
        if on not in prefix:
            prefix[on] = dag.with_edges(derived[:on])
        val = _check_cut(prefix[on], st.get("cut"), f"{sw}.cut", hypothesis=(b, a))
        if val <= limit:
            raise _Fail(f"{sw}: its cut proves {val}, not above the limit {limit}: edge {[a, b]} is not derived")
        derived.append((a, b))
    final = wit.get("final")
    if not isinstance(final, dict):
        raise _Fail(f"{where}.final must be an object")
    if final.get("kind") == "cycle":
        if not dag.with_edges(derived).has_cycle():
            raise _Fail(f"{where}.final: the derived edges close no cycle")
    elif final.get("kind") == "cut":
        on = _int(final.get("on"), f"{where}.final.on")
        if not 0 <= on <= len(derived):
            raise _Fail(f"{where}.final: 'on' = {on} is out of range (0..{len(derived)})")
        val = _check_cut(dag.with_edges(derived[:on]), final.get("cut"), f"{where}.final.cut")
        if val <= limit:
            raise _Fail(f"{where}.final: its cut proves {val}, not above the limit {limit}")
    else:
        raise _Fail(f"{where}.final has unknown kind {final.get('kind')!r}")
    if "value" in wit and _int(wit["value"], f"{where}.value") != limit + 1:
        raise _Fail(f"{where}: claims {wit['value']} but a refuted limit {limit} proves {limit + 1}")
    return limit + 1


def _check_bound(dag: _DAG, bound) -> tuple[int, str]:
    if not isinstance(bound, dict):
        raise _Fail("field 'bound' must be an object")
    wit = bound.get("witness")
    if not isinstance(wit, dict):
        raise _Fail("bound.witness must be an object")
    kind = wit.get("kind")
    if kind == "base":
        return dag.base, kind
    if kind == "end_memory":
        return dag.base + sum(dag.delta), kind
    if kind == "node_relaxation":
        v = _int(wit.get("node"), "bound.witness.node")
        if not 0 <= v < dag.n:
            raise _Fail(f"bound.witness: node {v} is out of range")
        anc = dag.ancestors(v, False)
        desc = dag.descendants(v, False)
        neg_free = sum(dag.delta[x] for x in range(dag.n) if x not in anc and x not in desc and x != v and dag.delta[x] < 0)
        return dag.base + sum(dag.delta[x] for x in anc) + neg_free + dag.delta[v] + dag.transient[v], kind
    if kind == "cut":
        return _check_cut(dag, wit, "bound.witness"), kind
    if kind == "pair":
        return _check_pair(dag, wit, "bound.witness"), kind
    if kind == "refutation":
        return _check_refutation(dag, wit, "bound.witness"), kind
    raise _Fail(f"bound.witness has unknown kind {kind!r}")


def verify_certificate(cert: dict, *, strict: bool = True) -> VerifyReport:
    """Check a certificate from scratch (module docstring); raise or collect every failure.

    With ``strict`` (default) any failure raises :class:`CertificateError` listing the
    reasons; otherwise they are returned in ``report.errors``.
    """
    rep = VerifyReport()
    try:
        if not isinstance(cert, dict):
            raise _Fail("a certificate must be a JSON object")
        if cert.get("format") != FORMAT:
            raise _Fail(f"not a memopt certificate (format {cert.get('format')!r}, expected {FORMAT!r})")
        if cert.get("version") not in SUPPORTED_VERSIONS:
            raise _Fail(f"unsupported certificate version {cert.get('version')!r} (supported: {SUPPORTED_VERSIONS})")
        dag = _DAG(cert.get("dag"))
        plan = cert.get("plan")
        if not isinstance(plan, dict):
            raise _Fail("field 'plan' must be an object with an 'order'")
        rep.claimed_peak = _int(cert.get("peak"), "peak")
        bound = cert.get("bound")
        if isinstance(bound, dict):
            rep.claimed_bound = _int(bound.get("value"), "bound.value")
            rep.bound_name = str(bound.get("name", ""))
        try:
            order = _check_order(dag, plan.get("order"))
            rep.peak = _plan_peak(dag, order)
            rep.peak_ok = rep.peak == rep.claimed_peak
            if not rep.peak_ok:
                rep.errors.append(f"claimed peak {rep.claimed_peak} but the plan's peak is {rep.peak}")
        except _Fail as exc:
            rep.errors.append(str(exc))
        try:
            rep.bound, _ = _check_bound(dag, bound)
            rep.bound_ok = rep.bound == rep.claimed_bound
            if not rep.bound_ok:
                rep.errors.append(f"claimed bound {rep.claimed_bound} but the witness proves {rep.bound}")
        except _Fail as exc:
            rep.errors.append(str(exc))
        if rep.peak is not None and rep.bound is not None and rep.bound > rep.peak:
            rep.errors.append(f"the proven bound {rep.bound} exceeds the plan's peak {rep.peak}: inconsistent certificate")
            rep.bound_ok = False
        rep.certified = rep.peak_ok and rep.bound_ok and rep.peak == rep.bound
        if "certified" in cert and bool(cert["certified"]) and not rep.certified:
            rep.errors.append("the certificate claims the plan is certified optimal, but bound and peak do not meet")
    except _Fail as exc:
        rep.errors.append(str(exc))
    if rep.errors:
        rep.certified = False
        if strict:
            raise CertificateError("certificate rejected: " + "; ".join(rep.errors))
    return rep
