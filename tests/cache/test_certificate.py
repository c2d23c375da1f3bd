"""The residency certificate: contents on hand-checked traces, the independent checker accepting
what certify_residency writes and rejecting every tampered field."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED
from memopt.cache import (certify_residency, flow_lower_bound, load_routes, make_trace,
                          offline_optimum, parse_envelopes, simulate, verify_residency_certificate)
from memopt.cache.certificate import CERT_FORMAT
from memopt.errors import CertificateError, OptionError

ROUTES = SHARED / "data" / "moe-routes"


def variable_trace():
    rng = np.random.default_rng(11)
    req = rng.integers(0, 6, 40)
    return make_trace(req, [3, 5, 2, 7, 4, 1], name="var")


def test_certificate_contents_by_hand():
    # a=4, b=6 bytes; trace a b a b a: demand 10 bytes
    tr = make_trace([0, 1, 0, 1, 0], [4, 6], name="ab")
    cert = certify_residency(tr, {"device": 6, "host": 10})
    assert cert["format"] == CERT_FORMAT and cert["semantic_demand"] == 10
    assert [(e["name"], e["fits"], e["slack"]) for e in cert["envelopes"]] == \
        [("device", False, -4), ("host", True, 0)]
    dev, host = cert["capacities"]
    assert (dev["capacity"], dev["envelope"], host["capacity"]) == (6, "device", 10)
    # at 6 bytes a and b cannot share the cache: every request misses (4+6+4+6+4 = 24)
    assert dev["minimum_traffic"] == {"bytes": 24, "exact": True, "method": "cp-sat", "witness_hits": []}
    # at 10 bytes (the envelope holds the demand) only the first loads move
    assert host["minimum_traffic"]["bytes"] == 10 == host["compulsory_traffic"]
    lru = next(p for p in dev["policies"] if p["policy"] == "lru")
    assert (lru["hits"], lru["misses"], lru["bytes_moved"]) == (0, 5, 24)
    assert verify_residency_certificate(cert, tr)["ok"]


def test_certificate_round_trip_json_text_and_file(tmp_path):
    tr = variable_trace()
    cert = certify_residency(tr, ["device=10", "host=22"], capacities=[6, 10, 15])
    text = json.dumps(cert)
    assert verify_residency_certificate(text, tr)["capacities"] == [6, 10, 15]
    path = tmp_path / "cert.json"
    path.write_text(text)
    assert verify_residency_certificate(path, tr)["ok"]
    for entry in cert["capacities"]:
        best = entry["minimum_traffic"]["bytes"]
        assert entry["minimum_traffic"]["method"] == "cp-sat"
        assert best == offline_optimum(tr, entry["capacity"], method="cp-sat").bytes_moved
        assert all(p["bytes_moved"] >= best for p in entry["policies"])


def test_wrong_trace_is_rejected():
    tr = variable_trace()
    cert = certify_residency(tr, {"device": 10})
    other = make_trace(tr.requests[::-1].copy(), tr.sizes, name="var")
    with pytest.raises(CertificateError, match="digest"):
        verify_residency_certificate(cert, other)


def test_flow_and_belady_certificates():
    tr = variable_trace()
    flow = certify_residency(tr, {"device": 12}, max_requests=0)
    mt = flow["capacities"][0]["minimum_traffic"]
    fb = flow_lower_bound(tr, 12)
    assert mt == {"bytes": fb.lower_bound, "exact": False, "method": "flow",
                  "dual_points": fb.dual_points.tolist()}
    assert verify_residency_certificate(flow, tr)["ok"]
    eq = make_trace(tr.requests, [5] * 6, cache_of=[0, 1, 0, 1, 0, 1], caches=("layer 0", "layer 1"))
    bel = certify_residency(eq, {"device": 20})
    entry = bel["capacities"][0]
    assert entry["capacity"] == 10                         # 20 bytes shared by two caches
    assert entry["minimum_traffic"] == {"bytes": simulate(eq, "belady", 10).bytes_moved, "exact": True,
                                        "method": "belady"}
    assert verify_residency_certificate(bel, eq)["ok"]


# ---------------------------------------------------------------------------- tampering

WITNESSES = ("witness_hits", "dual_points")


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list) and path and path[-1] in WITNESSES:
        yield path, obj
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    else:
        yield path, obj


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _set(cert, path, value):
    c = copy.deepcopy(cert)
    _get(c, path[:-1])[path[-1]] = value
    return c


def _mutations(cert, n_requests):
    """(description, tampered certificate) for every field."""
    for path, val in _leaves(cert):
        if path[-1] == "witness_hits":
            # every request of these traces moves bytes: one hit fewer or more changes the traffic
            if val:
                yield f"{path} drop", _set(cert, path, val[:-1])
                yield f"{path} duplicate", _set(cert, path, val + val[:1])
            missing = next(i for i in range(n_requests + 1) if i not in val)
            yield f"{path} add {missing}", _set(cert, path, sorted(val + [missing]))
        if path[-1] in WITNESSES:
            # another valid proof of the same claim would be fine; junk never is
            yield f"{path} junk", _set(cert, path, val + ["0"])
            yield f"{path} out of range", _set(cert, path, val + [n_requests])
            yield f"{path} unsorted", _set(cert, path, val[::-1] + [0, 0])
            yield f"{path} not a list", _set(cert, path, 3)
            yield f"{path} removed", _delete(cert, path)
            continue
        if isinstance(val, bool):
            yield f"{path} flipped", _set(cert, path, not val)
        elif isinstance(val, int):
            yield f"{path} +1", _set(cert, path, val + 1)
            yield f"{path} as float", _set(cert, path, float(val))
            yield f"{path} as bool", _set(cert, path, bool(val))
        elif isinstance(val, str):
            yield f"{path} edited", _set(cert, path, val + "x")
        elif val is None:
            yield f"{path} set", _set(cert, path, "device")
        yield f"{path} removed", _delete(cert, path)
    for path in [(), ("trace",), ("envelopes", 0), ("capacities", 0), ("capacities", 0, "minimum_traffic"),
                 ("capacities", 0, "policies", 0)]:
        c = copy.deepcopy(cert)
        _get(c, path)["extra"] = 1
        yield f"{path} unknown field", c
    for path in [("envelopes",), ("capacities",), ("capacities", 0, "policies")]:
        c = copy.deepcopy(cert)
        lst = _get(c, path)
        lst.append(copy.deepcopy(lst[0]))
        yield f"{path} duplicated entry", c


def _delete(cert, path):
    c = copy.deepcopy(cert)
    parent = _get(c, path[:-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
        if not parent:
            parent.append("junk")
    return c


@pytest.mark.parametrize("kind", ["cp-sat", "belady", "flow"])
def test_every_tampered_field_is_rejected(kind):
    tr = variable_trace()
    if kind == "belady":
        tr = make_trace(tr.requests, [5] * 6, cache_of=[0, 1, 0, 1, 0, 1], name="eq")
    cert = certify_residency(tr, {"device": 12, "host": 30}, max_requests=0 if kind == "flow" else 2000)
    assert {e["minimum_traffic"]["method"] for e in cert["capacities"]} == {kind}
    verify_residency_certificate(cert, tr)
    count = 0
    for what, bad in _mutations(cert, tr.n_requests):
        count += 1
        with pytest.raises(CertificateError):
            verify_residency_certificate(bad, tr)
            pytest.fail(f"accepted a certificate with {what}")
    assert count > 100


def test_dropping_a_claim_still_verifies_but_a_false_minimum_does_not():
    tr = variable_trace()
    cert = certify_residency(tr, {"device": 12})
    fewer = copy.deepcopy(cert)
    fewer["capacities"][0]["policies"].pop()
    assert verify_residency_certificate(fewer, tr)["ok"]        # fewer claims, all true
    # a minimum that some schedule beats: the witness of a larger capacity is refused
    wide = certify_residency(tr, {"device": 20})
    forged = copy.deepcopy(cert)
    forged["capacities"][0]["minimum_traffic"] = wide["capacities"][0]["minimum_traffic"]
    with pytest.raises(CertificateError):
        verify_residency_certificate(forged, tr)


def test_malformed_certificates():
    tr = variable_trace()
    for bad in ("{not json", "[]", "{}", 3):
        with pytest.raises(CertificateError):
            verify_residency_certificate(bad, tr)
    with pytest.raises(CertificateError, match="no such file"):
        verify_residency_certificate(SHARED / "absent-certificate.json", tr)


@pytest.mark.parametrize("envs", [{"": 3}, {"a": -1}, {"a": 2**62}, ["a=x"], ["a"], ["a=1", "a=2"],
                                  {"a": float("nan")}])
def test_bad_envelopes(envs):
    with pytest.raises(OptionError):
        parse_envelopes(envs)


def test_bad_certify_arguments():
    tr = variable_trace()
    with pytest.raises(OptionError):
        certify_residency(tr, {"d": 4}, policies=["lru", "lru"])
    with pytest.raises(OptionError):
        certify_residency(tr, {"d": 4}, capacities=[-1])
    with pytest.raises(OptionError):
        certify_residency([0, 1], {"d": 4})
    with pytest.raises(OptionError):
        certify_residency(tr, {"d": 4}, time_limit=-1)
    with pytest.raises(OptionError):
        certify_residency(tr, {"d": 4}, max_requests=True)
    with pytest.raises(OptionError):
        verify_residency_certificate(certify_residency(tr, {"d": 4}), tr, time_limit=float("inf"))


def test_real_route_certificate(tmp_path):
    path = ROUTES / "olmoe_layer0.jsonl"
    if not path.exists():
        pytest.skip(f"shared data not available: {path} (the real MoE route traces live in "
                    "../shared/data/moe-routes beside the checkout)")
    expert = 12582912          # OLMoE expert: 3 x 2048 x 1024 bf16 weights
    lines = path.read_text().split("\n")
    p = tmp_path / "olmoe_slice.jsonl"          # the first 200 rows after the 2048 warm-up rows
    p.write_text("\n".join([lines[0]] + lines[1 + 2048:1 + 2048 + 200]) + "\n")
    tr = load_routes(p, object_bytes=expert)
    cert = certify_residency(tr, {"device": 16 * expert, "host": 64 * expert})
    assert (cert["trace"]["requests"], cert["trace"]["objects"]) == (1600, 63)
    dev, host = cert["envelopes"]
    assert host["fits"] and not dev["fits"]
    assert cert["semantic_demand"] == 63 * expert      # one expert is never selected in these rows
    assert cert["capacities"][0]["minimum_traffic"]["method"] == "belady"
    assert cert["capacities"][1]["minimum_traffic"]["bytes"] == cert["semantic_demand"]
    assert verify_residency_certificate(cert, tr)["ok"]


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=6)
_FUZZ_TRACE = make_trace([0, 1, 2, 0, 1, 2, 0], [2, 2, 3], name="fz")
_FUZZ_CERT = certify_residency(_FUZZ_TRACE, {"device": 5, "host": 7})


@settings(max_examples=150)
@given(st.data())
def test_fuzzed_certificates_only_raise_certificate_errors(data):
    leaves = [p for p, _v in _leaves(_FUZZ_CERT)]
    path = data.draw(st.sampled_from(leaves))
    value = data.draw(JSON_VALUES)
    bad = _set(_FUZZ_CERT, path, value)
    try:
        verify_residency_certificate(bad, _FUZZ_TRACE)
    except CertificateError:
        return
    # accepted: then the value must be what was there, or a weaker true claim (another
    # witness schedule; a capacity no longer tied to an envelope)
    assert (_get(bad, path) == _get(_FUZZ_CERT, path) or path[-1] == "witness_hits"
            or path[-1] == "dual_points" or (path[-1] == "envelope" and value is None))


@settings(max_examples=60)
@given(st.integers(1, 6).flatmap(lambda m: st.tuples(st.lists(st.integers(0, m - 1), max_size=30),
                                                       st.lists(st.integers(0, 6), min_size=m, max_size=m))),
       st.integers(0, 14), st.booleans(), st.data())
def test_dual_points_prove_the_flow_bound(tr, cap, split, data):
    """The checker's plain-Python weak-duality bound: the flow bound's own dual points give
    exactly the bound; any other set of points gives a bound no higher than the optimum."""
    from memopt.cache.certificate import _dual_bound

    req, sizes = tr
    cache_of = [o % 2 for o in range(len(sizes))] if split else None
    t = make_trace(req, sizes, cache_of=cache_of)
    fb = flow_lower_bound(t, cap)
    assert _dual_bound(t, cap, fb.dual_points.tolist()) == fb.lower_bound
    other = sorted(data.draw(st.sets(st.integers(0, max(len(req) - 1, 0)), max_size=len(req))) if req else [])
    assert _dual_bound(t, cap, other) <= fb.lower_bound <= offline_optimum(t, cap, method="cp-sat").bytes_moved


def test_a_weaker_true_bound_verifies_a_false_one_does_not():
    tr = variable_trace()
    cert = certify_residency(tr, {"device": 12}, max_requests=0)
    entry = cert["capacities"][0]
    weak = copy.deepcopy(cert)
    # no dual point: the bound is the compulsory traffic, a true (weaker) claim
    weak["capacities"][0]["minimum_traffic"].update(bytes=entry["compulsory_traffic"], dual_points=[])
    assert verify_residency_certificate(weak, tr)["ok"]
    weak["capacities"][0]["minimum_traffic"]["bytes"] += 1
    with pytest.raises(CertificateError, match="dual points"):
        verify_residency_certificate(weak, tr)
