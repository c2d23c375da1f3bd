"""Fuzz tests of every parser: random mutations of valid documents end either in a valid
result or in a documented :class:`memopt.errors.MemoptError` subclass with a one-line
message -- never a bare ``ValueError``/``TypeError``/``KeyError``/``RecursionError``,
never an :class:`memopt.errors.InternalError`.

Parsers covered: node-link JSON (Checkmate and random-layered schemas), ``memopt-graph``,
``memopt-program``, ``memopt-plan`` loading, and DTR logs. Mutations: field deletions, type
swaps, huge / negative / fractional / non-finite numbers, 5000-digit integers, deep
nesting, unicode junk, truncation at a random offset, random character edits.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memopt.core import peak
from memopt.dtr.trace import parse_lines
from memopt.errors import FormatError, GraphError, InternalError, MemoptError, ScheduleError
from memopt.io import instance_from_doc, load_instance, plan_order
from memopt.io._json import loads

sys.path.insert(0, str(Path(__file__).resolve().parent / "dtr"))
from _synthetic import LINES as DTR_LINES  # noqa: E402

DOCUMENTED = (FormatError, GraphError, ScheduleError)
# MEMOPT_FUZZ_EXAMPLES=5000 runs a longer, randomized campaign locally
_DEEP = int(os.environ.get("MEMOPT_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_DEEP or 120, deadline=None, derandomize=not _DEEP,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ------------------------------------------------------------------------ valid seeds
GRAPH = {"format": "memopt-graph", "version": 1, "name": "diamond",
         "tensors": [{"name": "x", "size": 10}, {"name": "w", "size": 100, "resident": True},
                     {"name": "y", "size": 3}, {"name": "z", "size": 4, "output": True}],
         "ops": [{"name": "f", "inputs": ["x", "w"], "outputs": ["y"], "workspace": 2, "cost": 1.5},
                 {"name": "g", "inputs": ["y"], "outputs": ["z"]}]}
PROGRAM = {"format": "memopt-program", "version": 1, "name": "kernel", "inputs": {"arg0": 4096},
           "statements": [{"name": "s0", "alloc": [["buf0", 1024]], "reads": ["arg0"], "writes": ["buf0"],
                           "transient": 512},
                          {"name": "s1", "free": ["arg0"]},
                          {"name": "s2", "reads": ["buf0"], "alloc": [["buf1", 8]], "writes": ["buf1"]}]}
CHECKMATE = {"directed": True, "multigraph": False, "graph": {"name": "cm"},
             "nodes": [{"id": 0, "name": "in", "cost_ram": 10, "cost_cpu": 1, "backward": False},
                       {"id": 1, "name": "a", "cost_ram": 20, "cost_cpu": 2.5},
                       {"id": 2, "name": "b", "cost_ram": 5, "cost_cpu": 0}],
             "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]}
LAYERED = {"directed": True, "graph": {"order": ["n0", "n2", "n1"], "name": "rl"},
           "nodes": [{"name": "n0", "out_cost": 3, "duration": 1, "param_cost": 0},
                     {"name": "n1", "out_cost": 7, "duration": 2},
                     {"name": "n2", "out_cost": 1, "duration": 3}],
           "links": [{"0": "n0", "1": "n2"}, {"0": "n2", "1": "n1"}]}
PLAN = {"format": "memopt-plan", "version": 1, "instance": "diamond", "order": ["f", "g"],
        "peak": 124, "lower_bound": 124, "status": "certified", "method": "auto"}

HUGE_TOKEN, DEEP_TOKEN = "@@HUGE@@", "@@DEEP@@"
NASTY = [2**70, -(2**70), 2**63, 2**62, 2**62 - 1, -1, 0, 1, 1.5, -0.5, 1e300, -1e300, 2.0**62,
         float("nan"), float("inf"), float("-inf"), "12", "", "x", "\u0000", "\ud800", "é\u202e",
         None, True, False, [], {}, [1, 2], {"a": 1}, [[[[[[[[[[[]]]]]]]]]]],
         HUGE_TOKEN, DEEP_TOKEN]


def _containers(doc, path=()):
    """(path, container) of every list and dict in ``doc``."""
    out = []
    if isinstance(doc, (dict, list)):
        out.append((path, doc))
        items = doc.items() if isinstance(doc, dict) else enumerate(doc)
        for k, v in items:
            out.extend(_containers(v, path + (k,)))
    return out


def _mutate_tree(data, doc):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        conts = _containers(doc)
        _, cont = conts[data.draw(st.integers(0, len(conts) - 1), label="container")]
        keys = list(cont.keys()) if isinstance(cont, dict) else list(range(len(cont)))
        if not keys:
            continue
        key = keys[data.draw(st.integers(0, len(keys) - 1), label="key")]
        action = data.draw(st.sampled_from(["delete", "replace", "replace", "replace", "wrap"]), label="action")
        if action == "delete":
            del cont[key]
        elif action == "replace":
            cont[key] = copy.deepcopy(data.draw(st.sampled_from(NASTY), label="value"))
        else:
            cont[key] = [cont[key]]
    return doc


def _dumps(doc) -> str:
    text = json.dumps(doc)  # NaN / Infinity written bare, as a careless producer would
    text = text.replace(json.dumps(HUGE_TOKEN), "9" * 5000)
    return text.replace(json.dumps(DEEP_TOKEN), "[" * 50000 + "]" * 50000)


def _mutate_text(data, text: str) -> str:
    action = data.draw(st.sampled_from(["none", "none", "truncate", "insert", "delete"]), label="text")
    if action == "none" or not text:
        return text
    pos = data.draw(st.integers(0, len(text) - 1), label="offset")
    if action == "truncate":
        return text[:pos]
    if action == "delete":
        return text[:pos] + text[pos + 1:]
    junk = data.draw(st.sampled_from(["NaN", "Infinity", "-", "\u00e9", "\ufffd", "{", "]", ",", '"', "\\",
                                      "9" * 5000, "1e999", "\ud800", "\n", "0"]), label="junk")
    return text[:pos] + junk + text[pos:]


def _one_line(exc: BaseException, text: str = "") -> None:
    msg = str(exc)
    assert msg and "\n" not in msg, msg
    assert "np.float64" not in msg and "np.int64" not in msg, msg
    # a message may quote a (long) name from the input, never more than that
    assert len(msg) < len(text) + 600, msg[:200]


def _check_instance(text: str) -> None:
    try:
        inst = instance_from_doc(loads(text, "fuzz.json"), where="fuzz.json")
    except InternalError:
        raise
    except DOCUMENTED as exc:
        assert str(exc).startswith("fuzz.json"), str(exc)
        _one_line(exc, text)
        return
    # accepted: the model is exact and usable
    if inst.graph is not None:
        g = inst.graph
        assert int(g.tensor_size.max(initial=0)) < 2**62
        assert 0 <= peak(g, g.topological_order()) < 2**62
    else:
        p = inst.program
        assert 0 <= p.peak() < 2**62


def _fuzz_doc(data, seed):
    doc = _mutate_tree(data, seed) if data.draw(st.booleans(), label="tree") else copy.deepcopy(seed)
    return _mutate_text(data, _dumps(doc))


@FUZZ
@given(st.data())
def test_fuzz_memopt_graph(data):
    _check_instance(_fuzz_doc(data, GRAPH))


@FUZZ
@given(st.data())
def test_fuzz_memopt_program(data):
    _check_instance(_fuzz_doc(data, PROGRAM))


@FUZZ
@given(st.data())
def test_fuzz_node_link_checkmate(data):
    _check_instance(_fuzz_doc(data, CHECKMATE))


@FUZZ
@given(st.data())
def test_fuzz_node_link_random_layered(data):
    _check_instance(_fuzz_doc(data, LAYERED))


@FUZZ
@given(st.data())
def test_fuzz_plan_loading(data):
    inst = instance_from_doc(copy.deepcopy(GRAPH), where="g.json")
    text = _fuzz_doc(data, PLAN)
    try:
        order, doc = plan_order(inst, loads(text, "plan.json"), where="plan.json")
    except InternalError:
        raise
    except DOCUMENTED as exc:
        assert str(exc).startswith("plan.json"), str(exc)
        _one_line(exc, text)
        return
    assert order.dtype == np.int64 and all(0 <= i < inst.num_ops for i in order.tolist())
    for key in ("peak", "lower_bound"):
        if doc.get(key) is not None:
            assert isinstance(doc[key], (int, float)) and 0 <= doc[key] < 2**62


@FUZZ
@given(st.data())
def test_fuzz_dtr_log(data):
    from memopt.dtr import baseline

    lines = list(DTR_LINES)
    if data.draw(st.booleans(), label="record"):
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = _dumps(_mutate_tree(data, json.loads(lines[i])))
    if data.draw(st.booleans(), label="drop"):
        del lines[data.draw(st.integers(0, len(lines) - 1), label="dropped")]
    text = _mutate_text(data, "\n".join(lines))
    try:
        tr = parse_lines(text.split("\n"), path="fuzz.log")
    except InternalError:
        raise
    except FormatError as exc:
        assert str(exc).startswith("fuzz.log"), str(exc)
        _one_line(exc, text)
        return
    base = baseline(tr)
    assert 0 <= base.peak < 2**62 and 0 <= base.compute < 2**60


def test_fuzz_files_through_load_instance(tmp_path):
    """The file layer too: bytes that are not UTF-8, a directory, a missing file, a BOM."""
    cases = {"latin1.json": "{\"nodes\": [\"\xe9\"]}".encode("latin-1"),
             "bom.json": b"\xef\xbb\xbf" + json.dumps(GRAPH).encode(),
             "empty.json": b"   \n", "nul.json": b"\x00\x00"}
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(FormatError) as err:
            load_instance(tmp_path / name)
        _one_line(err.value)
    for path in (tmp_path, tmp_path / "missing.json"):
        with pytest.raises(FormatError, match="missing.json|directory"):
            load_instance(path)


def test_seeds_are_valid():
    for seed in (GRAPH, PROGRAM, CHECKMATE, LAYERED):
        instance_from_doc(copy.deepcopy(seed), where="seed")
    inst = instance_from_doc(copy.deepcopy(GRAPH), where="g.json")
    plan_order(inst, copy.deepcopy(PLAN), where="plan.json")
    parse_lines(DTR_LINES, path="seed.log")
    assert issubclass(FormatError, MemoptError)
