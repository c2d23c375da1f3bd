"""Diagnosis of a failing/passing budget pair on a real trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memopt.errors import MemoptError
from memopt.dtr.explain import explain, first_divergence

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REFERENCE = SHARED / "data" / "dtr-reference" / "reference.jsonl"
UNET = SHARED / "data" / "dtr-traces" / "unet-6-8000000000.0-2020-10-1-10-57-18-default.log"

needs_shared = pytest.mark.skipif(
    not UNET.exists() or not REFERENCE.exists(),
    reason=f"shared DTR traces/reference not found under {SHARED} (../shared from the repo root)",
)


def test_first_divergence_kinds():
    a = [{"instruction": 1, "tensor": "x"}, {"instruction": 5, "tensor": "y"}]
    assert first_divergence(a, list(a)) is None
    timing = first_divergence(a, [a[0], {"instruction": 6, "tensor": "y"}])
    assert (timing.index, timing.kind) == (1, "timing")
    assert first_divergence(a, [a[0], {"instruction": 6, "tensor": "y"}], choice_only=True) is None
    choice = first_divergence(a, [{"instruction": 1, "tensor": "z"}])
    assert (choice.index, choice.kind, choice.fail["tensor"], choice.pass_["tensor"]) == (0, "choice", "x", "z")
    short = first_divergence(a, a[:1])
    assert (short.index, short.kind, short.pass_) == (1, "length", None)


def _reference(ratio: float) -> dict:
    for line in REFERENCE.read_text().splitlines():
        row = json.loads(line)
        if (row["trace"], row["heuristic"], row["overhead_limit"], row["ratio"]) == (UNET.name, "DTR", None, ratio):
            return row
    raise AssertionError(f"no reference row for {ratio}")


@needs_shared
def test_explain_unet_oom_against_pass():
    from memopt.dtr import load_trace, replay

    ex = explain(UNET, 0.4, 0.5, "dtr")
    # The recorded replays are the ordinary replays: same outcome as simrd's.
    for run, ratio in ((ex.fail, 0.4), (ex.pass_, 0.5)):
        row = _reference(ratio)
        assert (run.status, run.budget, run.clock, run.remat_compute, run.max_memory) == (
            row["status"], row["budget"], row["clock"], row["remat_compute"], row["max_memory"])
    assert ex.fail.status == "OOM" and ex.pass_.status == "pass"

    # The reported divergence is the first difference of the two eviction logs.
    trace = load_trace(UNET)
    fail_log = replay(trace, ex.fail.budget, "dtr", record=True).log
    pass_log = replay(trace, ex.pass_.budget, "dtr", record=True).log
    key = lambda e: (e.instruction, e.tensor)
    assert ex.divergence is not None
    i = ex.divergence.index
    assert [key(e) for e in fail_log.evictions[:i]] == [key(e) for e in pass_log.evictions[:i]]
    assert key(fail_log.evictions[i]) != key(pass_log.evictions[i]) or len(pass_log.evictions) <= i

    # The OOM record is the failing run's, and bytes short is requested - available.
    assert ex.oom is not None
    oom = fail_log.oom
    assert ex.oom["instruction"] == oom.instruction
    assert ex.oom["short"] > 0

    # The counterfactual is a real replay with the implicated tensors kept resident.
    assert ex.implicated
    direct = replay(trace, ex.fail.budget, "dtr", keep_resident=frozenset(ex.implicated))
    assert ex.counterfactual.status == direct.status
    assert ex.counterfactual.resolved == (direct.status == "pass")

    as_json = json.loads(json.dumps(ex.to_dict()))
    assert as_json["fail"]["status"] == "OOM" and as_json["pass"]["status"] == "pass"
    text = ex.to_text()
    assert "out of memory at instruction" in text and "counterfactual" in text


@needs_shared
def test_explain_rejects_a_pair_that_is_not_fail_then_pass():
    with pytest.raises(MemoptError, match="does not fail"):
        explain(UNET, 0.6, 0.7)
    with pytest.raises(MemoptError, match="does not pass"):
        explain(UNET, 0.3, 0.2)


@needs_shared
def test_explain_a_feasibility_hole():
    # U-Net with h_DTR fails at 0.433 of its peak but passes at 0.431 and 0.436 (a hole
    # found by `benchmarks/dtr_sweeps.py --traces unet --grid 0.01:1.0:0.001`).
    from memopt.dtr import baseline, load_trace, replay, replay_ratio

    ex = explain(UNET, "0.433", "0.436", "dtr", singles=40)
    assert (ex.fail.status, ex.pass_.status) == ("OOM", "pass")
    trace = load_trace(UNET)
    assert replay_ratio(trace, 0.431, "dtr").status == "pass"  # a smaller budget passes
    assert ex.fail.budget == int(0.433 * baseline(trace).peak)
    # Every single-tensor counterfactual was run, and its verdict is a real replay's.
    assert len(ex.single_counterfactuals) == len(ex.implicated)
    for cf in ex.single_counterfactuals[:3] + ex.single_counterfactuals[-3:]:
        name = cf.keep_resident[0]
        direct = replay(trace, ex.fail.budget, "dtr", keep_resident=frozenset({name}))
        assert direct.status == cf.status, name
    assert set(ex.resolving_singles) <= set(ex.implicated)
    assert ex.to_dict()["resolving_singles"] == ex.resolving_singles
    text = ex.to_text()
    assert "one at a time" in text
