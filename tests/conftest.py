"""Shared test fixtures: where the shared data lives, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from memopt._torchvision import allow_import

# transformers imports torchvision when it is installed; the CPU torch needs its stub first
allow_import()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GRAPHS = SHARED / "data" / "checkmate-graphs"

# The default profile is derandomized: every run draws the same examples, so a red test is
# red on every machine and every rerun (no flakes from a lucky or unlucky draw). Search for
# new counterexamples with HYPOTHESIS_PROFILE=explore (random draws, more of them).
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=30, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("explore", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def shared_graph(name: str) -> Path:
    """Path of a published graph in ../shared, or skip when the shared data is absent."""
    path = GRAPHS / name
    if not path.exists():
        pytest.skip(f"shared data not available: {path} (tests on published graphs run in CI, "
                    "where ../shared sits beside the checkout)")
    return path


def pytest_sessionstart(session):
    """In CI the shared data must be there: tests that read it skip only in a user's clone."""
    if os.environ.get("CI") and not (SHARED / "data").is_dir():
        raise pytest.UsageError(f"CI is set but the shared data is missing at {SHARED / 'data'}; "
                                "the tests on published graphs and DTR traces would all be skipped")


@pytest.fixture(scope="module")
def tiny_llama():
    """A tiny randomly initialised Llama (real transformers, no weights) for the KV-cache
    tests: 2 layers, 6 query heads sharing 2 KV heads, byte vocabulary, eager attention."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=48, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                                   max_position_embeddings=256)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def held_value_graph(m: int):
    """A recomputation test graph: ``A`` makes ``a`` (10 bytes, cost 1); ``m`` rounds each run a
    big-workspace op ``H{i}`` (20 bytes of workspace) and then ``C{i}``, which reads ``a``. Under
    22 bytes ``a`` cannot be live while any ``H{i}`` runs, so ``A`` must run before every ``C{i}``: ``m`` runs in all."""
    from memopt.core import Op, Tensor, TensorGraph

    tensors, ops, prev = [Tensor("a", 10)], [Op("A", (), ("a",), cost=1)], None
    for i in range(m):
        last = i == m - 1
        tensors += [Tensor(f"h{i}", 1), Tensor(f"c{i}", 1, output=last)]
        ops.append(Op(f"H{i}", (prev,) if prev else (), (f"h{i}",), workspace=20, cost=50))
        ops.append(Op(f"C{i}", ("a", f"h{i}"), (f"c{i}",), cost=50))
        prev = f"c{i}"
    return TensorGraph.build(tensors, ops, name=f"held{m}")


def odd_tensor_graph(rng, n: int, *, random_costs: bool = False):
    """A random tensor graph with what ``random_tensor_graph`` never makes: ops without
    outputs, an op reading one tensor twice, graph inputs that are outputs or resident,
    zero-size tensors, outputs that are also read. Costs 1, or 1-4 with ``random_costs``."""
    from memopt.core import Op, Tensor, TensorGraph

    tensors, ops, avail = [], [], []
    for k in range(int(rng.integers(0, 3))):
        r = rng.random()
        tensors.append(Tensor(f"in{k}", int(rng.integers(0, 9)), resident=bool(r < 0.15), output=bool(0.15 <= r < 0.3)))
        avail.append(f"in{k}")
    for v in range(n):
        reads = [t for t in avail if rng.random() < 0.45]
        if reads and rng.random() < 0.2:
            reads.append(reads[0])
        outs = [f"t{v}_{k}" for k in range(int(rng.choice([0, 1, 1, 1, 2, 2])))]
        tensors += [Tensor(t, int(rng.integers(0, 9)), output=bool(rng.random() < 0.15)) for t in outs]
        ws = int(rng.integers(0, 12)) if rng.random() < 0.35 else 0
        ops.append(Op(f"o{v}", tuple(reads), tuple(outs), workspace=ws,
                      cost=float(rng.integers(1, 5)) if random_costs else 1.0))
        avail += outs
    return TensorGraph.build(tensors, ops)


def random_topological_order(g, rng) -> list[int]:
    """A random topological order of the ops of ``g`` (each step a uniform pick among the ready ops)."""
    preds = [set() for _ in range(g.num_ops)]
    for a, b in zip(*g.op_edges()):
        preds[int(b)].add(int(a))
    order, placed = [], set()
    while len(order) < g.num_ops:
        ready = [v for v in range(g.num_ops) if v not in placed and preds[v] <= placed]
        v = ready[int(rng.integers(len(ready)))]
        placed.add(v)
        order.append(v)
    return order


def rerun_set(plan) -> set:
    """The ops that a remat plan runs more than once."""
    from collections import Counter

    return {v for v, k in Counter(plan.runs().tolist()).items() if k > 1}


def assert_cost_bound_sound(cb, cost, plan) -> bool:
    """What a :class:`memopt.remat.lower_bounds.CostBound` owes the exhaustive optimum
    ``(cost, plan)`` (``(None, None)`` where no plan exists): ``infeasible`` only where no plan
    exists; else a value at most the least extra cost, and every core and every trap-cut row
    met by the optimal plan's re-runs. Returns whether there was a plan to check against."""
    from fractions import Fraction

    from memopt.remat.trap_cuts import cut_met

    if cb.infeasible:
        assert cost is None
        return False
    assert cb.value is not None
    if cost is None:
        return False   # infeasible for a reason the bound does not see: any value is vacuous
    assert Fraction(cb.value) <= Fraction(cost)
    rr = rerun_set(plan)
    for core in cb.cores:
        assert set(core) & rr
    for c in cb.cuts:
        assert cut_met(c, rr)
    return True
