"""What a file holds once loaded: a model plus how to talk about it in the file's own terms.

It lives in ``core`` so that every layer (solvers, bounds, checkers, adapters) can take one;
:mod:`memopt.io` re-exports it and creates it from files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memopt.core.program import Program
from memopt.core.signed_dag import GraphDAG, SignedDAG, graph_to_dag
from memopt.core.tensor_graph import TensorGraph


@dataclass(frozen=True, eq=False)
class Instance:
    """A loaded scheduling instance.

    Exactly one of ``graph`` (tensor graph) and ``program`` (statement program) is set.
    ``labels[i]`` is how the file names op/statement ``i`` (Checkmate's integer ``id``, the
    random-layered graphs' ``name``, or the op name of memopt's own format): plans are
    written with these labels. ``input_order`` is the file's own order (the "input order"
    baseline): the node list, or ``graph.order`` where the file has one.
    """

    name: str
    schema: str
    labels: tuple
    input_order: np.ndarray
    graph: TensorGraph | None = None
    program: Program | None = None
    path: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def num_ops(self) -> int:
        return self.graph.num_ops if self.graph is not None else len(self.program.statements)

    @property
    def dag(self) -> SignedDAG:
        if self.graph is not None:
            return graph_to_dag(self.graph).dag
        return self.program.to_dag()

    @property
    def graph_dag(self) -> GraphDAG | None:
        return graph_to_dag(self.graph) if self.graph is not None else None

    def label_of(self, i: int) -> Any:
        return self.labels[i]

    def index_of_labels(self, labels) -> np.ndarray:
        """Op ids of a list of labels (accepts labels or their string forms)."""
        from memopt.errors import ScheduleError

        lookup = {str(lab): i for i, lab in enumerate(self.labels)}
        out = np.empty(len(labels), np.int64)
        for k, lab in enumerate(labels):
            try:
                out[k] = lookup[str(lab)]
            except KeyError:
                raise ScheduleError(f"plan names unknown op {lab!r}") from None
        return out
