"""The stage model (:mod:`memopt.remat.stage_model`) against brute force over staged sequences.

What is claimed, on small random graphs (multi-output ops, graph inputs, resident tensors,
workspaces, size-0 tensors) with a topological order fixed as the order of first runs:

* every plan it returns fits the limit and passes the independent checker with the peak and
  extra cost it reports, and never costs more than its (staged) hint;
* the staged hint is itself a solution of the model (its variables fixed to the hint);
* ``optimal`` is the least extra cost over *all staged sequences* for the order (each stage:
  some earlier ops once each, in the order, then the stage's first run; a last stage of
  re-runs only), found here by enumerating them; ``infeasible`` only when none fits;
* with ``reach=0`` the same over the staged sequences whose re-runs are *near* their stage
  (the op's output is read in that stage or later, or is a graph output);
* a window of stages only re-places the re-runs of its stages, and the sweep over windows
  (:func:`improve_by_stages`) never returns a dearer plan.
"""

from __future__ import annotations

import glob
import itertools
import math
import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from memopt.errors import OptionError
from memopt.remat import check_plan
from memopt.remat.model_common import RematProblem, evaluate, footprint_bound, plan_from_runs
from memopt.remat.stage_model import (first_run_order, improve_by_stages, solve_stages, staged_reruns,
                                      staged_runs)
from memopt.schedule.brute_force import random_tensor_graph

GRAPHS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "checkmate-graphs")


def _case(seed: int, n_max: int = 4):
    rng = np.random.default_rng(seed)
    g = random_tensor_graph(rng, int(rng.integers(1, n_max + 1)), max_size=30, edge_prob=0.4)
    order = g.topological_order().tolist()
    cap = int(rng.integers(1, 3))
    return g, order, cap, rng


def _near(p: RematProblem, order, t: int) -> set:
    """Ops whose re-run ``reach=0`` allows in stage ``t`` (from the definition)."""
    outputs = set(p.outputs)
    out = set()
    for i in range(t):
        v = order[i]
        read_late = any(x in p.ins[order[m]] for x in p.outs[v] for m in range(t, len(order)))
        if read_late or any(x in outputs for x in p.outs[v]):
            out.add(v)
    return out


def _staged_sequences(p: RematProblem, order, near=None):
    """Every staged sequence for ``order`` (re-runs of stage ``t`` drawn from ``near(t)``)."""
    n = len(order)
    choices = []
    for t in range(n + 1):
        pool = [order[i] for i in range(t) if near is None or order[i] in near(t)]
        choices.append([list(c) for k in range(len(pool) + 1) for c in itertools.combinations(pool, k)])
    for pick in itertools.product(*choices):
        yield staged_runs(order, list(pick))


def _best_staged(p: RematProblem, order, limit: int, near=None):
    """The least extra cost over the staged sequences within the caps whose plan fits ``limit``."""
    best = None
    for seq in _staged_sequences(p, order, near):
        counts = np.bincount(seq, minlength=p.n)
        if (counts > 1 + np.asarray(p.caps)).any():
            continue
        pk, cost = evaluate(p, plan_from_runs(p, seq))
        if pk <= limit and (best is None or Fraction(cost) < best):
            best = Fraction(cost)
    return best


def _limit(p: RematProblem, order, rng) -> int:
    """A limit between the footprint bound and the order's own peak."""
    top = evaluate(p, plan_from_runs(p, order))[0]
    low = footprint_bound(p)
    return int(rng.integers(low, top + 1)) if top > low else top


def _checked(g, got, cap, limit):
    pk, cost = check_plan(g, got["plan"], cap, claimed_peak=got["peak"], claimed_extra_cost=got["extra_cost"])
    assert pk <= limit
    assert got["runs"] == got["plan"].runs().tolist()
    return pk, cost


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6))
def test_optimum_over_staged_sequences(seed):
    g, order, cap, rng = _case(seed)
    p = RematProblem.of(g, cap)
    limit = _limit(p, order, rng)
    want = _best_staged(p, order, limit)
    got = solve_stages(p, order, limit, time_limit=20)
    if want is None:
        assert got["status"] == "infeasible" and got["plan"] is None
        return
    assert got["status"] == "optimal"
    _checked(g, got, cap, limit)
    assert Fraction(got["extra_cost"]) == want


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_near_restriction_is_exact_over_near_sequences(seed):
    g, order, cap, rng = _case(seed)
    p = RematProblem.of(g, cap)
    limit = _limit(p, order, rng)
    want = _best_staged(p, order, limit, near=lambda t: _near(p, order, t))
    got = solve_stages(p, order, limit, time_limit=20, reach=0)
    if want is None:
        assert got["status"] == "infeasible"
        return
    assert got["status"] == "optimal" and Fraction(got["extra_cost"]) == want
    _checked(g, got, cap, limit)


def _random_fitting_staged(p, order, limit, rng):
    """A random staged sequence within the caps whose plan fits ``limit`` (``None`` if none)."""
    fits = []
    for seq in _staged_sequences(p, order):
        counts = np.bincount(seq, minlength=p.n)
        if (counts <= 1 + np.asarray(p.caps)).all() and evaluate(p, plan_from_runs(p, seq))[0] <= limit:
            fits.append(seq)
    return fits[int(rng.integers(len(fits)))] if fits else None


def _fitting_case(seed):
    """A random case and a random staged sequence that fits its limit (``None`` if none fits)."""
    g, order, cap, rng = _case(seed)
    p = RematProblem.of(g, cap)
    limit = _limit(p, order, rng)
    hint = _random_fitting_staged(p, order, limit, rng)
    return None if hint is None else (g, order, cap, p, limit, hint)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6))
def test_hint_is_a_solution_and_never_dearer(seed):
    case = _fitting_case(seed)
    assume(case is not None)
    g, order, cap, p, limit, hint = case
    hint_cost = evaluate(p, plan_from_runs(p, staged_runs(order, staged_reruns(p, hint, order))))[1]
    assert Fraction(hint_cost) <= Fraction(evaluate(p, plan_from_runs(p, hint))[1])
    n = len(order)
    for window in (None, (0, n + 1), (1, max(2, n // 2 + 1)), (n // 2, n + 1)):
        fixed = solve_stages(p, hint, limit, time_limit=20, strict=False, window=window,
                             parameters={"fix_variables_to_their_hinted_value": True})
        assert fixed["stats"]["solver"] in ("OPTIMAL", "FEASIBLE"), window
        assert Fraction(fixed["extra_cost"]) == Fraction(hint_cost)
        got = solve_stages(p, hint, limit, time_limit=20, window=window)
        _checked(g, got, cap, limit)
        assert Fraction(got["extra_cost"]) <= Fraction(hint_cost)
        assert first_run_order(got["runs"]) == order
    swept = improve_by_stages(p, hint, limit, deadline=float("inf"), width=2)
    _checked(g, swept, cap, limit)
    assert Fraction(swept["extra_cost"]) <= Fraction(hint_cost)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_window_over_everything_is_the_full_model(seed):
    case = _fitting_case(seed)
    assume(case is not None)
    g, order, cap, p, limit, hint = case
    full = solve_stages(p, hint, limit, time_limit=20, strict=False)
    whole = solve_stages(p, hint, limit, time_limit=20, strict=False, window=(0, len(order) + 1))
    assert full["status"] == whole["status"] == "optimal"
    assert Fraction(full["extra_cost"]) == Fraction(whole["extra_cost"]) == _best_staged(p, order, limit)


def test_staged_form_of_a_plan():
    g, order, cap, _ = _case(7, n_max=5)
    p = RematProblem.of(g, 2)
    runs = order + order[:1]
    staged = staged_reruns(p, runs, order)
    assert len(staged) == len(order) + 1
    assert staged_runs(order, staged)[:len(order)] == order


def test_bad_orders_are_refused():
    g, order, _, _ = _case(3, n_max=5)
    p = RematProblem.of(g, 1)
    limit = evaluate(p, plan_from_runs(p, order))[0]
    with pytest.raises(OptionError):
        solve_stages(p, order, limit, time_limit=1, order=order[:-1] + order[:1] if len(order) > 1 else [])
    if len(order) > 1:
        with pytest.raises(OptionError):
            solve_stages(p, order, limit, time_limit=1, order=order[::-1])


@pytest.mark.skipif(not glob.glob(os.path.join(GRAPHS, "random_layered_n100_*.json")),
                    reason="needs ../shared/data/checkmate-graphs (random_layered_n100)")
def test_random_layered_n100_windows_keep_the_plan_valid():
    from memopt.io import load_instance
    from memopt.remat.heuristic import heuristic_method
    from memopt.schedule import schedule

    g = load_instance(glob.glob(os.path.join(GRAPHS, "random_layered_n100_*.json"))[0]).graph
    p = RematProblem.of(g, 2)
    s = schedule(g)
    limit = math.floor(0.9 * int(s.peak))
    r = heuristic_method(g, question="min_cost", memory_limit=limit, cap=2, time_limit=5,
                         incumbent=plan_from_runs(p, s.order.tolist()), lns=False)
    import time

    # the greedy fits the limit in well under a second; whatever plan it has at its limit,
    # the windows keep a fitting plan no dearer (or refuse one above the limit)
    assert r.peak <= limit or r.status == "unknown"
    if r.peak > limit:
        with pytest.raises(OptionError, match="above the limit"):
            improve_by_stages(p, r.plan.runs().tolist(), limit, deadline=time.perf_counter() + 20)
    else:
        got = improve_by_stages(p, r.plan.runs().tolist(), limit, deadline=time.perf_counter() + 20, width=12,
                                reach=0, seconds=2)
        _checked(g, got, 2, limit)
        assert Fraction(got["extra_cost"]) <= Fraction(r.extra_cost)
