"""Recomputation plans (``docs/remat.md``) and their one evaluator, O(steps + edges touched).

A plan is a sequence of steps ``{"run": op}`` and ``{"free": tensor}``; the model and its
rules are stated once, in ``docs/remat.md``. In short:

* the start holds every non-resident graph input; resident tensors are a constant offset;
* ``run v`` needs every input of ``v`` live and **none of its outputs live** (a re-run
  re-allocates all its outputs: free the live ones first); the memory while it runs is
  ``live_before + sum(s(out(v))) + w(v)``; afterwards its outputs are live;
* ``free t`` needs ``t`` live and not resident, and (when ``aliases`` are declared) no live
  alias of ``t``;
* every op runs at least once and at most ``1 + cap(v)`` times; graph outputs are live at
  the end; a freed graph input never comes back (it has no producer);
* peak = the maximum of the start and of every run; extra cost = the sum of ``c(v)`` over
  every run of ``v`` beyond its first, computed exactly (:func:`exact_costs`).

The tensor-graph order evaluator is the special case "no recomputation, frees as early as
possible": :func:`plan_from_order` builds that plan and its peak equals
:func:`memopt.core.peak` exactly (property-tested). The independent checker is
:mod:`memopt.remat.checker`; it shares no code with this module.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build(
...     tensors=[Tensor("a", 4), Tensor("b", 8), Tensor("c", 1, output=True)],
...     ops=[Op("f", (), ("a",), cost=3), Op("g", ("a",), ("b",)), Op("h", ("a", "b"), ("c",))])
>>> plan = RematPlan.from_steps(g, [{"run": "f"}, {"run": "g"}, {"free": "a"}, {"run": "f"},
...                                 {"run": "h"}, {"free": "a"}, {"free": "b"}])
>>> evaluate_plan(g, plan, cap=1)[:2]
(13, 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from memopt.core.evaluate import validate_order
from memopt.core.remat import FREE, RUN, evaluate_steps, exact_costs  # noqa: F401 (re-exported)
from memopt.core.tensor_graph import TensorGraph, show_value
from memopt.errors import GraphError, OptionError, ScheduleError

_KIND_NAMES = ("run", "free")


@dataclass(frozen=True, eq=False)
class RematPlan:
    """An immutable plan: ``kind[i]`` is :data:`RUN` or :data:`FREE`, ``index[i]`` the op or tensor id."""

    kind: np.ndarray   # int8 [S]
    index: np.ndarray  # int64 [S]

    def __post_init__(self):
        kind = np.ascontiguousarray(self.kind, dtype=np.int8).reshape(-1)
        index = np.ascontiguousarray(self.index, dtype=np.int64).reshape(-1)
        if kind.shape != index.shape:
            raise ScheduleError("a plan needs one kind and one index per step")
        bad = np.flatnonzero((kind != RUN) & (kind != FREE))
        if bad.size:
            raise ScheduleError(f"step {int(bad[0])}: unknown step kind {int(kind[bad[0]])}")
        kind.setflags(write=False)
        index.setflags(write=False)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "index", index)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def __eq__(self, other) -> bool:
        return (isinstance(other, RematPlan) and np.array_equal(self.kind, other.kind)
                and np.array_equal(self.index, other.index))

    __hash__ = None  # mutable-looking arrays: compare, do not hash

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, int]]) -> "RematPlan":
        """From ``(kind, id)`` pairs, e.g. ``[(RUN, 0), (FREE, 3)]``."""
        pairs = list(pairs)
        if not pairs:
            return cls(np.zeros(0, np.int8), np.zeros(0, np.int64))
        k, i = zip(*pairs)
        return cls(np.array(k, np.int8), np.array(i, np.int64))

    @classmethod
    def from_steps(cls, graph: TensorGraph, steps: Sequence) -> "RematPlan":
        """From JSON-style steps ``{"run": op}`` / ``{"free": tensor}`` (names or integer ids).

        Raises :class:`ScheduleError` naming the step that is malformed or names an unknown
        op or tensor.
        """
        if isinstance(steps, (str, bytes, Mapping)):
            raise ScheduleError("a plan must be a list of steps {\"run\": op} / {\"free\": tensor}")
        kinds: list[int] = []
        ids: list[int] = []
        op_index, t_index = graph.op_index, graph.tensor_index
        for i, step in enumerate(steps):
            if not isinstance(step, Mapping) or len(step) != 1:
                raise ScheduleError(f"step {i}: expected one of {{\"run\": op}} or {{\"free\": tensor}}, "
                                    f"got {show_value(step)}")
            (key, value), = step.items()
            if key == "run":
                kinds.append(RUN)
                ids.append(_resolve(value, op_index, graph.num_ops, "op", i))
            elif key == "free":
                kinds.append(FREE)
                ids.append(_resolve(value, t_index, graph.num_tensors, "tensor", i))
            else:
                raise ScheduleError(f"step {i}: unknown step kind {key!r} (expected 'run' or 'free')")
        return cls(np.array(kinds, np.int8), np.array(ids, np.int64))

    def to_doc(self, graph: TensorGraph) -> list[dict]:
        """The steps as JSON-ready dicts in the graph's names (the input file's ids)."""
        out = []
        for k, i in zip(self.kind.tolist(), self.index.tolist()):
            names = graph.op_names if k == RUN else graph.tensor_names
            out.append({_KIND_NAMES[k]: names[i]})
        return out

    def runs(self) -> np.ndarray:
        """Op ids of the run steps, in plan order."""
        return self.index[self.kind == RUN]


def _resolve(value, index: Mapping[str, int], count: int, what: str, step: int, place: str = "step") -> int:
    """The id of an op or tensor named by ``value`` (a name or an integer id) at item ``step``
    of a ``place`` list (plan steps, or the runs of :func:`memopt.remat.plan_from_runs`)."""
    if isinstance(value, str):
        try:
            return index[value]
        except KeyError:
            raise ScheduleError(f"{place} {step}: unknown {what} {value!r}") from None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if 0 <= int(value) < count:
            return int(value)
        raise ScheduleError(f"{place} {step}: {what} id {int(value)} is out of range (the graph has {count})")
    raise ScheduleError(f"{place} {step}: a {what} must be a name or an integer id, got {show_value(value)}")


# ---------------------------------------------------------------------------- parameters
def resolve_caps(graph: TensorGraph, cap=None) -> list[int] | None:
    """Per-op recomputation caps ``k(v)`` as a list, or ``None`` for no cap.

    ``cap`` is ``None`` (unlimited), one integer ``k >= 0`` for every op, or a mapping
    ``{op name or id: k}`` / a sequence of one ``k`` per op. A mapping leaves unnamed ops
    uncapped. Raises :class:`OptionError` on a negative or non-integer cap.
    """
    if cap is None:
        return None
    n = graph.num_ops

    def one(k, who):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 0:
            raise OptionError(f"recomputation cap{who} must be an integer >= 0, got {show_value(k)}")
        return int(k)

    if isinstance(cap, (int, np.integer)) and not isinstance(cap, bool):
        return [one(cap, "")] * n
    if isinstance(cap, Mapping):
        big = 1 << 62
        out = [big] * n
        for key, k in cap.items():
            if isinstance(key, str) and key in graph.op_index:
                v = graph.op_index[key]
            elif isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= int(key) < n:
                v = int(key)
            else:
                raise OptionError(f"recomputation cap names unknown op {key!r}")
            out[v] = one(k, f" of op {graph.op_names[v]!r}")
        return out
    try:
        caps = list(cap)
    except TypeError:
        raise OptionError(f"recomputation cap must be an integer, a list or a mapping, got {show_value(cap)}") from None
    if len(caps) != n:
        raise OptionError(f"per-op caps need one entry per op ({n}), got {len(caps)}")
    return [one(k, f" of op {graph.op_names[v]!r}") for v, k in enumerate(caps)]


def resolve_aliases(graph: TensorGraph, aliases) -> dict[int, int]:
    """Validated ``{alias tensor id: base tensor id}``; empty when ``aliases`` is ``None``.

    An alias (a view, an in-place result) is a size-0 tensor whose producer and every
    consumer also read its base, and which is a graph output only if its base is one
    (``docs/design.md``, tensor graph: "tensors of size 0 that keep their base alive"). Raises
    :class:`GraphError` naming the alias that breaks one of these conditions.
    """
    if not aliases:
        return {}
    t_index = graph.tensor_index
    out: dict[int, int] = {}
    def tensor(x):
        if isinstance(x, str) and x in t_index:
            return t_index[x]
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= int(x) < graph.num_tensors:
            return int(x)
        raise GraphError(f"alias map names unknown tensor {show_value(x)}")

    for a, b in dict(aliases).items():
        ai, bi = tensor(a), tensor(b)
        an, bn = graph.tensor_names[ai], graph.tensor_names[bi]
        if ai == bi:
            raise GraphError(f"tensor {an!r} is declared an alias of itself")
        if int(graph.tensor_size[ai]) != 0:
            raise GraphError(f"alias {an!r} of {bn!r} has size {int(graph.tensor_size[ai])}; aliases have size 0")
        p = int(graph.tensor_producer[ai])
        if p < 0:
            raise GraphError(f"alias {an!r} of {bn!r} is a graph input; an alias is produced by a view op")
        readers = [p] + graph.consumers_of(ai).tolist()
        for v in readers:
            if bi not in set(graph.inputs_of(v).tolist()):
                role = "its producer" if v == p else "its consumer"
                raise GraphError(f"alias {an!r} of {bn!r}: {role} {graph.op_names[v]!r} does not read the base "
                                 f"{bn!r} (importers must add the base as an input so that it stays alive)")
        if graph.tensor_output[ai] and not graph.tensor_output[bi]:
            raise GraphError(f"alias {an!r} is a graph output but its base {bn!r} is not")
        out[ai] = bi
    return out


# ---------------------------------------------------------------------------- evaluation
class PlanEvaluation(NamedTuple):
    """``peak`` (bytes), ``extra_cost`` (exact), ``profile``: memory at the start
    (``profile[0]``) and at step ``i`` (``profile[i + 1]``: while it runs, or after the free)."""

    peak: int
    extra_cost: object
    profile: np.ndarray


def evaluate_plan(graph: TensorGraph, plan: RematPlan | Sequence, cap=None, *, aliases=None) -> PlanEvaluation:
    """Validate ``plan`` against every rule of the model and return its peak, exact extra
    cost and memory profile, in O(steps + sum of the degrees of the ops run).

    Parameters
    ----------
    graph : TensorGraph
    plan : RematPlan or list of dict
        A plan or its JSON steps.
    cap : None, int, list or dict, optional
        As :func:`resolve_caps` (``None``: any number of runs).
    aliases : dict, optional
        As :func:`resolve_aliases`.

    Returns
    -------
    PlanEvaluation
        ``(peak, extra_cost, profile)``.

    Raises
    ------
    ScheduleError
        Naming the first step that breaks a rule, or the op or tensor wrong at the end.

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 2, output=True)], [Op("A", (), ("a",)), Op("B", ("a",), ("b",))])
    >>> e = evaluate_plan(g, plan_from_order(g, ["A", "B"]), cap=0)
    >>> e.peak, e.extra_cost, e.profile.tolist()
    (6, 0, [0, 4, 6, 2])
    """
    if not isinstance(plan, RematPlan):
        plan = RematPlan.from_steps(graph, plan)
    ev = evaluate_steps(graph, plan.kind, plan.index, resolve_caps(graph, cap), resolve_aliases(graph, aliases))
    return PlanEvaluation(ev.peak, ev.extra_cost, ev.profile)


def plan_from_order(graph: TensorGraph, order: Sequence, *, aliases=None) -> RematPlan:
    """The plan that runs every op once in ``order`` and frees every tensor as early as
    possible: a graph input nobody reads at the start, a tensor right after its last
    consumer (a produced tensor nobody reads right after its producer), never a graph output
    or a resident tensor. Within one step, aliases are freed before other tensors.

    Its peak equals :func:`memopt.core.peak` ``(graph, order)`` exactly.

    Parameters
    ----------
    graph : TensorGraph
    order : sequence of int or str
        A topological order of all ops (else :class:`ScheduleError`).
    aliases : dict, optional
        ``{alias: base}``, as :func:`resolve_aliases`.

    Returns
    -------
    RematPlan
        Of peak ``memopt.core.peak(graph, order)``.

    Raises
    ------
    ScheduleError

    Examples
    --------
    >>> from memopt.core import Op, Tensor, TensorGraph
    >>> g = TensorGraph.build([Tensor("a", 4), Tensor("b", 2, output=True)], [Op("A", (), ("a",)), Op("B", ("a",), ("b",))])
    >>> plan_from_order(g, ["A", "B"]).to_doc(g)
    [{'run': 'A'}, {'run': 'B'}, {'free': 'a'}]
    """
    pos = validate_order(graph, order)
    n, T = graph.num_ops, graph.num_tensors
    alias = resolve_aliases(graph, aliases)
    order_ids = np.empty(n, np.int64)
    order_ids[pos] = np.arange(n)
    producer = graph.tensor_producer.tolist()
    keep = (graph.tensor_output | graph.tensor_resident).tolist()
    cons_ptr, cons_idx = graph.cons_ptr.tolist(), graph.cons_idx.tolist()
    posl = pos.tolist()
    # the step after which each tensor dies: -1 = at the start
    dies_after: list[list[int]] = [[] for _ in range(n + 1)]
    for t in range(T):
        if keep[t]:
            continue
        last = -1
        for j in range(cons_ptr[t], cons_ptr[t + 1]):
            last = max(last, posl[cons_idx[j]])
        if last < 0:
            last = posl[producer[t]] if producer[t] >= 0 else -1
        dies_after[last + 1].append(t)
    steps: list[tuple[int, int]] = []

    def emit_frees(ts):
        ts.sort(key=lambda t: (t not in alias, t))
        steps.extend((FREE, t) for t in ts)

    emit_frees(dies_after[0])
    for k, v in enumerate(order_ids.tolist()):
        steps.append((RUN, v))
        emit_frees(dies_after[k + 1])
    return RematPlan.from_pairs(steps)
