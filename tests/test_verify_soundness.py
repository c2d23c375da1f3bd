"""``memopt verify`` is sound: a document is accepted only if every claim in it is true.

Thousands of mutated certificates and plans (forcing sets, flows, cut sides, DAG edits,
claims of peak / bound / status, junk of every JSON type) on small random graphs whose
optimum is known by brute force. Whatever the mutation, the checker either refuses with a
:class:`CertificateError`/:class:`FormatError` or everything the document claims holds:
the claimed peak is the true peak of its order, the claimed bound is at most the optimum,
a claimed ``certified``/``optimal`` status means the plan is optimal.
"""

from __future__ import annotations

import copy
import functools
import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memopt.bounds import forward_trap_bound, make_certificate, pair_trap_bound, probing_trap_bound, verify_certificate
from memopt.bounds.checker import VerifyReport, solver_free_bound, verify_plan
from memopt.bounds.certificate import dag_to_doc
from memopt.bounds.trap import _augment, _net, _solve, simple_dag_bounds, trap_cut
from memopt.bounds.verify import VerifyOutcome, dag_difference, verify_document
from memopt.core import dag_order_from_op_order, graph_to_dag, op_order_from_dag_order, program_from_graph
from memopt.errors import CertificateError, FormatError
from memopt.io import Instance, plan_to_doc
from memopt.schedule.brute_force import brute_force_dag_optimum, brute_force_schedule, random_tensor_graph

ALLOWED = (CertificateError, FormatError)
_BASE = settings(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def fast(n: int) -> settings:
    """Deterministic (derandomized) runs of ``n`` examples, no deadline: no timing in any test."""
    return settings(_BASE, max_examples=n)


# ---------------------------------------------------------------------------- oracle (independent of memopt)

def _opt_of(delta, transient, base, edges) -> int:
    """Minimum peak over all linear extensions, by dynamic programming over ideals (pure Python)."""
    n = len(delta)
    pred = [0] * n
    for a, b in edges:
        pred[b] |= 1 << a
    best = {0: base}
    for mask in range(1 << n):          # masks in increasing order: subsets before supersets
        if mask not in best:
            continue
        level = base + sum(delta[x] for x in range(n) if mask >> x & 1)
        cur = best[mask]
        for v in range(n):
            if not mask >> v & 1 and pred[v] & ~mask == 0:
                nxt = mask | 1 << v
                val = max(cur, level + delta[v] + transient[v])
                if nxt not in best or val < best[nxt]:
                    best[nxt] = val
    return best[(1 << n) - 1]


@functools.lru_cache(maxsize=None)
def _opt_cached(key) -> int:
    delta, transient, base, edges = key
    return _opt_of(list(delta), list(transient), base, list(edges))


def _doc_opt(dag_doc) -> int:
    return _opt_cached((tuple(dag_doc["delta"]), tuple(dag_doc["transient"]), dag_doc["base"],
                        tuple(sorted(tuple(e) for e in dag_doc["edges"]))))


def _doc_peak(dag_doc, order) -> int:
    assert sorted(order) == list(range(len(dag_doc["names"])))
    pos = {v: k for k, v in enumerate(order)}
    assert all(pos[a] < pos[b] for a, b in dag_doc["edges"])
    level = peak = dag_doc["base"]
    for v in order:
        level += dag_doc["delta"][v]
        peak = max(peak, level + dag_doc["transient"][v])
    return peak


# ---------------------------------------------------------------------------- a pool of small instances

def _random_extension(dag, rng) -> list[int]:
    n = dag.n
    indeg = [len(dag.pred(v)) for v in range(n)]
    ready = [v for v in range(n) if indeg[v] == 0]
    out = []
    while ready:
        v = ready.pop(int(rng.integers(len(ready))))
        out.append(v)
        for s in dag.succ(v):
            indeg[int(s)] -= 1
            if indeg[int(s)] == 0:
                ready.append(int(s))
    return out


class Case:
    def __init__(self, seed: int, program: bool):
        rng = np.random.default_rng(seed)
        g = random_tensor_graph(rng, int(rng.integers(3, 6)))
        self.graph = g
        if program:
            p = program_from_graph(g)
            self.inst = Instance(name=f"p{seed}", schema="memopt-program", labels=tuple(s.name for s in p.statements),
                                 input_order=np.arange(len(p.statements)), program=p)
            self.dag, self.gd = p.to_dag(), None
        else:
            self.inst = Instance(name=f"g{seed}", schema="memopt-graph", labels=tuple(g.op_names),
                                 input_order=np.arange(g.num_ops), graph=g)
            self.gd = graph_to_dag(g)
            self.dag = self.gd.dag
        self.dag_doc = dag_to_doc(self.dag)
        self.opt = _doc_opt(self.dag_doc)
        # memopt's own brute force agrees with the oracle
        assert self.opt == brute_force_dag_optimum(self.dag)
        if not program:
            assert self.opt == brute_force_schedule(g)[1]
        # canonical orders (releases as early as they are ready), as a plan's op order expands to
        self.orders = [self.canonical(_random_extension(self.dag, np.random.default_rng(seed * 31 + k)))
                       for k in range(6)]
        self.worst = max(self.orders, key=lambda o: _doc_peak(self.dag_doc, o))
        bounds = [forward_trap_bound(self.dag), pair_trap_bound(self.dag), probing_trap_bound(self.dag, upper=self.opt)]
        bounds += [b for b in simple_dag_bounds(self.dag)]
        self.certs = [json.loads(json.dumps(make_certificate(self.dag, o, b)))
                      for b in bounds for o in (self.orders[0], self.worst)]
        for c in self.certs:
            verify_certificate(c)   # genuine certificates pass

    def canonical(self, full) -> list[int]:
        if self.gd is None:
            return [int(x) for x in full]
        return [int(x) for x in dag_order_from_op_order(self.gd, op_order_from_dag_order(self.gd, np.asarray(full)))]

    def op_order(self, full) -> list[int]:
        return [int(x) for x in (op_order_from_dag_order(self.gd, np.asarray(full)) if self.gd is not None else full)]

    def plan(self, full, cert=None, **claims) -> dict:
        order = self.op_order(full)
        pk = _doc_peak(self.dag_doc, full)
        args = dict(peak=pk)
        args.update(claims)
        return json.loads(json.dumps(plan_to_doc(self.inst, order, certificate=cert, **args)))

    def true_peak_of_plan(self, doc) -> int:
        ids = [self.inst.labels.index(lab) if isinstance(lab, str) else lab for lab in doc["order"]]
        full = ([int(x) for x in dag_order_from_op_order(self.gd, np.asarray(ids))]
                if self.gd is not None else ids)
        return _doc_peak(self.dag_doc, full)


SEEDS = [3, 9, 17, 21, 42, 77, 101, 212]


@functools.lru_cache(maxsize=None)
def case(i: int) -> Case:
    seed = SEEDS[i % len(SEEDS)]
    return Case(seed, program=i >= len(SEEDS))


CASES = st.integers(0, 2 * len(SEEDS) - 1).map(case)


# ---------------------------------------------------------------------------- mutation machinery
# Mutations are driven by a seeded random.Random (hypothesis draws the seed): much cheaper than
# drawing every choice through hypothesis, so each example checks several mutated documents.

NAMES = ["certified", "optimal", "feasible", "infeasible", "banana", "forward", "reverse", "cut", "pair",
         "refutation", "base", "end_memory", "node_relaxation", "cycle", "u_before_v", "u_after_v", ""]
HUGE = [2**63, 2**63 - 1, 2**70, -(2**63), 10**100, 10**5000]
KEYS = ["force_in", "force_out", "extra_edges", "value", "status", "lower_bound", "certified", "program", "node",
        "on", "limit", "bound", "peak", "junk", "kind", "witness", "name", "order", "edge", "final", "cases"]


def _junk(rng: random.Random, n: int, depth: int = 0):
    r = rng.random()
    if r < 0.12:
        return None
    if r < 0.22:
        return rng.random() < 0.5
    if r < 0.45:
        return rng.randint(-2, n + 2)
    if r < 0.52:
        return rng.choice(HUGE)
    if r < 0.60:
        return rng.choice([0.5, 1.0, -0.0, 1e300, float("inf"), float("-inf"), float("nan")])
    if r < 0.75:
        return rng.choice(NAMES)
    if depth > 2:
        return "x"
    if r < 0.90:
        return [_junk(rng, n, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): _junk(rng, n, depth + 1) for _ in range(rng.randint(0, 2))}


def _paths(x, prefix=()):
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, prefix + (i,))


def _get(x, path):
    for p in path:
        x = x[p]
    return x


def _mutate_once(rng: random.Random, doc, n: int):
    path = rng.choice(list(_paths(doc)))
    target = _get(doc, path)
    op = rng.choice(["replace", "tweak", "tweak", "tweak", "delete", "append", "add_key", "node", "swap"])
    if not path and op in ("replace", "delete", "tweak", "node"):
        op = "add_key"
    parent = _get(doc, path[:-1]) if path else None
    if op == "replace":
        parent[path[-1]] = _junk(rng, n)
    elif op == "tweak" and isinstance(target, int) and not isinstance(target, bool):
        parent[path[-1]] = target + rng.choice([-2, -1, -1, 1, 1, 2, 5, -(10**3), 2**64])
    elif op == "node" and path:
        parent[path[-1]] = rng.randint(-1, n + 2)
    elif op == "delete":
        del parent[path[-1]]
    elif op == "append" and isinstance(target, list):
        r = rng.random()
        extra = (rng.randint(-1, n + 2) if r < 0.5 else copy.deepcopy(rng.choice(target)) if target and r < 0.8
                 else _junk(rng, n))
        target.insert(rng.randint(0, len(target)), extra)
    elif op == "add_key" and isinstance(target, dict):
        target[rng.choice(KEYS)] = (_junk(rng, n) if rng.random() < 0.5
                                    else [rng.randint(-1, n + 2) for _ in range(rng.randint(0, 4))])
    elif op == "swap" and isinstance(target, list) and len(target) >= 2:
        i, j = rng.randrange(len(target)), rng.randrange(len(target))
        target[i], target[j] = target[j], target[i]
    elif isinstance(target, dict) and isinstance(target.get("value"), int):
        target["value"] += 1      # fallback: nudge the closest integer claim


def _mutate(rng: random.Random, doc, n: int, at_most: int = 3):
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, at_most)):
        _mutate_once(rng, doc, n)
    return doc


# ---------------------------------------------------------------------------- what acceptance must imply

def _assert_certificate_true(doc):
    """An accepted certificate's claims hold on its own DAG."""
    dag_doc = doc["dag"]
    order = doc["plan"]["order"]
    peak = _doc_peak(dag_doc, order)
    assert doc["peak"] == peak
    if len(dag_doc["names"]) <= 14:
        opt = _doc_opt(dag_doc)
        assert doc["bound"]["value"] <= opt, "accepted a bound above the optimum"
        if doc.get("certified"):
            assert doc["bound"]["value"] == peak == opt


def _assert_document_true(c: Case, doc, out: VerifyOutcome):
    assert out.ok
    if doc.get("format") == "memopt-certificate":
        assert dag_difference(doc["dag"], c.dag_doc) is None
        _assert_certificate_true(doc)
        assert out.lower_bound <= c.opt and out.peak == doc["peak"]
        return
    true_peak = c.true_peak_of_plan(doc)
    assert out.peak == true_peak
    if "peak" in doc:
        assert doc["peak"] == true_peak
    if "lower_bound" in doc:
        assert doc["lower_bound"] <= c.opt
    if out.lower_bound is not None:
        assert out.lower_bound <= c.opt
    if "bound" in doc:
        assert doc["bound"]["value"] <= c.opt
    assert doc.get("status") in (None, "certified", "optimal", "feasible")
    if doc.get("status") in ("certified", "optimal"):
        assert true_peak == c.opt
    if out.certified:
        assert true_peak == c.opt


def _check_document(c: Case, doc) -> bool:
    try:
        out = verify_document(c.inst, doc, "<doc>")
    except ALLOWED as exc:
        assert "\n" not in str(exc)
        return False
    _assert_document_true(c, doc, out)
    json.dumps(out.to_dict())
    return True


def _check_certificate_alone(doc) -> bool:
    try:
        rep = verify_certificate(doc)
    except ALLOWED as exc:
        assert "\n" not in str(exc)
        return False
    assert rep.ok
    _assert_certificate_true(doc)
    return True


# ---------------------------------------------------------------------------- property tests: random mutations

PER_EXAMPLE = 5   # mutated documents per hypothesis example


@fast(300)
@given(CASES, st.integers(0, 2**32 - 1))
def test_mutated_certificates_are_accepted_only_when_true(c, seed):
    rng = random.Random(seed)
    for _ in range(PER_EXAMPLE):
        bad = _mutate(rng, rng.choice(c.certs), c.dag.n)
        _check_certificate_alone(bad)       # the checker alone, on the certificate's own DAG
        _check_document(c, bad)             # and against the instance


@fast(300)
@given(CASES, st.integers(0, 2**32 - 1))
def test_mutated_plans_are_accepted_only_when_true(c, seed):
    rng = random.Random(seed)
    for _ in range(PER_EXAMPLE):
        cert = rng.choice(c.certs)
        full = cert["plan"]["order"]
        kind = rng.choice(["with_witness", "bare", "claims"])
        if kind == "with_witness":
            doc = c.plan(full, cert, lower_bound=cert["bound"]["value"],
                         status="certified" if cert["certified"] else "feasible", method="test")
        elif kind == "bare":
            doc = c.plan(full)
        else:
            doc = c.plan(full, None, lower_bound=rng.randint(0, c.opt + 5),
                         status=rng.choice(["certified", "optimal", "feasible", "infeasible", "banana"]))
        _check_document(c, doc)             # the unmutated document: true claims or refused
        _check_document(c, _mutate(rng, doc, c.inst.num_ops))


@fast(150)
@given(CASES, st.integers(0, 2**32 - 1))
def test_claims_of_peak_bound_and_status_are_checked(c, seed):
    rng = random.Random(seed)
    for _ in range(PER_EXAMPLE):
        cert = rng.choice(c.certs)
        full = cert["plan"]["order"]
        pk = _doc_peak(c.dag_doc, full)
        claims = {}
        if rng.random() < 0.5:
            claims["peak"] = pk + rng.choice([0, 0, -1, 1])
        if rng.random() < 0.5:
            claims["lower_bound"] = rng.choice([0, c.opt - 1, c.opt, c.opt + 1, pk, cert["bound"]["value"]])
        if rng.random() < 0.5:
            claims["status"] = rng.choice(["certified", "optimal", "feasible", "infeasible", "banana", "", "Certified"])
        doc = c.plan(full, cert if rng.random() < 0.5 else None)
        doc.pop("lower_bound", None)
        doc.pop("status", None)
        doc.update(claims)
        accepted = _check_document(c, doc)
        # a true claim backed by the certificate's own witness is accepted
        if (not accepted and "bound" in doc and claims.get("peak", pk) == pk
                and claims.get("lower_bound", 0) <= cert["bound"]["value"]
                and (claims.get("status") in (None, "feasible")
                     or (claims.get("status") in ("certified", "optimal") and cert["bound"]["value"] == pk
                         and claims.get("lower_bound", pk) == pk))):
            pytest.fail(f"a true, witnessed plan was refused: {claims}")


# ---------------------------------------------------------------------------- property tests: forged witnesses
# Witnesses computed by memopt's own max flow, but for arbitrary forcing (random nodes forced
# before / after), hypotheses and final cuts: valid flows of the wrong network. Accepted only
# when the value they prove is still at most the optimum.

def _subset(rng: random.Random, n: int) -> list[int]:
    return sorted({rng.randrange(n) for _ in range(rng.randint(0, 4))})


def _claiming(c: Case, rng: random.Random, value: int, witness: dict) -> dict:
    full = rng.choice(c.orders)
    return json.loads(json.dumps(make_certificate(c.dag, full, {"name": "forged", "value": value, "witness": witness})))


def _forged_cut_doc(c: Case, rng: random.Random):
    n = c.dag.n
    wit = trap_cut(c.dag, rng.randrange(n), _subset(rng, n), _subset(rng, n), reverse=rng.random() < 0.3)
    return None if wit is None else _claiming(c, rng, wit["value"], wit)


def _forged_pair_doc(c: Case, rng: random.Random):
    n = c.dag.n
    u, v = rng.randrange(n), rng.randrange(n)
    if u == v:
        return None
    cases, values = [], []
    for label in ("u_before_v", "u_after_v"):
        forced = rng.random() < 0.7
        w = trap_cut(c.dag, rng.choice([u, v]), _subset(rng, n) if forced else [u, v][rng.randrange(2)::2],
                     _subset(rng, n) if forced else [])
        if w is None:
            return None
        cases.append({"case": label, "cut": w})
        values.append(w["value"])
    wit = {"kind": "pair", "u": u, "v": v, "value": min(values), "cases": cases}
    return _claiming(c, rng, min(values), wit)


def _forged_refutation_doc(c: Case, rng: random.Random):
    n = c.dag.n
    net = _net(c.dag)
    steps, values = [], []
    final = None
    for _ in range(rng.randint(0, 2)):
        a, b = rng.randrange(n), rng.randrange(n)
        if a == b:
            continue
        forced = rng.random() < 0.5
        cut = _solve(net, rng.randrange(n), _subset(rng, n) if forced else (), _subset(rng, n) if forced else (),
                     extra=(b, a), flow=True)
        if cut is None:
            return None
        steps.append({"edge": [a, b], "on": len(steps), "cut": cut.witness()})
        values.append(cut.value)
        aug = _augment(net, [(a, b)])
        if aug is None:
            final = {"kind": "cycle"}
            break
        net = aug
    if final is None:
        forced = rng.random() < 0.7
        cut = _solve(net, rng.randrange(n), _subset(rng, n) if forced else (), _subset(rng, n) if forced else (),
                     flow=True)
        if cut is None:
            return None
        final = {"kind": "cut", "on": len(steps), "cut": cut.witness()}
        values.append(cut.value)
    limit = min(values) - 1 if values else c.opt + rng.randint(-1, 2)
    wit = {"kind": "refutation", "limit": limit, "value": limit + 1, "steps": steps, "final": final}
    return _claiming(c, rng, limit + 1, wit)


@pytest.mark.parametrize("forge", [_forged_cut_doc, _forged_pair_doc, _forged_refutation_doc])
@fast(120)
@given(c=CASES, seed=st.integers(0, 2**32 - 1))
def test_forged_witnesses_are_accepted_only_when_true(forge, c, seed):
    rng = random.Random(seed)
    for _ in range(PER_EXAMPLE):
        cert = forge(c, rng)
        if cert is None:
            continue
        _check_certificate_alone(cert)
        _check_document(c, cert)
        plan = c.plan(cert["plan"]["order"], cert, lower_bound=cert["bound"]["value"])
        _check_document(c, plan)
        _check_document(c, _mutate(rng, cert, c.dag.n, at_most=1))


@fast(100)
@given(CASES, st.integers(0, 2**32 - 1))
def test_dag_edits_are_refused_or_harmless(c, seed):
    rng = random.Random(seed)
    for _ in range(PER_EXAMPLE):
        cert = copy.deepcopy(rng.choice(c.certs))
        d = cert["dag"]
        n = len(d["names"])
        what = rng.choice(["add_edge", "drop_edge", "delta", "transient", "base", "name", "reorder_edges"])
        if what == "add_edge":
            d["edges"].append([rng.randrange(n), rng.randrange(n)])
        elif what == "drop_edge" and d["edges"]:
            d["edges"].pop(rng.randrange(len(d["edges"])))
        elif what in ("delta", "transient"):
            d[what][rng.randrange(n)] += rng.choice([-3, -1, 1, 4])
        elif what == "base":
            d["base"] += rng.choice([-1, 1, 7])
        elif what == "name":
            d["names"][0] += "_"
        else:
            d["edges"].reverse()
        changed = dag_difference(d, c.dag_doc) is not None
        accepted = _check_document(c, cert)
        assert not (changed and accepted), "a certificate for a different DAG was accepted"
        _check_certificate_alone(cert)   # on its own DAG, only true claims pass


# ---------------------------------------------------------------------------- named regressions (the attacks)

def _suboptimal_case() -> Case:
    for i in range(2 * len(SEEDS)):
        c = case(i)
        if _doc_peak(c.dag_doc, c.worst) > c.opt:
            return c
    raise AssertionError("no suboptimal order in the pool")


def _prefix_suffix_cut(c: Case, order):
    """The attack: force the plan's own prefix in and suffix out at its peak node: the cut then
    'proves' exactly the plan's peak, whatever the optimum."""
    level, best, at = c.dag_doc["base"], None, 0
    for k, v in enumerate(order):
        level += c.dag_doc["delta"][v]
        run = level + c.dag_doc["transient"][v]
        if best is None or run > best:
            best, at = run, k
    wit = trap_cut(c.dag, order[at], order[:at], order[at + 1:])
    assert wit["value"] == _doc_peak(c.dag_doc, order) > c.opt
    return wit


def test_attack_plan_prefix_and_suffix_as_forcing():
    c = _suboptimal_case()
    order = c.worst
    wit = _prefix_suffix_cut(c, order)
    cert = json.loads(json.dumps(make_certificate(c.dag, order, {"name": "forward_trap", "value": wit["value"],
                                                                  "witness": wit})))
    assert cert["certified"]
    with pytest.raises(CertificateError, match="is not implied by the DAG"):
        verify_certificate(cert)
    with pytest.raises(CertificateError, match="is not implied by the DAG"):
        verify_document(c.inst, cert, "cert.json")
    # the same cut as a plan's witness
    plan = c.plan(order, cert, lower_bound=wit["value"], status="certified")
    with pytest.raises(CertificateError, match="is not implied by the DAG"):
        verify_document(c.inst, plan, "plan.json")


def test_attack_prefix_suffix_forcing_inside_a_refutation_final_cut():
    c = _suboptimal_case()
    order = c.worst
    wit = _prefix_suffix_cut(c, order)
    ref = {"kind": "refutation", "limit": wit["value"] - 1, "value": wit["value"], "steps": [],
           "final": {"kind": "cut", "on": 0, "cut": wit}}
    cert = json.loads(json.dumps(make_certificate(c.dag, order, {"name": "probing_trap", "value": wit["value"],
                                                                  "witness": ref})))
    with pytest.raises(CertificateError, match=r"final\.cut: force_(in|out) node .* is not implied by the DAG"):
        verify_certificate(cert)


def test_attack_prefix_suffix_forcing_inside_a_pair_case():
    c = _suboptimal_case()
    order = c.worst
    wit = _prefix_suffix_cut(c, order)
    v = wit["node"]
    u = next(x for x in range(c.dag.n) if x != v)
    pair = {"kind": "pair", "u": u, "v": v, "value": wit["value"],
            "cases": [{"case": "u_before_v", "cut": wit}, {"case": "u_after_v", "cut": copy.deepcopy(wit)}]}
    cert = json.loads(json.dumps(make_certificate(c.dag, order, {"name": "pair_trap", "value": wit["value"],
                                                                  "witness": pair})))
    with pytest.raises(CertificateError, match="not implied"):
        verify_certificate(cert)


def test_attack_plan_raises_its_own_lower_bound():
    c = _suboptimal_case()
    order = c.worst
    pk = _doc_peak(c.dag_doc, order)
    bare = c.plan(order, None, lower_bound=pk, status="certified")
    with pytest.raises(CertificateError, match="carries no witness"):
        verify_document(c.inst, bare, "plan.json")
    bare = c.plan(order, None, lower_bound=pk)
    with pytest.raises(CertificateError, match="claims lower bound"):
        verify_document(c.inst, bare, "plan.json")
    # with a genuine but weaker witness: the claim still exceeds what it proves
    cert = next(x for x in c.certs if x["plan"]["order"] == order)
    doc = c.plan(order, cert)
    doc["lower_bound"] = pk
    doc["status"] = "optimal"
    with pytest.raises(CertificateError, match="witness proves only"):
        verify_document(c.inst, doc, "plan.json")
    doc = c.plan(order, cert)
    doc["bound"]["value"] = pk                   # the witness's own claimed value raised
    with pytest.raises(CertificateError, match="claimed bound"):
        verify_document(c.inst, doc, "plan.json")
    # above the peak
    with pytest.raises(CertificateError, match="above its own peak"):
        verify_document(c.inst, c.plan(order, None, lower_bound=pk + 1), "plan.json")


@pytest.mark.parametrize("status, message", [
    ("banana", "unknown status 'banana'"), ("infeasible", "'infeasible' but carries an order"),
    (5, "unknown status 5"), (None, "unknown status None"), (["certified"], "unknown status"),
])
def test_attack_status_banana(status, message):
    c = case(0)
    doc = c.plan(c.orders[0])
    doc["status"] = status
    with pytest.raises(CertificateError, match=message):
        verify_document(c.inst, doc, "plan.json")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["delta"].__setitem__(0, d["delta"][0] + 1), r"delta\[0\]"),
    (lambda d: d["edges"].pop(), "lacks the instance's edge"),
    (lambda d: d["edges"].append([len(d["names"]) - 1, 0]), "has an edge"),
    (lambda d: d.update(base=d["base"] + 1), "base memory"),
    (lambda d: d["transient"].__setitem__(0, True if d["transient"][0] == 1 else d["transient"][0] + 1), r"transient\[0\]"),
    (lambda d: d["names"].__setitem__(1, "other"), r"names\[1\]"),
])
def test_attack_dag_differs(edit, message):
    c = case(0)
    cert = copy.deepcopy(c.certs[0])
    edit(cert["dag"])
    with pytest.raises(CertificateError, match="for a different graph: .*" + message):
        verify_document(c.inst, cert, "cert.json")


def test_plans_written_with_their_certificate_verify():
    for i in range(2 * len(SEEDS)):
        c = case(i)
        for cert in c.certs:
            full = cert["plan"]["order"]
            pk = cert["peak"]
            for status, lb in (("certified", pk), ("optimal", pk), ("feasible", cert["bound"]["value"])):
                doc = c.plan(full, cert, lower_bound=lb, status=status, method="test")
                out = verify_document(c.inst, doc, "plan.json")
                assert out.ok and out.peak == pk and out.lower_bound <= c.opt
                # plan_to_doc states only what the witness proves
                assert doc["lower_bound"] <= cert["bound"]["value"]
                if doc["status"] in ("certified", "optimal"):
                    assert cert["bound"]["value"] == pk
            out = verify_document(c.inst, cert, "cert.json")
            assert out.certified == cert["certified"] and out.lower_bound == cert["bound"]["value"]


def test_claim_rederived_by_the_checker_itself():
    c = case(1)
    full = c.orders[0]
    value, wit = solver_free_bound(c.dag_doc)
    assert value <= c.opt
    out = verify_document(c.inst, c.plan(full, None, lower_bound=value), "plan.json")
    assert out.proof == "re-derived" and out.lower_bound == value


def test_unknown_fields_are_refused():
    c = case(0)
    doc = c.plan(c.orders[0])
    doc["certainly_optimal"] = True
    with pytest.raises(CertificateError, match="unexpected field 'certainly_optimal'"):
        verify_document(c.inst, doc, "plan.json")
    cert = copy.deepcopy(c.certs[0])
    cert["lower_bound"] = 0
    with pytest.raises(CertificateError, match="unexpected field 'lower_bound'"):
        verify_document(c.inst, cert, "cert.json")
    cert = copy.deepcopy(c.certs[0])
    cert["certified"] = "yes"
    with pytest.raises(CertificateError, match="'certified' must be true or false"):
        verify_certificate(cert)


def test_not_a_plan_is_a_format_error():
    c = case(0)
    for doc in ([], "x", None, {"format": "memopt-graph"}, {}):
        with pytest.raises(FormatError):
            verify_document(c.inst, doc, "x.json")
    with pytest.raises(FormatError, match="version"):
        verify_document(c.inst, {"format": "memopt-plan", "version": True, "order": []}, "x.json")


def test_reports_round_trip():
    c = case(0)
    rep = verify_certificate(c.certs[0])
    d = rep.to_dict()
    assert d["ok"] and VerifyReport.from_dict(json.loads(json.dumps(d))) == rep
    rep2 = verify_plan(c.dag_doc, c.orders[0], peak=_doc_peak(c.dag_doc, c.orders[0]))
    assert rep2.ok and rep2.bound is None
    out = verify_document(c.inst, c.certs[0], "cert.json")
    assert VerifyOutcome.from_dict(json.loads(json.dumps(out.to_dict()))) == out
    assert out["ok"] is True and dict(out.items())["kind"] == "certificate"
    with pytest.raises(CertificateError):
        VerifyReport.from_dict({"nope": 1})


@pytest.mark.parametrize("where, value", [
    (("order", 0), 10**5000), (("peak",), 10**5000), (("lower_bound",), 2**70), (("peak",), 1e300),
    (("peak",), float("inf")), (("instance",), [[[]]]), (("bound",), {"name": "x", "value": 10**5000, "witness": {}}),
], ids=lambda v: type(v).__name__)
def test_huge_and_odd_values_in_plans_are_refused_cleanly(where, value):
    c = case(0)
    doc = c.plan(c.orders[0], c.certs[0] if where[0] == "bound" else None)
    obj = doc
    for p in where[:-1]:
        obj = obj[p]
    obj[where[-1]] = value
    with pytest.raises(CertificateError) as err:
        verify_document(c.inst, doc, "plan.json")
    assert "\n" not in str(err.value) and len(str(err.value)) < 500


@pytest.mark.parametrize("where, value", [
    (("dag", "edges", 0, 0), 10**5000), (("plan", "order", 0), -(10**5000)), (("peak",), 10**5000),
    (("bound", "witness", "node"), 2**64), (("dag", "delta", 0), 2**63),
], ids=lambda v: type(v).__name__)
def test_huge_numbers_in_certificates_are_refused_cleanly(where, value):
    c = case(0)
    cert = copy.deepcopy(next(x for x in c.certs if x["bound"]["witness"]["kind"] == "cut"))
    obj = cert
    for p in where[:-1]:
        obj = obj[p]
    obj[where[-1]] = value
    for check in (verify_certificate, lambda d: verify_document(c.inst, d, "cert.json")):
        with pytest.raises(CertificateError) as err:
            check(cert)
        assert "\n" not in str(err.value) and len(str(err.value)) < 800
