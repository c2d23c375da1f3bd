"""memopt.adapters.training.plan on real PyTorch training steps (CPU, no mocks, no timings).

A tiny CNN (Conv2d, BatchNorm2d, an in-place ReLU, a strided Conv2d, a global mean, Linear)
and a tiny MLP (Linear, BatchNorm1d, ReLU, Linear, tanh, Linear), each with a cross-entropy
loss, are planned once (module fixtures) at a memory limit below the captured step's peak that
only a recomputation meets. Checked: the planned step's measured peak is its modelled peak to
the byte; its loss, gradients and new batch-norm statistics are bitwise those of the plain eager
step; the plan passes memopt's independent checker on the realizable instance and keeps its
constraints (backward after the barrier, forward ops at most twice, backward ops once).
Compiled (``TrainingPlan.compile``, a ``torch.compile`` backend): loss, gradients and buffers
bitwise those of the stock ``aot_eager`` step, and the measured peak off the modelled one by
exactly what the stock compiled step is off the captured order's; refusals of another step and
of a backward recomputation reading an updated buffer.
"""

from __future__ import annotations

import copy
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402
from memopt.adapters.training import op_flop_counts  # noqa: E402
from memopt.adapters.training_plan import BARRIER, realizable_graph  # noqa: E402
from memopt.cli import main  # noqa: E402
from memopt.errors import OptionError  # noqa: E402
from memopt.remat import check_plan, plan_from_runs  # noqa: E402
from _torch_models import CNN, MLP, assert_step_is_eager, train_remat_json  # noqa: E402


def _planned(model_cls, shape, ratio):
    torch.manual_seed(0)
    model = model_cls().train()
    x = torch.randn(*shape)
    labels = torch.randint(0, 10, (shape[0],))
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio=ratio,
                        time_limit=30, measure_step=False)
    return model, x, labels, rep


@pytest.fixture(scope="module")
def cnn():
    return _planned(CNN, (16, 3, 32, 32), "0.9")


@pytest.fixture(scope="module")
def mlp():
    return _planned(MLP, (512, 32), "0.9")


@pytest.fixture(scope="module")
def mlp_step():
    """The MLP's step captured once, for plans at many limits."""
    torch.manual_seed(0)
    model = MLP().train()
    x = torch.randn(512, 32)
    labels = torch.randint(0, 10, (512,))
    return model, x, labels, training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)


CASES = [pytest.param("cnn", marks=pytest.mark.slow), pytest.param("mlp", marks=pytest.mark.slow)]


@pytest.mark.parametrize("case", CASES)
def test_the_plan_recomputes_and_meets_the_limit(case, request):
    _, _, _, rep = request.getfixturevalue(case)
    assert rep.status in ("optimal", "feasible")
    assert rep.memory_limit == int(Fraction("0.9") * rep.baseline_peak)
    assert rep.modelled_peak <= rep.memory_limit < rep.baseline_peak
    assert rep.recomputed and rep.extra_flops + rep.reruns_without_flops > 0
    assert rep.lower_bound is not None and 0 <= rep.lower_bound <= rep.extra_flops
    doc = rep.to_dict()
    assert doc["recomputed"] == list(rep.recomputed) and doc["modelled_peak"] == rep.modelled_peak


@pytest.mark.parametrize("case", CASES)
def test_the_plan_passes_the_independent_checker_and_is_realizable(case, request):
    _, _, _, rep = request.getfixturevalue(case)
    graph, caps = realizable_graph(rep.capture)
    assert graph.op_names == rep.graph.op_names
    peak, _ = check_plan(graph, plan_from_runs(graph, list(rep.runs)), cap=[caps[n] for n in graph.op_names])
    assert peak - graph.resident_bytes == rep.modelled_peak
    flops = op_flop_counts(rep.capture)
    assert rep.extra_flops == sum(flops.get(n, 0) * (k - 1) for n, k in Counter(rep.runs).items())
    counts = Counter(rep.runs)
    barrier = rep.runs.index(BARRIER)
    phase = rep.capture.phase
    assert counts[BARRIER] == 1
    assert all(phase[n] == "forward" for n in rep.recomputed)
    assert all(counts[n] == 1 for n in phase if phase[n] == "backward")
    assert all(counts[n] <= 2 for n in phase)
    assert all(i > barrier for i, n in enumerate(rep.runs) if n != BARRIER and phase[n] == "backward")
    # a recomputation is a run after the op's first one; the saved tensors are produced in the forward
    first = {n: rep.runs.index(n) for n in counts}
    assert set(rep.recomputed) == {n for n in counts if counts[n] == 2}
    assert all(first[n] < barrier for n in rep.recomputed)
    producer = {t: o.name for o in rep.capture._ops for t in o.outputs}
    assert rep.saved and all(first[producer[t]] < barrier for t in rep.saved if t in producer)


@pytest.mark.parametrize("case", CASES)
def test_the_planned_step_is_measured_to_the_byte(case, request):
    _, x, labels, rep = request.getfixturevalue(case)
    assert rep.measure(x, labels) == rep.modelled_peak
    assert rep.measure() == rep.modelled_peak


@pytest.mark.parametrize("case", CASES)
def test_loss_gradients_and_statistics_are_bitwise_those_of_eager(case, request):
    model, x, labels, rep = request.getfixturevalue(case)
    reference = assert_step_is_eager(rep, model, x, labels)
    # a second step adds its gradients, as loss.backward() does
    rep.step(x, labels)
    torch.nn.functional.cross_entropy(reference(x), labels).backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(p.grad, q.grad), name


@pytest.mark.slow
def test_a_step_with_inputs_of_another_shape_is_refused(cnn):
    _, x, labels, rep = cnn
    with pytest.raises(OptionError, match="step input 0 must be a torch.float32 tensor of shape"):
        rep.step(x[:2], labels)
    with pytest.raises(OptionError, match="step takes 2 tensors"):
        rep.step(x)


def test_a_limit_no_plan_meets_is_infeasible_and_has_no_step():
    torch.manual_seed(0)
    rep = training.plan(torch.nn.Linear(4, 2), torch.randn(3, 4), memory_limit=0, time_limit=5, measure_step=False)
    assert rep.status == "infeasible" and rep.modelled_peak is None and rep.recomputed == ()
    with pytest.raises(OptionError, match="no plan to run: the step's plan is infeasible"):
        rep.step()


@pytest.mark.parametrize("kwargs, words", [
    (dict(memory_ratio=float("nan")), "memory_ratio must be finite"),
    (dict(memory_ratio="abc"), "memory_ratio must be a number"),
    (dict(memory_ratio=0), "memory_ratio must be finite, > 0 and <= 1"),
    (dict(memory_ratio=1.5), "memory_ratio must be finite, > 0 and <= 1"),
    (dict(memory_limit=-1), "memory_limit must be an integer"),
    (dict(memory_limit=1.5), "memory_limit must be an integer"),
    (dict(cost_budget=-3), "cost_budget must be an integer"),
    (dict(), "give exactly one of memory_limit, memory_ratio, cost_budget"),
    (dict(memory_limit=10, memory_ratio=0.5), r"give exactly one .* \(got memory_limit, memory_ratio\)"),
    (dict(memory_ratio=0.5, time_limit=-1), "time_limit"),
])
def test_bad_options_are_refused_before_the_capture(kwargs, words):
    with pytest.raises(OptionError, match=words):
        training.plan(torch.nn.Linear(4, 2), torch.randn(3, 4), **kwargs)


_FACTORY = """
import torch

def linear():
    return torch.nn.Linear(4, 2)

def not_a_module():
    return 3
"""


@pytest.mark.parametrize("argv, words", [
    (["tiny_factories:linear", "--input-shape", "3,4", "--memory-ratio", "nan"],
     "--memory-ratio must be a finite number"),
    (["tiny_factories:linear", "--input-shape", "3,4", "--memory-ratio", "1.5"], "--memory-ratio '1.5' is too large"),
    (["tiny_factories:nope", "--input-shape", "3,4", "--memory-ratio", "0.5"],
     "module 'tiny_factories' has no function 'nope'"),
    (["no_such_module_xyz:f", "--input-shape", "3,4", "--memory-ratio", "0.5"],
     "cannot import module 'no_such_module_xyz'"),
    (["tiny_factories", "--input-shape", "3,4", "--memory-ratio", "0.5"], "expected MODULE:FACTORY"),
    (["tiny_factories:not_a_module", "--input-shape", "3,4", "--memory-ratio", "0.5"], "not a torch.nn.Module"),
    (["tiny_factories:linear", "--input-shape", "3,0", "--memory-ratio", "0.5"], "--input-shape"),
])
def test_cli_bad_input_is_one_line_exit_2(argv, words, tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny_factories.py").write_text(_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train-remat", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memopt: error: ") and words in err[0], err


@pytest.mark.slow
def test_cli_plans_measures_and_prints_one_json_object(tmp_path, monkeypatch, capsys):
    doc = train_remat_json(tmp_path, monkeypatch, capsys, "tiny_cnn:cnn",
                           "torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3), torch.nn.Tanh(), "
                           "torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 10)",
                           ["--input-shape", "8,3,16,16", "--loss", "cross-entropy", "--memory-ratio", "0.95",
                            "--time-limit", "20"])
    assert doc["model"] == "tiny_cnn:cnn" and doc["status"] in ("optimal", "feasible")
    assert doc["peak"] == doc["modelled_peak"] <= doc["memory_limit"]


@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True)
@given(permille=st.integers(min_value=800, max_value=1000))
def test_every_plan_at_any_limit_is_measured_to_the_byte(mlp_step, permille):
    model, x, labels, tg = mlp_step
    limit = tg.modelled_peak() * permille // 1000
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_limit=limit,
                        time_limit=5, captured=tg)
    assume(rep.modelled_peak is not None)
    assert rep.peak == rep.modelled_peak


# ----------------------------------------------------------------------------- compiled realization
class Tanh3(torch.nn.Module):
    """Three Linear layers, no buffers: every plan's backward reads only parameters and saved
    tensors, so AOTAutograd can run it."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 256)
        self.l2 = torch.nn.Linear(256, 256)
        self.l3 = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.relu(self.l1(x)))))


def _compiled_step(fn, model, x, labels):
    model.zero_grad(set_to_none=True)
    loss = fn(x, labels)
    loss.backward()
    return loss


@pytest.fixture(scope="module")
def tanh3():
    import dataclasses

    model, x, labels, rep = _planned(Tanh3, (512, 32), "0.95")
    stock_model = copy.deepcopy(model)
    stock = dataclasses.replace(rep, _model=stock_model).compile(backend="aot_eager")
    return model, x, labels, rep, stock_model, stock


@pytest.mark.slow
def test_the_compiled_step_runs_the_plan_bitwise_equal_to_the_stock_compiled_step(tanh3):
    from memopt.adapters.inductor import measure_peak

    model, x, labels, rep, stock_model, stock = tanh3
    assert rep.recomputed and rep.modelled_peak < rep.baseline_peak
    planned = rep.compile()
    for _ in range(2):  # the second step runs the compiled programs without compiling
        loss = _compiled_step(planned, model, x, labels)
        ref = _compiled_step(stock, stock_model, x, labels)
    assert torch.equal(loss, ref)
    for (name, p), (_, q) in zip(model.named_parameters(), stock_model.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    model.zero_grad(set_to_none=True)
    stock_model.zero_grad(set_to_none=True)
    peak, _ = measure_peak(lambda: planned(x, labels).backward())
    stock_peak, _ = measure_peak(lambda: stock(x, labels).backward())
    # the compiled step differs from the modelled peak by what it does to the stock compiled
    # step (one float32 scalar, AOTAutograd's calling convention); the rest is the plan's peak
    assert peak - rep.modelled_peak == stock_peak - rep.baseline_peak == 4


@pytest.mark.slow
def test_the_backend_refuses_a_step_other_than_the_planned_one(tanh3):
    model, x, labels, rep, _, _ = tanh3
    other = torch.compile(lambda a, b: torch.nn.functional.mse_loss(model(a).sum(1), b.float()), backend=rep.backend)
    with pytest.raises(Exception, match="differs from the planned one|is not the planned one"):
        other(x, labels)


@pytest.mark.slow
def test_the_backend_refuses_a_backward_recomputation_reading_an_updated_buffer(mlp):
    model, x, labels, rep = mlp
    assert any("batch_norm" in n for n in rep.recomputed), "the MLP's plan at 0.9 recomputes its batch norm"
    with pytest.raises(Exception, match="a buffer the step updates"):
        rep.compile()(x, labels).backward()


@pytest.mark.slow
@pytest.mark.parametrize("model_cls,shape", [(MLP, (512, 32)), (CNN, (16, 3, 32, 32))], ids=["mlp", "cnn"])
def test_a_plan_made_for_compilation_runs_compiled_with_batch_norm(model_cls, shape):
    import dataclasses

    from memopt.adapters.inductor import measure_peak

    torch.manual_seed(0)
    model = model_cls().train()
    x = torch.randn(*shape)
    labels = torch.randint(0, 10, (shape[0],))
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio="0.9",
                        time_limit=30, measure_step=False, compiled=True)
    assert rep.recomputed and rep.modelled_peak <= rep.memory_limit < rep.baseline_peak
    assert not any("batch_norm" in n for n in rep.recomputed)
    stock_model = copy.deepcopy(model)
    planned = rep.compile()
    stock = dataclasses.replace(rep, _model=stock_model).compile(backend="aot_eager")
    for _ in range(2):
        loss = _compiled_step(planned, model, x, labels)
        ref = _compiled_step(stock, stock_model, x, labels)
    assert torch.equal(loss, ref)
    for (name, p), (_, q) in zip(model.named_parameters(), stock_model.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (name, b), (_, c) in zip(model.named_buffers(), stock_model.named_buffers()):
        assert torch.equal(b, c), name
    # each program's phase as modelled; between them the seed scalar (+4), or the loss the
    # model holds to the end and autograd releases before the backward (-4); nothing else
    # (not compared with the stock step's offset: that depends on what ran before in the process)
    cp = rep.measure_compiled(planned, x, labels)
    causes = dict(cp.differences)
    assert causes["forward program"] == causes["backward program"] == causes["unattributed"] == 0
    assert abs(causes["held between the programs"]) <= 4
    assert cp.peak == rep.modelled_peak + causes["held between the programs"]


def test_a_call_without_time_answers_at_once_with_a_plan_measured_to_the_byte(monkeypatch):
    # time_limit=0: the capture and the measurement run (no plan without the transients), the
    # search gets 0 seconds (never a negative limit), the cheap-ops search is skipped
    import memopt

    limits = []
    remat = memopt.remat

    def recording(*args, **kwargs):
        limits.append(kwargs["time_limit"])
        return remat(*args, **kwargs)

    monkeypatch.setattr(memopt, "remat", recording)
    torch.manual_seed(0)
    model = MLP().train()
    x, labels = torch.randn(512, 32), torch.randint(0, 10, (512,))
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio="0.9",
                        time_limit=0, measure_step=False)
    assert limits == [0.0]
    # the first answer: a plan within the limit, or (``unknown``) the best plan found, above it;
    # either way a plan the two programs run, measured to the byte
    assert rep.status in ("optimal", "feasible", "unknown") and rep.memory_limit < rep.baseline_peak
    assert (rep.modelled_peak <= rep.memory_limit) == (rep.status != "unknown")
    assert rep.measure() == rep.modelled_peak
