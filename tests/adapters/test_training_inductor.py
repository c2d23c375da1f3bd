"""The compiled realization under Inductor: a plan of the step captured with Inductor's
decompositions, its two programs compiled by Inductor and ordered by memopt's scheduler pass
(real torch.compile on CPU, no mocks, no timings).

Checked: the decomposed capture (seed, no batch-norm operator left, measured = modelled); the
options ``plan`` refuses; on the tests' MLP the Inductor-compiled step's loss and gradients
against the stock Inductor step (``torch.compile`` default), its measured peak itemised by
program so that the items add up to ``peak - modelled_peak`` exactly, and memopt's pass
consulted on both programs; ``modelled_phases`` against the plan's modelled peak; a model with a
tied parameter (one input of Dynamo's, two of the capture) compiled bitwise equal to the stock
``aot_eager`` step.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402
from memopt.adapters.inductor import measure_peak  # noqa: E402
from memopt.cli import main  # noqa: E402
from memopt.errors import OptionError  # noqa: E402
from _torch_models import MLP, train_remat_json  # noqa: E402


class Tied(torch.nn.Module):
    """Embedding, tanh, a Linear whose weight is the embedding's (GPT-2's tied output layer)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 32)
        self.mid = torch.nn.Linear(32, 32)
        self.out = torch.nn.Linear(32, 64, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(torch.tanh(self.mid(self.emb(ids))))


def _mlp():
    torch.manual_seed(0)
    return MLP().train(), torch.randn(256, 32), torch.randint(0, 10, (256,))


def test_a_capture_with_inductors_decompositions_is_measured_to_the_byte():
    model, x, labels = _mlp()
    plain = training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)
    tg = training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels, decompositions="inductor")
    assert (plain.decompositions, tg.decompositions) == (None, "inductor")
    assert plain.nodes[plain.seed].target is torch.ops.aten.ones_like.default
    assert tg.nodes[tg.seed].target is torch.ops.aten.full.default and tg.phase[tg.seed] == "backward"
    targets = {str(n.target) for n in tg.nodes.values()}
    assert any("batch_norm" in t for t in {str(n.target) for n in plain.nodes.values()})
    assert not any("batch_norm" in t for t in targets), "Inductor's table decomposes the batch norm"
    m = training.measure(tg)
    assert m.measured_peak == tg.with_workspace(m.transients).modelled_peak()
    with pytest.raises(OptionError, match="decompositions"):
        training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels, decompositions="core")


def test_plan_refuses_what_the_inductor_realization_cannot_run():
    model, x, labels = _mlp()
    plain = training.capture(model, x, torch.nn.functional.cross_entropy, targets=labels)
    with pytest.raises(OptionError, match="compiled must be"):
        training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio=1, compiled="yes")
    with pytest.raises(OptionError, match="realize='fx'"):
        training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio=1,
                      compiled="inductor", realize="sac")
    with pytest.raises(OptionError, match="decompositions='inductor'"):
        training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio=1,
                      compiled="inductor", captured=plain)


def _step(fn, model, x, labels):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    loss = fn(x, labels)
    loss.backward()
    return loss.detach()


def _against_stock(rep, model, stock_backend, *args):
    """Two steps of ``rep.compile()`` and of the stock compiled step on a copy of ``model``
    (the second without compiling): ``(planned, stock, loss, stock loss, stock model)``."""
    stock_model = copy.deepcopy(model)
    stock = dataclasses.replace(rep, _model=stock_model).compile(backend=stock_backend)
    planned = rep.compile()
    for _ in range(2):
        loss = _step(planned, model, *args)
        ref = _step(stock, stock_model, *args)
    return planned, stock, loss, ref, stock_model


@pytest.mark.slow
def test_the_inductor_compiled_step_runs_the_plan_and_its_peak_is_itemised():
    model, x, labels = _mlp()
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio="0.9",
                        time_limit=20, measure_step=True, compiled="inductor")
    assert rep.recomputed and rep.modelled_peak <= rep.memory_limit < rep.baseline_peak
    assert rep.peak == rep.modelled_peak  # the two FX programs, eagerly (TrainingPlan.step)
    forward, handover, backward = rep.modelled_phases()
    assert max(forward, handover + backward) == rep.modelled_peak and handover <= forward
    planned, stock, loss, ref, stock_model = _against_stock(rep, model, "inductor", x, labels)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), stock_model.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    cp = rep.measure_compiled(planned, x, labels)
    assert [c for c, _ in cp.differences] == [*type(cp).CAUSES, "unattributed"]
    # what the backward does not read is not handed over (a saved view whose base the backward
    # rebuilds would hold that base between the programs); the seed scalar is
    assert dict(cp.differences)["held between the programs"] <= 4
    assert cp.peak - cp.modelled_peak == sum(b for _, b in cp.differences)
    assert cp.modelled_phases == (forward, handover, backward)
    assert cp.phases[1] <= cp.phases[0] and cp.peak >= max(cp.phases[0], cp.phases[1] + cp.phases[2])
    # memopt's scheduler pass ran on (or Inductor's cache served) each of the two programs
    assert [k for k, _ in cp.pass_decisions] == ["forward", "backward"]
    assert cp.to_dict()["differences"][-1]["cause"] == "unattributed"
    stock_model.zero_grad(set_to_none=True)
    stock_peak, _ = measure_peak(lambda: stock(x, labels).backward())
    assert stock_peak > 0


@pytest.mark.slow
def test_a_tied_parameter_is_one_compiled_input_and_its_gradients_are_summed():
    torch.manual_seed(0)
    model = Tied().train()
    ids, labels = torch.randint(0, 64, (8, 16)), torch.randint(0, 64, (128,))

    def loss_fn(out, y):
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), y)

    tg = training.capture(model, ids, loss_fn, targets=labels)
    assert len(tg.args) == len({id(a) for a in tg.args}) + 1 and len(tg.gradients) == 4
    rep = training.plan(model, ids, loss_fn, targets=labels, captured=tg, memory_ratio="0.9", time_limit=10,
                        measure_step=False, compiled=True)
    assert rep.recomputed
    planned, stock, loss, ref, stock_model = _against_stock(rep, model, "aot_eager", ids, labels)
    assert torch.equal(loss, ref)
    for (name, p), (_, q) in zip(model.named_parameters(), stock_model.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    cp = rep.measure_compiled(planned, ids, labels)
    stock_model.zero_grad(set_to_none=True)
    stock_peak, _ = measure_peak(lambda: stock(ids, labels).backward())
    # the eager programs: the model's phases to the byte but the seed scalar the calling
    # convention holds between the programs, as in the stock compiled step
    assert cp.differences == (("forward program", 0), ("held between the programs", 4), ("backward program", 0),
                              ("unattributed", 0))
    assert stock_peak - rep.baseline_peak == 4


@pytest.mark.slow
def test_cli_measures_the_inductor_compiled_step(tmp_path, monkeypatch, capsys):
    doc = train_remat_json(tmp_path, monkeypatch, capsys, "tiny_mlp:mlp",
                           "torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.Tanh(), "
                           "torch.nn.Linear(256, 10)",
                           ["--input-shape", "256,32", "--loss", "cross-entropy", "--memory-ratio", "0.9",
                            "--time-limit", "10", "--compile", "inductor"])
    assert doc["peak"] == doc["modelled_peak"] <= doc["memory_limit"]
    got = doc["compiled"]
    assert got["backend"] == "inductor" and got["modelled_peak"] == doc["modelled_peak"]
    assert got["peak"] - got["modelled_peak"] == sum(x["bytes"] for x in got["differences"])
    assert [d["program"] for d in got["pass_decisions"]] == ["forward", "backward"]
    assert main(["train-remat", "tiny_mlp:mlp", "--input-shape", "256,32", "--memory-ratio", "0.9",
                 "--compile", "eager", "--realize", "sac"]) == 2
    assert "--realize fx" in capsys.readouterr().err


@pytest.mark.slow
def test_each_compiled_step_runs_its_own_plan_after_other_compiles_of_the_same_model():
    # Dynamo keeps compiled entries on the step's code object; were it shared by every
    # TrainingPlan.compile, another step of the same model's structure would be served its
    # entry, or, past Dynamo's cache size limit, run eagerly, without the plan
    model, x, labels = _mlp()
    rep = training.plan(model, x, torch.nn.functional.cross_entropy, targets=labels, memory_ratio="0.95",
                        time_limit=10, measure_step=False, compiled=True)
    with torch._dynamo.config.patch(recompile_limit=2):
        for _ in range(3):
            other = dataclasses.replace(rep, _model=copy.deepcopy(model)).compile()
            other(x, labels).backward()
        planned = rep.compile()
        cp = rep.measure_compiled(planned, x, labels)
    assert dict(cp.differences)["forward program"] == dict(cp.differences)["backward program"] == 0
    # a step of another plan (here the same plan's copy, its own counters) is refused
    with pytest.raises(OptionError, match="did not run this plan's two programs"):
        dataclasses.replace(rep, _program_runs=[0, 0]).measure_compiled(planned, x, labels)
