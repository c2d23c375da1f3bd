"""Loading traces fast without loosening them (issue 24, item 8).

Routes: the bulk reading of a route file (one ``json.loads`` call, numpy checks) must give the
line-by-line reading's result on every file it accepts, and leave every other file to it, so
that every refusal and its message stay the same. Attention: the binary ``.npz`` form holds
the same integers as JSON lines (round trips, identical policy results) and refuses a
truncated, corrupt or ill-typed archive with one line naming the file and the array.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import SHARED
from memopt.cache import KV_POLICIES, dump_attention, kv_optimum, load_attention, load_routes, \
    make_attention_trace, simulate_kv
from memopt.cache import routes
from memopt.cache.kv_trace import NPZ_FORMAT, convert_attention, dump_attention_npz, is_npz
from memopt.cli import main
from memopt.errors import FormatError

ROUTES = SHARED / "data" / "moe-routes"
META = {"type": "meta", "model_id": "test/moe", "top_k": 2, "num_experts": 16}


def real_routes(name: str):
    path = ROUTES / name
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


def same_route_file(a, b) -> bool:
    return a.path == b.path and a.meta == b.meta and all(
        np.array_equal(getattr(a, k), getattr(b, k)) and getattr(a, k).dtype == getattr(b, k).dtype
        for k in ("token_idx", "layer", "ids_flat", "ids_start", "uniform", "lines", "pass_start"))


def read_both(path):
    """(what the loader does, what the line-by-line reading does): a _RouteFile or the message."""
    out = []
    for reader in (routes._read_route_file, routes._read_route_file_by_line):
        try:
            out.append(reader(str(path)))
        except FormatError as exc:
            out.append(str(exc))
    return out


def assert_same_reading(path):
    fast, slow = read_both(path)
    if isinstance(slow, str):
        assert fast == slow
    else:
        assert not isinstance(fast, str), fast
        assert same_route_file(fast, slow)
    return fast, slow


# ---------------------------------------------------------------------------- routes: bulk reading

@pytest.mark.parametrize("name", ["qwen15moe_layer0.jsonl", "qwen15moe_layer23.jsonl", "olmoe_layer0.jsonl"])
def test_real_route_files_take_the_bulk_reading_with_the_same_result(name):
    path = str(real_routes(name))
    bulk = routes._read_route_file_bulk(path)
    assert bulk is not None
    assert same_route_file(bulk, routes._read_route_file_by_line(path))


def test_real_qwen_trace_is_unchanged():
    paths = [real_routes(f"qwen15moe_layer{layer}.jsonl") for layer in (0, 8, 12, 18, 23)]
    tr = load_routes(paths, drop_warmup=True)
    assert tr.n_requests == 87140
    # RequestTrace.digest() of the traces the line-by-line reader built before the bulk reading
    assert tr.digest() == "1d0cf61e73ce95deb7936e626df08a06a9a4d5275d7de01036d39014e3a358ff"
    assert load_routes(paths, per_layer=True).digest() == \
        "775ef4b253b25e4dd204bcb3b6792113eb9704d4a11b5f2026141eb297da8fd9"


def route_line(tok, layer, ids, weights=(0.5, 0.25), **extra):
    rec = {"type": "route", "req_id": "r1", "token_idx": tok, "layer": layer, "topk_ids": ids}
    if weights is not None:
        rec["topk_weights"] = list(weights)
    rec.update(extra)
    return json.dumps(rec)


def write_lines(tmp_path, lines, name="r.jsonl", newline="\n"):
    path = tmp_path / name
    path.write_bytes((newline.join([json.dumps(META)] + lines) + newline).encode("utf-8"))
    return path


GOOD = [route_line(0, 3, [1, 2]), route_line(1, 3, [2, 5]), route_line(0, 3, [5, 1], (0.5, 0.5))]

# Files the bulk reading must not accept as they are, with the line-by-line reading's verdict
ODD_FILES = {
    "float_overflow_in_weights": [GOOD[0], GOOD[1].replace("0.25", "1e400")],
    "400_digit_integer_in_an_extra_field": [GOOD[0], route_line(1, 3, [1, 2], note=1).replace("1}", "9" * 400 + "}")],
    "nan_weight": [GOOD[0], GOOD[1].replace("0.25", "NaN")],
    "infinity_token": [GOOD[0], GOOD[1].replace('"token_idx": 1', '"token_idx": Infinity')],
    "true_as_expert": [GOOD[0], route_line(1, 3, [True, 2])],
    "true_as_weight": [GOOD[0], route_line(1, 3, [1, 2], (True, 0.5))],
    "float_token_idx": [GOOD[0], route_line(1.5, 3, [1, 2])],
    "integral_float_token_idx": [GOOD[0], route_line(1.0, 3, [1, 2])],
    "duplicate_expert": [GOOD[0], route_line(1, 3, [2, 2])],
    "expert_beyond_num_experts": [GOOD[0], route_line(1, 3, [2, 16])],
    "string_weight": [GOOD[0], route_line(1, 3, [1, 2], ("a", 0.5))],
    "integer_weights": [GOOD[0], route_line(1, 3, [1, 2], (1, 1)), route_line(2, 3, [1, 2], (2**53 + 1, 2**53))],
    "no_weights": [GOOD[0], route_line(1, 3, [1, 2], None)],
    "null_weights": [GOOD[0], route_line(1, 3, [1, 2], None, topk_weights=None)],
    "escaped_type": [GOOD[0], GOOD[1].replace('"route"', '"rout\\u0065"')],
    "extra_field": [GOOD[0], route_line(1, 3, [1, 2], note=[1, {"x": 2}])],
    "integer_req_id": [GOOD[0], route_line(1, 3, [1, 2], req_id=7)],
    "empty_line": [GOOD[0], "", GOOD[1]],
    "two_records_on_a_line": [GOOD[0] + ", " + GOOD[1], GOOD[2]],
    "record_split_over_two_lines": [GOOD[0][:40], GOOD[0][40:], GOOD[1]],
    "a_list_not_an_object": [GOOD[0], "[1, 2]"],
    "token_idx_beyond_2_pow_62": [GOOD[0], route_line(2**62, 3, [1, 2])],
    "token_idx_beyond_2_pow_64": [GOOD[0], route_line(2**64, 3, [1, 2])],
    "layer_missing": [GOOD[0], GOOD[1].replace('"layer": 3, ', "")],
}


@pytest.mark.parametrize("case", sorted(ODD_FILES))
def test_odd_route_files_read_as_line_by_line(tmp_path, case):
    path = write_lines(tmp_path, ODD_FILES[case])
    assert routes._read_route_file_bulk(str(path)) is None
    assert_same_reading(path)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_plain_route_file_takes_the_bulk_reading(tmp_path, newline):
    path = write_lines(tmp_path, GOOD, newline=newline)
    assert (routes._read_route_file_bulk(str(path)) is not None) == (newline == "\n")
    fast, _ = assert_same_reading(path)
    assert fast.uniform.tolist() == [False, False, True]
    assert fast.pass_start.tolist() == [0, 2, 3]


def test_spaces_around_a_record_are_read_as_line_by_line(tmp_path):
    path = write_lines(tmp_path, ["  " + GOOD[0], GOOD[1] + " \t", GOOD[2]])
    assert routes._read_route_file_bulk(str(path)) is not None
    fast, _ = assert_same_reading(path)
    assert fast.ids_flat.tolist() == [1, 2, 2, 5, 5, 1]


def test_object_split_across_lines_is_not_taken_for_one_object_per_line():
    # joined by commas these three lines are a valid array of three objects, but line 1 is cut
    # and line 3 holds two objects: the line-by-line reading refuses line 1
    body = b'{"a": [{}\n{}]}\n{}, {}'
    assert json.loads("[" + body.decode().replace("\n", ",") + "]") == [{"a": [{}, {}]}, {}, {}]
    assert routes._one_object_per_line(body) is None
    assert routes._one_object_per_line(b'{"a": [{}]}\n{"b": "}{"}\n{}') == 3
    assert routes._one_object_per_line(b'{"a": "x\n"}') is None
    assert routes._one_object_per_line(b'"s"\n{}') is None


def test_bracket_inside_a_string_does_not_end_the_object(tmp_path):
    path = write_lines(tmp_path, [GOOD[0], route_line(1, 3, [1, 2], req_id="}{]["), GOOD[2]])
    assert routes._read_route_file_bulk(str(path)) is not None
    assert_same_reading(path)


def test_spoofed_object_split_is_refused_with_the_line(tmp_path):
    lines = [GOOD[0][:-1] + ', "x": [{}', "{}]}", GOOD[1] + ", " + GOOD[2]]
    path = write_lines(tmp_path, lines)
    fast, slow = read_both(path)
    assert fast == slow and slow.startswith(f"{path}: line 2: invalid JSON")


ODD_VALUES = st.one_of(st.integers(-3, 20), st.sampled_from([2**62, 2**64, 1.0, 2.5, True, None, "7", [], [1]]))
WEIGHTS = st.one_of(st.none(), st.lists(st.one_of(st.sampled_from([0.5, 0.25, 1, 1e300, -0.0]),
                                                  st.floats(0, 1)), min_size=0, max_size=4))


@st.composite
def route_records(draw):
    rec = {"type": draw(st.sampled_from(["route"] * 8 + ["meta", None])),
           "token_idx": draw(st.one_of(st.integers(0, 5), ODD_VALUES)),
           "layer": draw(st.one_of(st.integers(0, 3), ODD_VALUES)),
           "topk_ids": draw(st.one_of(st.lists(st.integers(0, 17), min_size=1, max_size=3),
                                      st.lists(ODD_VALUES, max_size=3), ODD_VALUES))}
    w = draw(WEIGHTS)
    if w is not None or draw(st.booleans()):
        rec["topk_weights"] = w
    if draw(st.integers(0, 9)) == 0:
        rec["req_id"] = draw(st.one_of(st.text(max_size=3), ODD_VALUES))
    for key in draw(st.lists(st.sampled_from(["token_idx", "layer", "topk_ids", "type"]), max_size=1)):
        rec.pop(key, None)
    return rec


@settings(max_examples=150, deadline=None)
@given(st.lists(route_records(), min_size=1, max_size=6), st.sampled_from([None, 2, 3]),
       st.sampled_from([None, 16]), st.booleans(), st.booleans())
def test_bulk_and_line_by_line_readings_agree(tmp_path_factory, recs, top_k, n_exp, spaced, crlf):
    meta = {"type": "meta", "model_id": "m"}
    if top_k:
        meta["top_k"] = top_k
    if n_exp:
        meta["num_experts"] = n_exp
    sep = (", ", ": ") if spaced else (",", ":")
    lines = [json.dumps(meta)] + [json.dumps(r, separators=sep) for r in recs]
    path = tmp_path_factory.mktemp("bulk") / "r.jsonl"
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + b"\n")
    assert_same_reading(path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.permutations(range(6))), min_size=1, max_size=30),
       st.integers(2, 4))
def test_bulk_reading_taken_on_clean_files_and_loads_the_same_trace(tmp_path_factory, rows, k):
    lines = [route_line(t, 2, list(p[:k]), [0.5] * k if t == 0 else [0.5] + [0.125] * (k - 1))
             for t, p in rows]
    path = tmp_path_factory.mktemp("clean") / "r.jsonl"
    path.write_text("\n".join([json.dumps({"type": "meta", "top_k": k})] + lines) + "\n")
    assert routes._read_route_file_bulk(str(path)) is not None
    assert_same_reading(path)


# ---------------------------------------------------------------------------- attention: .npz form

def random_trace(seed, T=12, L=2, H=2, scale=64, group=3):
    rng = np.random.default_rng(seed)
    att = np.tril(rng.integers(0, group * scale + 1, size=(L, H, T, T)))
    return make_attention_trace(att, rng.random(T) < 0.5, rng.integers(0, 50000, T), scale=scale, group=group,
                                name=f"random {seed}", meta={"model": "m", "text": "sha256:0"})


def same_trace(a, b) -> bool:
    return (np.array_equal(a.attention, b.attention) and a.attention.dtype == b.attention.dtype
            and np.array_equal(a.correct, b.correct) and np.array_equal(a.tokens, b.tokens)
            and (a.scale, a.group, a.name, a.meta, a.steps) == (b.scale, b.group, b.name, b.meta, b.steps))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 9), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([1, 8, 2**24]), st.integers(1, 4))
def test_json_npz_json_round_trip_is_identical(tmp_path_factory, seed, T, L, H, scale, group):
    d = tmp_path_factory.mktemp("rt")
    tr = random_trace(seed, T, L, H, scale, group)
    dump_attention(tr, d / "a.jsonl")
    convert_attention(d / "a.jsonl", d / "a.npz")
    convert_attention(d / "a.npz", d / "b.jsonl")
    assert is_npz(d / "a.npz") and not is_npz(d / "a.jsonl")
    assert (d / "a.jsonl").read_bytes() == (d / "b.jsonl").read_bytes()
    assert same_trace(load_attention(d / "a.npz"), tr)
    assert same_trace(load_attention(d / "a.npz"), load_attention(d / "a.jsonl"))


def test_policy_results_identical_on_json_and_npz(tmp_path):
    tr = random_trace(7, T=24)
    dump_attention(tr, tmp_path / "t.jsonl")
    dump_attention(tr, tmp_path / "t.npz")
    a, b = load_attention(tmp_path / "t.jsonl"), load_attention(tmp_path / "t.npz")
    for policy in KV_POLICIES:
        ra, rb = simulate_kv(a, policy, 5, prefill=3), simulate_kv(b, policy, 5, prefill=3)
        assert ra.to_dict() == rb.to_dict()
        assert np.array_equal(ra.per_head, rb.per_head) and np.array_equal(ra.last_step, rb.last_step)
    oa, ob = kv_optimum(a, 5, prefill=3), kv_optimum(b, 5, prefill=3)
    assert oa.to_dict() == ob.to_dict() and np.array_equal(oa.last_step, ob.last_step)


def test_cli_kv_and_sweep_read_npz_like_json(tmp_path, capsys):
    dump_attention(random_trace(3, T=16), tmp_path / "t.jsonl")
    assert main(["cache", "convert-attention", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "t.npz"),
                 "--json"]) == 0
    conv = json.loads(capsys.readouterr().out)
    assert (conv["form"], conv["steps"], conv["layers"], conv["kv_heads"]) == ("npz", 16, 2, 2)
    outs = {}
    for form in ("jsonl", "npz"):
        path = str(tmp_path / f"t.{form}")
        assert main(["cache", "kv", path, "--policy", "opt", "--budget", "25%", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        d.pop("trace")
        assert main(["cache", "sweep", path, "--policies", "h2o,rmm", "--budgets", "2,4", "--lags", "0,inf",
                     "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        outs[form] = (d, [(p.get("policy"), p.get("budget"), p.get("lag"), p.get("retained")) for p in s["points"]])
    assert outs["jsonl"] == outs["npz"]


def test_record_attention_writes_npz_by_suffix(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        from transformers import LlamaForCausalLM  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install raises RuntimeError, not ImportError
        pytest.skip(f"transformers cannot build the tiny Llama here: {str(exc)[:100]}")
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 2, encoding="utf-8")
    for out in ("t.jsonl", "t.npz"):
        assert main(["cache", "record-attention", "--text", str(text), "--tokens", "20", "-o",
                     str(tmp_path / out), "--tiny", "--json"]) == 0
        capsys.readouterr()
    assert is_npz(tmp_path / "t.npz") and not is_npz(tmp_path / "t.jsonl")
    assert same_trace(load_attention(tmp_path / "t.npz"), load_attention(tmp_path / "t.jsonl"))


# ---------------------------------------------------------------------------- attention: bad archives

def good_arrays():
    """The arrays of the binary form of ``random_trace(1, T=5, L=1, H=2, scale=8, group=2)``,
    packed by hand (docs/formats.md)."""
    tr = random_trace(1, T=5, L=1, H=2, scale=8, group=2)
    arrays = {"format": np.array(NPZ_FORMAT), "version": np.array(1), "scale": np.array(8),
              "group": np.array(2), "correct": tr.correct.copy(), "tokens": tr.tokens.copy(),
              "attention": np.stack([np.concatenate([tr.attention[0, h, t, :t + 1] for t in range(5)])
                                     for h in range(2)])[None].astype(np.int32)}
    return arrays


def write_npz(path, arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def test_hand_written_archive_reads_and_equals_the_trace(tmp_path):
    tr = load_attention(write_npz(tmp_path / "h.npz", good_arrays()))
    ref = random_trace(1, T=5, L=1, H=2, scale=8, group=2)
    assert np.array_equal(tr.attention, ref.attention) and np.array_equal(tr.correct, ref.correct)
    assert np.array_equal(tr.tokens, ref.tokens) and (tr.scale, tr.group, tr.name, tr.meta) == (8, 2, "h.npz", {})
    # the writer's archive holds the same arrays, plus the name and the optional strings
    dump_attention_npz(ref, tmp_path / "w.npz")
    with np.load(tmp_path / "w.npz", allow_pickle=False) as z:
        assert sorted(z.files) == sorted(list(good_arrays()) + ["name", "model", "text"])
        for key, val in good_arrays().items():
            assert np.array_equal(z[key], val) and z[key].dtype.kind == val.dtype.kind


BAD_ARRAYS = {
    "attention_float32": (lambda a: a.update(attention=a["attention"].astype(np.float32)), "'attention'.*dtype int32"),
    "attention_nan": (lambda a: a.update(attention=np.full(a["attention"].shape, np.nan)), "'attention'.*dtype int32"),
    "attention_int64": (lambda a: a.update(attention=a["attention"].astype(np.int64)), "'attention'.*dtype int32"),
    "attention_negative": (lambda a: a["attention"].__setitem__((0, 1, 3), -1), "'attention'.*outside"),
    "attention_above_group_scale": (lambda a: a["attention"].__setitem__((0, 0, 0), 17), "'attention'.*outside"),
    "attention_short": (lambda a: a.update(attention=a["attention"][:, :, :-1]), "'attention'.*shape"),
    "attention_2d": (lambda a: a.update(attention=a["attention"][0]), "'attention'.*shape"),
    "correct_int": (lambda a: a.update(correct=a["correct"].astype(np.int8)), "'correct'.*dtype bool"),
    "tokens_negative": (lambda a: a["tokens"].__setitem__(2, -5), "'tokens'.*outside"),
    "tokens_float": (lambda a: a.update(tokens=a["tokens"].astype(np.float64)), "'tokens'.*dtype int64"),
    "tokens_long": (lambda a: a.update(tokens=np.zeros(6, dtype=np.int64)), "'tokens'.*shape"),
    "version_2": (lambda a: a.update(version=np.array(2)), "unsupported .*version 2"),
    "format_other": (lambda a: a.update(format=np.array("memopt-graph")), "'format'"),
    "format_bytes": (lambda a: a.update(format=np.array(b"memopt-attention-npz")), "'format'.*unicode"),
    "scale_zero": (lambda a: a.update(scale=np.array(0)), "'scale'"),
    "scale_vector": (lambda a: a.update(scale=np.array([8])), "'scale'.*scalar"),
    "group_times_scale": (lambda a: a.update(scale=np.array(2**30)), "group \\* scale"),
    "name_number": (lambda a: a.update(name=np.array(3)), "'name'.*unicode"),
    "unknown_array": (lambda a: a.update(extra=np.zeros(2)), "unknown array 'extra'"),
    "missing_attention": (lambda a: a.pop("attention"), "array 'attention' is missing"),
    "object_array": (lambda a: a.update(tokens=np.array([1, "x", None, 2, 3], dtype=object)), "'tokens'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARRAYS))
def test_bad_npz_arrays_name_the_file_and_the_array(tmp_path, case):
    change, what = BAD_ARRAYS[case]
    arrays = good_arrays()
    change(arrays)
    path = write_npz(tmp_path / "bad.npz", arrays)
    with pytest.raises(FormatError, match=what) as info:
        load_attention(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, 0.999])
def test_truncated_npz_is_one_error_line_exit_2(tmp_path, capsys, cut):
    good = tmp_path / "good.npz"
    dump_attention(random_trace(2, T=30), good)
    data = good.read_bytes()
    bad = tmp_path / "cut.npz"
    bad.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(FormatError, match=r"cut\.npz"):
        load_attention(bad)
    assert main(["cache", "kv", str(bad), "--policy", "h2o", "--budget", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"memopt: error: {bad}") and "Traceback" not in err[0]


def test_flipped_byte_in_attention_is_a_crc_error(tmp_path, capsys):
    good = tmp_path / "good.npz"
    dump_attention(random_trace(4, T=30), good)
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("attention.npy")
    data[info.header_offset + 30 + len(info.filename) + 200] ^= 0x40      # inside the array's data
    bad = tmp_path / "flip.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"flip\.npz: array 'attention' is unreadable, truncated or corrupt"):
        load_attention(bad)
    assert main(["cache", "convert-attention", str(bad), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_compressed_npz_is_read_too(tmp_path):
    arrays = good_arrays()
    with open(tmp_path / "z.npz", "wb") as fh:
        np.savez_compressed(fh, **arrays)
    plain = load_attention(write_npz(tmp_path / "p.npz", arrays))
    assert np.array_equal(load_attention(tmp_path / "z.npz").attention, plain.attention)


def test_convert_refuses_to_overwrite_its_input(tmp_path, capsys):
    dump_attention(random_trace(5, T=4), tmp_path / "t.npz")
    assert main(["cache", "convert-attention", str(tmp_path / "t.npz"), "-o", str(tmp_path / "t.npz")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert load_attention(tmp_path / "t.npz").steps == 4


def test_empty_trace_round_trips_through_npz(tmp_path):
    tr = make_attention_trace(np.zeros((1, 1, 0, 0), dtype=np.int32), np.zeros(0, dtype=bool), scale=4)
    dump_attention(tr, tmp_path / "e.npz")
    back = load_attention(tmp_path / "e.npz")
    assert back.steps == 0 and back.attention.shape == (1, 1, 0, 0)
