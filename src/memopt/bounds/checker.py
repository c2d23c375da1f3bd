"""Independent checker of memopt certificates (``memopt verify``).

Deliberately shares no code with the solvers, the bounds or :mod:`memopt.core.evaluate`:
plain Python over the certificate's own data, no numpy, no max-flow solver. It

1. checks the format header and the DAG data (sizes, ranges, non-negative transients/base);
   every field must be one the format defines (an unknown field is an unchecked claim, so
   it is refused);
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

**Forcing must be justified** (``proofs/trap_bounds.md`` §1, §3, §4). A cut's value bounds the
memory while its node ``v`` runs only in the schedules that agree with its forcing
(``force_in`` before ``v``, ``force_out`` after ``v``). So forcing is accepted only where the
argument around the cut implies it:

* a top-level cut, a refutation's final cut and a refutation step: ``force_in`` may only
  name (proper) ancestors of ``v`` and ``force_out`` only ``v`` or its descendants, in the DAG
  the cut lives on (for a refutation: the DAG plus the derived edges the cut leans on, plus
  the step's hypothesis) and in the cut's program (for ``"reverse"`` the roles swap with the
  edges). Such forcing changes nothing; anything else (say, the plan's own prefix and
  suffix) would bound only the plan itself and is refused;
* a pair case's cut may in addition force exactly what its case assumes (``u_before_v``:
  ``u`` in for ``v``'s cut or ``v`` out for ``u``'s; ``u_after_v``: the converse).

Every failure is a precise sentence; with ``strict=True`` (the default) they are raised
together as one :class:`~memopt.errors.CertificateError`. Malformed data of any type
(booleans, floats, strings, nested junk, huge integers) ends in that error too, never in a
``KeyError``/``TypeError``.

Entry points: :func:`verify_certificate` (a whole certificate), :func:`verify_plan` (an
order on a DAG given as certificate data, with optional claims: the plan files'
checker, see :mod:`memopt.bounds.verify`) and :func:`solver_free_bound` (the bounds the
checker derives on its own: base, end memory, node relaxation).

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

from dataclasses import dataclass, field, fields

from memopt.errors import CertificateError

FORMAT = "memopt-certificate"
SUPPORTED_VERSIONS = (1,)

__all__ = ["VerifyReport", "verify_certificate", "verify_plan", "solver_free_bound"]

_CERT_KEYS = ("format", "version", "dag", "plan", "peak", "bound", "certified")
_DAG_KEYS = ("name", "base", "names", "delta", "transient", "edges")
_BOUND_KEYS = ("name", "value", "witness")
_CUT_KEYS = ("kind", "program", "node", "force_in", "force_out", "extra_edges", "value", "flow")
_WITNESS_KEYS = {
    "base": ("kind", "value"),
    "end_memory": ("kind", "value"),
    "node_relaxation": ("kind", "node", "value"),
    "cut": _CUT_KEYS,
    "pair": ("kind", "u", "v", "value", "cases"),
    "refutation": ("kind", "limit", "value", "steps", "final"),
}


def record_to_dict(record) -> dict:
    """A report dataclass as plain JSON data: every field, list fields copied."""
    return {f.name: (list(v) if isinstance(v := getattr(record, f.name), list) else v) for f in fields(record)}


def record_from_dict(cls, d, what: str, error, derived=()):
    """Inverse of :func:`record_to_dict` for the dataclass ``cls``: refuses anything but a
    JSON object, an unknown field (``derived`` ones are accepted and dropped) and a list
    field that is not a list of strings, with ``error`` naming ``what``."""
    if not isinstance(d, dict):
        raise error(f"a {what} must be a JSON object, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = [k for k in d if k not in known and k not in derived]
    if unknown:
        raise error(f"{what} has unexpected field {unknown[0]!r}")
    kw = {k: v for k, v in d.items() if k in known}
    for f in fields(cls):
        if f.name in kw and f.default_factory is list:
            v = kw[f.name]
            if not isinstance(v, list) or not all(isinstance(e, str) for e in v):
                raise error(f"{what}: {f.name!r} must be a list of strings")
            kw[f.name] = list(v)
    return cls(**kw)


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

    def to_dict(self) -> dict:
        """Plain JSON data (every field, plus ``ok``)."""
        return {**record_to_dict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, d: dict) -> "VerifyReport":
        """Inverse of :meth:`to_dict` (``ok`` is derived, so it is ignored)."""
        return record_from_dict(cls, d, "verify report", CertificateError, derived=("ok",))


class _Fail(Exception):
    """A fatal problem: later checks depend on what failed."""


def _r(x, limit: int = 60) -> str:
    """A short repr for messages (junk can be huge: an integer of 5000 digits has no repr)."""
    try:
        s = repr(x)
    except (ValueError, RecursionError):
        s = f"<a {type(x).__name__} too large to print>"
    return s if len(s) <= limit else s[: limit - 3] + "..."


INT_LIMIT = 2**63   # memopt's exact arithmetic is 64-bit: nothing it writes is larger


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise _Fail(f"{what} must be an integer, got {_r(x)}")
    if not -INT_LIMIT < x < INT_LIMIT:
        raise _Fail(f"{what} is outside the 64-bit range memopt handles ({_r(x)})")
    return x


def _int_list(x, what: str) -> list[int]:
    if not isinstance(x, list):
        raise _Fail(f"{what} must be a list")
    return [_int(v, f"{what}[{k}]") for k, v in enumerate(x)]


def _obj(x, what: str, allowed) -> dict:
    """``x`` as a JSON object whose fields are all among ``allowed`` (an unknown field is refused)."""
    if not isinstance(x, dict):
        raise _Fail(f"{what} must be an object")
    for k in x:
        if k not in allowed:
            raise _Fail(f"{what} has an unexpected field {_r(k)} (allowed: {', '.join(allowed)})")
    return x


class _DAG:
    def __init__(self, doc):
        _obj(doc, "field 'dag'", _DAG_KEYS)
        if "name" in doc and not isinstance(doc["name"], str):
            raise _Fail(f"dag.name must be a string, got {_r(doc['name'])}")
        self.name = doc.get("name", "")
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
                raise _Fail(f"dag.edges[{k}] = {_r(e)} names a node out of range (the DAG has {n} nodes)")
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
        other.name, other.names, other.n = self.name, self.names, self.n
        other.delta, other.transient, other.base = self.delta, self.transient, self.base
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
        return f"{_r(self.names[v])} ({v})"

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
        """Proper ancestors of ``v`` in the (reversed) program, with ``extra`` edges added.

        (On a cyclic graph ``v`` itself may be among them: then every forcing clashes.)"""
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
        raise _Fail(f"{what} = {_r(e)} must name two distinct nodes in range")
    return a, b


def _check_cut(dag: _DAG, wit, where: str, hypothesis: tuple[int, int] | None = None,
               case_in: frozenset = frozenset(), case_out: frozenset = frozenset(), case: str = "") -> int:
    """Value proven by a cut witness (raises _Fail with a precise reason).

    A cut may assume an extra edge (``extra_edges``) only where the caller justifies it:
    a refutation step hypothesises the opposite of the precedence it derives. Its forcing
    must be implied by the DAG (with that edge) — ``force_in`` ancestors of the node,
    ``force_out`` the node or its descendants — except for the nodes ``case_in`` /
    ``case_out`` that the caller's case analysis (a pair case, named ``case``) assumes.
    """
    if not isinstance(wit, dict) or wit.get("kind") != "cut":
        raise _Fail(f"{where}: expected a witness of kind 'cut'")
    _obj(wit, where, _CUT_KEYS)
    extra = wit.get("extra_edges", [])
    if not isinstance(extra, list):
        raise _Fail(f"{where}: extra_edges must be a list of pairs")
    extra = [_edge(e, dag.n, f"{where}.extra_edges[{k}]") for k, e in enumerate(extra)]
    if extra != ([hypothesis] if hypothesis is not None else []):
        raise _Fail(f"{where}: the cut assumes extra edges {extra} where the argument justifies "
                    f"{[hypothesis] if hypothesis is not None else 'none'}")
    program = wit.get("program", "forward")
    if not isinstance(program, str) or program not in ("forward", "reverse"):
        raise _Fail(f"{where}: program must be 'forward' or 'reverse', got {_r(program)}")
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
    anc_v = dag.ancestors(v, reverse, extra)
    desc_v = dag.descendants(v, reverse, extra)
    # forcing must be implied: by the DAG (then it changes nothing) or by the caller's case
    justified = "the DAG" + (f" or by the case {case}" if case else "")
    rel = " in the reversed program" if reverse else ""
    for u in fin:
        if u not in anc_v and u not in case_in:
            raise _Fail(f"{where}: force_in node {dag.label(u)} is not implied by {justified}: it is not an "
                        f"ancestor of node {dag.label(v)}{rel}, so the cut would bound only the orders that "
                        f"run it first")
    for u in fout:
        if u != v and u not in desc_v and u not in case_out:
            raise _Fail(f"{where}: force_out node {dag.label(u)} is not implied by {justified}: it is not a "
                        f"descendant of node {dag.label(v)}{rel}, so the cut would bound only the orders that "
                        f"run it later")
    pin = set(anc_v)
    for u in fin:
        pin |= dag.ancestors(u, reverse, extra) | {u}
    pout = desc_v | {v}
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
        return "source" if x == S else "sink" if x == T else dag.label(x) if 0 <= x < n else _r(x)

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
        raise _Fail(f"{where}: claims {_r(wit['value'])} but its flow proves {total}")
    return total


_CASE_CUTS = {
    # case -> {running node: (nodes the case forces in, nodes it forces out)}, in terms of u and v
    "u_before_v": {"v": ({"u"}, set()), "u": (set(), {"v"})},
    "u_after_v": {"v": (set(), {"u"}), "u": ({"v"}, set())},
}


def _check_pair(dag: _DAG, wit, where: str) -> int:
    _obj(wit, where, _WITNESS_KEYS["pair"])
    u = _int(wit.get("u"), f"{where}.u")
    v = _int(wit.get("v"), f"{where}.v")
    if not (0 <= u < dag.n and 0 <= v < dag.n) or u == v:
        raise _Fail(f"{where}: u and v must be two distinct node ids")
    cases = wit.get("cases")
    labels = ([c.get("case") for c in cases] if isinstance(cases, list) and all(isinstance(c, dict) for c in cases)
              else None)
    if (labels is None or len(labels) != 2 or not all(isinstance(x, str) and x in _CASE_CUTS for x in labels)
            or set(labels) != set(_CASE_CUTS)):
        raise _Fail(f"{where}: cases must be exactly 'u_before_v' and 'u_after_v'")
    ids = {"u": u, "v": v}
    values = []
    for c in cases:
        label = c["case"]
        cw = f"{where}.{label}"
        _obj(c, f"{where}.cases[{label}]", ("case", "cut"))
        cut = c.get("cut")
        if not isinstance(cut, dict):
            raise _Fail(f"{cw}: the cut must be an object")
        if cut.get("program", "forward") != "forward":
            raise _Fail(f"{cw}: the cut must be a forward-program cut")
        node = _int(cut.get("node"), f"{cw}.node")
        fin = _int_list(cut.get("force_in", []), f"{cw}.force_in")
        fout = _int_list(cut.get("force_out", []), f"{cw}.force_out")
        role = "v" if node == v else "u" if node == u else None
        if role is None:
            raise _Fail(f"{cw}: the cut (node {node}) is not implied by the case {label} of u={u}, v={v}: "
                        f"it must be the trap of u or of v")
        ins, outs = _CASE_CUTS[label][role]
        case_in = frozenset(ids[x] for x in ins)
        case_out = frozenset(ids[x] for x in outs)
        anc = dag.ancestors(node, False)
        desc = dag.descendants(node, False) | {node}
        extra_in = [x for x in fin if x not in case_in and x not in anc]
        extra_out = [x for x in fout if x not in case_out and x not in desc]
        if extra_in or extra_out:
            raise _Fail(f"{cw}: the cut (node {node}, force_in {_r(fin)}, force_out {_r(fout)}) is not implied "
                        f"by the case {label} of u={u}, v={v}")
        values.append(_check_cut(dag, cut, cw, case_in=case_in, case_out=case_out, case=label))
    total = min(values)
    if "value" in wit and _int(wit["value"], f"{where}.value") != total:
        raise _Fail(f"{where}: claims {_r(wit['value'])} but its cases prove {total}")
    return total


def _check_refutation(dag: _DAG, wit, where: str) -> int:
    """A refutation of ``peak <= limit``: derived precedences, each justified, then a contradiction.

    Step ``i`` derives ``a -> b`` (``a`` before ``b`` in every schedule within the limit) from a
    cut above the limit on the DAG plus the first ``on <= i`` derived edges plus the opposite
    hypothesis ``b -> a``. The final contradiction is a cut above the limit on the DAG plus
    the first ``on`` derived edges, or a cycle among the original and all derived edges.
    Every cut's forcing must be implied by the DAG it lives on (no free assumptions).
    """
    _obj(wit, where, _WITNESS_KEYS["refutation"])
    limit = _int(wit.get("limit"), f"{where}.limit")
    steps = wit.get("steps")
    if not isinstance(steps, list):
        raise _Fail(f"{where}.steps must be a list")
    derived: list[tuple[int, int]] = []
    prefix: dict[int, _DAG] = {}   # the DAG with the first `on` derived edges, shared by a round's steps
    for i, st in enumerate(steps):
        sw = f"{where}.steps[{i}]"
        _obj(st, sw, ("edge", "on", "cut"))
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
    fkind = final.get("kind")
    if fkind == "cycle":
        _obj(final, f"{where}.final", ("kind",))
        if not dag.with_edges(derived).has_cycle():
            raise _Fail(f"{where}.final: the derived edges close no cycle")
    elif fkind == "cut":
        _obj(final, f"{where}.final", ("kind", "on", "cut"))
        on = _int(final.get("on"), f"{where}.final.on")
        if not 0 <= on <= len(derived):
            raise _Fail(f"{where}.final: 'on' = {on} is out of range (0..{len(derived)})")
        val = _check_cut(dag.with_edges(derived[:on]), final.get("cut"), f"{where}.final.cut")
        if val <= limit:
            raise _Fail(f"{where}.final: its cut proves {val}, not above the limit {limit}")
    else:
        raise _Fail(f"{where}.final has unknown kind {_r(fkind)}")
    if "value" in wit and _int(wit["value"], f"{where}.value") != limit + 1:
        raise _Fail(f"{where}: claims {_r(wit['value'])} but a refuted limit {limit} proves {limit + 1}")
    return limit + 1


def _node_relaxation(dag: _DAG, v: int) -> int:
    anc = dag.ancestors(v, False)
    desc = dag.descendants(v, False)
    neg_free = sum(dag.delta[x] for x in range(dag.n) if x not in anc and x not in desc and x != v and dag.delta[x] < 0)
    return dag.base + sum(dag.delta[x] for x in anc) + neg_free + dag.delta[v] + dag.transient[v]


def _check_witness(dag: _DAG, wit, where: str) -> tuple[int, str]:
    if not isinstance(wit, dict):
        raise _Fail(f"{where} must be an object")
    kind = wit.get("kind")
    if not isinstance(kind, str) or kind not in _WITNESS_KEYS:
        raise _Fail(f"{where} has unknown kind {_r(kind)}")
    _obj(wit, where, _WITNESS_KEYS[kind])
    if kind == "cut":
        return _check_cut(dag, wit, where), kind
    if kind == "pair":
        return _check_pair(dag, wit, where), kind
    if kind == "refutation":
        return _check_refutation(dag, wit, where), kind
    if kind == "base":
        value = dag.base
    elif kind == "end_memory":
        value = dag.base + sum(dag.delta)
    else:  # node_relaxation
        v = _int(wit.get("node"), f"{where}.node")
        if not 0 <= v < dag.n:
            raise _Fail(f"{where}: node {v} is out of range")
        value = _node_relaxation(dag, v)
    if "value" in wit and _int(wit["value"], f"{where}.value") != value:
        raise _Fail(f"{where}: claims {_r(wit['value'])} but the {kind} bound is {value}")
    return value, kind


def _check_bound(dag: _DAG, bound) -> tuple[int, str]:
    _obj(bound, "field 'bound'", _BOUND_KEYS)
    if "name" in bound and not isinstance(bound["name"], str):
        raise _Fail(f"bound.name must be a string, got {_r(bound['name'])}")
    return _check_witness(dag, bound.get("witness"), "bound.witness")


def _run(rep: VerifyReport, dag_doc, plan_order, claimed_peak, bound, *, peak_claimed: bool, bound_claimed: bool):
    """Shared core of the entry points: fills ``rep`` (errors collected, fatal ones raised as _Fail)."""
    dag = _DAG(dag_doc)
    if peak_claimed:
        rep.claimed_peak = _int(claimed_peak, "peak")
    if bound_claimed:
        if not isinstance(bound, dict):
            raise _Fail("field 'bound' must be an object")
        rep.claimed_bound = _int(bound.get("value"), "bound.value")
        rep.bound_name = bound.get("name", "") if isinstance(bound.get("name", ""), str) else ""
    try:
        order = _check_order(dag, plan_order)
        rep.peak = _plan_peak(dag, order)
        rep.peak_ok = rep.peak == rep.claimed_peak if peak_claimed else True
        if not rep.peak_ok:
            rep.errors.append(f"claimed peak {rep.claimed_peak} but the plan's peak is {rep.peak}")
    except _Fail as exc:
        rep.errors.append(str(exc))
    if bound_claimed:
        try:
            rep.bound, _ = _check_bound(dag, bound)
            rep.bound_ok = rep.bound == rep.claimed_bound
            if not rep.bound_ok:
                rep.errors.append(f"claimed bound {rep.claimed_bound} but the witness proves {rep.bound}")
        except _Fail as exc:
            rep.errors.append(str(exc))
    else:
        rep.bound_ok = True
    if rep.peak is not None and rep.bound is not None and rep.bound > rep.peak:
        rep.errors.append(f"the proven bound {rep.bound} exceeds the plan's peak {rep.peak}: inconsistent certificate")
        rep.bound_ok = False
    rep.certified = rep.peak_ok and rep.bound_ok and rep.bound is not None and rep.peak == rep.bound


def _finish(rep: VerifyReport, strict: bool, what: str) -> VerifyReport:
    if rep.errors:
        rep.certified = False
        if strict:
            raise CertificateError(f"{what} rejected: " + "; ".join(rep.errors))
    return rep


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
            raise _Fail(f"not a memopt certificate (format {_r(cert.get('format'))}, expected {FORMAT!r})")
        version = cert.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
            raise _Fail(f"unsupported certificate version {_r(version)} (supported: {SUPPORTED_VERSIONS})")
        _obj(cert, "the certificate", _CERT_KEYS)
        plan = cert.get("plan")
        if not isinstance(plan, dict) or "order" not in plan:
            raise _Fail("field 'plan' must be an object with an 'order'")
        _obj(plan, "field 'plan'", ("order",))
        claimed_certified = cert.get("certified")
        if "certified" in cert and not isinstance(claimed_certified, bool):
            raise _Fail(f"field 'certified' must be true or false, got {_r(claimed_certified)}")
        _run(rep, cert.get("dag"), plan.get("order"), cert.get("peak"), cert.get("bound"),
             peak_claimed=True, bound_claimed=True)
        if claimed_certified is True and not rep.certified:
            rep.errors.append("the certificate claims the plan is certified optimal, but bound and peak do not meet")
        elif claimed_certified is False and rep.certified and not rep.errors:
            rep.errors.append("the certificate claims the plan is not certified, but its bound meets its peak")
    except _Fail as exc:
        rep.errors.append(str(exc))
    return _finish(rep, strict, "certificate")


def verify_plan(dag_doc: dict, order, *, peak=None, bound=None, strict: bool = True) -> VerifyReport:
    """Check a node ``order`` on a DAG given as certificate data (``dag_to_doc``), with optional claims.

    ``peak`` (when not ``None``) must equal the order's peak; ``bound`` (when not ``None``,
    ``{"name", "value", "witness"}`` as in a certificate) must be proven by its witness and
    not exceed the peak. ``report.certified`` says whether the proven bound meets the peak.
    """
    rep = VerifyReport()
    try:
        _run(rep, dag_doc, order, peak, bound, peak_claimed=peak is not None, bound_claimed=bound is not None)
    except _Fail as exc:
        rep.errors.append(str(exc))
    return _finish(rep, strict, "plan")


RELAXATION_MAX_NODES = 4000   # node relaxations cost O(n (n + e)) in plain Python


def solver_free_bound(dag_doc: dict, at_least: int | None = None) -> tuple[int, dict]:
    """The best bound the checker derives by itself: base, end memory, node relaxations.

    Returns ``(value, witness)``; stops early once ``value >= at_least``. Each is sound
    without any solver (``proofs/trap_bounds.md`` §5). Node relaxations are tried only up to
    ``RELAXATION_MAX_NODES`` nodes (larger plans should carry their witness).
    """
    try:
        dag = _DAG(dag_doc)
    except _Fail as exc:
        raise CertificateError(f"DAG rejected: {exc}") from None
    best, wit = dag.base, {"kind": "base"}
    end = dag.base + sum(dag.delta)
    if dag.n and end > best:
        best, wit = end, {"kind": "end_memory"}
    for v in range(dag.n if dag.n <= RELAXATION_MAX_NODES else 0):
        if at_least is not None and best >= at_least:
            break
        val = _node_relaxation(dag, v)
        if val > best:
            best, wit = val, {"kind": "node_relaxation", "node": v}
    return best, wit
