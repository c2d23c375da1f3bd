"""The one evaluator of recomputation step sequences (``docs/remat.md``), O(steps + edges touched).

A plan is a sequence of steps ``run op`` / ``free tensor`` (``kind[i]`` is :data:`RUN` = 0 or
:data:`FREE` = 1, ``index[i]`` the op or tensor id). The rules, stated once in
``docs/remat.md``:

* the start holds every non-resident graph input; resident tensors are a constant offset;
* ``run v`` needs every input of ``v`` live and **none of its outputs live**; the memory
  while it runs is ``live_before + sum(s(out(v))) + w(v)``; afterwards its outputs are live;
* ``free t`` needs ``t`` live and not resident, and no live declared alias of ``t``;
* every op runs at least once and at most ``1 + k(v)`` times; graph outputs are live at the
  end; a freed graph input never comes back (it has no producer);
* peak = the maximum of the start and every run; extra cost = the sum of ``c(v)`` over every
  run of ``v`` beyond its first, exact (:func:`exact_costs`).

The order evaluator :func:`memopt.core.evaluate.peak` is the special case "every op once, in
order, every tensor freed right after its last consumer": both give the same peak
(property-tested in ``tests/remat/test_solvers.py``). Each step costs O(1) plus the degree of
the op it runs, so a plan of ``S`` steps costs O(S + (1 + k) edges).

Parsing of names, caps and alias declarations lives in :mod:`memopt.remat.plan`
(:func:`~memopt.remat.plan.evaluate_plan` validates them and calls :func:`evaluate_steps`).

Example
-------
>>> import numpy as np
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 1, output=True)],
...                       [Op("f", (), ("a",), cost=2), Op("g", ("a",), ("b",))])
>>> evaluate_steps(g, np.array([RUN, RUN, FREE], np.int8), np.array([0, 1, 0]))[:2]
(5, 0)
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import ScheduleError

__all__ = ["RUN", "FREE", "StepEvaluation", "evaluate_steps", "exact_costs"]

RUN = 0
FREE = 1


class StepEvaluation(NamedTuple):
    """``peak`` (bytes), ``extra_cost`` (exact), ``profile``: memory at the start
    (``profile[0]``) and at step ``i`` (``profile[i + 1]``: while it runs, or after the free)."""

    peak: int
    extra_cost: object
    profile: np.ndarray


def exact_costs(graph: TensorGraph) -> list:
    """Each op's compute cost as an exact Python number (:attr:`TensorGraph.op_cost_exact`):
    an ``int``, or a ``Fraction`` when not integral, exactly as the graph was given (``0.1``
    read from a file is ``Fraction(1, 10)``; ``2**53 + 1`` stays itself). Sums of these are
    exact, so extra costs never suffer rounding (the exact solvers compare them with ``<=``).
    """
    return list(graph.op_cost_exact)


def _exact_number(x):
    if isinstance(x, Fraction) and x.denominator == 1:
        return int(x)
    return x


def evaluate_steps(graph: TensorGraph, kind, index, caps: list[int] | None = None,
                   alias: dict[int, int] | None = None) -> StepEvaluation:
    """Validate the steps ``(kind, index)`` against every rule and return the peak, exact
    extra cost and memory profile, in O(steps + sum of the degrees of the ops run).

    ``caps``: one ``k(v)`` per op, or ``None`` (any number of runs). ``alias``: validated
    ``{alias tensor id: base tensor id}`` (freeing a base while an alias is live is refused).
    Raises :class:`ScheduleError` naming the first step that breaks a rule, or the op or
    tensor that is wrong at the end.
    """
    kind = np.asarray(kind, np.int8).reshape(-1)
    index = np.asarray(index, np.int64).reshape(-1)
    if kind.shape != index.shape:
        raise ScheduleError("a plan needs one op or tensor id per step")
    alias = alias or {}
    n, T = graph.num_ops, graph.num_tensors
    if kind.size:
        runs = index[kind == RUN]
        frees = index[kind == FREE]
        if runs.size and (runs.min() < 0 or runs.max() >= n):
            raise ScheduleError(f"plan names op id {int(runs[(runs < 0) | (runs >= n)][0])}, but the graph has {n} ops")
        if frees.size and (frees.min() < 0 or frees.max() >= T):
            raise ScheduleError(f"plan names tensor id {int(frees[(frees < 0) | (frees >= T)][0])}, "
                                f"but the graph has {T} tensors")
    size = graph.tensor_size.tolist()
    resident = graph.tensor_resident.tolist()
    producer = graph.tensor_producer.tolist()
    in_ptr, in_idx = graph.op_in_ptr.tolist(), graph.op_in_idx.tolist()
    out_ptr, out_idx = graph.op_out_ptr.tolist(), graph.op_out_idx.tolist()
    ws = graph.op_workspace.tolist()
    costs = exact_costs(graph)
    tname, oname = graph.tensor_names, graph.op_names
    # live[t]: 1 live, 0 not live; ever[t]: allocated at least once
    live = [0] * T
    ever = [False] * T
    level = 0
    for t in range(T):
        if producer[t] < 0 and not resident[t]:
            live[t] = 1
            ever[t] = True
            level += size[t]
    base_live_aliases = [0] * T  # per base: how many of its aliases are live
    off = graph.resident_bytes
    count = [0] * n
    extra = 0
    S = int(kind.shape[0])
    profile = np.empty(S + 1, np.int64)
    profile[0] = level + off
    peak_val = level + off
    for i, (k, x) in enumerate(zip(kind.tolist(), index.tolist())):
        if k == RUN:
            v = x
            if caps is not None and count[v] > caps[v]:
                raise ScheduleError(f"step {i}: op {oname[v]!r} runs a {_nth(count[v] + 1)} time, beyond its cap of "
                                    f"{caps[v]} recomputation{'s' if caps[v] != 1 else ''}")
            for j in range(in_ptr[v], in_ptr[v + 1]):
                t = in_idx[j]
                if not live[t] and not resident[t]:
                    raise ScheduleError(f"step {i}: op {oname[v]!r} reads {tname[t]!r}, which is not live"
                                        + (" (a freed graph input cannot be recomputed)" if producer[t] < 0 else
                                           "" if ever[t] else f" (its producer {oname[producer[t]]!r} has not run)"))
            grow = 0
            for j in range(out_ptr[v], out_ptr[v + 1]):
                t = out_idx[j]
                if live[t]:
                    raise ScheduleError(f"step {i}: op {oname[v]!r} re-runs while its output {tname[t]!r} is live "
                                        "(a re-run re-allocates every output: free it first)")
                grow += size[t]
            level += grow
            mem = level + ws[v] + off
            profile[i + 1] = mem
            if mem > peak_val:
                peak_val = mem
            for j in range(out_ptr[v], out_ptr[v + 1]):
                t = out_idx[j]
                live[t] = 1
                ever[t] = True
                if t in alias:
                    base_live_aliases[alias[t]] += 1
            if count[v]:
                extra += costs[v]
            count[v] += 1
        else:
            t = x
            if resident[t]:
                raise ScheduleError(f"step {i}: frees resident tensor {tname[t]!r} (resident tensors live for the whole run)")
            if not live[t]:
                raise ScheduleError(f"step {i}: frees {tname[t]!r}, which is not live"
                                    + (" (already freed)" if ever[t] else " (never allocated)"))
            if base_live_aliases[t]:
                a = next(a for a, b in alias.items() if b == t and live[a])
                raise ScheduleError(f"step {i}: frees {tname[t]!r} while its alias {tname[a]!r} is live "
                                    "(free the alias first)")
            live[t] = 0
            level -= size[t]
            if t in alias:
                base_live_aliases[alias[t]] -= 1
            profile[i + 1] = level + off
    for v in range(n):
        if count[v] == 0:
            raise ScheduleError(f"op {oname[v]!r} never runs")
    for t in np.flatnonzero(graph.tensor_output).tolist():
        if not live[t] and not resident[t]:
            raise ScheduleError(f"graph output {tname[t]!r} is not live at the end of the plan")
    return StepEvaluation(int(peak_val), _exact_number(extra), profile)


def _nth(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"
