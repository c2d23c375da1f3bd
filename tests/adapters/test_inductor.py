"""memopt.adapters.inductor on real Inductor programs (CPU, no mocks, no timings).

One small branching model is compiled once (module fixture) to keep the compile count low:
a linear layer whose output must live until the end, and an independent convolution whose
library call (`extern_kernels.convolution`) allocates a large transient. Inductor's estimate does not see
the transient and runs the linear layer first; memopt sees it and runs the convolution
first, which lowers the measured peak.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import memopt  # noqa: E402
from memopt.adapters import inductor  # noqa: E402
from memopt.core.program import Program  # noqa: E402
from memopt.errors import InternalError, MemoptError, ScheduleError  # noqa: E402


class Branching(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 3072)
        self.c = torch.nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, z, x):
        big = self.a(z)
        y = self.c(x)
        return big * y.mean()


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model = Branching().eval()
    inputs = (torch.randn(4, 32), torch.randn(1, 64, 16, 16))
    cap = inductor.capture(model, *inputs)
    report = inductor.optimize(model, *inputs, capture_result=cap, time_limit=5)
    return model, inputs, cap, report


def test_capture_is_a_valid_program_the_checker_accepts(case):
    _, _, cap, _ = case
    prog = cap.program
    assert isinstance(prog, Program)
    assert cap.mismatches == []
    n = len(prog.statements)
    assert n > 10
    # the independent checker verifies the stock order and its peak
    res = memopt.schedule(prog, method="input", time_limit=5)
    assert res.verified and res.order.tolist() == list(range(n))
    assert res.peak == prog.peak()
    # statements carry the wrapper's source; allocations are storages, names are size 0
    texts = [s.payload for s in prog.statements]
    assert any("extern_kernels.convolution" in t for t in texts)
    assert any(t.startswith("del ") for t in texts)
    for s in prog.statements:
        for b, size in s.allocs:
            assert size == 0 if b.startswith("n:") else size > 0
    # exactly one statement (the convolution) holds a transient
    assert [("convolution" in s.payload) for s in prog.statements if s.transient] == [True]


def test_stock_modelled_peak_equals_measured_to_the_byte(case):
    _, _, cap, report = case
    measured, _ = cap.measure()
    assert measured == cap.program.peak() == report.modelled_peak_stock == report.measured_peak_stock
    # after the capture's runs a warm-up run changes nothing: optimize measures without one
    assert cap.measure(warm_up=False)[0] == measured


def test_inductor_estimate_misses_exactly_the_library_transient(case):
    _, _, _, report = case
    assert report.inductor_estimate is not None
    assert report.inductor_estimate == report.stock_peak_without_transients < report.modelled_peak_stock


def test_estimate_difference_is_itemised_exactly(case):
    _, _, cap, report = case
    diffs = report.estimate_differences
    assert diffs == inductor.attribute_estimate(cap)
    assert [d.cause for d in diffs] == list(inductor.ESTIMATE_CAUSES) + ["unattributed"]
    # estimate + the itemised differences = the stock program's peak = the measured one
    assert report.inductor_estimate + sum(d.bytes for d in diffs) == report.modelled_peak_stock == report.measured_peak_stock
    by_cause = {d.cause: d.bytes for d in diffs}
    assert by_cause["unattributed"] == 0
    # on this model the whole difference is the convolution's library transient
    assert by_cause["library transients"] == report.modelled_peak_stock - report.inductor_estimate > 0
    assert all(b == 0 for c, b in by_cause.items() if c != "library transients")


def test_optimize_is_bitwise_equal_exact_and_lower_on_a_branching_model(case):
    model, inputs, cap, report = case
    assert report.bitwise_equal
    assert report.modelled_peak <= report.modelled_peak_stock
    assert report.lower_bound <= report.modelled_peak
    assert report.status in ("certified", "optimal", "feasible")
    assert report.measured_peak == report.modelled_peak
    assert report.measured_peak < report.measured_peak_stock
    assert cap.program.peak(report.order) == report.modelled_peak
    # the permuted wrapper is a permutation of the stock statements
    assert sorted(report.order) == list(range(len(cap.program.statements)))
    assert report.order != list(range(len(cap.program.statements)))


def test_optimize_keeps_the_stock_order_when_it_is_already_optimal():
    # a chain: Inductor's order is the only one, so memopt's cannot be lower; the report keeps
    # the stock program (one measurement serves both) and proves it optimal
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(4, 16)
    report = inductor.optimize(mlp, x, time_limit=2)
    n = len(report.capture.program.statements)
    assert report.order == list(range(n))
    assert report.measured_peak == report.measured_peak_stock == report.modelled_peak == report.modelled_peak_stock
    assert report.lower_bound == report.modelled_peak and report.status in ("certified", "optimal")
    assert report.bitwise_equal and torch.equal(report()[0], report.capture.run()[0])


def test_optimize_measures_the_stock_order_by_the_captures_profiled_run_once(case):
    _, _, cap, report = case
    # the first optimize took the profiled run's (peak, outputs) as its stock measurement
    assert cap.take_stock_run() is None
    # a second optimize has none and runs the stock order again: the same bytes and outputs
    again = inductor.optimize_capture(cap, time_limit=2)
    assert again.measured_peak_stock == report.measured_peak_stock == report.modelled_peak_stock
    assert again.measured_peak == report.measured_peak and again.bitwise_equal


def test_optimized_callable_matches_stock_and_eager(case):
    model, inputs, cap, report = case
    out = report()
    stock = cap.run()
    assert torch.equal(out[0], stock[0])
    with torch.no_grad():
        eager = model(*inputs)
    torch.testing.assert_close(out[0], eager, rtol=1e-4, atol=1e-5)


def test_an_order_that_breaks_a_dependency_is_refused(case):
    _, _, cap, _ = case
    n = len(cap.program.statements)
    with pytest.raises(ScheduleError):
        cap.source_for(list(reversed(range(n))))
    with pytest.raises(MemoptError):
        cap.source_for([0, 0] + list(range(2, n)))


def test_compile_path_scheduler_pass_reorders_and_is_measured_exactly(case):
    model, inputs, stock_cap, report = case
    opts = inductor.compile_path_options(time_limit=2)
    memopt_pass = opts["_post_fusion_custom_pass"]
    from torch._inductor.custom_graph_pass import CustomSchedulerPass

    assert isinstance(memopt_pass, CustomSchedulerPass) and memopt_pass.uuid()
    cap = inductor.capture(model, *inputs, **opts)
    decision = memopt_pass.last
    assert decision.lower_bound <= decision.memopt and decision.peak <= decision.stock
    if decision.adopted:  # only a lower order with no node above Inductor's order's memory at that node
        assert decision.peak < decision.stock and decision.nodes_above_stock == 0
    else:  # Inductor's own order: the stock program, statement for statement
        assert decision.peak == decision.stock
        assert [s.payload for s in cap.program.statements] == [s.payload for s in stock_cap.program.statements]
    # whatever order the pass chose, the wrapper path measures the program it produced exactly
    measured, out = cap.measure()
    assert measured == cap.program.peak()
    assert torch.equal(out[0], stock_cap.run()[0])


def test_training_step_forward_and_backward_programs_are_exact_and_bitwise():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                              torch.nn.Linear(64, 4))
    caps = inductor.capture_training(mlp, torch.randn(8, 16))
    assert set(caps) == {"forward", "backward"}
    # both programs carry the step's compile time and their own profiling phases
    assert caps["forward"].seconds["compile"] == caps["backward"].seconds["compile"] > 0
    assert all({"load wrapper", "profiled run"} <= set(cap.seconds) for cap in caps.values())
    for kind, cap in caps.items():
        rep = inductor.optimize_capture(cap, time_limit=2)
        assert rep.bitwise_equal, kind
        assert rep.measured_peak_stock == rep.modelled_peak_stock, kind
        assert rep.measured_peak == rep.modelled_peak <= rep.modelled_peak_stock, kind
        # every statement's measured net allocation is the modelled one (no stray `del`)
        assert cap.mismatches == [], kind
        # Inductor's estimate is itemised to the byte (a backward counts the saved activations)
        diffs = rep.estimate_differences
        assert rep.inductor_estimate + sum(d.bytes for d in diffs) == rep.modelled_peak_stock, kind
        assert diffs[-1].cause == "unattributed" and diffs[-1].bytes == 0, kind


# --------------------------------------------------------------------- hand-written wrappers (no compile)
_WRAPPER_HEAD = """
import torch

def call(args):
    x, = args
    args.clear()
"""


def _capture_of(body: str, args: list, timeline=None, estimate=None) -> inductor.Capture:
    source = _WRAPPER_HEAD + body
    program, mismatches = inductor._build_program(source, list(args), name="hand")
    return inductor.Capture(program=program, source=source, args=list(args), inductor_estimate=estimate,
                            mismatches=mismatches, inductor_timeline=timeline, _src=inductor._split(source))


def test_a_del_frees_its_storage_at_the_del():
    # the profiling loop must hold no reference of its own to a tensor: the free of buf0 is
    # recorded at `del buf0`, not later (the training captures' "del attributed nowhere")
    cap = _capture_of("    buf0 = torch.ops.aten.mul.Tensor(x, x)\n"
                      "    buf1 = torch.ops.aten.add.Tensor(buf0, x)\n"
                      "    del buf0\n"
                      "    return (buf1,)\n", [torch.ones(1024)])
    assert cap.mismatches == []
    dele = cap.program.statements[2]
    assert dele.payload == "del buf0" and any(b.startswith("s:") for b in dele.frees)
    assert cap.program.peak() == 8192
    measured, out = cap.measure()
    assert measured == 8192 and torch.equal(out[0], torch.full((1024,), 2.0))


def test_attribute_estimate_on_a_known_timeline():
    """A wrapper whose in-place add reuses buf0's storage, and the timeline Inductor's estimate
    would build for it (a freeable saved input of 1024 bytes, buf0 and buf1 counted apart)."""
    B = inductor.InductorBuffer
    timeline = inductor.InductorTimeline(3, (B("saved", 1024, 1024, 0, 1, True), B("buf0", 4096, 4096, 0, 1),
                                             B("buf1", 4096, 4096, 1, 2), B("buf2", 4, 4, 2, -1)))
    assert timeline.peak() == 1024 + 4096 + 4096
    cap = _capture_of("    buf0 = torch.ops.aten.mul.Tensor(x, x)\n"
                      "    buf1 = buf0; del buf0  # reuse\n"
                      "    torch.ops.aten.add_.Tensor(buf1, x)\n"
                      "    buf2 = torch.ops.aten.mul.Tensor(buf1[:1], x[:1])\n"
                      "    del buf1\n"
                      "    return (buf2,)\n", [torch.ones(1024)], timeline, estimate=9216)
    assert cap.mismatches == [] and cap.program.peak() == 4100
    diffs = {d.cause: d for d in inductor.attribute_estimate(cap)}
    assert {c: d.bytes for c, d in diffs.items() if d.bytes} == {"graph inputs": -1024, "in-place reuse": -4092}
    assert diffs["graph inputs"].buffers == ("saved",) and diffs["in-place reuse"].buffers == ("buf1=buf0",)
    assert diffs["unattributed"].bytes == 0
    # a timeline that does not reproduce the recorded estimate is refused
    bad = inductor.Capture(program=cap.program, source=cap.source, args=cap.args, inductor_estimate=1,
                           inductor_timeline=timeline, _src=cap._src)
    with pytest.raises(InternalError):
        inductor.attribute_estimate(bad)


# --------------------------------------------------------------------- the torch.compile pass and the FX-graph cache
def test_scheduler_pass_pickles_as_its_options_with_a_stable_option_dependent_uuid():
    import pickle

    p = inductor.MemoptSchedulerPass(time_limit=2, method="auto")
    p.last = (3, 2, 1, "optimal")  # run state: not part of the pickled state, nor of the uuid
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is type(p) and q == p and q.last is None
    assert pickle.dumps(p) == pickle.dumps(inductor.MemoptSchedulerPass(time_limit=2.0))
    assert q.uuid() == p.uuid() == inductor.MemoptSchedulerPass(2).uuid()
    assert len({p.uuid(), inductor.MemoptSchedulerPass(3).uuid(), inductor.MemoptSchedulerPass(2, "input").uuid()}) == 3


def test_second_compile_with_the_pass_hits_the_fx_graph_cache():
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = Branching().eval()
    inputs = (torch.randn(4, 32), torch.randn(1, 64, 16, 16))
    options = dict(inductor.compile_path_options(time_limit=1), fx_graph_cache=True)

    def compile_once():
        torch._dynamo.reset()
        before = dict(counters["inductor"])
        with torch.no_grad():
            out = torch.compile(model, backend="inductor", options=options)(*inputs)
        return out, {k: counters["inductor"][k] - before.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_bypass")}

    first, first_counts = compile_once()
    assert first_counts["fxgraph_cache_bypass"] == 0  # the key pickles (no "Failed to pickle cache key")
    second, second_counts = compile_once()
    assert second_counts == {"fxgraph_cache_hit": 1, "fxgraph_cache_bypass": 0}
    assert torch.equal(first, second)


def test_capture_without_measuring_is_the_model_without_transients(case):
    model, inputs, measured_cap, _ = case
    cap = inductor.capture(model, *inputs, measure=False)
    assert not cap.transients_measured and measured_cap.transients_measured
    assert set(cap.seconds) == {"compile", "load wrapper", "run", "model"}
    # the compile's first call warmed the library caches: no warm-up run of its own
    assert {"compile", "load wrapper", "profiled run", "model"} == set(measured_cap.seconds)
    # the same statements, buffers and dependencies; only the (unknown) transients are 0
    assert [(s.allocs, s.frees, s.reads, s.writes, s.payload) for s in cap.program.statements] == \
           [(s.allocs, s.frees, s.reads, s.writes, s.payload) for s in measured_cap.program.statements]
    assert all(s.transient == 0 for s in cap.program.statements)
    assert cap.program.peak() == inductor.without_transients(measured_cap.program).peak() < measured_cap.program.peak()
    # optimize orders by that model and still measures both orders; outputs stay bitwise equal
    report = inductor.optimize_capture(cap, time_limit=2)
    assert not report.transients_measured and report.row()["transients_measured"] is False
    assert report.bitwise_equal and report.modelled_peak <= report.modelled_peak_stock == cap.program.peak()
    assert report.measured_peak_stock == measured_cap.program.peak()


def test_statement_texts_are_the_parser_segments_with_unicode_and_form_feeds():
    import ast

    from memopt.adapters.inductor import wrapper

    source = ("K = '''\x0c a kernel's source\n\x0c'''\n\ndef call(args):\n    x, = args\n    args.clear()\n"
              "    # the comment above y\n    y = 'é\x0c' + \"ü\"; z = (1,\n        2)\n    del x  # trailing\n"
              "    return (y,)\n")
    lines = wrapper._source_lines(source)
    assert "".join(lines) == source
    nodes = [n for n in ast.walk(ast.parse(source)) if getattr(n, "end_col_offset", None) is not None]
    assert [wrapper._segment(lines, n) for n in nodes] == [ast.get_source_segment(source, n) for n in nodes]
    assert inductor._split(source).texts == ["# the comment above y\ny = 'é\x0c' + \"ü\"", "z = (1,\n        2)",
                                             "del x  # trailing"]


def _random_wrapper(draw_ops) -> str:
    """A straight-line wrapper body from ``(kind, a, b)`` draws: new tensors of several sizes,
    aliases (``bufK = bufI``, views) and ``del``s of live names, every live name returned."""
    live: list[int] = []
    lines, k = [], 0
    for kind, a, b in draw_ops:
        if kind == "new" or not live:
            src = f"buf{live[a % len(live)]}" if live and b % 2 else "x"
            lines.append(f"buf{k} = torch.ops.aten.mul.Tensor({src}[:{64 * (1 + b % 4)}], 2.0)")
        elif kind == "alias":
            lines.append(f"buf{k} = buf{live[a % len(live)]}" + (".view(-1)" if b % 2 else "  # reuse"))
        else:  # del
            lines.append(f"del buf{live.pop(a % len(live))}")
            continue
        live.append(k)
        k += 1
    lines.append("return (" + "".join(f"buf{i}, " for i in live) + ")")
    return "".join(f"    {ln}\n" for ln in lines)


_OPS = st.lists(st.tuples(st.sampled_from(["new", "new", "alias", "del", "del"]), st.integers(0, 50),
                          st.integers(0, 50)), min_size=1, max_size=30)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_OPS, seed=st.integers(0, 2**16))
def test_random_wrappers_measure_as_modelled_in_random_orders(ops, seed):
    # aliases, views, dels and freed addresses reused by later tensors: the storages the profiled
    # run tracks must give a model that every valid order measures to the byte
    import random

    cap = _capture_of(_random_wrapper(ops), [torch.ones(256)])
    assert cap.mismatches == []
    prog = cap.program
    assert cap.measure()[0] == prog.peak()
    # a random topological order of the statements (the dependency edges kept)
    n = len(prog.statements)
    succ: dict[int, list[int]] = {}
    indeg = [0] * n
    for u, v in prog.dependency_edges().tolist():
        succ.setdefault(u, []).append(v)
        indeg[v] += 1
    rng, ready, order = random.Random(seed), [i for i in range(n) if indeg[i] == 0], []
    while ready:
        u = ready.pop(rng.randrange(len(ready)))
        order.append(u)
        for v in succ.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    assert len(order) == n
    assert cap.measure(order, warm_up=False)[0] == prog.peak(order)
