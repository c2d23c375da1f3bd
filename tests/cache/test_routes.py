"""Request traces: the expert-route reader (default reading, passes, warm-up, per-layer caches),
the memopt-requests format, and errors that name the file and the line."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED
from memopt.cache import dump_requests, load_requests, load_routes, make_trace, parse_requests, simulate
from memopt.errors import FormatError, OptionError

ROUTES = SHARED / "data" / "moe-routes"
QWEN_LAYERS = (0, 8, 12, 18, 23)


def real_routes(name: str):
    path = ROUTES / name
    if not path.exists():
        pytest.skip(f"shared data not available: {path} (the real MoE route traces live in "
                    "../shared/data/moe-routes beside the checkout)")
    return path


def meta(top_k=2, **extra):
    return {"type": "meta", "model_id": "test/moe", "top_k": top_k, "layers_logged": [0], **extra}


def route(tok, layer, ids, weights=None):
    rec = {"type": "route", "req_id": "r0", "token_idx": tok, "layer": layer, "topk_ids": ids}
    rec["topk_weights"] = weights if weights is not None else [0.5 + 0.1 * i for i in range(len(ids))][::-1]
    return rec


def write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ---------------------------------------------------------------------------- default reading

def test_default_reading_file_order_listed_order(tmp_path):
    p = write(tmp_path, "l0.jsonl", [meta(), route(0, 0, [3, 1]), route(1, 0, [1, 2]), route(0, 0, [2, 3])])
    tr = load_routes(p)
    # objects (layer, expert) sorted; requests in file order, topk_ids in listed order
    assert tr.objects == ((0, 1), (0, 2), (0, 3))
    assert [tr.objects[o] for o in tr.requests.tolist()] == [(0, 3), (0, 1), (0, 1), (0, 2), (0, 2), (0, 3)]
    assert tr.caches == ("global",)
    assert tr.sizes.tolist() == [1, 1, 1]
    assert tr.meta["passes"] == 2          # token_idx restarts at the third row
    assert tr.meta["rows"] == 3


def test_several_files_line_up_pass_by_pass_layer_by_layer(tmp_path):
    # two passes (2 rows, then 1 row) in each of layers 5 and 1; files given in any order
    a = write(tmp_path, "l5.jsonl", [meta(), route(0, 5, [0, 1]), route(1, 5, [2, 0]), route(0, 5, [1, 2])])
    b = write(tmp_path, "l1.jsonl", [meta(), route(0, 1, [7, 8]), route(1, 1, [8, 9]), route(0, 1, [9, 7])])
    tr = load_routes([a, b], object_bytes={1: 10, 5: 20})
    got = [tr.objects[o] for o in tr.requests.tolist()]
    assert got == [(1, 7), (1, 8), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2), (5, 0),   # pass 0
                   (1, 9), (1, 7), (5, 1), (5, 2)]                                   # pass 1
    assert tr.sizes.tolist() == [10, 10, 10, 20, 20, 20]
    assert tr.semantic_demand() == 90
    per = load_routes([a, b], object_bytes={1: 10, 5: 20}, per_layer=True)
    assert per.caches == ("layer 1", "layer 5")
    assert per.cache_of.tolist() == [0, 0, 0, 1, 1, 1]
    assert per.requests.tolist() == tr.requests.tolist()


def test_same_file_twice_is_refused(tmp_path):
    a = write(tmp_path, "a.jsonl", [meta(), route(0, 0, [0, 1])])
    with pytest.raises(OptionError, match="given twice"):
        load_routes([a, str(a)])


def test_files_with_different_passes_are_refused(tmp_path):
    a = write(tmp_path, "a.jsonl", [meta(), route(0, 0, [0, 1]), route(1, 0, [1, 2])])
    b = write(tmp_path, "b.jsonl", [meta(), route(0, 1, [0, 1]), route(0, 1, [1, 2])])
    with pytest.raises(FormatError, match=r"b\.jsonl: its passes do not line up"):
        load_routes([a, b])


def test_drop_warmup_identical_passes_and_uniform_rows(tmp_path):
    recs = [meta(),
            route(0, 0, [4, 5]), route(1, 0, [4, 5]), route(2, 0, [4, 5]),       # dummy pass
            route(0, 0, [1, 2], [0.5, 0.5]), route(1, 0, [3, 2], [0.5, 0.5]),   # uniform weights
            route(2, 0, [1, 3]), route(3, 0, [2, 1]),                           # real rows
            route(0, 0, [3, 1])]
    p = write(tmp_path, "w.jsonl", recs)
    tr = load_routes(p, drop_warmup=True)
    assert tr.meta["dropped_rows"] == {str(p): 5}
    assert [tr.objects[o][1] for o in tr.requests.tolist()] == [1, 3, 2, 1, 3, 1]
    assert tr.meta["passes"] == 2
    full = load_routes(p)
    assert full.n_requests == 16
    assert load_routes(p, skip_passes=1).n_requests == 10
    assert load_routes(p, skip_passes=1, skip_rows=2).n_requests == 6
    with pytest.raises(OptionError, match="skip_passes=3 drops every pass"):
        load_routes(p, skip_passes=3)
    with pytest.raises(OptionError, match="nothing left"):
        load_routes(p, skip_passes=2, skip_rows=1)
    with pytest.raises(OptionError):
        load_routes(p, skip_rows=-1)


# ---------------------------------------------------------------------------- bad route lines

BAD_ROUTES = [
    ('{"type": "route", "token_idx": 0, "layer": 0, "topk_ids": [1, 2]}', 1, "meta record"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 2}', 3, "invalid JSON"),
    ('{"type": "route", "token_idx": 1, "layer": 0}', 3, "topk_ids"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 1]}', 3, "expert twice"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 2, 3]}', 3, "top_k=2"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, -2]}', 3, "expert id -2"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 64]}', 3, r"num_experts is 64"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 2.5]}', 3, "expert id"),
    ('{"type": "route", "token_idx": -1, "layer": 0, "topk_ids": [1, 2]}', 3, "token_idx"),
    ('{"type": "route", "token_idx": "1", "layer": 0, "topk_ids": [1, 2]}', 3, "token_idx"),
    ('{"type": "route", "token_idx": 1, "layer": true, "topk_ids": [1, 2]}', 3, "layer"),
    ('{"type": "route", "token_idx": NaN, "layer": 0, "topk_ids": [1, 2]}', 3, "NaN"),
    ('{"type": "note", "token_idx": 1, "layer": 0, "topk_ids": [1, 2]}', 3, "route record"),
    ('{"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 2], "topk_weights": [1]}', 3,
     "topk_weights"),
    ('[1, 2]', 3, "not a JSON object"),
    ('', 3, "empty line"),
]


@pytest.mark.parametrize("line,lineno,what", BAD_ROUTES)
def test_bad_route_lines_name_file_and_line(tmp_path, line, lineno, what):
    good = [json.dumps(meta(num_experts=64)), json.dumps(route(0, 0, [1, 2]))]
    lines = [line] if lineno == 1 else good + [line]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines + [json.dumps(route(2, 0, [3, 4]))]) + "\n")
    with pytest.raises(FormatError) as info:
        load_routes(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: line {lineno}:"), msg
    assert re.search(what, msg), msg


def test_truncated_last_line_and_missing_file(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(meta()) + "\n" + json.dumps(route(0, 0, [1, 2]))[:-7])
    with pytest.raises(FormatError, match=r"cut\.jsonl: line 2: invalid JSON"):
        load_routes(path)
    with pytest.raises(FormatError, match="no such file"):
        load_routes(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(FormatError, match="empty"):
        load_routes(tmp_path / "empty.jsonl")
    with pytest.raises(OptionError, match="object_bytes"):
        load_routes(write(tmp_path, "ok.jsonl", [meta(), route(0, 0, [1, 2])]), object_bytes=-1)
    with pytest.raises(OptionError, match="2\\*\\*62"):
        load_routes(tmp_path / "ok.jsonl", object_bytes=2**62)


def test_total_requested_bytes_beyond_limit_is_refused(tmp_path):
    p = write(tmp_path, "big.jsonl", [meta(), route(0, 0, [1, 2]), route(1, 0, [1, 2])])
    with pytest.raises(OptionError, match="add up to"):
        load_routes(p, object_bytes=2**60 + 1)


@settings(max_examples=40)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=4))
def test_fuzzed_route_lines_only_format_errors(tmp_path_factory, junk):
    # a route record needs more than 30 characters, so no junk line is one: the file is
    # refused, by a FormatError naming it (a bad line, or no route records at all)
    path = tmp_path_factory.mktemp("fz") / "f.jsonl"
    path.write_text(json.dumps(meta()) + "\n" + "\n".join(junk) + "\n")
    with pytest.raises(FormatError) as info:
        load_routes(path)
    assert str(info.value).startswith(f"{path}: ")


# ---------------------------------------------------------------------------- memopt-requests

HEAD = '{"format": "memopt-requests", "version": 1, "name": "t"}'


def test_requests_format_roundtrip(tmp_path):
    tr = make_trace([0, 1, 0, 2, 2], [5, 7, 0], objects=("a", 17, "c"), cache_of=[0, 1, 1],
                    caches=("dev", "host"), name="rt")
    path = tmp_path / "r.jsonl"
    dump_requests(tr, path)
    back = load_requests(path)
    assert back.requests.tolist() == tr.requests.tolist()
    assert back.sizes.tolist() == [5, 7, 0]
    assert back.objects == ("a", 17, "c")
    assert back.caches == ("dev", "host")
    assert back.digest() == tr.digest()
    assert back.name == "rt"
    # route traces round-trip with L/E ids
    routes = make_trace([1, 0], [3, 3], objects=((0, 4), (2, 9)))
    dump_requests(routes, tmp_path / "q.jsonl")
    back = load_requests(tmp_path / "q.jsonl")
    assert back.objects == ("L2/E9", "L0/E4")      # numbered in order of first request
    assert back.digest() == routes.digest()        # the digest does not depend on numbering


def test_requests_sizes_given_once_and_checked():
    tr = parse_requests([HEAD, '{"object": 1, "size": 4}', '{"object": "1", "size": 4}', '{"object": 1, "size": 4}'])
    assert tr.requests.tolist() == [0, 1, 0]     # 1 and "1" are different objects
    assert tr.sizes.tolist() == [4, 4] and tr.requested_bytes() == 12


BAD_REQUESTS = [
    (['{"format": "memopt-graph", "version": 1}'], 1, "not a memopt-requests file"),
    (['{"format": "memopt-requests", "version": 2}'], 1, "unsupported memopt-requests version 2"),
    (['{"format": "memopt-requests", "version": true}'], 1, "version"),
    ([HEAD, '{"object": "a"}'], 2, "lacks field 'size'"),
    ([HEAD, '{"size": 3}'], 2, "lacks field 'object'"),
    ([HEAD, '{"object": "a", "size": -3}'], 2, "negative"),
    ([HEAD, '{"object": "a", "size": 1.5}'], 2, "whole number"),
    ([HEAD, '{"object": "a", "size": 4611686018427387904}'], 2, "2\\*\\*62"),
    ([HEAD, '{"object": "a", "size": 3}', '{"object": "a", "size": 4}'], 3, "size 4 here but 3 at line 2"),
    ([HEAD, '{"object": "a", "size": 3}', '{"object": "a", "cache": "x"}'], 3, "cache 'x'"),
    ([HEAD, '{"object": [1], "size": 3}'], 2, "string or an integer"),
    ([HEAD, '{"object": true, "size": 3}'], 2, "string or an integer"),
    ([HEAD, '{"object": "a", "size": 3, "weight": 1}'], 2, "unknown field 'weight'"),
    ([HEAD, '{"object": "a", "size": 3', '{"object": "a"}'], 2, "invalid JSON"),
    ([HEAD, '{"object": "a", "size": Infinity}'], 2, "Infinity"),
    ([HEAD, '{"object": "a", "size": 3, "cache": 7}'], 2, "'cache' must be a string"),
]


@pytest.mark.parametrize("lines,lineno,what", BAD_REQUESTS)
def test_bad_request_lines_name_the_line(lines, lineno, what):
    with pytest.raises(FormatError) as info:
        parse_requests(lines, path="reqs.jsonl")
    msg = str(info.value)
    assert msg.startswith(f"reqs.jsonl: line {lineno}:"), msg
    assert re.search(what, msg), msg


def test_requests_total_beyond_limit():
    lines = [HEAD] + ['{"object": "a", "size": 2305843009213693952}'] * 2
    with pytest.raises(FormatError, match=r"^big\.jsonl: line 3: the requests up to this line add up to"):
        parse_requests(lines, path="big.jsonl")


def test_make_trace_arguments():
    with pytest.raises(OptionError, match="request 1 names object 3"):
        make_trace([0, 3], [1, 1])
    with pytest.raises(OptionError, match="negative"):
        make_trace([0], [-1])
    with pytest.raises(OptionError):
        make_trace([0], [float("nan")])
    with pytest.raises(OptionError):
        make_trace([[0]], [1])
    tr = make_trace([], [])
    assert tr.n_requests == 0 and simulate(tr, "lru", 0).requests == 0


# ---------------------------------------------------------------------------- real route traces

def test_real_slice_with_the_documented_reading(tmp_path):
    """Lines 8446-8588 of the Qwen layer-0 log: the last 3 rows of the second warm-up pass,
    the 65-row prefill pass and the first 75 rows of the 1406-row prompt pass."""
    src = real_routes("qwen15moe_layer0.jsonl")
    lines = src.read_text().split("\n")
    rows = lines[1 + 8448 - 3:1 + 8448 + 65 + 75]
    path = tmp_path / "slice.jsonl"
    path.write_text("\n".join([lines[0]] + rows) + "\n")
    tr = load_routes(path)
    # independent reading of the same lines
    recs = [json.loads(r) for r in rows]
    flat = [(r["layer"], e) for r in recs for e in r["topk_ids"]]
    assert [tr.objects[o] for o in tr.requests.tolist()] == flat
    assert (len(recs), tr.n_requests, tr.n_objects, tr.meta["passes"]) == (143, 572, 60, 3)
    assert tr.semantic_demand() == 60
    assert [simulate(tr, p, 16).misses for p in ("lru", "lfu", "lru-2", "belady")] == [408, 399, 396, 240]
    warm = load_routes(path, drop_warmup=True)
    assert warm.meta["dropped_rows"] == {str(path): 3}
    assert (warm.n_requests, warm.meta["passes"]) == (560, 2)
    assert warm.requests.tolist() == tr.requests.tolist()[12:]
    assert simulate(warm, "belady", 16).misses == 240


def test_real_qwen_layers_line_up_and_warmup_matches_manifest():
    paths = [real_routes(f"qwen15moe_layer{layer}.jsonl") for layer in QWEN_LAYERS]
    tr = load_routes(paths, drop_warmup=True, per_layer=True)
    # MANIFEST: the first two passes (8192 + 256 rows) are warm-up; then 65 + 1406 + 127 decode passes
    assert set(tr.meta["dropped_rows"].values()) == {8448}
    assert tr.meta["passes"] == 2 + 127
    assert tr.meta["rows"] == 5 * (12805 - 8448)
    assert tr.n_requests == 4 * tr.meta["rows"] == 87140
    assert tr.caches == tuple(f"layer {layer}" for layer in QWEN_LAYERS)
    assert tr.n_objects == 300
    # the first pass is layer 0's 65 prefill rows, then layer 8's
    assert {tr.objects[o][0] for o in tr.requests[:65 * 4].tolist()} == {0}
    assert {tr.objects[o][0] for o in tr.requests[65 * 4:130 * 4].tolist()} == {8}


def test_real_olmoe_warmup_matches_manifest():
    path = real_routes("olmoe_layer0.jsonl")
    tr = load_routes(path, drop_warmup=True, object_bytes=12582912)
    assert tr.meta["dropped_rows"] == {str(path): 2048}
    assert tr.meta["passes"] == 1
    assert tr.n_requests == 8 * (6519 - 2048)
    assert tr.semantic_demand() == 64 * 12582912
