"""Independent checker of recomputation plans (the rules of ``docs/remat.md``).

Written apart from :mod:`memopt.remat.plan` on purpose: it reads only the graph's public
lookups (``inputs_of``, ``outputs_of``, sizes, flags, costs), parses the steps itself,
keeps the live set as a Python ``set`` and recomputes the live bytes from that set at every
run (no running level), so a bug in the evaluator's bookkeeping cannot hide here. Its cost
is O(steps x live tensors): fine for verification, not meant to be fast.

Every violation raises :class:`ScheduleError` naming the step index and the reason; a wrong
claimed peak or extra cost raises :class:`CertificateError`.
"""

from __future__ import annotations

import numbers
from fractions import Fraction
from typing import Mapping

from memopt.core.tensor_graph import TensorGraph
from memopt.errors import CertificateError, GraphError, OptionError, ScheduleError


def _steps(graph: TensorGraph, plan) -> list[tuple[str, int]]:
    """``[("run", op id) | ("free", tensor id)]`` from a step list or any object with
    ``kind``/``index`` arrays (0 = run, 1 = free)."""
    if hasattr(plan, "kind") and hasattr(plan, "index"):
        raw = [({0: "run", 1: "free"}.get(int(k), str(k)), int(i)) for k, i in zip(plan.kind, plan.index)]
    else:
        raw = []
        for i, step in enumerate(plan):
            if not isinstance(step, Mapping) or len(step) != 1:
                raise ScheduleError(f"step {i}: not a single-key step: {step!r}")
            (key, value), = step.items()
            raw.append((key, value))
    out = []
    for i, (key, value) in enumerate(raw):
        if key == "run":
            names, count, what = graph.op_names, graph.num_ops, "op"
        elif key == "free":
            names, count, what = graph.tensor_names, graph.num_tensors, "tensor"
        else:
            raise ScheduleError(f"step {i}: unknown step kind {key!r}")
        if isinstance(value, str):
            try:
                value = list(names).index(value)
            except ValueError:
                raise ScheduleError(f"step {i}: unknown {what} {value!r}") from None
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
            raise ScheduleError(f"step {i}: {what} {value!r} is not an id of this graph")
        out.append((key, value))
    return out


def check_plan(graph: TensorGraph, plan, cap=None, *, aliases: Mapping | None = None,
               claimed_peak: int | None = None, claimed_extra_cost=None) -> tuple[int, object]:
    """Verify every rule of the model for ``plan`` and return ``(peak, extra_cost)``.

    The independent checker: it shares no code with the evaluator. Checked rules, in the
    order they can fail: known ops and tensors; at each run, the cap, every input live, no
    output live; at each free, the tensor live, not resident, no live alias; at the end, every
    op run at least once and every graph output live.

    Parameters
    ----------
    graph : TensorGraph
    plan : RematPlan or list of dict
        A plan, or its JSON steps ``{"run": op}`` / ``{"free": tensor}``.
    cap : None, int or list of int, optional
        ``None`` (no cap), an integer ``k`` for every op (``1 + k`` runs), or one ``k`` per op.
    aliases : dict, optional
        ``{alias: base}`` (names or ids); freeing a base while an alias is live is an error.
    claimed_peak, claimed_extra_cost : optional
        Claims to check against the measured values.

    Returns
    -------
    tuple
        ``(peak, extra_cost)``: bytes (int) and the exact extra cost (int or Fraction).

    Raises
    ------
    ScheduleError
        The plan breaks a rule; the message names the step and the op or tensor.
    CertificateError
        A claim differs from what the plan measures.
    OptionError
        A malformed ``cap``.
    GraphError
        An alias names an unknown tensor.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 2, output=True)],
    ...                       [Op("A", (), ("a",), cost=3), Op("B", ("a",), ("b",), cost=5)])
    >>> check_plan(g, [{"run": "A"}, {"run": "B"}, {"free": "a"}], cap=0)
    (6, 0)
    >>> check_plan(g, [{"run": "B"}], cap=0)
    Traceback (most recent call last):
    ...
    memopt.errors.ScheduleError: step 0: input 'a' of op 'B' is not live
    """
    n, T = graph.num_ops, graph.num_tensors
    if cap is None:
        limit = [None] * n
    elif isinstance(cap, int) and not isinstance(cap, bool):
        if cap < 0:
            raise OptionError(f"cap must be >= 0, got {cap}")
        limit = [cap + 1] * n
    else:
        if isinstance(cap, Mapping) or isinstance(cap, (str, bytes)):
            raise OptionError("the plan checker takes cap=None, one integer k or a list of one k per op "
                              f"(got a {type(cap).__name__})")
        try:
            cap = list(cap)
        except TypeError:
            raise OptionError(f"cap must be None, an integer or a list of one per op, got {type(cap).__name__}") from None
        if len(cap) != n:
            raise OptionError("a list of caps needs one entry per op")
        if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in cap):
            raise OptionError("every cap in the list must be an integer >= 0")
        limit = [int(k) + 1 for k in cap]
    tindex = {name: t for t, name in enumerate(graph.tensor_names)}
    alias_of: dict[int, int] = {}

    def tensor_id(x) -> int:
        if isinstance(x, str) and x in tindex:
            return tindex[x]
        if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < T:
            return x
        raise GraphError(f"alias declaration names unknown tensor {x!r}")

    for a, b in (aliases or {}).items():
        alias_of[tensor_id(a)] = tensor_id(b)
    sizes = {t: int(graph.tensor_size[t]) for t in range(T)}
    is_input = {t for t in range(T) if int(graph.tensor_producer[t]) < 0}
    resident = {t for t in range(T) if bool(graph.tensor_resident[t])}
    outputs = {t for t in range(T) if bool(graph.tensor_output[t])}
    constant = sum(sizes[t] for t in resident)
    live = {t for t in is_input if t not in resident}
    freed_once: set[int] = set()
    runs = [0] * n
    extra = Fraction(0)
    peak = constant + sum(sizes[t] for t in live)
    for i, (kind, x) in enumerate(_steps(graph, plan)):
        if kind == "run":
            name = graph.op_names[x]
            if limit[x] is not None and runs[x] + 1 > limit[x]:
                raise ScheduleError(f"step {i}: op {name!r} would run {runs[x] + 1} times; its cap allows {limit[x]}")
            for t in map(int, graph.inputs_of(x)):
                if t not in live and t not in resident:
                    raise ScheduleError(f"step {i}: input {graph.tensor_names[t]!r} of op {name!r} is not live")
            outs = [int(t) for t in graph.outputs_of(x)]
            for t in outs:
                if t in live:
                    raise ScheduleError(f"step {i}: op {name!r} runs while its output {graph.tensor_names[t]!r} is live")
            live.update(outs)
            during = constant + sum(sizes[t] for t in live) + int(graph.op_workspace[x])
            peak = max(peak, during)
            if runs[x] >= 1:
                extra += Fraction(graph.op_cost_exact[x])
            runs[x] += 1
        else:
            name = graph.tensor_names[x]
            if x in resident:
                raise ScheduleError(f"step {i}: {name!r} is resident and may not be freed")
            if x not in live:
                raise ScheduleError(f"step {i}: {name!r} is freed but is not live"
                                    + (" (double free)" if x in freed_once else ""))
            for a, b in alias_of.items():
                if b == x and a in live:
                    raise ScheduleError(f"step {i}: {name!r} is freed while its alias "
                                        f"{graph.tensor_names[a]!r} is live")
            live.discard(x)
            freed_once.add(x)
    for v in range(n):
        if runs[v] == 0:
            raise ScheduleError(f"op {graph.op_names[v]!r} is never run")
    for t in sorted(outputs):
        if t not in live and t not in resident:
            raise ScheduleError(f"graph output {graph.tensor_names[t]!r} is not live at the end")
    extra_cost = int(extra) if extra.denominator == 1 else extra
    if claimed_peak is not None and int(claimed_peak) != peak:
        raise CertificateError(f"claimed peak {claimed_peak} but the plan peaks at {peak}")
    if claimed_extra_cost is not None and Fraction(claimed_extra_cost) != extra:
        raise CertificateError(f"claimed extra cost {claimed_extra_cost} but the plan's extra cost is {extra_cost}")
    return peak, extra_cost
