"""The scheduling call's clock: first-call imports reported apart, setups that cannot fit skipped.

A first :func:`memopt.schedule` call in a process imports the modules of the phases it runs and
of the independent check; like kernel compilation, that is reported apart
(``stats["import_seconds"]``) and not charged to the time limit. An exact method whose setup
alone cannot fit in the time it is given is skipped and the result says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import memopt
from memopt.core import Op, Tensor, TensorGraph
from memopt.core.problem import SchedulingProblem
from memopt.schedule import portfolio
from memopt.schedule.portfolio import SETUP_SECONDS, Session, import_first

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _diamond() -> TensorGraph:
    tensors = [Tensor("x", 8), Tensor("a", 5), Tensor("b", 7), Tensor("y", 3, output=True)]
    ops = [Op("f", ("x",), ("a",)), Op("g", ("x",), ("b",)), Op("h", ("a", "b"), ("y",))]
    return TensorGraph.build(tensors, ops)


def _fan(width: int) -> TensorGraph:
    """``width`` independent branches read together: ``width + 1`` allocating ops."""
    tensors = [Tensor("x", 4)] + [Tensor(f"t{i}", i + 1) for i in range(width)] + [Tensor("y", 1, output=True)]
    ops = [Op(f"f{i}", ("x",), (f"t{i}",)) for i in range(width)]
    ops.append(Op("join", tuple(f"t{i}" for i in range(width)), ("y",)))
    return TensorGraph.build(tensors, ops)


def test_first_call_reports_imports_apart_and_a_second_call_imports_nothing():
    """In a fresh process: the first call imports the check's modules and its phases' and says
    how long that took; the second call of the same kind has nothing left to import."""
    code = (
        "import json, sys, time\n"
        "import memopt\n"
        "from memopt.core import Op, Tensor, TensorGraph\n"
        "g = TensorGraph.build([Tensor('x', 4), Tensor('y', 2, output=True)], [Op('f', ('x',), ('y',))])\n"
        "before = 'memopt.bounds.checker' in sys.modules\n"
        "t = time.perf_counter()\n"
        "r1 = memopt.schedule(g, time_limit=1)\n"
        "wall = time.perf_counter() - t\n"
        "r2 = memopt.schedule(g, time_limit=1)\n"
        "print(json.dumps([before, 'memopt.bounds.checker' in sys.modules, r1.stats['import_seconds'],\n"
        "                  r1.seconds + r1.stats['import_seconds'] + r1.stats['compile_seconds'] <= wall + 1e-3,\n"
        "                  r2.stats['import_seconds'], r1.status, r2.status]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "MEMOPT_JIT": "pure"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, after, first, inside, second, s1, s2 = json.loads(out.stdout.splitlines()[-1])
    assert (before, after) == (False, True)
    assert first > 0.0 and inside
    assert second == 0.0
    assert s1 == s2 == "certified"


def test_import_first_imports_only_what_is_missing():
    assert import_first(("memopt.schedule.portfolio", "memopt.core")) == 0.0
    assert import_first(()) == 0.0


def test_phase_moves_the_deadline_by_the_imports_and_compilation():
    s = Session(SchedulingProblem(_diamond(), None), 10.0)
    e0 = s.end
    with s.phase("greedy", ("memopt.schedule.greedy",)):
        pass
    moved = s.compile_seconds + s.import_seconds
    assert s.end - e0 == pytest.approx(moved, abs=1e-9)


def test_ideal_search_setup_estimate_grows_with_the_square_of_allocating_nodes():
    small = SchedulingProblem(_fan(10), None)
    large = SchedulingProblem(_fan(40), None)
    est = SETUP_SECONDS["ideal-search"]
    a, b = small.num_allocating, large.num_allocating
    assert est(small) == pytest.approx(portfolio.IDEAL_SETUP_SECONDS_PER_PAIR * a * a)
    assert est(large) * a * a == pytest.approx(est(small) * b * b)


def test_run_exact_skips_a_setup_that_cannot_fit_and_says_so():
    s = Session(SchedulingProblem(_fan(30), None), 10.0)
    s.run("input", baseline=True)
    assert s.run_exact("ideal-search", 0.0) is None
    assert "ideal-search" not in s.candidates
    (note,) = s.stats["skipped"]
    assert note.startswith("ideal-search (its setup needs about")


def test_run_exact_runs_when_the_setup_fits():
    s = Session(SchedulingProblem(_diamond(), None), 10.0)
    s.run("input", baseline=True)
    res = s.run_exact("ideal-search", 10.0)
    assert res is not None and "ideal-search" in s.candidates
    assert s.candidates["ideal-search"][1] == 20  # x is held until f and g both ran: 8 + 5 + 7
    assert "skipped" not in s.stats


def test_a_schedule_with_no_time_skips_the_exact_search_of_a_mid_sized_graph():
    """At time limit 0 a graph past the small-exact size never starts the exact search (its
    setup would be the only thing it did); the result is still a valid order with its bound."""
    g = _fan(portfolio.SMALL_EXACT + 50)
    r = memopt.schedule(g, time_limit=0)
    assert r.status == "feasible"  # no time for a bound that closes the gap: the search was due
    assert "ideal-search" not in r.stats.get("methods", {})
    assert any(note.startswith("ideal-search (its setup needs") for note in r.stats["skipped"])
    assert r.peak >= r.lower_bound
    assert r.peak == memopt.peak(g, r.order)


def test_first_use_seconds_is_compilation_and_imports():
    r = memopt.schedule(_diamond(), time_limit=1)
    assert r.first_use_seconds == r.stats["compile_seconds"] + r.stats["import_seconds"]
    assert r.peak == r.lower_bound == 20


def test_slowdown_is_at_least_one():
    s = Session(SchedulingProblem(_diamond(), None), 10.0)
    assert s.slowdown() >= 1.0


def test_the_check_reserve_follows_the_slowdown():
    """The time kept for the independent check is its CPU seconds times the slowdown, at most
    half of the limit; when even that cannot hold it (the check will be skipped), none."""
    s = Session(SchedulingProblem(_fan(30), None), 10.0)
    s._wall0 = float("inf")        # the session's first instant: no slowdown measured yet
    assert s.slowdown() == 1.0
    for cpu, kept in [(3.0, 3.0), (5.5, 5.0), (6.5, 0.0)]:
        s.check_seconds = cpu
        assert s.check_reserve() == kept
    s.check_seconds = 1e-3
    s._wall0 = -1e6                # the wall clock ran 10^6 s ahead of the CPU clock
    assert s.slowdown() >= 1e5
    assert s.check_reserve() == 0.0   # 1e-3 s of CPU x 1e5 cannot fit: the methods get the time
    s.run("input", baseline=True)
    assert s.run_exact("ideal-search", 5.0) is None   # its setup, in wall seconds, cannot fit either
