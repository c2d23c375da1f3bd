"""A scheduling problem: one of the three models of ``docs/design.md`` (tensor graph, statement
program, signed DAG) behind one interface.

Every scheduling method, bound and checker of memopt works on the signed DAG (``docs/design.md``);
users hand in a :class:`~memopt.core.tensor_graph.TensorGraph`, a
:class:`~memopt.core.program.Program` or a :class:`~memopt.core.signed_dag.SignedDAG`.
:class:`SchedulingProblem` holds the model, its signed DAG and the translation between the
model's own orders (op ids of a tensor graph, statement ids of a program, node ids of a
DAG) and full node orders of the DAG. It lives in ``core`` so that every layer above —
solvers, bounds, the portfolio, adapters — shares it.

>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
>>> p = SchedulingProblem.of(g)
>>> p.num_items, p.peak([0])
(1, 6)
"""

from __future__ import annotations

import numpy as np

from memopt.core.evaluate import peak as graph_peak
from memopt.core.evaluate import validate_order
from memopt.core.program import Program
from memopt.core.signed_dag import (GraphDAG, SignedDAG, dag_order_from_op_order, dag_peak, graph_to_dag,
                                    op_order_from_dag_order, validate_node_order)
from memopt.core.tensor_graph import TensorGraph
from memopt.errors import OptionError

__all__ = ["SchedulingProblem"]


class SchedulingProblem:
    """A model to schedule, its signed DAG, and the input order (the "input" baseline).

    ``graph`` is set for tensor graphs (``gd`` maps op orders to DAG orders), ``program``
    for statement programs (statement ``i`` is DAG node ``i``); for a bare signed DAG both
    are ``None``. Orders passed to and returned by :meth:`peak`, :meth:`validate` and
    :meth:`from_full` are in the model's own ids.
    """

    __slots__ = ("model", "graph", "program", "gd", "dag", "input_order", "_reach")

    def __init__(self, model, input_order=None):
        self.model = model
        self.graph: TensorGraph | None = None
        self.program: Program | None = None
        self.gd: GraphDAG | None = None
        self._reach = None
        if isinstance(model, TensorGraph):
            self.graph, self.gd = model, graph_to_dag(model)
            self.dag: SignedDAG = self.gd.dag
        elif isinstance(model, Program):
            self.program, self.dag = model, model.to_dag()
        elif isinstance(model, SignedDAG):
            self.dag = model
        else:
            raise OptionError(f"cannot schedule a {type(model).__name__}: expected a TensorGraph, Program or SignedDAG")
        self.input_order = None
        if input_order is not None:
            order = np.asarray(input_order, np.int64).reshape(-1)
            self.validate(order)
            self.input_order = order

    @classmethod
    def of(cls, model, input_order=None) -> "SchedulingProblem":
        """The problem of ``model`` (returned unchanged if it already is one)."""
        if isinstance(model, SchedulingProblem):
            return model
        return cls(model, input_order)

    # ------------------------------------------------------------------ sizes
    @property
    def num_items(self) -> int:
        """Number of things a model order lists (ops, statements, or DAG nodes)."""
        if self.graph is not None:
            return self.graph.num_ops
        return self.dag.n

    @property
    def num_allocating(self) -> int:
        """Allocating nodes of the DAG: the size that drives every search's cost."""
        return int(np.count_nonzero(~self.dag.is_release))

    # ------------------------------------------------------------------ orders
    def peak(self, order) -> int:
        """Exact peak of a model order (validated)."""
        if self.graph is not None:
            return graph_peak(self.graph, order)
        return dag_peak(self.dag, order)

    def validate(self, order) -> None:
        if self.graph is not None:
            validate_order(self.graph, order)
        else:
            validate_node_order(self.dag, order)

    def to_full(self, order) -> np.ndarray:
        """Full signed-DAG node order of a model order."""
        order = np.asarray(order, np.int64)
        return dag_order_from_op_order(self.gd, order) if self.gd is not None else order

    def from_full(self, full) -> np.ndarray:
        """Model order of a full signed-DAG node order."""
        full = np.asarray(full, np.int64)
        return op_order_from_dag_order(self.gd, full) if self.gd is not None else full

    def default_order(self) -> np.ndarray:
        """The order the model was written in (a topological order for a bare DAG)."""
        if self.graph is not None:
            return self.graph.topological_order()
        if self.program is not None:
            return np.arange(self.dag.n, dtype=np.int64)
        return self.dag.topological_order()

    def baseline_order(self) -> np.ndarray:
        """The input order if one was given, else :meth:`default_order`."""
        return self.input_order if self.input_order is not None else self.default_order()
