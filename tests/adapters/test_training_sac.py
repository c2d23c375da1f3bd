"""memopt.adapters.training.plan(..., realize="sac"): the plan run as selective activation
checkpointing of the model's blocks (torch.utils.checkpoint, non-reentrant, a context_fn from
create_selective_checkpoint_contexts), on real PyTorch steps (CPU, no mocks, no timings).

Checked on the tiny CNN and MLP (batch norm, an in-place ReLU, blocks with nothing to cache)
and on a residual MLP whose checkpointing lowers the peak: the measured peak of the eager step
is the modelled one to the byte; loss, gradients and batch-norm statistics are bitwise those of
the unmodified eager step; the plan passes memopt's independent checker and has SAC's shape
(each block's recomputation contiguous, in forward order, right before its hold op); the raw
``context_fn`` in a hand-written ``checkpoint`` call gives the same step; a model run with other
shapes is refused at the first differing call; the model is restored after ``apply``.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402
from memopt.adapters.training import op_flop_counts  # noqa: E402
from memopt.adapters.training_sac import BACKWARD_RETURNS, HOLD, default_blocks  # noqa: E402
from memopt.adapters.training_plan import BARRIER  # noqa: E402
from memopt.cli import main  # noqa: E402
from memopt.errors import OptionError  # noqa: E402
from memopt.remat import check_plan, plan_from_runs  # noqa: E402
from _torch_models import CNN, MLP, ResidualMLP, train_remat_json  # noqa: E402

CE = torch.nn.functional.cross_entropy


def _planned(model_cls, shape, **question):
    torch.manual_seed(0)
    model = model_cls().train()
    x = torch.randn(*shape)
    labels = torch.randint(0, 10, (shape[0],))
    reference = copy.deepcopy(model)
    rep = training.plan(model, x, CE, targets=labels, time_limit=4, realize="sac", **question)
    return model, reference, x, labels, rep


def _assert_applied_step_is_eager(rep, reference, x, labels):
    """One step of a copy of ``reference`` under ``rep.apply`` against one plain eager step of
    another copy: loss, every gradient and every buffer bitwise equal; the copy it applied to."""
    a, b = copy.deepcopy(reference), copy.deepcopy(reference)
    loss_ref = CE(a(x), labels)
    loss_ref.backward()
    with rep.apply(b):
        loss = CE(b(x), labels)
        loss.backward()
    assert torch.equal(loss, loss_ref)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (name, s), t in zip(a.named_buffers(), b.buffers()):
        assert torch.equal(s, t), f"buffer {name} updated once, as in the plain step"
    return b


@pytest.fixture(scope="module")
def cnn():
    return _planned(CNN, (8, 3, 16, 16), memory_ratio="1")


@pytest.fixture(scope="module")
def mlp():
    return _planned(MLP, (64, 32), memory_ratio="1")


@pytest.fixture(scope="module")
def residual():
    """At 0.95 of the captured step's peak: only recomputation inside the blocks meets it."""
    return _planned(ResidualMLP, (64, 32), memory_ratio="0.95")


CASES = ["cnn", "mlp", "residual"]


@pytest.mark.parametrize("case", CASES)
def test_the_eager_step_is_measured_to_the_byte(case, request):
    *_, rep = request.getfixturevalue(case)
    assert rep.status == "feasible" and rep.realize == "sac"
    assert rep.peak == rep.modelled_peak <= rep.memory_limit
    assert rep.attribute() == [("eager step without checkpoints", 0), ("unattributed", 0)]


def test_the_residual_plan_recomputes_inside_the_blocks_to_meet_the_limit(residual):
    *_, rep = residual
    assert rep.memory_limit < rep.baseline_peak and rep.extra_flops + rep.reruns_without_flops > 0
    assert rep.blocks == ("inp", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "head")
    assert rep.recomputed and rep.saved, "a selective plan: some calls cached, some recomputed"


@pytest.mark.parametrize("case", CASES)
def test_the_plan_passes_the_checker_and_has_the_shape_of_sac(case, request):
    *_, rep = request.getfixturevalue(case)
    g = rep.graph
    peak, _ = check_plan(g, plan_from_runs(g, list(rep.runs)))
    assert peak - g.resident_bytes == rep.modelled_peak
    flops = op_flop_counts(rep.capture)
    assert rep.extra_flops == sum(flops.get(n, 0) * (k - 1) for n, k in Counter(rep.runs).items())
    runs = list(rep.runs)
    barrier = runs.index(BARRIER)
    assert runs[-1] == BACKWARD_RETURNS and len(set(runs[:barrier])) == barrier
    # after the barrier, a forward op runs only in its block's recomputation: a contiguous run of
    # the block's ops in forward order ending at the block's hold op
    forward = set(runs[:barrier])
    k = barrier + 1
    while k < len(runs):
        if runs[k] in forward:
            start = k
            while not runs[k].startswith(HOLD):
                assert runs[k] in forward, runs[start:k + 1]
                k += 1
            order = [runs.index(n) for n in runs[start:k]]
            assert order == sorted(order), "a block reruns in forward order"
        k += 1


@pytest.mark.parametrize("case", CASES)
def test_loss_gradients_and_statistics_are_bitwise_those_of_eager(case, request):
    model, reference, x, labels, rep = request.getfixturevalue(case)
    torch.manual_seed(1)
    b = _assert_applied_step_is_eager(rep, reference, x, labels)
    assert "forward" not in vars(b) and all("forward" not in vars(m) for m in b.modules()), "apply restores"


def test_the_raw_context_fn_checkpoints_the_blocks_by_hand(residual):
    from torch.utils.checkpoint import checkpoint

    _, reference, x, labels, rep = residual
    a, b, c = (copy.deepcopy(reference) for _ in range(3))
    CE(a(x), labels).backward()
    # per block
    h = checkpoint(b.inp, x, use_reentrant=False, context_fn=rep.context_fn_for("inp"))
    for i, blk in enumerate(b.blocks):
        h = checkpoint(blk, h, use_reentrant=False, context_fn=rep.context_fn_for(f"blocks.{i}"))
    CE(checkpoint(b.head, h, use_reentrant=False, context_fn=rep.context_fn_for("head")), labels).backward()
    # one context_fn, blocks in forward order
    fn = rep.context_fn
    h = checkpoint(c.inp, x, use_reentrant=False, context_fn=fn)
    for blk in c.blocks:
        h = checkpoint(blk, h, use_reentrant=False, context_fn=fn)
    CE(checkpoint(c.head, h, use_reentrant=False, context_fn=fn), labels).backward()
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p.grad, q.grad) and torch.equal(p.grad, r.grad), name


def test_a_step_of_another_shape_is_refused_at_the_first_differing_call(residual):
    _, reference, x, labels, rep = residual
    b = copy.deepcopy(reference)
    with pytest.raises(OptionError, match=r"block 'inp' call \d+ is aten\.\w+.* the plan expects"):
        with rep.apply(b):
            CE(b(x[:7]), labels[:7]).backward()
    assert all("forward" not in vars(m) for m in b.modules())


def test_the_context_fn_of_a_block_the_plan_does_not_have_is_refused(residual):
    *_, rep = residual
    with pytest.raises(OptionError, match="'nope' is not a block of this plan"):
        rep.context_fn_for("nope")()


def test_fx_plans_have_no_context_fn_and_sac_plans_no_backend():
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    fx = training.plan(model, x, memory_ratio="1", time_limit=5, measure_step=False)
    with pytest.raises(OptionError, match="realize='sac'"):
        fx.context_fn
    sac = training.plan(model, x, memory_ratio="1", time_limit=5, measure_step=False, realize="sac")
    with pytest.raises(OptionError, match="realized as 'sac'"):
        sac.backend


class _InplaceChild(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.act = torch.nn.ReLU(inplace=True)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.act(self.lin(x)))


def test_a_block_writing_its_input_in_place_is_left_out_or_refused():
    torch.manual_seed(0)
    model, x = _InplaceChild(), torch.randn(4, 8)
    assert default_blocks(model) == ["lin", "act", "out"]
    rep = training.plan(model, x, cost_budget=10**9, time_limit=5, realize="sac")
    assert rep.blocks == ("lin", "out") and rep.to_dict()["blocks_left_out"][0]["block"] == "act"
    assert rep.peak == rep.modelled_peak
    with pytest.raises(OptionError, match="block 'act': its input is written in place"):
        training.plan(model, x, memory_ratio="1", time_limit=5, realize="sac", blocks=["act"], measure_step=False)


@pytest.mark.parametrize("kwargs, words", [
    (dict(realize="nope"), "realize must be one of fx, sac"),
    (dict(blocks=["lin"]), "blocks= is for realize='sac'"),
    (dict(realize="sac", blocks=["nope"]), "block 'nope' is not a submodule"),
    (dict(realize="sac", blocks=["lin", "lin.x"]), "must not nest"),
])
def test_bad_realization_options_are_refused(kwargs, words):
    torch.manual_seed(0)
    with pytest.raises(OptionError, match=words):
        training.plan(_InplaceChild(), torch.randn(4, 8), memory_ratio="1", time_limit=5, measure_step=False,
                      **kwargs)


def test_cli_realize_sac_prints_one_json_object(tmp_path, monkeypatch, capsys):
    doc = train_remat_json(tmp_path, monkeypatch, capsys, "tiny_res:mlp",
                           "torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 10)",
                           ["--input-shape", "32,16", "--loss", "cross-entropy", "--cost-budget", "1000000000",
                            "--time-limit", "5", "--realize", "sac"])
    assert doc["realize"] == "sac" and doc["blocks"] == ["0", "1", "2"] and doc["status"] == "feasible"
    assert doc["extra_flops"] <= doc["cost_budget"]
    # this step's plain eager run is itself off its model (autograd's engine); the plan adds nothing
    causes = {d["cause"]: d["bytes"] for d in doc["differences"]}
    assert doc["peak"] == doc["modelled_peak"] + causes["eager step without checkpoints"]
    assert causes["unattributed"] == 0
    assert main(["train-remat", "tiny_res:mlp", "--input-shape", "32,16", "--memory-ratio", "1",
                 "--blocks", "0"]) == 2
    assert "--blocks is for --realize sac" in capsys.readouterr().err


@pytest.mark.slow
def test_resnet18_sac_step_is_measured_to_the_byte_and_bitwise_eager():
    from memopt._torchvision import allow_import

    allow_import()
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).train()
    x, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    reference = copy.deepcopy(model)
    # the least peak the greedy finds (a memory ratio this small step's blocks cannot reach would
    # leave no plan)
    rep = training.plan(model, x, CE, targets=labels, cost_budget=10**12, time_limit=20, realize="sac")
    assert rep.status == "feasible" and rep.to_dict()["blocks_left_out"] == [
        {"block": "relu", "reason": "its input is written in place"}]
    assert rep.modelled_peak < rep.baseline_peak and rep.recomputed
    assert rep.peak == rep.modelled_peak and rep.attribute()[-1] == ("unattributed", 0)
    _assert_applied_step_is_eager(rep, reference, x, labels)
