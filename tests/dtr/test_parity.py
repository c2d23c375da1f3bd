"""Parity with simrd's recorded outcomes (../shared/data/dtr-reference/reference.jsonl).

Every row whose simrd replay took at most ``FAST_SIMRD_S`` seconds is checked here
(the whole file is checked by ``benchmarks/dtr_parity.py``): status, clock,
remat_compute, max_memory exactly, and also model_compute, heuristic_evals, the budget
and both baselines.
"""

import json
from pathlib import Path

import pytest

from memopt.dtr import load_trace, replay

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TRACES = DATA / "dtr-traces"
REFERENCE = DATA / "dtr-reference" / "reference.jsonl"
FAST_SIMRD_S = 3.0


def _rows():
    if not REFERENCE.is_file():
        return []
    rows = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line]
    return [r for r in rows if r["simrd_wall_s"] <= FAST_SIMRD_S]


ROWS = _rows()
_TRACES = {}


def _trace(name):
    if name not in _TRACES:
        _TRACES[name] = load_trace(TRACES / name)
    return _TRACES[name]


@pytest.mark.skipif(not ROWS, reason=f"DTR reference data not found under {DATA}")
@pytest.mark.parametrize(
    "row", ROWS,
    ids=[f"{r['trace'].split('-')[0]}-{r['heuristic']}-{r['ratio']}-{r['overhead_limit']}"
         for r in ROWS])
def test_reference_row(row):
    res = replay(_trace(row["trace"]), int(row["ratio"] * row["baseline_peak"]),
                 row["heuristic"], overhead_limit=row["overhead_limit"],
                 ratio=row["ratio"]).to_dict()
    for key in ("status", "clock", "remat_compute", "max_memory", "model_compute",
                "heuristic_evals", "budget", "baseline_peak", "baseline_compute"):
        assert res[key] == row[key], key


def test_fast_rows_cover_every_trace_and_heuristic():
    if not ROWS:
        pytest.skip(f"DTR reference data not found under {DATA}")
    assert len({r["trace"] for r in ROWS}) == 8
    assert len({r["heuristic"] for r in ROWS}) == 6
