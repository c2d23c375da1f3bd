"""The input order as a scheduling method: the reference every other method is compared with.

It is the order the file lists its ops or statements in (``graph.order`` where a published
graph has one, see :mod:`memopt.io.checkmate`), or a topological order of a bare DAG.
"""

from __future__ import annotations

from memopt.schedule.result import MethodResult, order_result

__all__ = ["input_method"]


def input_method(problem, *, time_limit: float = 0.0, incumbent=None, lower_bound=None, seed: int = 0) -> MethodResult:
    """Registry method ``input``: the problem's input order, unchanged."""
    return order_result(problem, problem.baseline_order())
