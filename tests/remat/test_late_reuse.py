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


@pytest.mark.parametrize("name, cheap, p0, ref_peak, ref_extra", CASES)
def test_recomputing_the_cheap_op_beats_the_proven_order_optimum(name, cheap, p0, ref_peak, ref_extra):
    g = load_instance(INSTANCES / name).graph
    base = memopt.schedule(g, time_limit=60)
    assert base.status in ("certified", "optimal") and int(base.peak) == p0
    assert int(base.lower_bound) == p0

    # the reference plan: file order, the cheap op re-run right before its last reader
    order = list(range(g.num_ops))
    assert check_plan(g, plan_from_runs(RematProblem.of(g, 0), order), cap=0) == (p0, 0)
    v = g.op_names.index(cheap)
    last = max(int(u) for u in g.consumers_of(g.tensor_names.index(cheap)))
    runs = order[:last] + [v] + order[last:]
    assert check_plan(g, plan_from_runs(RematProblem.of(g, 1), runs), cap=1) == (ref_peak, ref_extra)
    assert ref_extra == g.op_cost[v]
    total = total_compute(g)
    assert ref_peak < p0 and Fraction(ref_extra) < total / 100

    # memopt finds a plan at least as good, within a 1% budget and at the reference's limit
    budget = int(total / 100)
    r = memopt.remat(g, cost_budget=budget, cap=1, time_limit=10)
    assert r.plan is not None and r.peak <= ref_peak < p0
    assert check_plan(g, r.plan, cap=1, claimed_peak=r.peak, claimed_extra_cost=r.extra_cost)[0] == r.peak
    assert Fraction(r.extra_cost) <= budget < total / 100
    r = memopt.remat(g, memory_limit=ref_peak, cap=1, time_limit=10)
    assert r.status in ("optimal", "feasible") and r.peak <= ref_peak
    # P0 is proved: every plan under it recomputes something, and the cheap op is enough
    assert 0 < Fraction(r.extra_cost) <= ref_extra
    assert check_plan(g, r.plan, cap=1) == (r.peak, r.extra_cost)


def test_edsr_least_peak_within_one_percent_is_proved():
    g = load_instance(INSTANCES / "late_reuse_edsr.json").graph
    r = memopt.remat(g, cost_budget=int(total_compute(g) / 100), cap=2, time_limit=30)
    assert (r.status, r.peak, r.lower_bound) == ("optimal", 53638656, 53638656)
