"""The model zoo: every architecture builds and runs forward on CPU, deterministically."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memopt import zoo  # noqa: E402
from memopt.errors import OptionError  # noqa: E402

FAMILIES = {"microcontroller", "multi-branch", "dense", "encoder-decoder", "attention", "randomly-wired"}


def test_zoo_has_twelve_architectures_in_every_family():
    assert len(zoo.names()) >= 12
    assert {zoo.family(n) for n in zoo.names()} == FAMILIES


@pytest.mark.parametrize("name", zoo.names())
def test_model_builds_and_runs_forward_deterministically(name):
    model, inputs = zoo.build(name, seed=0)
    assert not model.training
    with torch.no_grad():
        out = model(*inputs)
        again_model, again_inputs = zoo.build(name, seed=0)
        again = again_model(*again_inputs)
    outs = out if isinstance(out, tuple) else (out,)
    agains = again if isinstance(again, tuple) else (again,)
    for a, b in zip(outs, agains):
        assert torch.isfinite(a).all()
        assert torch.equal(a, b)
    # a different seed gives different weights
    other, _ = zoo.build(name, seed=1)
    assert any(not torch.equal(p0, p1) for p0, p1 in zip(model.parameters(), other.parameters()))


def test_unknown_model_is_a_clear_error():
    with pytest.raises(OptionError, match="unknown zoo model 'nope'"):
        zoo.build("nope")
