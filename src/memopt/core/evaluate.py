"""The one exact peak evaluator of an op order on a tensor graph (``docs/design.md``, tensor graph), O(n + e).

Running op ``v`` allocates its outputs and its workspace; the memory *while v runs* is
``live_before(v) + sum(s(out(v))) + w(v)``. After ``v`` its workspace is released and every
tensor whose consumers have all run is freed, unless it is a graph output or resident. A
produced tensor with no consumer is freed right after its producer. Non-resident graph
inputs are live from the start until their last consumer has run. Resident tensors are a
constant offset. Peak is the maximum over the start and every op.

Every tensor is therefore live over one interval of steps ``[alloc, free]`` (step -1 is the
start); the profile is a difference array over those intervals, so the evaluation is a few
vectorized passes whatever the graph's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import ScheduleError


@dataclass(frozen=True)
class MemoryProfile:
    """Memory of one schedule: ``start`` (before any op) and ``during[k]`` (while the k-th op runs)."""

    order: np.ndarray
    start: int
    during: np.ndarray
    peak: int
    peak_step: int  # index into order of the op at the peak, -1 when the peak is at the start


def order_indices(graph: TensorGraph, order: Sequence) -> np.ndarray:
    """Turn an order given as op names or op ids into an int64 array of op ids."""
    if isinstance(order, np.ndarray) and order.dtype.kind in "iu":
        return order.astype(np.int64, copy=False)
    order = list(order)
    if order and isinstance(order[0], str):
        index = graph.op_index
        out = np.empty(len(order), np.int64)
        for k, name in enumerate(order):
            try:
                out[k] = index[name]
            except KeyError:
                raise ScheduleError(f"order names unknown op {name!r}") from None
        return out
    try:
        return np.asarray(order, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise ScheduleError("order must be a list of op names or op ids") from None


def validate_order(graph: TensorGraph, order: Sequence) -> np.ndarray:
    """Check that ``order`` runs every op exactly once, after its producers; return positions.

    Raises :class:`ScheduleError` naming the missing, repeated or misplaced op.
    """
    idx = order_indices(graph, order)
    n = graph.num_ops
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx[(idx < 0) | (idx >= n)][0])
        raise ScheduleError(f"order names op id {bad}, but the graph has {n} ops")
    counts = np.bincount(idx, minlength=n)
    if np.any(counts > 1):
        v = int(np.flatnonzero(counts > 1)[0])
        raise ScheduleError(f"order runs op {graph.op_names[v]!r} {int(counts[v])} times")
    if np.any(counts == 0):
        v = int(np.flatnonzero(counts == 0)[0])
        raise ScheduleError(f"order misses op {graph.op_names[v]!r}")
    pos = np.empty(n, np.int64)
    pos[idx] = np.arange(n, dtype=np.int64)
    src, dst = graph.op_edges()
    late = np.flatnonzero(pos[src] >= pos[dst])
    if late.size:
        k = int(late[0])
        raise ScheduleError(
            f"order is not topological: op {graph.op_names[int(dst[k])]!r} runs before "
            f"its producer {graph.op_names[int(src[k])]!r}")
    return pos


def memory_profile(graph: TensorGraph, order: Sequence, *, validate: bool = True) -> MemoryProfile:
    """Exact memory profile of running the ops in ``order`` (see the module docstring).

    Parameters
    ----------
    graph, order, validate
        As in :func:`peak`.

    Returns
    -------
    MemoryProfile
        ``start`` (bytes before any op), ``during[k]`` (while the ``k``-th op runs), ``peak``
        and ``peak_step`` (index of the op at the peak, ``-1`` at the start).

    Raises
    ------
    ScheduleError
        ``order`` is not a valid order of ``graph``.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 8), Tensor("z", 2, output=True)],
    ...                       [Op("f", ("x",), ("y",)), Op("g", ("y",), ("z",), workspace=1)])
    >>> p = memory_profile(g, [0, 1])
    >>> p.start, p.during.tolist(), p.peak, p.peak_step
    (4, [12, 11], 12, 0)
    """
    idx = order_indices(graph, order)
    if validate:
        pos = validate_order(graph, idx)
    else:
        pos = np.empty(graph.num_ops, np.int64)
        pos[idx] = np.arange(graph.num_ops, dtype=np.int64)
    n = graph.num_ops
    prod = graph.tensor_producer
    alloc = np.full(prod.shape[0], -1, np.int64)
    alloc[prod >= 0] = pos[prod[prod >= 0]]
    from memopt import _jit
    from memopt.core._kernels import segment_max

    last_use = _jit.choose(segment_max, n)(pos[graph.cons_idx], _jit.readonly(graph.cons_ptr), np.int64(-2))
    # a tensor with no consumer dies with its producer's step (inputs: at the start)
    free = np.where(last_use >= -1, last_use, alloc)
    keep = graph.tensor_output
    free = np.where(keep, n - 1, free)
    live = ~graph.tensor_resident
    size = graph.tensor_size
    # difference array over steps -1..n-1, shifted by one
    diff = np.zeros(n + 2, np.int64)
    np.add.at(diff, alloc[live] + 1, size[live])
    np.add.at(diff, free[live] + 2, -size[live])
    level = np.cumsum(diff[:-1])
    resident = graph.resident_bytes
    start = int(level[0]) + resident
    during = level[1:] + graph.op_workspace[idx] + resident
    if n:
        k = int(np.argmax(during))
        peak_val = int(during[k])
    else:
        k, peak_val = -1, start
    if start >= peak_val:
        peak_val, k = start, -1
    return MemoryProfile(order=idx, start=start, during=during, peak=peak_val, peak_step=k)


def peak(graph: TensorGraph, order: Sequence, *, validate: bool = True) -> int:
    """Peak memory (bytes) of running ``graph``'s ops in ``order`` (``docs/design.md``, tensor graph).

    The maximum, over the start and every op, of the live bytes while it runs: its inputs
    still needed, its outputs, its workspace, the resident tensors and the graph outputs
    produced so far.

    Parameters
    ----------
    graph : TensorGraph
    order : sequence of int or str
        Every op once (ids or names), each after its producers.
    validate : bool, default True
        Check ``order`` first (``False``: the caller guarantees it).

    Returns
    -------
    int
        Exact bytes (a Python int).

    Raises
    ------
    ScheduleError
        ``order`` misses or repeats an op, names an unknown one, or is not topological.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 8), Tensor("z", 2, output=True)],
    ...                       [Op("f", ("x",), ("y",)), Op("g", ("y",), ("z",), workspace=1)])
    >>> peak(g, ["f", "g"])          # f: x 4 + y 8; g: y 8 + z 2 + workspace 1
    12
    """
    return memory_profile(graph, order, validate=validate).peak
