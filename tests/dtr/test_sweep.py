"""Budget sweeps: grid arithmetic, hole detection, executors, determinism, parity of sweep
points with simrd's recorded outcomes."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memopt.errors import MemoptError
from memopt.dtr import sweep as sweep_mod
from memopt.dtr.sweep import (
    InlineExecutor,
    SweepPoint,
    SweepResult,
    find_holes,
    parse_grid,
    ratio_budget,
    run_sweep,
)

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "data" / "dtr-traces"
REFERENCE = SHARED / "data" / "dtr-reference" / "reference.jsonl"
UNET = TRACES / "unet-6-8000000000.0-2020-10-1-10-57-18-default.log"

needs_shared = pytest.mark.skipif(
    not UNET.exists() or not REFERENCE.exists(),
    reason=f"shared DTR traces/reference not found under {SHARED} (../shared from the repo root)",
)


# ------------------------------------------------------------------ holes


def brute_force_holes(passed: list[bool]) -> list[tuple[int, int]]:
    """Independent definition: a failing index is in a hole iff some budget below it and
    some budget above it pass; holes are the maximal runs of such indices."""
    inside = [
        (not ok) and any(passed[:i]) and any(passed[i + 1 :]) for i, ok in enumerate(passed)
    ]
    holes, start = [], None
    for i, flag in enumerate(inside + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            holes.append((start, i - 1))
            start = None
    return holes


@given(st.lists(st.booleans(), max_size=60))
@settings(max_examples=400, deadline=None)
def test_find_holes_matches_brute_force(passed):
    assert find_holes(passed) == brute_force_holes(passed)


def test_find_holes_examples():
    P, F = True, False
    assert find_holes([F, F, P, P]) == []  # failures below the first pass are no hole
    assert find_holes([P, P, F, F]) == []  # nor above the last pass
    assert find_holes([F, P, F, F, P, F, P, F]) == [(2, 3), (5, 5)]
    assert find_holes([]) == []


def _point(ratio: str, status: str) -> SweepPoint:
    return SweepPoint(Decimal(ratio), 100, status, 1, 1, 0, 100, 0, 0.0)


def test_sweep_result_reports_holes_as_ratio_pairs():
    statuses = ["OOM", "pass", "OOM", "thrash", "pass", "OOM", "pass", "OOM"]
    points = tuple(_point(f"0.{i + 1}", s) for i, s in enumerate(statuses))
    result = SweepResult("t", "dtr", None, "g", 1, 1, 1, points, 0.0)
    assert result.holes == ((Decimal("0.3"), Decimal("0.4")), (Decimal("0.6"), Decimal("0.6")))
    d = result.to_dict()
    assert d["holes"] == [[0.3, 0.4], [0.6, 0.6]]
    assert d["failing"] == 5 and d["hole_budgets"] == 3 and d["min_passing_ratio"] == 0.2


# ------------------------------------------------------------------ grid


def test_grid_0001_has_no_drift_and_includes_stop():
    points = parse_grid("0.1:1.0:0.001")
    assert len(points) == 901
    assert points[0] == Decimal("0.1") and points[-1] == Decimal("1.0")
    assert [str(p) for p in points[:3]] == ["0.100", "0.101", "0.102"]
    # Every point is exactly a multiple of 0.001 (no 0.30000000000000004-style drift).
    assert all((p * 1000) == (p * 1000).to_integral_value() for p in points)
    assert float(points[330]) == 0.43  # the same double as the literal 0.43


@given(
    st.integers(1, 2000),
    st.integers(0, 3000),
    st.integers(1, 500),
    st.sampled_from([10, 100, 1000, 10000]),
)
@settings(max_examples=300, deadline=None)
def test_grid_points_are_exact_multiples(start_units, span_units, step_units, scale):
    start, stop, step = start_units, start_units + span_units, step_units
    spec = f"{Decimal(start) / scale}:{Decimal(stop) / scale}:{Decimal(step) / scale}"
    expected = [Decimal(u) / scale for u in range(start, stop + 1, step)]
    assert list(parse_grid(spec)) == expected


def test_grid_stop_off_grid_is_excluded():
    assert parse_grid("0.1:0.25:0.1") == (Decimal("0.1"), Decimal("0.2"))
    assert parse_grid("0.5:0.5:0.01") == (Decimal("0.5"),)


@pytest.mark.parametrize(
    "spec",
    ["", "0.1:1", "0.1:1:0.1:2", "a:1:0.1", "0:1:0.1", "-0.1:1:0.1", "0.5:0.1:0.1",
     "0.1:1:0", "0.1:1:-0.01", "nan:1:0.1", "0.1:inf:0.1", "0.1:1:1e-9"],
)
def test_bad_grids_raise_memopt_error(spec):
    with pytest.raises(MemoptError, match="bad grid"):
        parse_grid(spec)


@needs_shared
def test_ratio_budget_matches_simrd_budgets():
    rows = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    for row in rows:
        assert ratio_budget(Decimal(str(row["ratio"])), row["baseline_peak"]) == row["budget"], row


# ------------------------------------------------------------------ sweeps on a real trace


def _reference_rows(trace: str, heuristic: str, limit=None) -> dict[float, dict]:
    rows = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    return {
        r["ratio"]: r
        for r in rows
        if r["trace"] == trace and r["heuristic"] == heuristic and r["overhead_limit"] == limit
    }


@needs_shared
def test_sweep_points_match_simrd_reference_and_single_replays():
    result = run_sweep(UNET, "0.1:1.0:0.1", "dtr", jobs=1)
    ref = _reference_rows(UNET.name, "DTR")
    assert [float(p.ratio) for p in result.points] == [round(0.1 * k, 1) for k in range(1, 11)]
    checked = 0
    for p in result.points:
        row = ref.get(float(p.ratio))
        if row is None:
            continue
        checked += 1
        got = (p.status, p.budget, p.clock, p.remat_compute, p.max_memory)
        want = (row["status"], row["budget"], row["clock"], row["remat_compute"], row["max_memory"])
        assert got == want, p.ratio
    assert checked >= 8
    assert result.baseline_peak == ref[1.0]["baseline_peak"]
    # Failures below the smallest passing budget are not holes.
    assert all(lo > result.min_passing_ratio for lo, _ in result.holes)


@needs_shared
def test_process_pool_and_repeats_agree_with_inline():
    grid = "0.40:0.50:0.02"
    inline = run_sweep(UNET, grid, "dtr", jobs=1)
    pooled = run_sweep(UNET, grid, "dtr", jobs=2, repeats=2)
    strip = lambda r: [{k: v for k, v in p.to_dict().items() if k != "seconds"} for p in r.points]
    assert strip(inline) == strip(pooled)
    assert pooled.nondeterministic == [] and pooled.repeats == 2


@needs_shared
def test_any_executor_can_run_a_sweep_and_is_left_open():
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        result = run_sweep(UNET, "0.5:0.7:0.1", "lru", executor=pool)
        assert pool.submit(lambda: 42).result() == 42  # not shut down by the sweep
    assert [p.status for p in result.points] and result.heuristic == "lru"


@needs_shared
def test_trace_is_parsed_once_per_process(monkeypatch):
    import memopt.dtr as dtr

    calls = []
    real = dtr.load_trace
    monkeypatch.setattr(dtr, "load_trace", lambda path: calls.append(path) or real(path))
    sweep_mod._TRACE_CACHE.clear()
    run_sweep(UNET, "0.5:0.9:0.1", "dtr", jobs=1, repeats=2)
    assert len(calls) == 1


@needs_shared
def test_nondeterministic_replays_are_flagged(monkeypatch):
    import memopt.dtr as dtr

    real = dtr.replay
    seen: dict[int, int] = {}

    def flaky(trace, budget, heuristic="dtr", **kw):
        result = real(trace, budget, heuristic, **kw)
        seen[budget] = seen.get(budget, 0) + 1
        if seen[budget] == 2:  # the second run of every budget reports one more tick
            result = dataclasses.replace(result, clock=result.clock + 1)
        return result

    monkeypatch.setattr(dtr, "replay", flaky)
    result = run_sweep(UNET, "0.6:0.7:0.1", "dtr", executor=InlineExecutor(), repeats=2)
    assert [float(p.ratio) for p in result.nondeterministic] == [0.6, 0.7]
    assert result.to_dict()["nondeterministic"] == [0.6, 0.7]
    assert len(result.points[0].variants) == 2


@needs_shared
def test_sweep_input_errors():
    with pytest.raises(MemoptError, match="unknown heuristic"):
        run_sweep(UNET, "0.5:0.6:0.1", "belady")
    with pytest.raises(MemoptError, match="not found"):
        run_sweep(UNET.with_name("missing.log"), "0.5:0.6:0.1")
    with pytest.raises(MemoptError, match="repeats"):
        run_sweep(UNET, "0.5:0.6:0.1", repeats=0)


@needs_shared
def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    result = run_sweep(UNET, "0.3:0.6:0.1", "dtr", jobs=1)
    out = tmp_path / "sweep.png"
    sweep_mod.plot_sweep(result, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


TREELSTM = TRACES / "treelstm-6-8000000000.0-2020-10-1-12-54-1-default.log"


@needs_shared
def test_timeout_workers_give_the_same_outcomes():
    grid = "0.40:0.46:0.02"
    plain = run_sweep(UNET, grid, "dtr", jobs=1)
    timed = run_sweep(UNET, grid, "dtr", jobs=2, timeout=300)
    strip = lambda r: [{k: v for k, v in p.to_dict().items() if k != "seconds"} for p in r.points]
    assert strip(plain) == strip(timed) and timed.timeouts == []


@pytest.mark.skipif(not TREELSTM.exists(), reason=f"{TREELSTM} not found")
def test_a_budget_that_overruns_is_undecided():
    # TreeLSTM at 5% of its peak recomputes for ~32 CPU-seconds before its OOM: stopped after 2 s.
    result = run_sweep(TREELSTM, "0.05:0.05:0.01", "dtr", jobs=1, timeout=2)
    (point,) = result.points
    assert point.status == "timeout" and result.failing == [] and result.holes == ()
    assert result.to_dict()["timeouts"] == [0.05]
    with pytest.raises(MemoptError, match="timeout"):
        run_sweep(TREELSTM, "0.5:0.5:0.1", executor=InlineExecutor(), timeout=1)


def test_timeouts_are_not_failures_for_holes():
    statuses = ["pass", "timeout", "OOM", "timeout", "pass", "OOM", "timeout"]
    points = tuple(_point(f"0.{i + 1}", s) for i, s in enumerate(statuses))
    result = SweepResult("t", "dtr", None, "g", 1, 1, 1, points, 0.0, timeout=5.0)
    assert result.holes == ((Decimal("0.3"), Decimal("0.3")),)
    assert [float(p.ratio) for p in result.failing] == [0.3, 0.6]
    assert result.to_dict()["timeouts"] == [0.2, 0.4, 0.7]
