"""The tensor graph (``docs/design.md``, tensor graph): ops that produce and consume sized tensors.

A :class:`TensorGraph` is immutable and indexed: ops and tensors have dense integer ids,
and every relation is stored as a CSR pair of numpy arrays, so that evaluating an order
of a million ops is a handful of vectorized passes. Names are kept for messages and I/O.

Model
-----
* tensor ``t``: size ``s(t) >= 0`` bytes, at most one producing op, any consumers, flags
  *output* (live at the end) and *resident* (live for the whole run: a constant offset).
* op ``v``: input tensors, output tensors, workspace ``w(v) >= 0`` (held only while ``v``
  runs) and compute cost ``c(v) >= 0``.

Example
-------
>>> g = TensorGraph.build(
...     tensors=[Tensor("x", 4), Tensor("y", 8), Tensor("z", 2, output=True)],
...     ops=[Op("f", ("x",), ("y",)), Op("g", ("y",), ("z",), workspace=1)])
>>> g.num_ops, g.num_tensors
(2, 3)
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np

from memopt.errors import GraphError

# Sums of sizes are kept in int64; refuse graphs whose total could overflow it.
MAX_TOTAL_BYTES = 2**62


@dataclass(frozen=True)
class Tensor:
    """A tensor of a :class:`TensorGraph`.

    Parameters
    ----------
    name : str
    size : int
        Bytes, ``>= 0``.
    output : bool, default False
        A graph output: live at the end.
    resident : bool, default False
        Live for the whole run (weights, caller-owned buffers); only graph inputs may be.

    Examples
    --------
    >>> Tensor("w", 1024, resident=True).size
    1024
    """

    name: str
    size: int
    output: bool = False
    resident: bool = False


@dataclass(frozen=True)
class Op:
    """An op of a :class:`TensorGraph`.

    Parameters
    ----------
    name : str
    inputs : tuple of str
        Tensors it reads.
    outputs : tuple of str
        Tensors it allocates (it is their one producer).
    workspace : int, default 0
        Bytes held only while it runs.
    cost : number, default 0
        Compute cost of one run (what recomputation pays).

    Examples
    --------
    >>> Op("matmul", ("x", "w"), ("y",), workspace=64, cost=3).outputs
    ('y',)
    """

    name: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    workspace: int = 0
    cost: int | float | Fraction = 0


def _csr(rows: np.ndarray, cols: np.ndarray, nrows: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (ptr, idx) of the pairs (rows[i], cols[i]), stable in input order within a row."""
    from memopt import _jit
    from memopt.core._kernels import csr_from_pairs

    return _jit.choose(csr_from_pairs, int(nrows))(np.ascontiguousarray(rows, dtype=np.int64),
                          np.ascontiguousarray(cols, dtype=np.int64), int(nrows))


def unique_sorted(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its overhead)."""
    k = np.sort(keys)
    if k.size:
        k = k[np.concatenate(([True], k[1:] != k[:-1]))]
    return k


def show_value(x) -> str:
    """A short text for a value in a message: Python numbers (never ``np.int64(3)``), and
    no 5000-digit integers."""
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, bool):
        return repr(x)
    if isinstance(x, int):
        if abs(x) < 10**20:
            return str(x)
        if abs(x).bit_length() > 1000:
            return f"an integer of about {int(abs(x).bit_length() * 0.30103) + 1} digits"
        return f"{float(x):.3e}"
    if isinstance(x, float):
        return repr(x)
    text = str(x) if isinstance(x, Fraction) else repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_int_array(values, what: str, names: Sequence[str] | None) -> np.ndarray:
    """int64 array of byte counts; an error names the first item that is not a whole number
    of bytes in ``[0, 2**62)``."""
    def label(k: int) -> str:
        return repr(names[k]) if names is not None else str(k)

    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as exc:
        raise GraphError(f"{what} values are not an array of numbers ({type(exc).__name__})") from None
    if arr.ndim != 1:
        raise GraphError(f"{what} must be a flat list of numbers (got shape {arr.shape})")
    if arr.dtype.kind in "fOU" or arr.dtype.kind == "u" or arr.dtype.kind == "S":
        for k, x in enumerate(arr.tolist()):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise GraphError(f"{what} of {label(k)} is not a number: {show_value(x)}")
            if isinstance(x, float) and not (x == x and abs(x) != float("inf") and x.is_integer()):
                raise GraphError(f"{what} of {label(k)} is not an integer number of bytes: {show_value(x)}")
            if x < 0:
                raise GraphError(f"{what} of {label(k)} is negative: {show_value(x)}")
            if x >= MAX_TOTAL_BYTES:
                raise GraphError(f"{what} of {label(k)} is {show_value(x)} bytes, beyond memopt's exact limit of 2**62")
    elif arr.dtype.kind not in "ib" and arr.size:
        raise GraphError(f"{what} must be integers, got {arr.dtype}")
    arr = arr.astype(np.int64)
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        raise GraphError(f"{what} of {label(int(neg[0]))} is negative: {int(arr[neg[0]])}")
    big = np.flatnonzero(arr >= MAX_TOTAL_BYTES)
    if big.size:
        raise GraphError(f"{what} of {label(int(big[0]))} is {int(arr[big[0]])} bytes, beyond memopt's exact limit of 2**62")
    return arr


def _exact_cost(c, label: str):
    """One compute cost as an exact number (``int``, or ``Fraction`` when not integral), or a
    GraphError naming the op: a number (Python or numpy int, float, Fraction, Decimal), finite,
    in ``[0, 2**62)``, compared exactly (``2**62 - 1`` is accepted, ``2**62`` refused)."""
    if isinstance(c, np.generic):
        c = c.item()
    if isinstance(c, bool) or not isinstance(c, numbers.Number):
        raise GraphError(f"compute cost of op {label} is not a number: {show_value(c)}")
    if isinstance(c, int):
        exact = c
    elif isinstance(c, float):
        if c != c or c in (float("inf"), float("-inf")):
            raise GraphError(f"compute cost of op {label} must be finite, >= 0 and below 2**62, got {show_value(c)}")
        exact = int(c) if c.is_integer() else Fraction(c)
    elif isinstance(c, (numbers.Rational, Decimal)):
        if isinstance(c, Decimal) and (not c.is_finite() or (not c.is_zero() and c.adjusted() > 20)):
            raise GraphError(f"compute cost of op {label} must be finite, >= 0 and below 2**62, got {show_value(c)}")
        if isinstance(c, Decimal) and not c.is_zero() and c.as_tuple().exponent < -300:
            # its exact value would need a denominator of over 300 digits (and long to build)
            raise GraphError(f"compute cost of op {label} has more than 300 decimal places: {show_value(c)}")
        exact = Fraction(c)
        exact = int(exact) if exact.denominator == 1 else exact
    else:
        raise GraphError(f"compute cost of op {label} is not a real number: {show_value(c)}")
    if not 0 <= exact < MAX_TOTAL_BYTES:
        raise GraphError(f"compute cost of op {label} must be finite, >= 0 and below 2**62, got {show_value(exact)}")
    return exact


def _check_costs(values, names: Sequence[str] | None) -> tuple[np.ndarray, tuple | None]:
    """``(float64 costs, exact costs)``; an error names the op. The float64 array guides the
    kernels' searches; the exact tuple (``int`` or ``Fraction`` per op) is what every reported
    number and every bound is computed from. ``None`` for the exact part means the float64
    array is exact (a float64 array was given: each float is its own exact binary value)."""
    def label(k: int) -> str:
        return repr(names[k]) if names else repr(k)

    arr = values if isinstance(values, np.ndarray) else None
    if arr is None:
        # fast paths for plain lists of floats or of ints (a million ops in well under a second)
        try:
            fast = np.asarray(values)
        except (ValueError, TypeError, OverflowError):
            fast = None
        if fast is not None and fast.ndim == 1 and (fast.dtype.kind in "iu" or (
                fast.dtype.kind == "f" and not any(isinstance(x, (int, np.integer)) and x > 2**53 for x in values))):
            arr = fast  # floats given as floats, or ints: nothing lost on the way
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "iu" and arr.size:
        if int(arr.min()) >= 0 and int(arr.max()) < MAX_TOTAL_BYTES:
            cost = arr.astype(np.float64)
            # float64 holds every integer up to 2**53 exactly; larger ones keep their exact value
            return cost, (None if int(arr.max()) <= 2**53 else tuple(arr.tolist()))
    if arr is not None and arr.ndim == 1 and arr.dtype.kind == "f":
        cost = np.asarray(arr, dtype=np.float64)
        bad = ~np.isfinite(cost) | (cost < 0) | (cost >= MAX_TOTAL_BYTES)
        if cost.size and bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise GraphError(f"compute cost of op {label(k)} must be finite, >= 0 and below "
                             f"2**62, got {show_value(float(cost[k]))}")
        return cost, None
    if arr is not None and arr.ndim != 1:
        raise GraphError("op_cost must be a flat list of numbers")
    try:
        items = arr.tolist() if arr is not None else list(values)
    except TypeError:
        raise GraphError("op_cost must be a flat list of numbers") from None
    exact = tuple(_exact_cost(c, label(k)) for k, c in enumerate(items))
    return np.array([float(c) for c in exact], dtype=np.float64), exact


def exact_total(arr: np.ndarray) -> int:
    """Sum of non-negative int64 values without wrap-around (Python ints when it could overflow)."""
    if arr.size == 0:
        return 0
    if int(arr.max()) * arr.size < MAX_TOTAL_BYTES:
        return int(arr.sum())
    return sum(arr.tolist())


@dataclass(frozen=True, eq=False)
class TensorGraph:
    """Validated, indexed tensor graph (model: module docstring). Immutable.

    Build with :meth:`build` (records), :meth:`from_arrays` (flat arrays, for large graphs)
    or :func:`memopt.from_networkx`; load with :func:`memopt.load_graph`.

    Attributes
    ----------
    op_names, tensor_names : tuple of str
    tensor_size : numpy.ndarray
        int64 bytes per tensor.
    tensor_producer : numpy.ndarray
        Producing op per tensor, ``-1`` for graph inputs.
    tensor_output, tensor_resident : numpy.ndarray
        bool flags per tensor.
    op_workspace, op_cost : numpy.ndarray
        Per op.
    name : str

    Examples
    --------
    >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
    >>> g.num_ops, g.tensor_producer.tolist()
    (1, [-1, 0])
    """

    op_names: tuple[str, ...]
    tensor_names: tuple[str, ...]
    tensor_size: np.ndarray          # int64 [T]
    tensor_producer: np.ndarray      # int64 [T], -1 for graph inputs
    tensor_output: np.ndarray        # bool [T]
    tensor_resident: np.ndarray      # bool [T]
    op_workspace: np.ndarray         # int64 [N]
    op_cost: np.ndarray              # float64 [N]: guides searches; exact values in op_cost_exact
    op_in_ptr: np.ndarray            # CSR op -> input tensors
    op_in_idx: np.ndarray
    op_out_ptr: np.ndarray           # CSR op -> output tensors
    op_out_idx: np.ndarray
    cons_ptr: np.ndarray             # CSR tensor -> consuming ops
    cons_idx: np.ndarray
    name: str = ""
    _cache: dict = field(default_factory=dict, repr=False, compare=False)
    #: the exact cost of each op (``int`` or ``Fraction``); ``None``: ``op_cost`` is exact
    _exact_cost: tuple | None = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        # pickled without the cache: it holds only what the fields determine (indexes, compiled
        # DAGs, some of which do not pickle), and is rebuilt on demand
        return {**self.__dict__, "_cache": {}}

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, tensors: Iterable[Tensor], ops: Iterable[Op], name: str = "") -> "TensorGraph":
        """Build from :class:`Tensor` and :class:`Op` records, validating every reference.

        Parameters
        ----------
        tensors : iterable of Tensor
        ops : iterable of Op
        name : str, optional

        Returns
        -------
        TensorGraph
            Ops and tensors numbered in the order given.

        Raises
        ------
        GraphError
            A name declared twice, an unknown tensor, two producers, a cycle, a negative or
            fractional size; the message names the item.

        Examples
        --------
        >>> TensorGraph.build([Tensor("y", 2)], [Op("f", ("y",), ("y",))])
        Traceback (most recent call last):
        ...
        memopt.errors.GraphError: cycle: op 'f' reads its own output 'y'
        """
        tensors = list(tensors)
        ops = list(ops)
        t_index: dict[str, int] = {}
        for i, t in enumerate(tensors):
            if t.name in t_index:
                raise GraphError(f"tensor {t.name!r} is declared twice")
            t_index[t.name] = i
        o_index: dict[str, int] = {}
        for i, o in enumerate(ops):
            if o.name in o_index:
                raise GraphError(f"op {o.name!r} is declared twice")
            o_index[o.name] = i
        producer = np.full(len(tensors), -1, dtype=np.int64)
        in_rows, in_cols, out_rows, out_cols = [], [], [], []
        for i, o in enumerate(ops):
            seen_in: set[str] = set()
            for tn in o.inputs:
                if tn not in t_index:
                    raise GraphError(f"op {o.name!r} reads unknown tensor {tn!r}")
                if tn in seen_in:
                    continue  # reading a tensor twice is one dependency
                seen_in.add(tn)
                in_rows.append(i)
                in_cols.append(t_index[tn])
            for tn in o.outputs:
                if tn not in t_index:
                    raise GraphError(f"op {o.name!r} writes unknown tensor {tn!r}")
                j = t_index[tn]
                if producer[j] >= 0:
                    other = ops[int(producer[j])].name
                    if other == o.name:
                        raise GraphError(f"op {o.name!r} lists output tensor {tn!r} twice")
                    raise GraphError(f"tensor {tn!r} has two producers: {other!r} and {o.name!r}")
                if tn in seen_in:
                    raise GraphError(f"cycle: op {o.name!r} reads its own output {tn!r}")
                producer[j] = i
                out_rows.append(i)
                out_cols.append(j)
        return cls.from_arrays(
            tensor_size=[t.size for t in tensors],
            tensor_producer=producer,
            op_inputs=(np.array(in_rows, np.int64), np.array(in_cols, np.int64)),
            tensor_output=[t.output for t in tensors],
            tensor_resident=[t.resident for t in tensors],
            op_workspace=[o.workspace for o in ops],
            op_cost=[o.cost for o in ops],
            op_names=[o.name for o in ops],
            tensor_names=[t.name for t in tensors],
            name=name,
        )

    @classmethod
    def from_arrays(
        cls,
        *,
        tensor_size,
        tensor_producer,
        op_inputs: tuple,
        num_ops: int | None = None,
        tensor_output=None,
        tensor_resident=None,
        op_workspace=None,
        op_cost=None,
        op_names: Sequence[str] | None = None,
        tensor_names: Sequence[str] | None = None,
        name: str = "",
        check_acyclic: bool = True,
    ) -> "TensorGraph":
        """Build from flat arrays (the fast path for large graphs).

        ``op_inputs`` is a pair ``(op_ids, tensor_ids)`` listing every (consumer, tensor)
        dependency; ``tensor_producer[t]`` is the producing op or -1 for a graph input.
        """
        if op_names is not None:
            num_ops = len(op_names)
        if num_ops is None:
            raise GraphError("from_arrays needs num_ops or op_names")
        tnames = list(tensor_names) if tensor_names is not None else None
        onames = list(op_names) if op_names is not None else None
        size = _check_int_array(tensor_size, "size", tnames)
        T = size.shape[0]
        producer = np.asarray(tensor_producer, dtype=np.int64)
        if producer.shape != (T,):
            raise GraphError("tensor_producer must have one entry per tensor")
        bad = np.flatnonzero((producer < -1) | (producer >= num_ops))
        if bad.size:
            t = int(bad[0])
            raise GraphError(f"tensor {(tnames[t] if tnames else t)!r} names unknown producer op {int(producer[t])}")
        in_ops = np.asarray(op_inputs[0], dtype=np.int64)
        in_ts = np.asarray(op_inputs[1], dtype=np.int64)
        if in_ops.shape != in_ts.shape:
            raise GraphError("op_inputs must be two arrays of equal length")
        if in_ops.size and (in_ops.min() < 0 or in_ops.max() >= num_ops):
            raise GraphError("op_inputs names an op id out of range")
        if in_ts.size and (in_ts.min() < 0 or in_ts.max() >= T):
            raise GraphError("op_inputs names a tensor id out of range")
        out = np.zeros(T, bool) if tensor_output is None else np.asarray(tensor_output, dtype=bool)
        res = np.zeros(T, bool) if tensor_resident is None else np.asarray(tensor_resident, dtype=bool)
        ws = np.zeros(num_ops, np.int64) if op_workspace is None else _check_int_array(op_workspace, "workspace", onames)
        cost, exact_cost = (np.zeros(num_ops, np.float64), None) if op_cost is None else _check_costs(op_cost, onames)
        if ws.shape != (num_ops,) or cost.shape != (num_ops,):
            raise GraphError("op_workspace and op_cost must have one entry per op")
        if out.shape != (T,) or res.shape != (T,):
            raise GraphError("tensor_output and tensor_resident must have one entry per tensor")
        total = exact_total(size) + int(ws.max(initial=0))
        if total >= MAX_TOTAL_BYTES:
            raise GraphError(f"the tensor sizes add up to {show_value(exact_total(size))} bytes (plus the largest "
                             f"workspace, {int(ws.max(initial=0))}): beyond memopt's exact limit of 2**62 "
                             "for a graph's total")
        bad = np.flatnonzero(res & (producer >= 0))
        if bad.size:
            t = int(bad[0])
            raise GraphError(f"tensor {(tnames[t] if tnames else t)!r} is resident but has a producer; "
                             "resident tensors are graph inputs (weights, caller-owned buffers)")
        # a tensor read by its own producer is a self-loop
        self_loop = np.flatnonzero(producer[in_ts] == in_ops)
        if self_loop.size:
            k = int(self_loop[0])
            o, t = int(in_ops[k]), int(in_ts[k])
            raise GraphError(
                f"cycle: op {(onames[o] if onames else o)!r} reads its own output {(tnames[t] if tnames else t)!r}")
        produced = np.flatnonzero(producer >= 0)
        op_out_ptr, op_out_idx = _csr(producer[produced], produced, num_ops)
        op_in_ptr, op_in_idx = _csr(in_ops, in_ts, num_ops)
        # an op reading a tensor twice is one dependency
        from memopt import _jit
        from memopt.core._kernels import dedupe_csr_rows

        op_in_ptr, op_in_idx = _jit.choose(dedupe_csr_rows, num_ops)(op_in_ptr, op_in_idx, T)
        cons_ptr, cons_idx = _csr(in_ts, in_ops, T) if op_in_idx.shape[0] == in_ts.shape[0] else \
            _csr(op_in_idx, np.repeat(np.arange(num_ops, dtype=np.int64), np.diff(op_in_ptr)), T)
        g = cls(
            op_names=tuple(onames) if onames is not None else _LazyNames("op", num_ops),
            tensor_names=tuple(tnames) if tnames is not None else _LazyNames("t", T),
            tensor_size=size, tensor_producer=producer, tensor_output=out, tensor_resident=res,
            op_workspace=ws, op_cost=cost, op_in_ptr=op_in_ptr, op_in_idx=op_in_idx,
            op_out_ptr=op_out_ptr, op_out_idx=op_out_idx, cons_ptr=cons_ptr, cons_idx=cons_idx,
            name=name, _exact_cost=exact_cost,
        )
        for arr in (size, producer, out, res, ws, cost, op_in_ptr, op_in_idx, op_out_ptr, op_out_idx, cons_ptr, cons_idx):
            arr.setflags(write=False)
        if check_acyclic:
            g.topological_order()  # raises GraphError naming a cycle
        return g

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def num_ops(self) -> int:
        return len(self.op_workspace)

    @property
    def num_tensors(self) -> int:
        return len(self.tensor_size)

    @property
    def op_index(self) -> dict[str, int]:
        if "op_index" not in self._cache:
            self._cache["op_index"] = {n: i for i, n in enumerate(self.op_names)}
        return self._cache["op_index"]

    @property
    def tensor_index(self) -> dict[str, int]:
        if "tensor_index" not in self._cache:
            self._cache["tensor_index"] = {n: i for i, n in enumerate(self.tensor_names)}
        return self._cache["tensor_index"]

    def inputs_of(self, v: int) -> np.ndarray:
        return self.op_in_idx[self.op_in_ptr[v]:self.op_in_ptr[v + 1]]

    def outputs_of(self, v: int) -> np.ndarray:
        return self.op_out_idx[self.op_out_ptr[v]:self.op_out_ptr[v + 1]]

    def consumers_of(self, t: int) -> np.ndarray:
        return self.cons_idx[self.cons_ptr[t]:self.cons_ptr[t + 1]]

    @property
    def op_cost_exact(self) -> tuple:
        """Each op's compute cost exactly: an ``int``, or a ``Fraction`` when not integral
        (``0.1`` read from a file is ``Fraction(1, 10)``; a cost given as a Python float is
        that float's exact binary value). Every extra cost and cost bound is summed from these."""
        if self._exact_cost is None:
            object.__setattr__(self, "_exact_cost", tuple(
                int(c) if c.is_integer() else Fraction(c) for c in self.op_cost.tolist()))
        return self._exact_cost

    @property
    def is_input(self) -> np.ndarray:
        return self.tensor_producer < 0

    @property
    def resident_bytes(self) -> int:
        """Bytes held for the whole run (resident tensors): a constant offset of every schedule."""
        return int(self.tensor_size[self.tensor_resident].sum())

    @property
    def op_output_bytes(self) -> np.ndarray:
        """Non-resident bytes each op allocates for its outputs."""
        if "op_output_bytes" not in self._cache:
            sizes = np.where(self.tensor_resident, 0, self.tensor_size)
            prod = self.tensor_producer
            m = prod >= 0
            self._cache["op_output_bytes"] = _int_bincount(prod[m], sizes[m], self.num_ops)
        return self._cache["op_output_bytes"]

    # ------------------------------------------------------------------ op-level DAG
    def op_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Deduplicated op -> op data-dependency edges (producer, consumer)."""
        if "op_edges" not in self._cache:
            cons_t = np.repeat(np.arange(self.num_tensors, dtype=np.int64), np.diff(self.cons_ptr))
            src = self.tensor_producer[cons_t]
            dst = self.cons_idx
            m = src >= 0
            src, dst = src[m], dst[m]
            if src.size:
                key = unique_sorted(src * self.num_ops + dst)
                src, dst = key // self.num_ops, key % self.num_ops
            self._cache["op_edges"] = (src, dst)
        return self._cache["op_edges"]

    def op_successors(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (ptr, idx) of op successors."""
        if "op_succ" not in self._cache:
            s, d = self.op_edges()
            self._cache["op_succ"] = _csr(s, d, self.num_ops)
        return self._cache["op_succ"]

    def op_predecessors(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (ptr, idx) of op predecessors."""
        if "op_pred" not in self._cache:
            s, d = self.op_edges()
            self._cache["op_pred"] = _csr(d, s, self.num_ops)
        return self._cache["op_pred"]

    def topological_order(self) -> np.ndarray:
        """Kahn's order (smallest index first among ready ops); raises GraphError on a cycle."""
        if "topo" not in self._cache:
            from memopt import _jit
            from memopt.core._kernels import kahn_order

            ptr, idx = self.op_successors()
            s, d = self.op_edges()
            indeg = np.bincount(d, minlength=self.num_ops).astype(np.int64)
            order = _jit.choose(kahn_order, self.num_ops)(_jit.readonly(ptr), _jit.readonly(idx), indeg)
            if order.shape[0] < self.num_ops:
                pptr, pidx = self.op_predecessors()
                cycle = _find_cycle(pptr, pidx, order, self.num_ops)
                raise GraphError("cycle among ops: " + " <- ".join(repr(self.op_names[i]) for i in cycle))
            order.setflags(write=False)
            self._cache["topo"] = order
        return self._cache["topo"]

    def to_networkx(self):
        """Op-level ``networkx.DiGraph`` (nodes are op names) for inspection and interop.

        Node attributes ``output_bytes``, ``outputs`` (``{tensor: bytes}``), ``reads`` (graph
        inputs read), ``workspace``, ``cost``; edge attribute ``tensors`` (what flows along
        it); graph attributes ``inputs``, ``graph_outputs``, ``resident``, ``name``: the
        attributes :func:`memopt.from_networkx` reads (:mod:`memopt.core.nxgraph`), so that
        ``from_networkx(g.to_networkx())`` rebuilds ``g``.

        Returns
        -------
        networkx.DiGraph

        Examples
        --------
        >>> g = TensorGraph.build([Tensor("x", 4), Tensor("y", 2, output=True)], [Op("f", ("x",), ("y",))])
        >>> G = g.to_networkx()
        >>> dict(G.nodes["f"]) == {"output_bytes": 2, "outputs": {"y": 2}, "reads": ["x"], "workspace": 0,
        ...                        "cost": 0}
        True
        >>> G.graph["inputs"], G.graph["graph_outputs"]
        ({'x': 4}, ['y'])
        """
        import networkx as nx

        tn, size = self.tensor_names, self.tensor_size.tolist()
        graph_inputs = np.flatnonzero(self.tensor_producer < 0).tolist()
        G = nx.DiGraph(name=self.name, inputs={tn[t]: size[t] for t in graph_inputs},
                       graph_outputs=[tn[t] for t in np.flatnonzero(self.tensor_output).tolist()],
                       resident=[tn[t] for t in np.flatnonzero(self.tensor_resident).tolist()])
        producer = self.tensor_producer.tolist()
        costs = list(self.op_cost_exact)
        carried: dict[tuple[int, int], list[str]] = {}
        for i, n in enumerate(self.op_names):
            reads = []
            for t in self.op_in_idx[self.op_in_ptr[i]:self.op_in_ptr[i + 1]].tolist():
                if producer[t] < 0:
                    reads.append(tn[t])
                else:
                    carried.setdefault((producer[t], i), []).append(tn[t])
            outs = self.op_out_idx[self.op_out_ptr[i]:self.op_out_ptr[i + 1]].tolist()
            G.add_node(n, output_bytes=int(self.op_output_bytes[i]), outputs={tn[t]: size[t] for t in outs},
                       reads=reads, workspace=int(self.op_workspace[i]), cost=costs[i])
        G.add_edges_from((self.op_names[a], self.op_names[b], {"tensors": ts}) for (a, b), ts in carried.items())
        return G

    def __repr__(self) -> str:
        return f"TensorGraph({self.name!r}, ops={self.num_ops}, tensors={self.num_tensors})"


def _int_bincount(idx: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Exact integer bincount (numpy's weighted bincount goes through float64)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, idx, weights.astype(np.int64))
    return out


def _find_cycle(pred_ptr: np.ndarray, pred_idx: np.ndarray, partial_order: np.ndarray, n: int) -> list[int]:
    """Ops of one cycle (listed against the edges), among the ops Kahn's algorithm left.

    Every op Kahn's algorithm could not order has a predecessor it could not order either,
    so walking predecessors inside that remainder must close a cycle.
    """
    left = np.ones(n, bool)
    left[partial_order] = False
    v = int(np.flatnonzero(left)[0])
    seen: dict[int, int] = {}
    path: list[int] = []
    while v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = next(int(u) for u in pred_idx[pred_ptr[v]:pred_ptr[v + 1]] if left[u])
    return path[seen[v]:] + [v]


class _LazyNames(tuple):
    """Synthetic names ``prefix0, prefix1, ...`` for graphs built from bare arrays."""

    def __new__(cls, prefix: str, n: int):
        obj = super().__new__(cls)
        obj._prefix = prefix
        obj._n = n
        return obj

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(f"{self._prefix}{k}" for k in range(*i.indices(self._n)))
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return f"{self._prefix}{i}"

    def __iter__(self):
        return (f"{self._prefix}{k}" for k in range(self._n))

    def __eq__(self, other):
        return isinstance(other, (tuple, list)) and len(other) == self._n and all(a == b for a, b in zip(self, other))

    def __hash__(self):
        return hash(tuple(self))
