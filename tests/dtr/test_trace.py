"""Parser of DTR logs: structure of the replay schedule and errors naming the line."""

import json
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from memopt.dtr import load_trace
from memopt.dtr.trace import SCHED_COMPUTE, SCHED_GET, SCHED_PIN, SCHED_RELEASE, parse_lines
from memopt.errors import FormatError

from _synthetic import LINES, write

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TRACES = DATA / "dtr-traces"
needs_data = pytest.mark.skipif(not TRACES.is_dir(),
                                reason=f"DTR traces not found at {TRACES}")


def test_synthetic_structure(tmp_path):
    tr = load_trace(write(tmp_path))
    # records before ANNOTATE START are skipped (simrd's has_start)
    assert tr.start_record == 3
    assert "pre" not in tr.name_storages
    # operators in creation order, with simrd's unique names
    assert tr.op_names == ["constant/0", "f/1", "g/2", "view/3", "h/4", "k/5", "relu_/6",
                           "m/7", "n/8"]
    assert tr.op_cost.tolist() == [0, 5, 7, 1, 11, 3, 2, 13, 17]
    # the view aliases b: size 0, same storage; h has two outputs
    assert tr.t_names == ["w", "a", "b", "bv", "c", "c2", "d", "d$", "e", "f"]
    assert tr.t_size.tolist() == [10, 100, 100, 0, 100, 30, 50, 50, 20, 60]
    assert tr.t_storage[3] == tr.t_storage[2]
    assert tr.n_storages == 9
    assert tr.op_total_size.tolist() == [10, 100, 100, 0, 130, 50, 50, 20, 60]
    kinds = tr.sched_kind.tolist()
    assert kinds[:2] == [SCHED_COMPUTE, SCHED_PIN]          # constant, then pin
    assert kinds.count(SCHED_RELEASE) == 7                  # unknown name ignored
    assert kinds.count(SCHED_GET) == 2                       # COPY and COPY_FROM
    # tensors still referenced at the end are pinned in name-insertion order:
    # w, c3 (rebound to e by COPY_FROM, keeps its slot), d (rebound to d$ by MUTATE), e, f
    tail = [tr.t_names[a] for k, a in zip(kinds, tr.sched_arg) if k == SCHED_PIN][1:]
    assert tail == ["w", "e", "d$", "e", "f"]
    assert tr.sched_record[-1] == len(LINES)


def test_pickle_roundtrip(tmp_path):
    tr = load_trace(write(tmp_path))
    tr2 = pickle.loads(pickle.dumps(tr))
    assert tr2.op_names == tr.op_names
    assert (tr2.sched_arg == tr.sched_arg).all()


def test_start_false_parses_everything(tmp_path):
    tr = load_trace(write(tmp_path), start=False)
    assert tr.t_names[0] == "pre"


def _replace(i, record):
    lines = list(LINES)
    lines[i] = record if isinstance(record, str) else json.dumps(record)
    return lines


CASES = [
    (_replace(5, '{"INSTRUCTION": "CALL", "NAME": '), 6, "invalid JSON"),
    (_replace(8, {"INSTRUCTION": "FROB", "NAME": "x"}), 9, "unknown instruction 'FROB'"),
    (_replace(5, {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["w"], "RESULT": ["a"]}), 6,
     "lacks field TIME"),
    (_replace(6, {"INSTRUCTION": "MEMORY", "NAME": "a", "MEMORY": "-100"}), 7,
     "negative size"),
    (_replace(4, {"INSTRUCTION": "MEMORY", "NAME": "w", "MEMORY": "ten"}), 5,
     "not an integer"),
    (_replace(8, {"INSTRUCTION": "CALL", "NAME": "g", "ARGS": ["zz"], "RESULT": ["b"],
                  "TIME": "7"}), 9, "unknown tensor name 'zz'"),
    (_replace(20, {"INSTRUCTION": "COPY", "DST": "c3", "SRC": "nope"}), 21,
     "unknown tensor name 'nope'"),
    (_replace(13, {"INSTRUCTION": "ALIAS", "NAME": "bv", "ALIAS": "3"}), 14,
     "ALIAS index 3 out of range"),
    (_replace(6, {"INSTRUCTION": "ALIAS", "NAME": "a", "ALIAS": "-1"}), 7,
     "expected MEMORY of result 'a'"),
    (_replace(4, {"INSTRUCTION": "RELEASE", "NAME": "w"}), 5, "expected MEMORY of constant"),
    (_replace(25, {"INSTRUCTION": "MUTATE", "NAME": "relu_", "ARGS": ["d"], "MUTATE": [1],
                   "TIME": "2"}), 26, "MUTATE index 1 out of range"),
    (_replace(20, {"INSTRUCTION": "COPY", "DST": "a", "SRC": "c"}), 21, "already defined"),
    (LINES[:3] + [LINES[3], LINES[4], LINES[3], LINES[4]], 6, "redefines tensor name 'w'"),
    (_replace(8, ""), 9, "empty line"),
    (_replace(8, "[1, 2]"), 9, "not a JSON object"),
    (_replace(26, {"INSTRUCTION": "RELEASE", "NAME": "b"}), 27, "no references left"),
    (_replace(27, {"INSTRUCTION": "CALL", "NAME": "m", "ARGS": ["b", "d"], "RESULT": ["e"],
                   "TIME": "13"}), 28, "after all references"),
    # COPY, then MUTATE through both names: simrd names both results 'd$' and asserts
    (LINES[:25] + [json.dumps({"INSTRUCTION": "COPY", "DST": "d2", "SRC": "d"}), LINES[25],
                   LINES[25].replace('"d"', '"d2"')], 28, "'d$' is created twice"),
    (LINES[:-1], 35, "file ends"),                           # CALL without MEMORY/ALIAS
    (LINES[:4], 4, "not followed by its MEMORY"),             # CONSTANT at the very end
    (LINES[:-1] + ['{"INSTRUCTION":"MEMORY","NAME":"f","MEM'], 37, "invalid JSON"),
]


@pytest.mark.parametrize("lines,lineno,message", CASES)
def test_malformed_logs_name_the_line(tmp_path, lines, lineno, message):
    path = write(tmp_path, lines)
    with pytest.raises(FormatError) as err:
        load_trace(path)
    text = str(err.value)
    assert f"line {lineno}:" in text
    assert message in text
    assert str(path) in text


def test_missing_file(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        load_trace(tmp_path / "absent.log")


def test_truncated_final_line_is_an_error(tmp_path):
    text = "\n".join(LINES)
    path = tmp_path / "cut.log"
    path.write_text(text[:-5])        # no newline, incomplete record
    with pytest.raises(FormatError, match=f"line {len(LINES)}: invalid JSON"):
        load_trace(path)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=len("\n".join(LINES)) - 1))
def test_any_truncation_is_rejected_or_parsed(cut):
    """Cutting the log anywhere either parses (cut at a record boundary that leaves a
    complete log) or raises a FormatError naming a line -- never anything else."""
    text = "\n".join(LINES)[:cut]
    try:
        parse_lines(text.split("\n"), path="cut")
    except FormatError as err:
        assert re.search(r"line \d+: ", str(err))
        last_line = text.count("\n") + 1
        if not text.endswith("}"):
            assert f"line {last_line}:" in str(err)


@needs_data
def test_public_traces_parse():
    counts = {}
    for path in sorted(TRACES.glob("*.log")):
        tr = load_trace(path)
        counts[path.name.split("-")[0]] = (tr.n_ops, tr.n_tensors, tr.n_storages)
    assert counts["unet"] == (399, 512, 466)
    assert counts["resnet32"] == (509, 696, 680)
    assert counts["lstm"] == (8063, 8319, 5376)
    assert len(counts) == 8
