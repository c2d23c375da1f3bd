"""Result types shared by every scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STATUSES = ("certified", "optimal", "feasible", "infeasible")


@dataclass(frozen=True)
class ExactResult:
    """Outcome of an exact solver on a signed DAG.

    ``order`` is a full node order (releases included) whose peak is ``peak``;
    ``lower_bound`` is what the solver proved; ``optimal`` is true iff it proved
    ``peak == lower_bound`` (the search finished, or the bound met the incumbent).
    """

    order: np.ndarray | None
    peak: int | None
    lower_bound: int
    optimal: bool
    solver: str
    seconds: float
    stats: dict = field(default_factory=dict)
