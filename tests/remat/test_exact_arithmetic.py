"""Exact arithmetic end to end (issue 24, item 1): costs read from files, summed by the
evaluator and the checker, scaled into the models, printed, written to plan files and read
back by ``memopt verify`` are exact ``int``/``Fraction`` values, up to the documented limit
(each cost below ``2**62``; sums of any size); ``2**62`` is refused naming the op.

The gadget graph of these tests: ``s: () -> x`` (cost 0), ``f: x -> a`` (cost ``c``),
``g: a -> b``, ``h: b -> c``, ``k: a, c -> d`` (sizes x 10, a 40, b 40, c 40, d 1). Running
``h`` with ``a`` live needs 120 bytes; under a limit of 100 every plan frees ``a`` before ``h``
and re-runs ``f`` after it, and the plan that does just that peaks at 90: the least extra
cost is exactly ``c``. ``n`` gadgets side by side (each gadget's ``d`` stays live, 1 byte)
under the same limit cost exactly the sum of their ``c``.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memopt.cli import main
from memopt.core import Op, Tensor, TensorGraph
from memopt.errors import FormatError, GraphError, InternalError
from memopt.io import load_graph, save_graph
from memopt.io._json import exact_json, exact_value, loads
from memopt.io.formats import graph_from_doc, graph_to_doc
from memopt.remat import check_plan, evaluate_plan
from memopt.remat.api import _with_point, remat
from memopt.remat.lower_bounds import bound_units, floor_scaled_costs
from memopt.remat.result import RematResult
from memopt.remat.verify import remat_plan_doc, verify_remat_document

LIMIT = 100


def gadgets(costs, others=(1, 1, 1)) -> TensorGraph:
    """One gadget per cost ``c`` (its op ``f{i}`` costs ``c``; ``g``, ``h``, ``k`` cost ``others``)."""
    tensors, ops = [], []
    for i, c in enumerate(costs):
        tensors += [Tensor(f"x{i}", 10), Tensor(f"a{i}", 40), Tensor(f"b{i}", 40), Tensor(f"c{i}", 40),
                    Tensor(f"d{i}", 1, output=True)]
        ops += [Op(f"s{i}", (), (f"x{i}",)), Op(f"f{i}", (f"x{i}",), (f"a{i}",), cost=c),
                Op(f"g{i}", (f"a{i}",), (f"b{i}",), cost=others[0]),
                Op(f"h{i}", (f"b{i}",), (f"c{i}",), cost=others[1]),
                Op(f"k{i}", (f"a{i}", f"c{i}"), (f"d{i}",), cost=others[2])]
    return TensorGraph.build(tensors, ops, name="gadgets")


def gadget_file(tmp_path, cost_text: str, other_text: str = "1", name: str = "g.json"):
    """The one-gadget graph as a file, with the costs written exactly as given (JSON text)."""
    text = ('{"format": "memopt-graph", "version": 1, "name": "g", "tensors": ['
            '{"name": "x", "size": 10}, {"name": "a", "size": 40}, {"name": "b", "size": 40}, '
            '{"name": "c", "size": 40}, {"name": "d", "size": 1, "output": true}], "ops": ['
            '{"name": "s", "outputs": ["x"]}, '
            f'{{"name": "f", "inputs": ["x"], "outputs": ["a"], "cost": {cost_text}}}, '
            f'{{"name": "g", "inputs": ["a"], "outputs": ["b"], "cost": {other_text}}}, '
            f'{{"name": "h", "inputs": ["b"], "outputs": ["c"], "cost": {other_text}}}, '
            f'{{"name": "k", "inputs": ["a", "c"], "outputs": ["d"], "cost": {other_text}}}]}}')
    path = tmp_path / name
    path.write_text(text)
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- reading costs
def test_cost_0_1_in_a_file_is_exactly_one_tenth(tmp_path):
    g = load_graph(gadget_file(tmp_path, "0.1", "0.2"))
    assert g.op_cost_exact == (0, Fraction(1, 10), Fraction(1, 5), Fraction(1, 5), Fraction(1, 5))


def test_cost_2_pow_53_plus_1_in_a_file_is_exact(tmp_path):
    g = load_graph(gadget_file(tmp_path, str(2**53 + 1)))
    assert g.op_cost_exact[1] == 2**53 + 1 and isinstance(g.op_cost_exact[1], int)


def test_cost_written_with_an_exponent_or_as_p_over_q_is_exact(tmp_path):
    assert load_graph(gadget_file(tmp_path, "9007199254740993.0")).op_cost_exact[1] == 2**53 + 1
    assert load_graph(gadget_file(tmp_path, "1e-3")).op_cost_exact[1] == Fraction(1, 1000)
    assert load_graph(gadget_file(tmp_path, '"1/3"')).op_cost_exact[1] == Fraction(1, 3)


def test_cost_2_pow_62_minus_1_is_accepted(tmp_path):
    g = load_graph(gadget_file(tmp_path, str(2**62 - 1)))
    assert g.op_cost_exact[1] == 2**62 - 1


def test_cost_2_pow_62_is_refused_naming_the_op(tmp_path):
    with pytest.raises(FormatError, match=r"op 'f'.*2\*\*62"):
        load_graph(gadget_file(tmp_path, str(2**62)))
    with pytest.raises(GraphError, match=r"op 'f0'.*2\*\*62"):
        gadgets([2**62])
    # a value just below 2**62 that rounds to 2**62 as a float is still below it exactly
    assert gadgets([2**62 - 1]).op_cost_exact[1] == 2**62 - 1


def test_cost_2_pow_62_on_the_command_line_is_one_line_exit_2(tmp_path, capsys):
    code, out, err = run(capsys, "remat", gadget_file(tmp_path, str(2**62)), "--memory-limit", LIMIT)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "op 'f'" in err and "2**62" in err and "Traceback" not in err


def test_cost_with_a_huge_negative_exponent_is_refused_not_expanded(tmp_path):
    with pytest.raises(FormatError, match="decimal places"):
        load_graph(gadget_file(tmp_path, "1e-999999999"))
    assert load_graph(gadget_file(tmp_path, "0e-999999999")).op_cost_exact[1] == 0


def test_cost_with_a_huge_exponent_is_refused_naming_the_field(tmp_path):
    with pytest.raises(FormatError, match=r"line 1, column \d+, field 'cost'"):
        load_graph(gadget_file(tmp_path, "1e999999999"))
    with pytest.raises(FormatError, match=r"op 'f'.*2\*\*62"):
        load_graph(gadget_file(tmp_path, "4.611686018427387904e18"))        # 2**62 exactly
    # 2**62 - 1 written with an exponent: its float is 2**62, its decimal value is not
    assert load_graph(gadget_file(tmp_path, "4.611686018427387903e18")).op_cost_exact[1] == 2**62 - 1


def test_cost_1_over_0_is_refused(tmp_path):
    with pytest.raises(FormatError, match="zero denominator"):
        load_graph(gadget_file(tmp_path, '"1/0"'))


@given(st.lists(st.one_of(st.integers(0, 2**62 - 1), st.integers(2**53 - 4, 2**53 + 4),
                          st.integers(2**62 - 5, 2**62 - 1),
                          st.fractions(0, 2**62 - 1, max_denominator=10**6)), min_size=1, max_size=4))
def test_graph_file_round_trip_keeps_every_cost_exact(costs):
    g = gadgets(costs)
    back = graph_from_doc(loads(json.dumps(graph_to_doc(g)), "<test>"))
    assert back.op_cost_exact == g.op_cost_exact
    assert [back.op_cost_exact[5 * i + 1] for i in range(len(costs))] == [Fraction(c) for c in costs]


@given(st.one_of(st.integers(0, 2**70), st.fractions(0, 2**70, max_denominator=10**30)))
def test_exact_json_reads_back_exactly(x):
    x = Fraction(x)
    assert exact_value(loads(json.dumps({"v": exact_json(x)}), "<test>")["v"], "v") == x
    assert exact_value(json.loads(json.dumps({"v": exact_json(x)}))["v"], "v") == x


# ---------------------------------------------------------------------------- sums
@given(st.lists(st.one_of(st.integers(2**53 - 3, 2**53 + 3), st.integers(2**62 - 3, 2**62 - 1)),
                min_size=1, max_size=5))
def test_extra_cost_of_re_runs_near_2_pow_53_and_2_pow_62_is_the_exact_sum(costs):
    g = gadgets(costs)
    steps = []
    for i in range(len(costs)):
        steps += [{"run": f"s{i}"}, {"run": f"f{i}"}, {"run": f"g{i}"}, {"free": f"a{i}"}, {"run": f"h{i}"},
                  {"free": f"b{i}"}, {"run": f"f{i}"}, {"free": f"x{i}"}, {"run": f"k{i}"}, {"free": f"a{i}"},
                  {"free": f"c{i}"}]
    expected = sum(costs)
    ev = evaluate_plan(g, steps, cap=1)
    assert ev.extra_cost == expected and ev.peak == 90 + len(costs) - 1
    assert check_plan(g, steps, cap=1, claimed_extra_cost=expected) == (ev.peak, expected)


# ---------------------------------------------------------------------------- the solvers
@pytest.mark.parametrize("method", ["cpsat", "heuristic", "auto"])
def test_cost_2_pow_53_plus_1_remat_status_and_extra_cost_are_exact(method):
    g = gadgets([2**53 + 1])
    r = remat(g, memory_limit=LIMIT, cap=1, method=method, time_limit=60, jobs=1)
    assert r.extra_cost == 2**53 + 1 and isinstance(r.extra_cost, int)
    assert r.cost_lower_bound <= 2**53 + 1
    assert check_plan(g, r.plan, cap=1) == (r.peak, 2**53 + 1)


def test_cost_2_pow_53_plus_1_cpsat_proves_the_exact_optimum():
    r = remat(gadgets([2**53 + 1]), memory_limit=LIMIT, cap=1, method="cpsat", time_limit=60)
    assert (r.status, r.extra_cost, r.cost_lower_bound) == ("optimal", 2**53 + 1, 2**53 + 1)


def test_cost_2_pow_62_minus_1_remat_is_exact():
    g = gadgets([2**62 - 1, 2**62 - 1])
    r = remat(g, memory_limit=LIMIT, cap=1, method="cpsat", time_limit=60)
    assert r.extra_cost == 2 * (2**62 - 1)            # beyond int64: a Python int
    assert r.cost_lower_bound <= 2 * (2**62 - 1)
    assert r.status != "optimal" or r.cost_lower_bound == r.extra_cost


@settings(max_examples=12)
@given(st.lists(st.one_of(st.integers(1, 9), st.integers(2**53 - 2, 2**53 + 2), st.integers(2**62 - 3, 2**62 - 1),
                          st.sampled_from([Fraction(1, 10), Fraction(1, 5), Fraction(1, 3)])),
                min_size=1, max_size=3))
def test_remat_near_2_pow_53_and_2_pow_62_reports_exact_numbers_and_sound_bounds(costs):
    g = gadgets(costs, others=(costs[0], 1, costs[-1]))
    r = remat(g, memory_limit=LIMIT, cap=1, method="cpsat", time_limit=30)
    expected = sum(Fraction(c) for c in costs)
    assert check_plan(g, r.plan, cap=1) == (r.peak, r.extra_cost)
    assert r.extra_cost >= expected and r.cost_lower_bound <= expected
    assert r.status != "optimal" or r.extra_cost == expected == r.cost_lower_bound


def test_floor_scaled_costs_never_scale_up_and_keep_totals_in_int64():
    costs = [2**62 - 1, 2**53 + 1, Fraction(1, 3), 0]
    scaled, factor, exact = floor_scaled_costs(costs, 8)
    assert not exact and all(s <= c * factor for s, c in zip(scaled, costs))
    assert max(scaled) * 8 < 2**62
    assert floor_scaled_costs([2**53 + 1, 1], 3) == ([2**53 + 1, 1], 1, True)


def test_bound_units_never_round_above_a_float_bound():
    for b in (0.0, 5.0, 2.0**50, 2.0**53, float(2**53 + 2), 2.0**62):
        assert bound_units(b) <= b
    assert bound_units(5.0) == 5 and bound_units(4.9999999) == 5


# ---------------------------------------------------------------------------- plan files
def test_plan_with_costs_0_1_and_0_2_is_verified(tmp_path, capsys):
    graph = gadget_file(tmp_path, "0.1", "0.2")
    plan = tmp_path / "plan.json"
    code, out, err = run(capsys, "remat", graph, "--memory-limit", LIMIT, "-o", plan, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert exact_value(d["extra_cost"], "extra_cost") == Fraction(1, 10)
    assert exact_value(d["cost_lower_bound"], "cost_lower_bound") <= Fraction(1, 10)
    assert exact_value(loads(plan.read_text(), "plan")["extra_cost"], "extra_cost") == Fraction(1, 10)
    code, out, err = run(capsys, "verify", graph, plan)
    assert code == 0, err
    assert "0.1" in out


def test_plan_with_cost_1_over_3_is_written_as_p_over_q_and_verified(tmp_path):
    g = gadgets([Fraction(1, 3)])
    save_graph(g, tmp_path / "g.json")
    from memopt.io import load_instance

    inst = load_instance(tmp_path / "g.json")
    r = remat(inst.graph, memory_limit=LIMIT, cap=1, method="cpsat", time_limit=30)
    doc = json.loads(json.dumps(remat_plan_doc(inst, r)))
    assert doc["extra_cost"] == "1/3"
    assert verify_remat_document(inst, doc)["extra_cost"] == "1/3"


def _written_plan(tmp_path, capsys, cost_text="0.1"):
    graph = gadget_file(tmp_path, cost_text, "0.2")
    plan = tmp_path / "plan.json"
    code, _, err = run(capsys, "remat", graph, "--memory-limit", LIMIT, "-o", plan)
    assert code == 0, err
    return graph, json.loads(plan.read_text())


def _verify_forged(tmp_path, capsys, graph, doc):
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    code, out, err = run(capsys, "verify", graph, forged)
    return code, out, err


def test_verify_refuses_question_banana(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    code, out, err = _verify_forged(tmp_path, capsys, graph, {**doc, "question": "banana"})
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "banana" in err


def test_verify_refuses_a_plan_without_a_question(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    del doc["question"]
    code, _, err = _verify_forged(tmp_path, capsys, graph, doc)
    assert code == 2 and "question" in err


def test_verify_refuses_extra_cost_rounded_to_the_nearest_float(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "extra_cost": "3602879701896397/36028797018963968"})
    assert code == 2 and "extra cost" in err


def test_verify_accepts_extra_cost_as_p_over_q(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "extra_cost": "1/10"})
    assert code == 0, err


def test_verify_refuses_a_cost_budget_on_a_min_cost_plan(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "cost_budget": 1})
    assert code == 2 and "cost_budget" in err


def test_verify_refuses_a_status_without_its_memory_limit(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    del doc["memory_limit"]
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "status": "feasible"})
    assert code == 2 and "memory_limit" in err


def test_verify_refuses_version_true(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys)
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "version": True})
    assert code == 2 and "version" in err


@pytest.mark.parametrize("field,value", [("peak", 90.0), ("lower_bound", -1), ("memory_limit", True),
                                         ("extra_cost", True), ("extra_cost", -0.1), ("method", 3),
                                         ("instance", ["g"])])
def test_verify_refuses_forged_field_types(tmp_path, capsys, field, value):
    graph, doc = _written_plan(tmp_path, capsys)
    code, out, err = _verify_forged(tmp_path, capsys, graph, {**doc, field: value})
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and field in err


def test_verify_of_a_2_pow_53_plus_1_plan(tmp_path, capsys):
    graph, doc = _written_plan(tmp_path, capsys, str(2**53 + 1))
    assert doc["extra_cost"] == 2**53 + 1
    code, _, err = _verify_forged(tmp_path, capsys, graph, doc)
    assert code == 0, err
    code, _, err = _verify_forged(tmp_path, capsys, graph, {**doc, "extra_cost": 2**53})
    assert code == 2 and "9007199254740993" in err


# ---------------------------------------------------------------------------- reduce
def test_reduce_knapsack_2_pow_53_plus_1_file_matches_the_printed_offset(tmp_path, capsys):
    out_file = tmp_path / "k.json"
    code, out, err = run(capsys, "reduce", "knapsack", "--weights=5", f"--values={2**53 + 1}", "--capacity=0",
                         "-o", out_file, "--json")
    assert code == 0, err
    printed = json.loads(out)
    g = load_graph(out_file)
    assert printed["cost_offset"] == 2**53 + 1 == sum(g.op_cost_exact)
    assert g.op_cost_exact[g.op_index["make0"]] == 2**53 + 1


def test_reduce_knapsack_value_2_pow_62_is_refused_naming_the_item(tmp_path, capsys):
    code, out, err = run(capsys, "reduce", "knapsack", "--weights=5", f"--values={2**62}", "--capacity=0",
                         "-o", tmp_path / "k.json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "item 0" in err


# ---------------------------------------------------------------------------- pareto
def _point(peak, cost):
    return RematResult(plan=None, peak=peak, extra_cost=cost, status="feasible", question="min_peak")


def test_pareto_point_49_0_drops_the_dominated_point_50_0():
    points = _with_point([_point(50, 0)], _point(49, 0))
    assert [(p.peak, p.extra_cost) for p in points] == [(49, 0)]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=8))
def test_pareto_frontier_never_holds_a_dominated_point(steps):
    points, peak = [], 100
    for drop, cost in steps:
        peak -= 1 + drop
        points = _with_point(points, _point(peak, cost))
    assert all(a.peak > b.peak and a.extra_cost < b.extra_cost for a, b in zip(points, points[1:]))


def test_pareto_point_not_below_the_last_is_an_internal_error():
    with pytest.raises(InternalError):
        _with_point([_point(50, 0)], _point(50, 1))


# ---------------------------------------------------------------------------- options and sizes
@pytest.mark.parametrize("text,word", [("1e-999999999", "decimal places"), ("1/0", "zero denominator"),
                                       ("1e999999999", "2**62"), (str(2**62), "2**62"), ("nan", "finite")])
def test_cost_budget_option_is_exact_or_refused_in_one_line(tmp_path, capsys, text, word):
    code, out, err = run(capsys, "remat", gadget_file(tmp_path, "1"), "--cost-budget", text, "--time-limit", "5")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--cost-budget" in err and word in err


def test_cost_budget_option_0_1_is_one_tenth(tmp_path, capsys):
    code, out, err = run(capsys, "remat", gadget_file(tmp_path, "0.1", "0.2"), "--cost-budget", "0.1", "--json",
                         "--time-limit", "30")
    assert code == 0, err
    d = json.loads(out)
    assert exact_value(d["cost_budget"], "cost_budget") == Fraction(1, 10)
    assert exact_value(d["extra_cost"], "extra_cost") <= Fraction(1, 10)


def test_size_1_point_0000000000000000001_is_no_whole_number(tmp_path):
    path = gadget_file(tmp_path, "1")
    path.write_text(path.read_text().replace('"size": 10', '"size": 1.0000000000000000001'))
    with pytest.raises(FormatError, match="whole number of bytes"):
        load_graph(path)
    path.write_text(path.read_text().replace('1.0000000000000000001', '10.0'))
    assert int(load_graph(path).tensor_size[0]) == 10


def _gadget_steps(n):
    steps = []
    for i in range(n):
        steps += [{"run": f"s{i}"}, {"run": f"f{i}"}, {"run": f"g{i}"}, {"free": f"a{i}"}, {"run": f"h{i}"},
                  {"free": f"b{i}"}, {"run": f"f{i}"}, {"free": f"x{i}"}, {"run": f"k{i}"}, {"free": f"a{i}"},
                  {"free": f"c{i}"}]
    return steps


@given(st.lists(st.one_of(st.integers(2**53 - 3, 2**53 + 3), st.integers(2**62 - 3, 2**62 - 1),
                          st.fractions(0, 10, max_denominator=10**9),
                          st.decimals(0, 10, places=8).map(Fraction)), min_size=1, max_size=4))
def test_plan_file_round_trip_is_exact_for_costs_near_2_pow_53_2_pow_62_and_decimals(tmp_path_factory, costs):
    from memopt.io import load_instance
    from memopt.remat.plan import RematPlan

    path = tmp_path_factory.mktemp("rt") / "g.json"
    save_graph(gadgets(costs), path)
    inst = load_instance(path)
    plan = RematPlan.from_steps(inst.graph, _gadget_steps(len(costs)))
    ev = evaluate_plan(inst.graph, plan, cap=1)
    res = RematResult(plan=plan, peak=ev.peak, extra_cost=ev.extra_cost, status="feasible", question="min_cost",
                      lower_bound=0, cost_lower_bound=0, memory_limit=LIMIT, cap=1)
    doc = loads(json.dumps(remat_plan_doc(inst, res)), "plan")
    report = verify_remat_document(inst, doc)
    assert exact_value(report["extra_cost"], "extra_cost") == sum(Fraction(c) for c in costs) == ev.extra_cost


def test_api_costs_decimal_0_1_and_fraction_are_exact_and_huge_decimal_exponents_refused():
    from decimal import Decimal

    assert gadgets([Decimal("0.1")]).op_cost_exact[1] == Fraction(1, 10)
    assert gadgets([Fraction(2**62 - 1, 1)]).op_cost_exact[1] == 2**62 - 1
    with pytest.raises(GraphError, match="op 'f0'.*decimal places"):
        gadgets([Decimal("1e-999999999")])
    with pytest.raises(GraphError, match="op 'f0'.*2\\*\\*62"):
        gadgets([Decimal("1e999999999")])
    with pytest.raises(GraphError, match="op 'f0'.*2\\*\\*62"):
        gadgets([Fraction(2**62)])
