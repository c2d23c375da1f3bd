"""The adapters report the scheduling call's own seconds, with first-use setup apart.

``seconds`` is :attr:`ScheduleResult.seconds` (the call's clock), ``compile_seconds`` what a
first call in the process spent compiling kernels and importing modules
(:attr:`ScheduleResult.first_use_seconds`), ``call_seconds`` the wall time of the whole call;
the first two lie inside the third.
"""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

import _onnx_models as M

from memopt.adapters import onnx as adapter


@pytest.mark.parametrize("name", ["diamond", "inception"])
def test_onnx_reorder_reports_the_solve_apart_from_first_use(tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    onnx.save(M.ALL[name](), str(path))
    rep = adapter.reorder(path, tmp_path / "out.onnx", time_limit=1, measure_runs=False, defaults=False)
    assert rep.seconds >= 0.0 and rep.compile_seconds >= 0.0
    assert rep.seconds + rep.compile_seconds <= rep.call_seconds + 1e-3
    assert rep.to_dict()["call_seconds"] == rep.call_seconds
    assert rep.status in ("certified", "optimal")
    assert rep.peak_after <= rep.peak_before
