"""Statement programs (``docs/design.md``, statement program): what a compiler actually emits.

A straight-line program of statements, each with effects on named buffers:
``alloc(b, bytes)``, ``free(b)`` and ``use(reads, writes)``, plus *transient* bytes the
statement holds only while it runs (a library kernel's scratch memory, measured by
profiling). Two statements keep their relative order iff they touch a common buffer and at
least one of them allocates, frees or writes it (read/read pairs commute). The memory of a
program is the running sum of allocs minus frees plus the running statement's transient.

Buffers that the program uses without allocating are *external* (caller-owned): declare
them in ``inputs`` with their size if the program frees them, otherwise they are not
counted. Example:

>>> p = Program([Statement("a", allocs=(("x", 8),), writes=("x",)),
...              Statement("b", reads=("x",), allocs=(("y", 4),), writes=("y",)),
...              Statement("c", frees=("x",))])
>>> p.peak()
12
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from memopt.core.signed_dag import SignedDAG, dag_peak
from memopt.core.tensor_graph import MAX_TOTAL_BYTES, show_value
from memopt.errors import GraphError, ScheduleError


def _check_name(name, what: str) -> None:
    if not isinstance(name, str):
        raise GraphError(f"{what} must be a string, got {show_value(name)}")


def _byte_count(size, what: str) -> int:
    """``size`` as a Python int in ``[0, 2**62)``; a GraphError naming ``what`` otherwise."""
    if isinstance(size, np.generic):
        size = size.item()
    if isinstance(size, bool) or not isinstance(size, (int, float)):
        raise GraphError(f"{what} is not a number: {show_value(size)}")
    if isinstance(size, float):
        if not (size == size and abs(size) != float("inf") and size.is_integer()):
            raise GraphError(f"{what} is not a whole number of bytes: {show_value(size)}")
        if abs(size) < MAX_TOTAL_BYTES:
            size = int(size)
    if size < 0:
        raise GraphError(f"{what} is negative: {show_value(size)}")
    if size >= MAX_TOTAL_BYTES:
        raise GraphError(f"{what} is {show_value(size)} bytes, beyond memopt's exact limit of 2**62")
    return size


@dataclass(frozen=True)
class Statement:
    """One statement of a :class:`Program` and its effects on named buffers (``docs/design.md``, statement program).

    Parameters
    ----------
    name : str
    allocs : tuple of (str, int)
        Buffers it allocates, with their bytes.
    frees : tuple of str
        Buffers it frees.
    reads, writes : tuple of str
        Buffers it reads / writes (read/read pairs of statements commute).
    transient : int, default 0
        Bytes held only while it runs (measured by profiling).
    payload : object, optional
        The original code line or node, for adapters (not compared).

    Examples
    --------
    >>> Statement("mm", allocs=(("y", 8),), reads=("x",)).buffers() == {"x", "y"}
    True
    """

    name: str
    allocs: tuple[tuple[str, int], ...] = ()
    frees: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    transient: int = 0
    payload: object = field(default=None, compare=False)  # the original code line / node, for adapters

    def buffers(self) -> set[str]:
        return {b for b, _ in self.allocs} | set(self.frees) | set(self.reads) | set(self.writes)


@dataclass(frozen=True, eq=False)
class Program:
    """A validated statement program in its original order (``docs/design.md``, statement program).

    Parameters
    ----------
    statements : iterable of Statement
    inputs : dict, optional
        External buffers live at the start, ``{name: bytes}``.
    name : str, optional

    Raises
    ------
    GraphError
        A malformed program (a buffer used before its allocation or after its free, a
        negative size...), naming the statement.

    Examples
    --------
    >>> p = Program([Statement("s0", allocs=(("a", 4),)), Statement("s1", allocs=(("b", 2),), reads=("a",)),
    ...              Statement("s2", frees=("a",))])
    >>> p.peak([0, 1, 2])
    6
    """

    statements: tuple[Statement, ...]
    inputs: Mapping[str, int] = field(default_factory=dict)  # external buffers live at start, by size
    name: str = ""

    def __init__(self, statements: Iterable[Statement], inputs: Mapping[str, int] | None = None, name: str = ""):
        try:
            object.__setattr__(self, "statements", tuple(statements))
            object.__setattr__(self, "inputs", dict(inputs or {}))
        except (TypeError, ValueError):
            raise GraphError("a program needs an iterable of statements and a mapping of input "
                             "buffer sizes") from None
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_dag", None)
        self._validate()

    def _validate(self) -> None:
        """Check names, byte counts and buffer lifetimes; every error names the statement.

        Byte counts are whole numbers in ``[0, 2**62)``, and so is the program's total (every
        input and allocation size plus the largest transient), so that every int64 sum over
        the program is exact."""
        names: set[str] = set()
        if not isinstance(self.inputs, dict):
            raise GraphError("program inputs must map buffer names to sizes")
        inputs = {}
        for b, size in self.inputs.items():
            _check_name(b, "input buffer name")
            inputs[b] = _byte_count(size, f"input buffer {b!r} size")
        object.__setattr__(self, "inputs", inputs)
        total = sum(inputs.values())
        max_transient = 0
        live: dict[str, int] = dict(inputs)
        ever: set[str] = set(inputs)
        freed_bytes: list[int] = []  # per statement: the sizes of the live buffers it frees
        for s in self.statements:
            if not isinstance(s, Statement):
                raise GraphError(f"program statements must be Statement records, got {type(s).__name__}")
            _check_name(s.name, "statement name")
            if s.name in names:
                raise GraphError(f"statement {s.name!r} is declared twice")
            names.add(s.name)
            for what in ("allocs", "frees", "reads", "writes"):
                if not isinstance(getattr(s, what), (tuple, list)):
                    raise GraphError(f"statement {s.name!r}: {what} must be a tuple, got "
                                     f"{type(getattr(s, what)).__name__}")
            for b in list(s.frees) + list(s.reads) + list(s.writes):
                _check_name(b, f"statement {s.name!r}: buffer name")
            for a in s.allocs:
                if not (isinstance(a, (tuple, list)) and len(a) == 2):
                    raise GraphError(f"statement {s.name!r}: each alloc must be a (buffer, bytes) pair, "
                                     f"got {show_value(a)}")
                _check_name(a[0], f"statement {s.name!r}: buffer name")
            transient = _byte_count(s.transient, f"statement {s.name!r} transient bytes")
            max_transient = max(max_transient, transient)
            own = {b for b, _ in s.allocs}  # a statement may allocate what it writes
            for b in list(s.reads) + list(s.writes):
                if b not in live and b in ever and b not in own:
                    raise GraphError(f"statement {s.name!r} uses buffer {b!r} after it was freed")
            for b, size in s.allocs:
                size = _byte_count(size, f"statement {s.name!r} allocates buffer {b!r} with a size that")
                if b in live:
                    raise GraphError(f"statement {s.name!r} allocates buffer {b!r}, which is already live")
                live[b] = size
                ever.add(b)
                total += size
            freed = 0
            for b in s.frees:
                if b not in live:
                    raise GraphError(f"statement {s.name!r} frees buffer {b!r}, which is not live")
                freed += live.pop(b)
            freed_bytes.append(freed)
        if total + max_transient >= MAX_TOTAL_BYTES:
            raise GraphError(f"the program's input and allocation sizes add up to {show_value(total)} bytes "
                             f"(plus the largest transient, {max_transient}): beyond memopt's exact limit "
                             "of 2**62 for a program's total")
        # a buffer name may be allocated again after a free: each free releases the size of
        # the allocation it ends, which the dependency edges keep in program order
        object.__setattr__(self, "_freed_bytes", tuple(freed_bytes))

    # ------------------------------------------------------------------ dependencies
    def dependency_edges(self) -> np.ndarray:
        """Order constraints between statements, as an ``(m, 2)`` array of statement ids.

        Per buffer, a reader follows the last exclusive access (alloc/free/write), and an
        exclusive access follows the previous exclusive access and every reader since; the
        transitive closure is exactly the "common buffer, one side not a read" relation.
        """
        last_excl: dict[str, int] = {}
        readers: dict[str, list[int]] = {}
        edges: list[tuple[int, int]] = []
        for i, s in enumerate(self.statements):
            excl = {b for b, _ in s.allocs} | set(s.frees) | set(s.writes)
            for b in set(s.reads) - excl:
                if b in last_excl:
                    edges.append((last_excl[b], i))
                readers.setdefault(b, []).append(i)
            for b in excl:
                if b in last_excl:
                    edges.append((last_excl[b], i))
                for r in readers.pop(b, ()):
                    if r != i:
                        edges.append((r, i))
                last_excl[b] = i
        return np.asarray(edges, dtype=np.int64).reshape(-1, 2)

    def to_dag(self) -> SignedDAG:
        """The program's signed DAG: one node per statement, delta = allocs - frees."""
        if self._dag is None:
            delta = [sum(int(z) for _, z in s.allocs) - f for s, f in zip(self.statements, self._freed_bytes)]
            dag = SignedDAG.build([s.name for s in self.statements], delta, self.dependency_edges(),
                                  transient=[int(s.transient) for s in self.statements],
                                  base=sum(int(v) for v in self.inputs.values()), name=self.name)
            object.__setattr__(self, "_dag", dag)
        return self._dag

    def peak(self, order: Sequence[int] | None = None) -> int:
        """Modelled peak of the program, in its own order or in ``order`` (statement ids)."""
        if order is None:
            order = np.arange(len(self.statements))
        return dag_peak(self.to_dag(), order)

    def reorder(self, order: Sequence) -> "Program":
        """The same statements in ``order`` (ids or names), which must keep every dependency."""
        order = list(order)
        if order and isinstance(order[0], str):
            index = {s.name: i for i, s in enumerate(self.statements)}
            try:
                order = [index[n] for n in order]
            except KeyError as exc:
                raise ScheduleError(f"order names unknown statement {exc.args[0]!r}") from None
        from memopt.core.signed_dag import validate_node_order

        validate_node_order(self.to_dag(), order)
        return Program([self.statements[i] for i in order], self.inputs, self.name)


def program_from_graph(graph, order: Sequence[int] | None = None) -> Program:
    """Lower a tensor graph to a statement program (one kernel statement per op, one free per dying tensor).

    Each op statement allocates its outputs and workspace-as-transient, reads its inputs and
    writes its outputs; a ``free`` statement follows the last consumer of every tensor that
    dies. In the given op order (default: the graph's topological order), its peak equals
    :func:`memopt.core.evaluate.peak` of that order.
    """
    from memopt.core.evaluate import validate_order
    from memopt.core.signed_dag import dag_order_from_op_order, graph_to_dag

    if order is None:
        order = graph.topological_order()
    validate_order(graph, order)
    gd = graph_to_dag(graph)
    full = dag_order_from_op_order(gd, np.asarray(order, dtype=np.int64))
    inputs = {graph.tensor_names[t]: int(graph.tensor_size[t])
              for t in np.flatnonzero(graph.tensor_producer < 0)}
    stmts = []
    for v in full.tolist():
        if v < gd.num_ops:
            outs = graph.outputs_of(v)
            stmts.append(Statement(
                graph.op_names[v],
                allocs=tuple((graph.tensor_names[t], int(graph.tensor_size[t])) for t in outs),
                reads=tuple(graph.tensor_names[t] for t in graph.inputs_of(v)),
                writes=tuple(graph.tensor_names[t] for t in outs),
                transient=int(graph.op_workspace[v]),
            ))
        else:
            t = int(gd.release_tensor[v - gd.num_ops])
            stmts.append(Statement(f"free({graph.tensor_names[t]})", frees=(graph.tensor_names[t],)))
    return Program(stmts, inputs=inputs, name=graph.name)
