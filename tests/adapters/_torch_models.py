"""Tiny PyTorch models shared by the training-step tests (import after ``pytest.importorskip("torch")``).

``CNN``: Conv2d, BatchNorm2d, an in-place ReLU, a strided Conv2d, a global mean, Linear — the
convolution scratch, a view-producing in-place op and batch-norm statistics in one step.
"""

from __future__ import annotations

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
