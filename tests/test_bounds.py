"""Lower bounds (trap cuts, pair branching, simple bounds), certificates and the checker."""

from __future__ import annotations

import copy
import itertools
import re
import json

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from memopt.bounds import (certify, forward_trap_bound, load_certificate, make_certificate, save_certificate, node_trap_values, pair_trap_bound,
                           reverse_trap_bound, simple_bounds, simple_dag_bounds, verify_certificate)
from memopt.bounds.trap import best_bound, forward_trap_exceeds, probing_trap_bound, trap_cut
from memopt.core import Op, Program, SignedDAG, Statement, Tensor, TensorGraph, dag_order_from_op_order, graph_to_dag
from memopt.errors import CertificateError
from memopt.schedule.brute_force import brute_force_dag_optimum, brute_force_schedule, random_tensor_graph

from conftest import shared_graph

# ---------------------------------------------------------------------------- generators


def random_graphs(max_ops: int = 9):
    return st.builds(lambda seed, n: random_tensor_graph(np.random.default_rng(seed), n),
                     st.integers(0, 2**32 - 1), st.integers(1, max_ops))


def _random_dag(seed: int, n: int) -> SignedDAG:
    """A raw signed DAG: any signs, transients on allocations and on releases."""
    rng = np.random.default_rng(seed)
    delta = rng.integers(-15, 21, n)
    transient = np.where(rng.random(n) < 0.4, rng.integers(0, 12, n), 0)
    p = rng.uniform(0.1, 0.6)
    edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < p]
    perm = rng.permutation(n)  # node ids need not be topological
    edges = [(int(perm[a]), int(perm[b])) for a, b in edges]
    return SignedDAG.build([f"n{i}" for i in range(n)], delta[np.argsort(perm)], edges,
                           transient=transient[np.argsort(perm)], base=int(rng.integers(0, 10)), name="random")


def random_dags(max_nodes: int = 9):
    return st.builds(_random_dag, st.integers(0, 2**32 - 1), st.integers(1, max_nodes))


def _random_program(seed: int, n: int) -> Program:
    """A random statement program: allocs, kernel uses (reads/writes), frees, transient bytes."""
    rng = np.random.default_rng(seed)
    inputs = {"in0": int(rng.integers(0, 10))} if rng.random() < 0.5 else {}
    live = list(inputs)
    stmts, k = [], 0
    for i in range(n):
        r = rng.random()
        trans = int(rng.integers(0, 9)) if rng.random() < 0.4 else 0
        if r < 0.4 or not live:
            b = f"b{k}"
            k += 1
            reads = tuple(x for x in live if rng.random() < 0.4)
            stmts.append(Statement(f"s{i}", allocs=((b, int(rng.integers(0, 16))),), reads=reads, writes=(b,),
                                   transient=trans))
            live.append(b)
        elif r < 0.7:
            b = live.pop(int(rng.integers(0, len(live))))
            stmts.append(Statement(f"s{i}", frees=(b,), transient=trans))
        else:
            reads = tuple(x for x in live if rng.random() < 0.5)
            writes = tuple(x for x in live if rng.random() < 0.2)
            stmts.append(Statement(f"s{i}", reads=reads, writes=writes, transient=trans))
    return Program(stmts, inputs=inputs, name="program")


def random_programs(max_statements: int = 9):
    return st.builds(_random_program, st.integers(0, 2**32 - 1), st.integers(1, max_statements))


# ---------------------------------------------------------------------------- brute force references


def _ideals(dag: SignedDAG) -> list[int]:
    """Every ideal of a small DAG, as bit masks."""
    n = dag.n
    pred_mask = [sum(1 << int(p) for p in dag.pred(v)) for v in range(n)]
    out = []
    for m in range(1 << n):
        if all(not (m >> v) & 1 or (pred_mask[v] & m) == pred_mask[v] for v in range(n)):
            out.append(m)
    return out


def _weight(dag: SignedDAG, m: int) -> int:
    return sum(int(dag.delta[v]) for v in range(dag.n) if (m >> v) & 1)


def _brute_trap(dag, ideals, v, force_in=(), force_out=()):
    """min over ideals I before v (with forced members) of the memory while v runs; None if impossible."""
    best = None
    for m in ideals:
        if (m >> v) & 1:
            continue
        if any(not (m >> u) & 1 for u in force_in) or any((m >> u) & 1 for u in force_out):
            continue
        if any((m >> int(p)) & 1 == 0 for p in dag.pred(v)):
            continue
        val = dag.base + _weight(dag, m) + int(dag.delta[v]) + int(dag.transient[v])
        best = val if best is None else min(best, val)
    return best


def _comparable(dag):
    n = dag.n
    reach = np.zeros((n, n), bool)
    for v in dag.topological_order()[::-1]:
        for s in dag.succ(int(v)):
            reach[v, s] = True
            reach[v] |= reach[s]
    return reach | reach.T


# ---------------------------------------------------------------------------- exactness of the cuts


@given(random_dags(10))
@settings(max_examples=80)
def test_min_cut_equals_brute_force_min_closure(dag):
    ideals = _ideals(dag)
    fwd = node_trap_values(dag)
    rev = node_trap_values(dag, reverse=True)
    for v in range(dag.n):
        want = _brute_trap(dag, ideals, v)
        assert fwd[v] == want
        assert rev[v] == want  # the reverse trap, translated back, is the forward trap node by node
    comp = _comparable(dag)
    for v, u in itertools.product(range(dag.n), repeat=2):
        if u != v and not comp[u, v]:
            assert trap_cut(dag, v, force_in=[u])["value"] == _brute_trap(dag, ideals, v, force_in=[u])
            assert trap_cut(dag, v, force_out=[u])["value"] == _brute_trap(dag, ideals, v, force_out=[u])
    assert forward_trap_bound(dag).value == max([dag.base, dag.base + int(dag.delta.sum())] + fwd.tolist())
    assert reverse_trap_bound(dag).value == forward_trap_bound(dag).value


@given(random_dags(10), st.integers(-3, 3))
@settings(max_examples=80)
def test_forward_trap_exceeds_answers_the_bound(dag, shift):
    """The early-exit test says yes exactly when the forward trap bound is above the limit."""
    value = forward_trap_bound(dag).value
    hints = list(range(dag.n))[::-1]          # every node, worst first: the answer must not change
    for limit in (value + shift, value - 1, value):
        assert forward_trap_exceeds(dag, limit) == (value > limit)
        assert forward_trap_exceeds(dag, limit, hints=hints, keep_hints=3) == (value > limit)
        assert len(hints) <= max(3, dag.n)
    # a yes decided by a node's trap (not the start or end memory) puts that node first
    found: list = []
    assert forward_trap_exceeds(dag, value - 1, hints=found, keep_hints=2)
    assert len(found) <= 1
    if found:
        assert node_trap_values(dag)[found[0]] > value - 1
        assert forward_trap_exceeds(dag, value - 1, hints=found, keep_hints=2) and len(found) == 1
    assert not forward_trap_exceeds(dag, value, hints=found) and len(found) <= 1


def test_impossible_forcing_gives_no_cut():
    d = SignedDAG.build(["a", "b", "c"], [1, 2, 3], edges=[(0, 1), (1, 2)])
    assert trap_cut(d, 1, force_in=[2]) is None
    assert trap_cut(d, 1, force_out=[0]) is None


@given(random_dags(9))
@example(_random_dag(2504880, 8))  # no free allocation in a cut: OR-Tools reports no source side
@settings(max_examples=60)
def test_pair_bound_equals_brute_force_pair_formula(dag):
    ideals = _ideals(dag)
    comp = _comparable(dag)
    cand = [v for v in range(dag.n) if dag.delta[v] + dag.transient[v] > 0]
    T = {v: _brute_trap(dag, ideals, v) for v in range(dag.n)}
    want = max([dag.base, dag.base + int(dag.delta.sum())] + list(T.values()))
    for u, v in itertools.combinations(cand, 2):
        if comp[u, v]:
            continue
        before = max(_brute_trap(dag, ideals, v, force_in=[u]), _brute_trap(dag, ideals, u, force_out=[v]))
        after = max(_brute_trap(dag, ideals, v, force_out=[u]), _brute_trap(dag, ideals, u, force_in=[v]))
        want = max(want, min(before, after))
    pb = pair_trap_bound(dag, time_limit=60)
    assert pb.complete
    assert pb.value == want


# ---------------------------------------------------------------------------- soundness against brute force


@given(random_graphs(9))
@settings(max_examples=60)
def test_every_bound_at_most_the_optimum_on_tensor_graphs(graph):
    order, opt = brute_force_schedule(graph)
    dag = graph_to_dag(graph).dag
    bounds = (simple_bounds(graph) + simple_dag_bounds(dag)
              + [forward_trap_bound(dag), reverse_trap_bound(dag), pair_trap_bound(dag, time_limit=30),
                 forward_trap_bound(graph), best_bound(graph, time_limit=30)])
    for b in bounds:
        assert b.value <= opt, b.name
    # the trap dominates the simple bounds
    assert forward_trap_bound(dag).value >= max(b.value for b in simple_bounds(graph) + simple_dag_bounds(dag))
    # and the certificate of an optimal order verifies, with the checker's own peak
    for b in bounds:
        if b.witness.get("kind") == "op_footprint":
            with pytest.raises(CertificateError, match="certifiable"):
                make_certificate(graph, order, b)
            continue
        cert = json.loads(json.dumps(make_certificate(graph, order, b)))
        rep = verify_certificate(cert)
        assert rep.peak == opt and rep.peak_ok and rep.bound_ok and rep.bound == b.value
        assert rep.certified == (b.value == opt)


@given(random_programs(9))
@settings(max_examples=60)
def test_every_bound_at_most_the_optimum_on_programs(program):
    dag = program.to_dag()
    opt = brute_force_dag_optimum(dag)
    for b in simple_dag_bounds(dag) + [forward_trap_bound(dag), reverse_trap_bound(dag),
                                       pair_trap_bound(dag, time_limit=30)]:
        assert b.value <= opt, b.name
        cert = make_certificate(dag, np.arange(dag.n), b)  # the program's own order
        rep = verify_certificate(cert)
        assert rep.peak == program.peak() and rep.bound == b.value


@given(random_dags(9))
@settings(max_examples=80)
def test_every_bound_at_most_the_optimum_on_signed_dags(dag):
    opt = brute_force_dag_optimum(dag)
    for b in simple_dag_bounds(dag) + [forward_trap_bound(dag), reverse_trap_bound(dag),
                                       pair_trap_bound(dag, time_limit=30, nodes=range(dag.n))]:
        assert b.value <= opt, b.name
        verify_certificate(make_certificate(dag, dag.topological_order(), b))


def test_untranslated_reverse_trap_is_not_a_bound():
    # base 5, one free of 5 bytes holding 3 transient bytes: our peak is 5 (at the start);
    # the reversed program runs it from the end level 0 up to 0 + 5 + 3 = 8.
    d = SignedDAG.build(["free"], [-5], transient=[3], base=5)
    assert brute_force_dag_optimum(d) == 5
    assert reverse_trap_bound(d).value == 5 == forward_trap_bound(d).value


# ---------------------------------------------------------------------------- exact values by hand


def two_branches() -> TensorGraph:
    """Two independent branches a1 -> a2 and b1 -> b2 joined by c: the pair bound sees the interleaving."""
    return TensorGraph.build(
        tensors=[Tensor("a1", 10), Tensor("a2", 1), Tensor("b1", 10), Tensor("b2", 1), Tensor("c", 1, output=True)],
        ops=[Op("A1", (), ("a1",)), Op("A2", ("a1",), ("a2",), workspace=5),
             Op("B1", (), ("b1",)), Op("B2", ("b1",), ("b2",), workspace=5), Op("C", ("a2", "b2"), ("c",))])


def test_exact_values_two_branches():
    g = two_branches()
    _, opt = brute_force_schedule(g)
    # A1 A2 B1 B2 C: A2 runs with a1 + a2 + 5 = 16; B2 with a2 + b1 + b2 + 5 = 17
    assert opt == 17
    assert forward_trap_bound(g).value == 16     # each x2 alone can run first: 10 + 1 + 5
    assert pair_trap_bound(g).value == 17        # branching A2 before/after B2 closes the gap
    assert {b.name: b.value for b in simple_bounds(g)} == {"max_op_footprint": 16, "graph_outputs": 1}
    pb = pair_trap_bound(g)
    assert pb.witness["kind"] == "pair" and set(pb.critical) == {1, 3}
    cert = make_certificate(g, [0, 1, 2, 3, 4], pb)
    rep = verify_certificate(cert)
    assert rep.certified and rep.peak == 17


# ---------------------------------------------------------------------------- tampering


def _cert_with_flow():
    g = two_branches()
    return make_certificate(g, [0, 1, 2, 3, 4], pair_trap_bound(g))


def test_tampered_flow_is_rejected():
    # v is independent of a -> free(a): its cheapest ideal runs a and frees it, a flow of 10
    d = SignedDAG.build(["a", "free(a)", "v"], [10, -10, 1], edges=[(0, 1)])
    wit = trap_cut(d, 2)
    S, T = 3, 4
    assert wit["value"] == 1 and wit["flow"] == [[S, 1, 10], [0, T, 10], [1, 0, 10]]
    from memopt.bounds.trap import Bound

    cert = make_certificate(d, [2, 0, 1], Bound(1, "forward_trap", (2,), wit))
    assert verify_certificate(cert).bound == 1
    for k in range(3):
        for delta in (1, -1):
            bad = copy.deepcopy(cert)
            bad["bound"]["witness"]["flow"][k][2] += delta
            with pytest.raises(CertificateError, match="conserved|capacity|claims"):
                verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["bound"]["witness"]["flow"] = [[S, 1, 11], [0, T, 11], [1, 0, 11]]
    with pytest.raises(CertificateError, match=r"arc source -> 'free\(a\)' \(1\) is 11, above its capacity 10"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["bound"]["witness"]["flow"] = [[S, 1, -1], [0, T, -1], [1, 0, -1]]
    with pytest.raises(CertificateError, match="negative"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # an arc the network does not have (a closure arc in the wrong direction)
    bad["bound"]["witness"]["flow"] = [[S, 1, 10], [0, T, 10], [0, 1, 10]]
    with pytest.raises(CertificateError, match=r"'a' \(0\) -> 'free\(a\)' \(1\) is not an arc of the network of node 'v' \(2\)"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["bound"]["witness"]["flow"].append([S, 1, 0])
    with pytest.raises(CertificateError, match="listed twice"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # the running node itself is not in its network
    bad["bound"]["witness"]["flow"].append([S, 2, 0])
    with pytest.raises(CertificateError, match="not an arc"):
        verify_certificate(bad)


def test_tampered_values_are_rejected():
    cert = _cert_with_flow()
    bad = copy.deepcopy(cert)
    bad["peak"] -= 1
    rep = verify_certificate(bad, strict=False)
    assert not rep.peak_ok and rep.bound_ok and not rep.certified
    assert any("claimed peak 16 but the plan's peak is 17" in e for e in rep.errors)
    bad = copy.deepcopy(cert)
    bad["bound"]["value"] += 1
    with pytest.raises(CertificateError, match="claimed bound 18 but the witness proves 17"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["bound"]["witness"]["cases"][1]["cut"]["value"] += 1
    with pytest.raises(CertificateError, match="claims 18 but its flow proves 17"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["dag"]["delta"][0] += 1   # the graph changed under the witness
    with pytest.raises(CertificateError):
        verify_certificate(bad)


def test_bad_orders_are_rejected():
    cert = _cert_with_flow()
    order = cert["plan"]["order"]
    names = cert["dag"]["names"]
    # swap A1 and A2: A2 would run before its producer
    bad = copy.deepcopy(cert)
    i, j = order.index(0), order.index(1)
    bad["plan"]["order"][i], bad["plan"]["order"][j] = order[j], order[i]
    with pytest.raises(CertificateError, match=r"not topological: node 'A2' \(1\) runs before its predecessor 'A1'"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["plan"]["order"] = order[:-1]
    with pytest.raises(CertificateError, match=re.escape(f"misses node '{names[order[-1]]}'")):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["plan"]["order"] = order[:-1] + [order[0]]
    with pytest.raises(CertificateError, match="twice"):
        verify_certificate(bad)


def test_wrong_pair_cases_and_forcing_are_rejected():
    cert = _cert_with_flow()
    w = cert["bound"]["witness"]
    bad = copy.deepcopy(cert)  # a cut that the case does not imply
    bad["bound"]["witness"]["cases"][0], bad["bound"]["witness"]["cases"][1] = w["cases"][1], w["cases"][0]
    bad["bound"]["witness"]["cases"][0]["case"], bad["bound"]["witness"]["cases"][1]["case"] = "u_before_v", "u_after_v"
    with pytest.raises(CertificateError, match="not implied by the case"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)
    bad["bound"]["witness"]["cases"] = bad["bound"]["witness"]["cases"][:1]
    with pytest.raises(CertificateError, match="cases must be exactly"):
        verify_certificate(bad)
    # a cut forcing a successor before its node is impossible (and not implied): rejected, not trusted
    g = two_branches()
    dag = graph_to_dag(g).dag
    wit = trap_cut(dag, 3)
    wit["force_in"] = [4]
    cert2 = make_certificate(g, [0, 1, 2, 3, 4], forward_trap_bound(g))
    cert2["bound"]["witness"] = wit
    with pytest.raises(CertificateError, match=r"force_in node 'C' \(4\) is not implied by the DAG"):
        verify_certificate(cert2)


def test_only_implied_forcing_is_accepted_in_a_top_level_cut():
    g = two_branches()
    dag = graph_to_dag(g).dag
    order = [0, 1, 2, 3, 4]
    free = trap_cut(dag, 3)                         # B2: ancestors B1; A1, A2 and the releases are free
    cert = make_certificate(g, order, forward_trap_bound(g))
    # forcing an ancestor in (or a descendant out) is what the DAG implies: same value, accepted
    for fin, fout in [([2], []), ([], [4]), ([2], [3, 4])]:
        wit = trap_cut(dag, 3, fin, fout)
        assert wit["value"] == free["value"]
        cert["bound"] = {"name": "forward_trap", "value": wit["value"], "witness": wit}
        assert verify_certificate(cert, strict=False).bound == free["value"]
    # forcing an incomparable node raises the value for the orders that agree, not for all: refused
    wit = trap_cut(dag, 3, [0, 1], [])              # A1 and A2 before B2: the plan's own prefix
    assert wit["value"] > free["value"]
    cert["bound"] = {"name": "forward_trap", "value": wit["value"], "witness": wit}
    with pytest.raises(CertificateError, match=r"force_in node 'A1' \(0\) is not implied by the DAG"):
        verify_certificate(cert)
    # the reversed program: its ancestors are our descendants
    rwit = trap_cut(dag, 3, [4], [], reverse=True)
    cert["bound"] = {"name": "reverse_trap", "value": rwit["value"], "witness": rwit}
    assert verify_certificate(cert, strict=False).bound == rwit["value"]
    rwit = trap_cut(dag, 3, [0], [], reverse=True)   # A1 "before" B2 in the reversed program: after it in ours
    cert["bound"] = {"name": "reverse_trap", "value": rwit["value"], "witness": rwit}
    with pytest.raises(CertificateError, match="not implied by the DAG"):
        verify_certificate(cert)


def test_checker_refuses_junk_with_certificate_errors_only():
    cert = _cert_with_flow()
    for path, junk in [(("bound", "witness", "cases"), [None, {}, {"case": ["x"]}]),
                       (("bound", "witness", "cases", 0, "cut", "force_in"), [[1, 2]]),
                       (("bound", "witness", "cases", 0, "cut", "force_out"), [{"a": 1}]),
                       (("bound", "witness", "u"), 10**5000), (("peak",), 2**70), (("peak",), 1e300),
                       (("certified",), "true"), (("version",), True), (("plan", "extra"), 1),
                       (("bound", "witness", "cases", 1, "cut", "program"), ["forward"])]:
        bad = copy.deepcopy(cert)
        obj = bad
        for p in path[:-1]:
            obj = obj[p]
        obj[path[-1]] = junk
        with pytest.raises(CertificateError):
            verify_certificate(bad)


def test_malformed_certificates_are_rejected():
    cert = _cert_with_flow()
    for mutate, msg in [
        (lambda c: c.update(format="other"), "not a memopt certificate"),
        (lambda c: c.update(version=7), "unsupported certificate version 7"),
        (lambda c: c["dag"]["edges"].append([0, 99]), "out of range"),
        (lambda c: c["dag"]["transient"].__setitem__(0, -1), "negative"),
        (lambda c: c["bound"]["witness"].update(kind="magic"), "unknown kind 'magic'"),
        (lambda c: c.update(peak="17"), "peak must be an integer"),
    ]:
        bad = copy.deepcopy(cert)
        mutate(bad)
        with pytest.raises(CertificateError, match=msg):
            verify_certificate(bad)


def test_bound_above_peak_is_inconsistent():
    # a witness may be valid yet belong to a plan claimed better than possible
    d = SignedDAG.build(["a", "b"], [5, 5], edges=[(0, 1)])
    cert = make_certificate(d, [0, 1], forward_trap_bound(d))
    cert["bound"]["witness"]["value"] = cert["bound"]["value"]
    assert verify_certificate(cert).certified
    cert["dag"]["delta"] = [5, 3]  # peak 8 now, witness flow unchanged
    rep = verify_certificate(cert, strict=False)
    assert not rep.ok


# ---------------------------------------------------------------------------- probing (edge finding)


@given(random_graphs(8))
@settings(max_examples=40)
def test_probing_bound_is_sound_and_certified_on_tensor_graphs(graph):
    order, opt = brute_force_schedule(graph)
    pb = pair_trap_bound(graph)
    q = probing_trap_bound(graph, upper=opt, time_limit=60)
    assert pb.value <= q.value <= opt
    rep = verify_certificate(json.loads(json.dumps(make_certificate(graph, order, q))))
    assert rep.bound == q.value and rep.peak == opt


@given(random_dags(9))
@settings(max_examples=40)
def test_probing_bound_is_sound_on_signed_dags(dag):
    opt = brute_force_dag_optimum(dag)
    q = probing_trap_bound(dag, time_limit=60)   # default upper: a trivial one
    assert q.value <= opt
    assert verify_certificate(make_certificate(dag, dag.topological_order(), q)).bound == q.value


@pytest.mark.parametrize("seed, pair, final", [(212, 56, "cut"), (9, 53, "cycle")])
def test_probing_closes_the_gap_exact_values(seed, pair, final):
    g = random_tensor_graph(np.random.default_rng(seed), 6)
    order, opt = brute_force_schedule(g)
    assert pair_trap_bound(g).value == pair < opt
    q = probing_trap_bound(g, upper=opt)
    assert q.value == opt and q.witness["kind"] == "refutation" and q.witness["final"]["kind"] == final
    assert verify_certificate(make_certificate(g, order, q)).certified
    # certify() finds the same on its own, from the order alone, and survives a file round trip
    cert = certify(g, order)
    assert cert["certified"] and verify_certificate(cert).certified


def test_certificate_file_round_trip(tmp_path):
    g = two_branches()
    cert = certify(g, [0, 1, 2, 3, 4])
    save_certificate(cert, tmp_path / "c.json")
    assert load_certificate(tmp_path / "c.json") == cert
    assert verify_certificate(load_certificate(tmp_path / "c.json")).certified


def test_tampered_refutations_are_rejected():
    g = random_tensor_graph(np.random.default_rng(9), 6)
    order, opt = brute_force_schedule(g)
    cert = make_certificate(g, order, probing_trap_bound(g, upper=opt))
    steps = cert["bound"]["witness"]["steps"]
    assert len(steps) >= 2
    bad = copy.deepcopy(cert)   # derive the opposite edge from the same cut
    bad["bound"]["witness"]["steps"][0]["edge"] = steps[0]["edge"][::-1]
    with pytest.raises(CertificateError, match="assumes extra edges"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # a step that leans on itself
    bad["bound"]["witness"]["steps"][0]["on"] = 1
    with pytest.raises(CertificateError, match="must count earlier derived edges"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # keep one derived edge only: no cycle left
    del bad["bound"]["witness"]["steps"][1:]
    with pytest.raises(CertificateError, match="close no cycle"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # claim a higher limit than the cuts refute
    bad["bound"]["witness"]["limit"] += 5
    bad["bound"]["witness"]["value"] += 5
    bad["bound"]["value"] += 5
    with pytest.raises(CertificateError, match="not above the limit"):
        verify_certificate(bad)
    bad = copy.deepcopy(cert)   # a plain bound cut may not assume an edge
    wit = copy.deepcopy(steps[0]["cut"])
    bad["bound"] = {"name": "forward_trap", "value": wit["value"], "witness": wit}
    with pytest.raises(CertificateError, match="assumes extra edges"):
        verify_certificate(bad)


# ---------------------------------------------------------------------------- real graphs


@pytest.mark.parametrize("name, forward, pair", [
    ("VGG16_256_224_224_3_train_nx.json", 15825108992, 15825108992),
    ("ResNet50_256_224_224_3_train_nx.json", 38059356160, 38059356160),
    ("MobileNet_512_224_224_3_train_nx.json", 34701056000, 34701056000),
    ("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json", 32440, 34450),
])
def test_exact_bounds_on_real_graphs(name, forward, pair):
    from memopt.io.checkmate import load_checkmate

    inst = load_checkmate(shared_graph(name))
    dag = inst.dag
    fb, rb = forward_trap_bound(dag), reverse_trap_bound(dag)
    assert fb.value == forward and rb.value == forward
    pb = pair_trap_bound(dag, time_limit=600)
    assert pb.complete and pb.value == pair
    full = dag_order_from_op_order(inst.graph_dag, inst.input_order)
    for b in (fb, rb, pb):
        rep = verify_certificate(json.loads(json.dumps(make_certificate(dag, full, b))))
        assert rep.bound == b.value and rep.peak_ok


@pytest.mark.parametrize("name, forward", [
    ("random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json", 105170),
    ("random_layered_n500_w0.36_nlv0.75_ed0.2_scd0.14.json", 247960),
    ("random_layered_n1000_w0.31_nlv0.75_ed0.2_scd0.14.json", 550170),
    ("ResNet50_256_224_224_3_test_nx.json", 2466250752),
])
def test_exact_trap_values_on_larger_graphs(name, forward):
    from memopt.io.checkmate import load_checkmate

    dag = load_checkmate(shared_graph(name)).dag
    fb = forward_trap_bound(dag)
    assert fb.value == forward == reverse_trap_bound(dag).value
    assert verify_certificate(make_certificate(dag, dag.topological_order(), fb)).bound == forward
