"""Tiny PyTorch models shared by the training-step tests (import after ``pytest.importorskip("torch")``).

``CNN``: Conv2d, BatchNorm2d, an in-place ReLU, a strided Conv2d, a global mean, Linear — the
convolution scratch, a view-producing in-place op and batch-norm statistics in one step.
``MLP``: Linear, BatchNorm1d, ReLU, Linear, tanh, Linear. ``ResidualMLP``: four residual
blocks whose checkpointing lowers the peak (the selective-checkpointing tests).
"""

from __future__ import annotations

import copy

import torch


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = torch.nn.functional.relu(self.bn(self.c1(x)), inplace=True)
        return self.fc(torch.relu(self.c2(h)).mean((2, 3)))


class MLP(torch.nn.Module):
    """Linear, BatchNorm1d, ReLU, Linear, tanh, Linear."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 128)
        self.bn = torch.nn.BatchNorm1d(128)
        self.l2 = torch.nn.Linear(128, 128)
        self.l3 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.relu(self.bn(self.l1(x))))))


class Residual(torch.nn.Module):
    """``x + b(gelu(a(x)))``: a block whose checkpointing pays (its inner values are large)."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.a = torch.nn.Linear(width, hidden)
        self.b = torch.nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.b(torch.nn.functional.gelu(self.a(x)))


class ResidualMLP(torch.nn.Module):
    """Linear, four :class:`Residual` blocks (64 -> 256 -> 64) in a Sequential, Linear."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(32, 64)
        self.blocks = torch.nn.Sequential(*(Residual(64, 256) for _ in range(4)))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


def assert_step_is_eager(rep, model, x, labels):
    """One planned step (``rep.step``) of ``model`` from ``.grad = None``: its loss, gradients
    and buffers bitwise those of one plain eager ``loss.backward()`` on a copy in the same
    state. Returns the copy (for further steps)."""
    for p in model.parameters():
        p.grad = None
    reference = copy.deepcopy(model)
    loss = rep.step(x, labels)
    ref_loss = torch.nn.functional.cross_entropy(reference(x), labels)
    ref_loss.backward()
    assert torch.equal(loss, ref_loss)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (name, b), (_, c) in zip(model.named_buffers(), reference.named_buffers()):
        assert torch.equal(b, c), name
    return reference


def train_remat_json(tmp_path, monkeypatch, capsys, factory: str, layers: str, argv: list) -> dict:
    """``memopt train-remat MODULE:FACTORY ... --json`` on a factory written to ``tmp_path``
    (``def FACTORY(): return torch.nn.Sequential(<layers>)``): exit 0 and the one JSON object."""
    import json

    from memopt.cli import main

    module, name = factory.split(":")
    (tmp_path / f"{module}.py").write_text(f"import torch\n\n\ndef {name}():\n    return torch.nn.Sequential({layers})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train-remat", factory, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)
