"""Shared test fixtures: where the shared data lives, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GRAPHS = SHARED / "data" / "checkmate-graphs"

settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=30, deadline=None,
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
