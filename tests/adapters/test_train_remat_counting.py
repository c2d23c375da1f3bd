"""The FLOP counts ``benchmarks/train_remat.py`` compares: the eager step counted by its dispatch
mode against the captured joint graph's count, and what block checkpointing adds (real torch,
tiny models; the benchmark itself runs in ``benchmarks/``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memopt.adapters import training  # noqa: E402

from _torch_models import CNN  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "train_remat.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("train_remat_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def _step(model, x, y):
    def run():
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return run


def test_eager_step_counts_the_joint_graphs_flops(bench):
    torch.manual_seed(0)
    model, x, y = CNN().train(), torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    tg = training.capture(model, x, torch.nn.functional.cross_entropy, targets=y)
    flops, _ = bench.graph_flops(tg.module)
    assert flops > 0
    assert bench.eager_flops(_step(model, x, y)) == flops


def test_block_checkpoint_adds_the_recomputed_forward_flops(bench):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    b, d = 8, 16
    block = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh(), torch.nn.Linear(d, d))
    model = torch.nn.Sequential(torch.nn.Linear(d, d), block, torch.nn.Linear(d, 10)).train()
    x, y = torch.randn(b, d), torch.randint(0, 10, (b,))
    plain = bench.eager_flops(_step(model, x, y))
    block.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(block.forward)
    # the backward needs tanh's output (saved by tanh and by the second Linear): the block's first
    # Linear (one addmm, 2*b*d*d FLOPs) runs again, then the recomputation stops early
    assert bench.eager_flops(_step(model, x, y)) - plain == 2 * b * d * d


@pytest.mark.parametrize("extra, bound, within", [(0, 0, True), (100, 95, True), (100, 90, False), (10, 0, False),
                                                  (10, None, False)])
def test_bound_within_ten_percent(bench, extra, bound, within):
    bound_key, plan_key = bench.FLOP_BOUND
    assert bench._within({plan_key: extra, bound_key: bound}, 0.10, bound_key, plan_key) is within


def test_the_flop_bound_is_read_against_the_counted_flops_of_the_step(bench):
    row = {"extra_flops": 100, "plan_flops": 80, "flop_lower_bound": 95}
    assert bench._within(row, 0.10, *bench.FLOP_BOUND)
    assert not bench._within(dict(row, extra_flops=120), 0.10, *bench.FLOP_BOUND)


def _memopt_row(limit, peak, extra):
    return {"who": "memopt", "limit": limit, "status": "feasible", "peak": peak, "modelled_peak": peak,
            "extra_flops": extra, "plan_flops": extra, "flop_lower_bound": extra, "reruns": 0, "cpu_s": 0.1,
            "solve_s": 1.0, "plan_s": 1.0, "loss_equal": True, "grads_equal": 1, "grads": 1}


def test_a_pytorch_point_is_clearly_beaten_only_by_a_plan_at_most_its_flops(bench):
    """The comparison at a PyTorch point: memopt's answer at its peak ties it by 4 bytes (not
    clearly better); another memopt plan of the model with a lower peak at the same FLOPs is, and
    one with a lower peak but more FLOPs is not."""
    rows = [{"who": "joint graph", "ops": 3, "flops": 1000, "cost": 1000, "modelled_peak": 500, "capture_s": 0.1},
            {"who": "eager", "eager_flops": 1000, "peak": 500, "cpu_s": 0.1, "time_limit": 1.0},
            {"who": "pytorch", "budget": 0.5, "solver": "dp", "peak": 300, "flops": 1010, "cost": 1010, "cpu_s": 0.1}]
    at_its_peak = _memopt_row(300, 296, 10)
    rows[0]["time_limit"] = 1.0

    def counts(extra_rows):
        line = bench.table(rows + [at_its_peak] + extra_rows).splitlines()[-1]
        return line.split("by more than 4 B or in FLOPs on ")[1].split(")")[0]

    assert counts([]) == "0/1; by some memopt plan of the model: 0/1"
    assert counts([_memopt_row(250, 240, 20)]) == "0/1; by some memopt plan of the model: 0/1"
    assert counts([_memopt_row(250, 240, 10)]) == "0/1; by some memopt plan of the model: 1/1"
