"""One clock per call: the shares table, the one time-limit check, deadlines passed down,
the cost bound's child ended at the deadline, and honest bound reports."""

from __future__ import annotations

import math
import time
import pathlib
import re

import numpy as np
import pytest

import memopt
from memopt.clock import Clock, Share, check_time_limit
from memopt.errors import OptionError
from memopt.remat import check_plan, remat
from memopt.remat.model_common import RematProblem, plan_from_runs
from memopt.time_shares import SHARES, remat_clock
from memopt.schedule.brute_force import random_tensor_graph
from test_cost_bound_process import held_across_big_op   # under 12 bytes, one re-run of cost 5

REMAT = pathlib.Path(memopt.__file__).parent / "remat"


# ------------------------------------------------------------------ the one table of shares
def test_the_shares_table_is_the_only_place_shares_live():
    offenders = []
    for path in sorted(REMAT.parent.rglob("*.py")):
        if path == REMAT.parent / "time_shares.py":
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*[A-Z_]*(_SHARE|_RESERVE)\s*=", line):
                offenders.append(f"{path.name}:{k}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("name", ["api.py", "heuristic.py", "cpsat.py", "lower_bounds.py"])
def test_no_literal_fraction_of_a_time_left(name):
    # a literal fraction times a time (``0.25 * time_limit``, ``0.1 * self.left()``) is a share
    # outside the table
    text = (REMAT / name).read_text()
    assert re.findall(r"[^\w.]0\.\d+ \* [\w(]", text) == []


def test_every_share_is_a_fraction_in_0_1_and_every_share_used_is_in_the_table():
    assert all(isinstance(s, Share) and 0 <= s.fraction <= 1 and (s.most is None or s.most > 0)
               for s in SHARES.values())
    used = set()
    for path in REMAT.glob("*.py"):
        used |= set(re.findall(r"(?:child|seconds)\(\"([a-z_]+\.[a-z_]+)\"\)", path.read_text()))
    assert used and used <= set(SHARES)


# ------------------------------------------------------------------ the clock
def test_a_child_never_ends_after_its_parent():
    c = Clock(10.0, shares={"all": Share(1.0), "long": Share(0.5, most=1e9), "total": Share(2.0, of_total=True)})
    for name in ("all", "long", "total"):
        assert c.child(name).end <= c.end
    assert c.child("long").left() <= 5.0
    assert c.part(3.0).end <= c.end and c.until(c.end + 100).end == c.end


def test_an_expired_clock_has_nothing_left_and_neither_have_its_children():
    c = remat_clock(0)
    assert c.expired() and c.left() == 0.0
    assert all(c.child(name).left() == 0.0 for name in SHARES)


def test_a_methods_shares_of_its_whole_time_count_from_its_own_start():
    import time

    # the call's clock started 800 s ago and has 200 s left: CP-SAT, started now, gets half
    # of its 200 s for the decomposition, not half of the call's 1000 s (long gone)
    call = Clock(1000, shares=SHARES, now=time.perf_counter() - 800)
    assert call.child("cpsat.decompose").left() == 0.0
    assert 50 < remat_clock(None, call).child("cpsat.decompose").left() <= 100


# ------------------------------------------------------------------ one time-limit check
@pytest.mark.parametrize("value", [math.inf, math.nan, -1, True, "soon", None, 1e7])
def test_one_time_limit_check_for_the_whole_library(value):
    with pytest.raises(OptionError, match="--time-limit"):
        check_time_limit(value, "--time-limit")
    g = held_across_big_op()
    with pytest.raises(OptionError, match="time limit"):
        remat(g, memory_limit=11, time_limit=value)
    with pytest.raises(OptionError, match="time limit"):
        memopt.schedule(g, time_limit=value)


def test_the_cli_and_the_cache_use_the_same_check():
    from memopt.cache.offline import check_time_limit as cache_check
    from memopt.cli._options import seconds

    with pytest.raises(OptionError, match="--time-limit must be a finite number of seconds"):
        seconds(math.nan, "--time-limit")
    with pytest.raises(OptionError, match="time_limit must be > 0 seconds"):
        cache_check(0)
    assert seconds(0, "--time-limit") == 0.0 and cache_check(2) == 2.0


# ------------------------------------------------------------------ time limit 0 and deadlines passed down
def test_time_limit_0_returns_the_no_recomputation_plan_with_the_reason():
    g = held_across_big_op()
    r = remat(g, memory_limit=11, cap=1, time_limit=0)
    assert r.status == "unknown" and r.plan is not None and r.peak > 11
    assert r.stats["reason"].startswith("time out before any plan within the limit")
    check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)


def test_time_limit_0_answers_what_needs_no_search():
    g = held_across_big_op()
    assert remat(g, memory_limit=12, cap=1, time_limit=0).status == "optimal"   # no re-run needed
    assert remat(g, memory_limit=5, cap=1, time_limit=0).status == "infeasible"  # below the footprint


def test_a_plan_found_is_returned_and_unknown_comes_with_the_parts_that_ran():
    g = held_across_big_op()
    r = remat(g, memory_limit=11, cap=1, time_limit=10, jobs=1)
    assert r.status == "optimal" and r.extra_cost == 5
    assert all({"status", "seconds"} <= set(v) for v in r.stats["parts"].values())


@pytest.mark.parametrize("method", ["heuristic", "cpsat", "mip", "treedp"])
def test_a_method_given_an_expired_clock_returns_at_once_with_its_incumbent(method):
    from memopt.remat.registry import get_method

    g = held_across_big_op()
    p = RematProblem.of(g, 1)
    start = plan_from_runs(p, [0, 1, 2, 3, 4])          # peak 12: above the limit 11
    r = get_method(method).load()(g, question="min_cost", memory_limit=11, cap=1, time_limit=1000,
                                  incumbent=None if method != "heuristic" else start, clock=remat_clock(0))
    assert r.status in ("unknown", "feasible", "infeasible") or r.status == "optimal" and r.extra_cost == 5
    if method == "heuristic":
        # no time to re-run anything: the start, above the limit
        assert r.status == "unknown" and r.peak == 12


def test_cpsat_given_an_expired_clock_keeps_its_incumbent_unproved():
    from memopt.remat.cpsat import solve_cpsat
    from memopt.remat.lower_bounds import CostBound

    g = held_across_big_op()
    p = RematProblem.of(g, 2)
    inc = plan_from_runs(p, [0, 1, 0, 2, 3, 0, 4])      # re-runs A twice: cost 10, not the least 5
    r = solve_cpsat(g, "min_cost", memory_limit=11, cap=2, incumbent=inc, cost_bound=CostBound(0, ()),
                    clock=remat_clock(0), restrict=False)
    assert (r.status, r.extra_cost) == ("feasible", 10)


# ------------------------------------------------------------------ the child process
def test_the_bound_child_is_gone_once_the_callers_deadline_passed():
    from memopt.remat.cost_bound_process import CostBoundProcess

    g = random_tensor_graph(np.random.default_rng(4), 40, max_size=30, edge_prob=0.3)
    limit = int(memopt.schedule(g, time_limit=5).peak) * 7 // 10
    bg = CostBoundProcess(g, limit, [2] * g.num_ops, time_limit=600)
    proc = bg._proc
    bg.result(stop=True, clock=remat_clock(0))       # the caller has no time left
    assert proc.poll() is not None and bg.done()


# ------------------------------------------------------------------ honest bounds
def test_a_bound_without_cores_that_stopped_at_the_deadline_is_not_complete():
    from memopt.remat.lower_bounds import CostBound, cost_lower_bound

    assert not CostBound(0, ()).complete                  # a bound made by hand claims nothing
    g = held_across_big_op()
    cb = cost_lower_bound(g, 11, 1, clock=remat_clock(0))
    assert cb.ended == "deadline" and not cb.complete and cb.value == 0 and cb.cores == ()
    cb = cost_lower_bound(g, 11, 1, time_limit=30)
    # proved by a trap cut (no core needed)
    assert cb.complete and cb.ended in ("fixpoint", "stop_at") and cb.value == 5 and (cb.cores or cb.cuts)


@pytest.mark.parametrize("seed", range(6))
def test_complete_means_a_fixpoint_or_a_met_target(seed):
    from memopt.remat.lower_bounds import cost_lower_bound

    g = random_tensor_graph(np.random.default_rng(seed), 10, max_size=30, edge_prob=0.3)
    p0 = int(memopt.schedule(g, time_limit=10).peak)
    for tl in (0, 5):
        cb = cost_lower_bound(g, p0 * 4 // 5, 1, time_limit=tl)
        assert cb.complete == (cb.ended in ("fixpoint", "stop_at", "infeasible"))
        if tl == 0:
            assert not cb.complete or cb.ended != "deadline"


# ------------------------------------------------------------------ no full garbage collection during a call
def test_full_collections_are_held_inside_and_restored_after_nested_entries_and_errors():
    import gc

    from memopt.clock import NEVER, full_collections_held

    before = gc.get_threshold()
    with full_collections_held():
        assert gc.get_threshold() == (*before[:2], NEVER)
        with full_collections_held():      # a call inside a call
            pass
        assert gc.get_threshold()[2] == NEVER   # the inner end does not release the outer call
    assert gc.get_threshold() == before
    with pytest.raises(ZeroDivisionError):
        with full_collections_held():
            1 / 0
    assert gc.get_threshold() == before


def test_remat_and_schedule_hold_full_collections_while_they_run_and_restore_them():
    import gc

    from memopt.clock import NEVER
    from memopt.remat.result import RematResult
    from memopt.schedule.result import MethodResult

    seen = []

    def looks_at_the_collector(problem, **kw):
        seen.append(gc.get_threshold()[2])
        memopt.schedule(problem.graph, time_limit=1)        # a nested call leaves the hold on
        seen.append(gc.get_threshold()[2])
        return RematResult(plan=None, peak=None, extra_cost=None, status="unknown", question="min_cost")

    def an_order(problem, **kw):
        seen.append(gc.get_threshold()[2])
        return MethodResult(order=problem.baseline_order(), peak=None)

    before = gc.get_threshold()
    g = held_across_big_op()
    remat(g, memory_limit=11, cap=1, time_limit=5, method=looks_at_the_collector)
    memopt.schedule(g, method=an_order, time_limit=1)
    assert seen == [NEVER] * 3 and gc.get_threshold() == before

    def fails(problem, **kw):
        raise RuntimeError("a method that fails")

    with pytest.raises(RuntimeError):
        remat(g, memory_limit=11, cap=1, time_limit=5, method=fails)
    assert gc.get_threshold() == before


def test_a_named_method_is_given_the_time_left_less_the_closing_reserve():
    from memopt.remat.api import SOLVER_STOP_CPU
    from memopt.remat.result import RematResult

    given = []

    def records_its_time(problem, **kw):
        given.append(kw["time_limit"])
        return RematResult(plan=None, peak=None, extra_cost=None, status="unknown", question="min_cost")

    remat(held_across_big_op(), memory_limit=11, cap=1, time_limit=5, method=records_its_time)
    # the reserve: at least the last solver's stop (0.15 x 5 s allows it), before the check
    assert len(given) == 1 and 0 < given[0] <= 5 - SOLVER_STOP_CPU


# ------------------------------------------------------------------ CP-SAT's stop
def _knapsack_data(n: int, rows: int, seed: int):
    """Rows of weights, their capacities and the values of a multi-dimensional 0/1 knapsack."""
    rng = np.random.default_rng(seed)
    ws = [rng.integers(1, 1000, n).tolist() for _ in range(rows)]
    return ws, [sum(w) // 3 for w in ws], rng.integers(1, 1000, n).tolist()


def _knapsack(n: int, rows: int, seed: int):
    """The knapsack as a CP-SAT model (maximise): small ones CP-SAT proves at once, large ones
    it is still improving when its time runs out."""
    from ortools.sat.python import cp_model

    ws, caps, values = _knapsack_data(n, rows, seed)
    m = cp_model.CpModel()
    x = [m.new_bool_var(f"x{i}") for i in range(n)]
    for w, c in zip(ws, caps):
        m.add(cp_model.LinearExpr.weighted_sum(x, w) <= c)
    m.maximize(cp_model.LinearExpr.weighted_sum(x, values))
    return m


def _solver(workers: int = 1):
    from ortools.sat.python import cp_model

    s = cp_model.CpSolver()
    s.parameters.num_workers = workers
    s.parameters.random_seed = 0
    return s


def _running_solves():
    import threading

    return [t for t in threading.enumerate() if t.name == "memopt-cpsat"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_solve_back_in_time_is_the_plain_solve(seed):
    from ortools.sat.python import cp_model

    from memopt.clock import solve_by

    m = _knapsack(12, 2, seed)
    s = _solver()
    st = solve_by(s, m, time.perf_counter() + 60)
    assert st == cp_model.OPTIMAL
    plain = _solver()
    plain.parameters.max_time_in_seconds = 60
    assert plain.solve(m) == cp_model.OPTIMAL
    assert s.objective_value == plain.objective_value
    # the brute force over the 2**12 subsets
    assert s.objective_value == max(_knapsack_value(12, 2, seed, bits) for bits in range(2 ** 12))
    assert _running_solves() == []


def _knapsack_value(n: int, rows: int, seed: int, bits: int) -> int:
    """The value of the subset ``bits``, or -1 if it breaks a row."""
    ws, caps, values = _knapsack_data(n, rows, seed)
    x = [(bits >> i) & 1 for i in range(n)]
    if any(sum(wi * xi for wi, xi in zip(w, x)) > c for w, c in zip(ws, caps)):
        return -1
    return sum(v * xi for v, xi in zip(values, x))


def test_cpsat_is_given_its_time_less_the_stop_share():
    from memopt.clock import solve_by

    stop = SHARES["solver.stop"]
    s = _solver()
    solve_by(s, _knapsack(8, 1, 0), time.perf_counter() + 100)
    given = s.parameters.max_time_in_seconds
    assert 100 - stop.most - 1 <= given <= 100 - min(stop.most, stop.fraction * 99)


def test_a_solve_with_no_time_returns_and_leaves_no_solve_running():
    from ortools.sat.python import cp_model

    from memopt.clock import solve_by

    s = _solver(2)
    st = solve_by(s, _knapsack(300, 30, 0), time.perf_counter())
    assert s.parameters.max_time_in_seconds == 0
    assert st in (None, cp_model.UNKNOWN, cp_model.FEASIBLE)
    for t in _running_solves():      # a dropped solve was told to stop: it ends
        t.join(60)
    assert _running_solves() == []


def test_a_dropped_solve_is_stopped_and_its_status_is_none():
    from ortools.sat.python import cp_model

    import memopt.clock as mc

    s = _solver(2)
    st = mc.solve_by(s, _knapsack(400, 40, 1), time.perf_counter() + 0.2)
    if st is None:                   # still running at its deadline: told to stop, then dropped
        for t in _running_solves():
            t.join(60)
        assert s.response_proto.status in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    else:                            # back in time, having run out of its (shortened) limit
        assert st in (cp_model.FEASIBLE, cp_model.UNKNOWN)
    assert _running_solves() == [] and not mc._running


def test_an_error_in_the_solve_is_raised_in_the_caller():
    from memopt.clock import solve_by

    with pytest.raises(AttributeError):
        solve_by(_solver(), None, time.perf_counter() + 10)
    assert _running_solves() == []


def test_every_cpsat_call_goes_through_solve_by():
    # every module of the library but the clock itself (the remat models, the scheduler's
    # CP-SAT, the cache's offline optimum)
    files = [f for f in sorted(REMAT.parent.rglob("*.py")) if f != REMAT.parent / "clock.py"]
    offenders = []
    for path in files:
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"max_time_in_seconds\s*=|\bsolver\.solve\(|\bs\.solve\(", line):
                offenders.append(f"{path.name}:{k}: {line.strip()}")
    assert offenders == []
