"""The late-reuse networks of ``instances/`` (issue 7): a capped plan goes below the proven
no-recomputation optimum for under 1% extra compute, and memopt's ``remat`` finds it.

Exact values: ``P0`` is proved by the scheduling core; the reference plan (the file order,
which is an optimal order, with the cheap early op run once more right before its last
reader) is measured by the independent checker; on the EDSR net the least peak within a 1%
budget is proved equal to it.
"""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction

import pytest

import memopt
from memopt.io import load_instance
from memopt.remat import check_plan
from memopt.remat.model_common import RematProblem, plan_from_runs

from conftest import REPO

INSTANCES = REPO / "instances"

# file, cheap early op, P0 (proven), reference plan's peak, its extra cost (= the op's FLOPs)
CASES = [
    ("late_reuse_edsr.json", "head", 70415872, 53638656, 226492416),
    ("late_reuse_ddpm_unet.json", "conv_in", 284554752, 252573184, 452984832),
]


def total_compute(graph) -> Fraction:
    return sum((Fraction(float(c)) for c in graph.op_cost), Fraction(0))


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_instance_files_are_what_the_generator_writes(name):
    spec = importlib.util.spec_from_file_location("make_instances", INSTANCES / "make_instances.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    doc = getattr(gen, name.removesuffix(".json"))()
    assert json.loads((INSTANCES / name).read_text()) == doc


def _reference(name, cheap, p0, ref_peak, ref_extra):
    """The graph and the reference plan's runs: the file order, the cheap op re-run right
    before its last reader (measured by the checker)."""
    g = load_instance(INSTANCES / name).graph
    order = list(range(g.num_ops))
    assert check_plan(g, plan_from_runs(RematProblem.of(g, 0), order), cap=0) == (p0, 0)
    v = g.op_names.index(cheap)
    last = max(int(u) for u in g.consumers_of(g.tensor_names.index(cheap)))
    runs = order[:last] + [v] + order[last:]
    assert check_plan(g, plan_from_runs(RematProblem.of(g, 1), runs), cap=1) == (ref_peak, ref_extra)
    assert ref_extra == g.op_cost[v]
    assert ref_peak < p0 and Fraction(ref_extra) < total_compute(g) / 100
    return g


@pytest.mark.parametrize("name, cheap, p0, ref_peak, ref_extra", CASES)
def test_recomputing_the_cheap_op_beats_the_proven_order_optimum(name, cheap, p0, ref_peak, ref_extra):
    g = _reference(name, cheap, p0, ref_peak, ref_extra)
    # the exact search ends when it proves P0 (EDSR: 2 s, the U-Net: 10 s on a busy core);
    # the limit is far above what the proof needs
    base = memopt.schedule(g, time_limit=600)
    assert (base.status in ("certified", "optimal"), int(base.peak), int(base.lower_bound)) == (True, p0, p0)


def test_remat_finds_the_edsr_reference_plan():
    """On the 37-op EDSR net remat proves both questions in seconds and stops (the limit is
    far above what it needs): the least peak within 1 % of the compute is the reference's,
    and at that peak the least extra cost is the cheap op's."""
    name, cheap, p0, ref_peak, ref_extra = CASES[0]
    g = _reference(name, cheap, p0, ref_peak, ref_extra)
    budget = int(total_compute(g) / 100)
    r = memopt.remat(g, cost_budget=budget, cap=1, time_limit=600)
    assert (r.status, r.peak) == ("optimal", ref_peak) and Fraction(r.extra_cost) <= budget
    assert check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)[0] == r.peak
    r = memopt.remat(g, memory_limit=ref_peak, cap=1, time_limit=600)
    assert (r.status, r.extra_cost) == ("optimal", ref_extra)
    assert check_plan(g, r.plan, cap=1) == (r.peak, r.extra_cost) and r.peak <= ref_peak


def test_remat_on_the_ddpm_unet_answers_soundly_at_any_deadline():
    """On the 103-op U-Net remat finds a plan at the reference's peak in a few seconds but
    proves nothing in minutes, so what holds whatever it has when the time is up: never
    ``infeasible`` (the reference plan exists), every plan checked and within the budget /
    limit, an ``optimal`` answer at least as good as the reference, and every plan under the
    proven P0 recomputes something."""
    name, cheap, p0, ref_peak, ref_extra = CASES[1]
    g = _reference(name, cheap, p0, ref_peak, ref_extra)
    budget = int(total_compute(g) / 100)
    r = memopt.remat(g, cost_budget=budget, cap=1, time_limit=5)
    assert r.status in ("feasible", "optimal", "unknown")
    assert r.plan is not None or r.status == "unknown"
    if r.plan is not None:
        assert check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)[0] == r.peak
        assert Fraction(r.extra_cost) <= budget and r.peak <= p0
        assert r.status != "optimal" or r.peak <= ref_peak
    r = memopt.remat(g, memory_limit=ref_peak, cap=1, time_limit=5)
    assert r.status in ("feasible", "optimal", "unknown")
    assert r.plan is not None or r.status == "unknown"
    if r.plan is not None:
        assert check_plan(g, r.plan, cap=1) == (r.peak, r.extra_cost) and r.peak <= ref_peak
        assert 0 < Fraction(r.extra_cost) and (r.status != "optimal" or Fraction(r.extra_cost) <= ref_extra)


def test_edsr_least_peak_within_one_percent_is_proved():
    """cap 2 (the questions above are at cap 1); proved in about a second, the limit is far
    above what it needs."""
    g = load_instance(INSTANCES / "late_reuse_edsr.json").graph
    r = memopt.remat(g, cost_budget=int(total_compute(g) / 100), cap=2, time_limit=600)
    assert (r.status, r.peak, r.lower_bound) == ("optimal", 53638656, 53638656)
