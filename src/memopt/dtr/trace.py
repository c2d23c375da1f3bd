"""Parser for DTR training logs, turning them into simrd's replay schedule.

A DTR log (Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021; logs
published with ``uwsampl/dtr-prototype``) is a JSON-lines file, one record per line::

    {"INSTRUCTION": "CONSTANT", "NAME": n}            a constant (weight/input) named n
    {"INSTRUCTION": "MEMORY", "NAME": n, "MEMORY": b}  size in bytes of the preceding result
    {"INSTRUCTION": "CALL", "NAME": op, "ARGS": [..], "RESULT": [..], "TIME": c}
    {"INSTRUCTION": "ALIAS", "NAME": n, "ALIAS": i}    result n aliases argument i (-1: none)
    {"INSTRUCTION": "MUTATE", "NAME": op, "ARGS": [..], "MUTATE": [..], "TIME": c}
    {"INSTRUCTION": "COPY", "DST": d, "SRC": s}        d is a new reference to s
    {"INSTRUCTION": "COPY_FROM", "DST": d, "SRC": s}   d is rebound to s (old d released)
    {"INSTRUCTION": "RELEASE", "NAME": n}              drop one reference to n
    {"INSTRUCTION": "ANNOTATE", "ANNOTATION": a}       START / BACKWARD markers

This module reproduces exactly how simrd turns a log into a replay
(``simrd/parse/parse.py: parse_file`` and ``simrd/parse/graph.py: Graph.get_closure``):

* with ``start`` every record up to and including the ``ANNOTATE START`` marker is
  skipped (simrd's experiments pass ``has_start`` from ``manifest.json``, true for every
  public log); the skipped records must still be well-formed, as simrd parses them;
* ``CONSTANT`` + ``MEMORY`` becomes a zero-cost operator ``constant`` followed by a *pin*;
* each ``CALL`` is followed by one ``MEMORY``/``ALIAS`` pair per result; an aliasing
  result has size 0 and shares the storage of the aliased argument;
* ``MUTATE`` becomes a new operator whose results (named ``arg + '$'``) have the full
  storage size of the mutated arguments, followed by a release of the old tensors;
* ``COPY`` is a *get* (one more external reference), ``COPY_FROM`` a release + get,
  ``RELEASE`` of a name simrd never saw is ignored (``ignore_undefined_release=True``);
* at the end every tensor still referenced by some name is rematerialized if needed and
  pinned (simrd's ``OutputCondition.REMATERIALIZE``), in name-insertion order.

The result is a :class:`Trace`: flat ``numpy`` arrays (operators, runtime tensors,
storages, the schedule) that the simulator consumes directly. Everything that does not
depend on the budget (tensor ids, storages, parent/child adjacency) is computed here
once, so one parsed trace serves any number of replays; it pickles cheaply.

Malformed input raises :class:`memopt.errors.FormatError` naming the 1-based line number
and the problem. simrd would crash (assertion, ``KeyError``) on the same inputs; a
truncated final line is an error, never dropped silently.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from memopt.errors import FormatError
from memopt.io import _json as _json_hooks

__all__ = ["Trace", "load_trace", "parse_lines", "SCHED_COMPUTE", "SCHED_GET", "SCHED_PIN",
           "SCHED_RELEASE"]

# Schedule command kinds (simrd's GCompute, GGet(pin=False), GGet(pin=True), GRelease).
SCHED_COMPUTE = 0
SCHED_GET = 1
SCHED_PIN = 2
SCHED_RELEASE = 3

_FIELDS = {
    "CONSTANT": ("NAME",),
    "MEMORY": ("NAME", "MEMORY"),
    "COPY": ("DST", "SRC"),
    "RELEASE": ("NAME",),
    "CALL": ("RESULT", "NAME", "ARGS", "TIME"),
    "MUTATE": ("NAME", "ARGS", "MUTATE", "TIME"),
    "ANNOTATE": ("ANNOTATION",),
    "COPY_FROM": ("DST", "SRC"),
    "ALIAS": ("NAME", "ALIAS"),
}

CONST_OP_NAME = "constant"


@dataclass(eq=False)
class Trace:
    """A parsed DTR log in simrd's replay form (flat arrays, budget independent).

    Operators ``o``: ``op_cost[o]`` (simrd's ``int(TIME)``), outputs are the runtime
    tensors ``op_out_start[o] .. op_out_start[o] + op_nout[o] - 1``, arguments are
    ``op_args[op_arg_start[o]:op_arg_start[o + 1]]`` (tensor ids, repeats kept),
    ``op_total_size[o]`` the bytes allocated when it runs.

    Runtime tensors ``t`` are numbered in creation order, which is exactly simrd's
    ``Tensor.id``: ``t_op``, ``t_size`` (0 for aliases), ``t_storage``; ``t_children``
    lists, in creation order, the outputs of every operator consuming ``t`` (once per
    occurrence in its argument list, as simrd's ``children.extend``).

    Storages ``s`` are numbered by creation; ``s_root[s]`` is the id of the tensor that
    created it (simrd's ``root_id``), ``s_size[s]`` its bytes, ``s_tensors`` its tensors
    in creation order (root first, then aliases).

    The schedule is ``sched_kind``/``sched_arg`` (an operator for compute, a tensor
    otherwise) and ``sched_record``: the 0-based index of the log record that produced
    the command (``n_records`` for the final output pins).
    """

    path: str
    n_records: int
    start_record: int
    op_cost: np.ndarray
    op_out_start: np.ndarray
    op_nout: np.ndarray
    op_arg_start: np.ndarray
    op_args: np.ndarray
    op_total_size: np.ndarray
    op_is_const: np.ndarray
    op_record: np.ndarray
    op_names: list[str]
    t_op: np.ndarray
    t_index: np.ndarray
    t_size: np.ndarray
    t_storage: np.ndarray
    t_is_alias: np.ndarray
    t_child_start: np.ndarray
    t_children: np.ndarray
    t_names: list[str]
    s_size: np.ndarray
    s_root: np.ndarray
    s_tensor_start: np.ndarray
    s_tensors: np.ndarray
    s_is_const: np.ndarray
    sched_kind: np.ndarray
    sched_arg: np.ndarray
    sched_record: np.ndarray
    name_storages: dict[str, tuple[int, ...]] = field(repr=False)
    _baseline: object = field(default=None, repr=False)
    _adjacency: object = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def n_ops(self) -> int:
        return len(self.op_cost)

    @property
    def n_tensors(self) -> int:
        return len(self.t_op)

    @property
    def n_storages(self) -> int:
        return len(self.s_size)

    def op_label(self, op: int) -> str:
        """simrd's unique operator name, ``NAME/<k>`` (``k`` = creation counter)."""
        return self.op_names[op]

    def storages_of(self, names) -> frozenset[int]:
        """Storage ids that the given tensor names were ever bound to (trace names, or
        simrd's runtime names such as ``x12$`` for the result of a ``MUTATE``)."""
        out: set[int] = set()
        for n in names:
            if n not in self.name_storages:
                raise FormatError(f"{self.name}: unknown tensor name {n!r}")
            out.update(self.name_storages[n])
        return frozenset(out)

    def storage_adjacency(self) -> tuple[np.ndarray, np.ndarray]:
        """Storage-level graph for region traversals, both directions, deduplicated.

        Returns ``(start, edge)``: the edges of storage ``s`` in direction ``d``
        (0 = towards children, 1 = towards parents) are ``edge[start[d, s]:start[d, s+1]]``,
        rows ``(neighbour storage, stamp)`` sorted by ``stamp``, the id of the later of the
        two tensors the edge joins: it exists in simrd's runtime once ``stamp`` tensors
        have been created. Self-loops (aliases) are left out: simrd's traversals skip them.
        """
        if self._adjacency is None:
            self._adjacency = _storage_adjacency(self)
        return self._adjacency


def _storage_adjacency(tr: Trace):
    n_s = tr.n_storages
    nargs = np.diff(tr.op_arg_start)
    # tensor t -> each argument p of its operator: parent edge, created with t
    child_t = np.repeat(np.arange(tr.n_tensors), nargs[tr.t_op])
    parent_t = np.concatenate([tr.op_args[tr.op_arg_start[o]:tr.op_arg_start[o + 1]]
                               for o in tr.t_op]) if tr.n_tensors else np.zeros(0, np.int64)
    parent_t = parent_t.astype(np.int64)
    src_s = tr.t_storage[parent_t]
    dst_s = tr.t_storage[child_t]
    keep = src_s != dst_s
    src_s, dst_s, stamp = src_s[keep], dst_s[keep], child_t[keep]
    starts, nbrs, stamps = [], [], []
    offset = 0
    for frm, to in ((src_s, dst_s), (dst_s, src_s)):
        order = np.lexsort((stamp, to, frm))         # by storage, neighbour, stamp
        f, t, st = frm[order], to[order], stamp[order]
        first = np.ones(len(f), dtype=bool)          # earliest edge per (storage, neighbour)
        first[1:] = (f[1:] != f[:-1]) | (t[1:] != t[:-1])
        f, t, st = f[first], t[first], st[first]
        order = np.lexsort((st, f))
        f, t, st = f[order], t[order], st[order]
        counts = np.bincount(f, minlength=n_s)
        start = np.zeros(n_s + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        starts.append(start + offset)
        nbrs.append(t)
        stamps.append(st)
        offset += len(t)
    # one (neighbour, stamp) row per edge, int32: the traversal reads both together
    edges = np.stack([np.concatenate(nbrs), np.concatenate(stamps)], axis=1)
    return np.stack(starts).astype(np.int64), np.ascontiguousarray(edges, dtype=np.int32)


def _err(path: str, lineno: int, msg: str) -> FormatError:
    return FormatError(f"{path}: line {lineno}: {msg}")


#: Limits of exact int64 replay arithmetic (see docs/formats.md, "Limits"): every MEMORY and
#: TIME is below MAX_VALUE, the sizes of all storages add up to less than MAX_TOTAL_BYTES (so
#: memory plus one operator's outputs never exceeds int64), and the TIME of every operator,
#: counted once per result, adds up to less than MAX_TOTAL_TIME (a heuristic score adds up
#: to three such sums).
MAX_VALUE = 2**62
MAX_TOTAL_BYTES = 2**62
MAX_TOTAL_TIME = 2**60

_DECODER = json.JSONDecoder(parse_int=_json_hooks._parse_int, parse_float=_json_hooks._parse_float,
                            parse_constant=_json_hooks._parse_constant)


def _as_int(path, lineno, rec, key, *, minimum=None):
    """simrd's ``int(value)`` (JSON numbers or decimal strings), exactly: a fractional,
    non-finite or out-of-range value is refused instead of truncated or wrapped."""
    value = rec[key]
    instr = rec["INSTRUCTION"]
    shown = _json_hooks.show_number(value)
    if isinstance(value, str) and len(value.strip()) > 24:
        raise _err(path, lineno, f"{instr} field {key} is {shown}, beyond memopt's exact limit "
                                 "of 2**62")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise _err(path, lineno, f"{instr} field {key} is not an integer: {shown}")
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise _err(path, lineno, f"{instr} field {key} is not an integer: {shown}") from None
    if minimum is not None and number < minimum:
        what = "negative size" if key == "MEMORY" else f"{key} below {minimum}"
        raise _err(path, lineno, f"{instr} {what}: {_json_hooks.show_number(number)}")
    if number >= MAX_VALUE:
        raise _err(path, lineno, f"{instr} field {key} is {_json_hooks.show_number(number)}, beyond "
                                 "memopt's exact limit of 2**62")
    return number


def _check_record(path: str, lineno: int, line: str) -> dict:
    """Decode and shape-check one record (what simrd's ``parse`` would access)."""
    rec = _json_hooks.decode_record(path, lineno, line, _DECODER)
    if "INSTRUCTION" not in rec:
        raise _err(path, lineno, "missing field INSTRUCTION")
    instr = rec["INSTRUCTION"]
    if not isinstance(instr, str) or instr not in _FIELDS:
        raise _err(path, lineno, f"unknown instruction {_json_hooks.show_number(instr)}")
    for key in _FIELDS[instr]:
        if key not in rec:
            raise _err(path, lineno, f"{instr} record lacks field {key}")
    for key in ("RESULT", "ARGS", "MUTATE"):
        if key in _FIELDS[instr] and not isinstance(rec[key], list):
            raise _err(path, lineno, f"{instr} field {key} is not a list")
    for key in ("ARGS",):
        if key in _FIELDS[instr] and not all(isinstance(a, str) for a in rec[key]):
            raise _err(path, lineno, f"{instr} field {key} must list tensor names (strings)")
    for key in ("NAME", "DST", "SRC"):
        if key in _FIELDS[instr] and not isinstance(rec[key], str):
            raise _err(path, lineno, f"{instr} field {key} is not a string")
    return rec


def load_trace(path, *, start: bool | None = None) -> Trace:
    """Parse the DTR log at ``path`` into simrd's replay schedule (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        A JSON-lines DTR log.
    start : bool, optional
        Skip everything up to the ``ANNOTATE START`` record, as simrd does with
        ``has_start``; ``None`` (default) skips iff the log contains that marker (true for all
        eight public logs, whose ``manifest.json`` says ``has_start: true``).

    Returns
    -------
    Trace

    Raises
    ------
    FormatError
        A missing file or a malformed record, naming the 1-based line.

    Examples
    --------
    >>> import json, os, tempfile
    >>> records = [{"INSTRUCTION": "CONSTANT", "NAME": "x"}, {"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": 4},
    ...            {"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["x"], "RESULT": ["y"], "TIME": 3},
    ...            {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": 8},
    ...            {"INSTRUCTION": "ALIAS", "NAME": "y", "ALIAS": -1}]
    >>> path = os.path.join(tempfile.mkdtemp(), "log.jsonl")
    >>> with open(path, "w") as f:
    ...     f.writelines(json.dumps(r) + chr(10) for r in records)
    >>> from memopt.dtr import baseline
    >>> baseline(load_trace(path))
    Baseline(peak=12, compute=3, const_memory=4)
    """
    try:
        path = os.fspath(path)
    except TypeError:
        raise FormatError(f"a trace path must be a string or a path, got {type(path).__name__}") from None
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except FileNotFoundError:
        raise FormatError(f"{path}: cannot read (no such file)") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    return parse_lines(text.splitlines(), path=path, start=start)


def parse_lines(lines, *, path: str = "<trace>", start: bool | None = None) -> Trace:
    """Parse an iterable of log lines (without or with newlines); see :func:`load_trace`."""
    lines = [ln.rstrip("\r\n") for ln in lines]
    records = [_check_record(path, i + 1, ln) for i, ln in enumerate(lines)]
    n = len(records)
    if n == 0:
        raise FormatError(f"{path}: empty log (no records)")

    pos = 0
    has_start = any(r["INSTRUCTION"] == "ANNOTATE" and r["ANNOTATION"] == "START"
                    for r in records)
    if start is None:
        start = has_start
    if start:
        if not has_start:
            raise FormatError(f"{path}: no ANNOTATE START record (start=True)")
        while not (records[pos]["INSTRUCTION"] == "ANNOTATE"
                   and records[pos]["ANNOTATION"] == "START"):
            pos += 1
        pos += 1
    start_record = pos

    builder = _Builder(path)
    while pos < n:
        rec = records[pos]
        lineno = pos + 1
        instr = rec["INSTRUCTION"]
        if instr == "CONSTANT":
            if pos + 1 >= n:
                raise _err(path, lineno, f"CONSTANT {rec['NAME']!r} is not followed by its "
                                         "MEMORY record (file ends; truncated log?)")
            mem = records[pos + 1]
            if mem["INSTRUCTION"] != "MEMORY" or mem["NAME"] != rec["NAME"]:
                raise _err(path, lineno + 1, f"expected MEMORY of constant {rec['NAME']!r}, "
                                             f"found {mem['INSTRUCTION']} "
                                             f"{mem.get('NAME', '')!r}")
            size = _as_int(path, lineno + 1, mem, "MEMORY", minimum=0)
            builder.constant(pos, lineno, rec["NAME"], size)
            pos += 2
        elif instr == "CALL":
            results = rec["RESULT"]
            cnt = len(results)
            if cnt == 0:
                raise _err(path, lineno, f"CALL {rec['NAME']!r} has no RESULT (simrd cannot "
                                         "replay an operator without outputs)")
            if pos + 2 * cnt >= n:
                raise _err(path, lineno, f"CALL {rec['NAME']!r} expects {cnt} MEMORY/ALIAS "
                                         "record pairs but the file ends (truncated log?)")
            sizes, aliases = [], []
            for k in range(cnt):
                m, a = records[pos + 1 + 2 * k], records[pos + 2 + 2 * k]
                mline, aline = lineno + 1 + 2 * k, lineno + 2 + 2 * k
                if m["INSTRUCTION"] != "MEMORY" or m["NAME"] != results[k]:
                    raise _err(path, mline, f"expected MEMORY of result {results[k]!r} of "
                                            f"CALL on line {lineno}, found {m['INSTRUCTION']}")
                if a["INSTRUCTION"] != "ALIAS" or a["NAME"] != results[k]:
                    raise _err(path, aline, f"expected ALIAS of result {results[k]!r} of "
                                            f"CALL on line {lineno}, found {a['INSTRUCTION']}")
                size = _as_int(path, mline, m, "MEMORY", minimum=0)
                alias = _as_int(path, aline, a, "ALIAS", minimum=-1)
                if alias >= len(rec["ARGS"]):
                    raise _err(path, aline, f"ALIAS index {alias} out of range for "
                                            f"{len(rec['ARGS'])} argument(s)")
                sizes.append(size)
                aliases.append(alias)
            cost = _as_int(path, lineno, rec, "TIME", minimum=0)
            builder.call(pos, lineno, rec["NAME"], rec["ARGS"], results, sizes, aliases, cost)
            pos += 1 + 2 * cnt
        elif instr == "MUTATE":
            cost = _as_int(path, lineno, rec, "TIME", minimum=0)
            builder.mutate(pos, lineno, rec["NAME"], rec["ARGS"], rec["MUTATE"], cost)
            pos += 1
        elif instr == "COPY":
            builder.copy(pos, lineno, rec["DST"], rec["SRC"])
            pos += 1
        elif instr == "COPY_FROM":
            builder.copy_from(pos, lineno, rec["DST"], rec["SRC"])
            pos += 1
        elif instr == "RELEASE":
            builder.release(pos, lineno, rec["NAME"])
            pos += 1
        elif instr == "ANNOTATE":
            pos += 1
        else:  # MEMORY / ALIAS outside of a CONSTANT or CALL group
            raise _err(path, lineno, f"{instr} record for {rec.get('NAME')!r} does not follow "
                                     "a CONSTANT or CALL")
    return builder.finish(n, start_record)


class _Builder:
    """Accumulates simrd's graph and schedule while the records are read."""

    def __init__(self, path: str):
        self.path = path
        self.tensor_map: dict[str, int] = {}   # trace name -> runtime tensor (simrd tensor_map)
        self.name_ref: list[int] = []          # per tensor: simrd's meta['_ref'] (names bound)
        self.op_cost: list[int] = []
        self.op_out_start: list[int] = []
        self.op_nout: list[int] = []
        self.op_args: list[list[int]] = []
        self.op_total: list[int] = []
        self.op_is_const: list[bool] = []
        self.op_record: list[int] = []
        self.op_names: list[str] = []
        self.t_op: list[int] = []
        self.t_index: list[int] = []
        self.t_size: list[int] = []
        self.t_storage: list[int] = []
        self.t_alias: list[bool] = []
        self.t_storage_size: list[int] = []    # GTensor.storage_size
        self.t_names: list[str] = []
        self.s_size: list[int] = []
        self.s_root: list[int] = []
        self.s_is_const: list[bool] = []
        self.s_ref_ext: list[int] = []         # static external reference count
        self.children: list[list[int]] = []
        self.s_tensors: list[list[int]] = []
        self.sched: list[tuple[int, int, int]] = []
        self.name_storages: dict[str, set[int]] = {}
        self.runtime_names: set[str] = set()

    # -- helpers -------------------------------------------------------------------
    def _lookup(self, lineno: int, instr: str, name) -> int:
        if not isinstance(name, str) or name not in self.tensor_map:
            raise _err(self.path, lineno, f"{instr} refers to unknown tensor name {name!r}")
        return self.tensor_map[name]

    def _bind(self, name: str, tensor: int) -> None:
        self.tensor_map[name] = tensor
        self.name_storages.setdefault(name, set()).add(self.t_storage[tensor])

    def _new_op(self, rec: int, name: str, args: list[int], cost: int, sizes, aliases,
                res_names, is_const: bool, lineno: int) -> int:
        for r in res_names:
            # simrd's Graph.add_op asserts every runtime tensor name is new; MUTATE names
            # its results ``<arg>$``, which collide when one tensor is mutated through
            # two names (COPY then MUTATE of both)
            if r in self.runtime_names:
                raise _err(self.path, lineno, f"tensor name {r!r} is created twice (simrd "
                                              "requires unique runtime tensor names)")
            self.runtime_names.add(r)
        op = len(self.op_cost)
        self.op_names.append(f"{name}/{op}")
        self.op_cost.append(cost)
        self.op_out_start.append(len(self.t_op))
        self.op_nout.append(len(sizes))
        self.op_args.append(args)
        self.op_total.append(sum(sizes))
        self.op_is_const.append(is_const)
        self.op_record.append(rec)
        outs = []
        for i, (size, alias) in enumerate(zip(sizes, aliases)):
            t = len(self.t_op)
            self.t_op.append(op)
            self.t_index.append(i)
            self.t_size.append(size)
            self.t_names.append(res_names[i])
            self.children.append([])
            if alias >= 0:
                base = args[alias]
                s = self.t_storage[base]
                self.t_alias.append(True)
                self.t_storage_size.append(self.t_storage_size[base])
            else:
                s = len(self.s_size)
                self.s_size.append(size)
                self.s_root.append(t)
                self.s_is_const.append(is_const)
                self.s_ref_ext.append(0)
                self.s_tensors.append([])
                self.t_alias.append(False)
                self.t_storage_size.append(size)
            self.t_storage.append(s)
            self.s_tensors[s].append(t)
            # runtime names (``x$`` for MUTATE results) resolve too, for keep_resident
            self.name_storages.setdefault(res_names[i], set()).add(s)
            self.s_ref_ext[s] += 1           # every new Tensor holds one external ref
            outs.append(t)
        for p in args:                        # simrd: p.children.extend(outputs)
            self.children[p].extend(outs)
        self.sched.append((SCHED_COMPUTE, op, rec))
        return op

    def _get(self, rec: int, lineno: int, t: int, what: str) -> None:
        # simrd's RuntimeV2.get asserts ``t.storage.ref_ext > 0``: a COPY (or COPY_FROM)
        # cannot bring back a tensor whose every reference was released
        if self.s_ref_ext[self.t_storage[t]] <= 0:
            raise _err(self.path, lineno, f"{what} of tensor {self.t_names[t]!r}, whose storage "
                                          "has no references left (all released): simrd cannot "
                                          "replay a copy that revives a released tensor")
        self.s_ref_ext[self.t_storage[t]] += 1
        self.sched.append((SCHED_GET, t, rec))

    def _release(self, rec: int, lineno: int, t: int, what: str) -> None:
        s = self.t_storage[t]
        if self.s_ref_ext[s] <= 0:
            raise _err(self.path, lineno, f"{what} releases tensor {self.t_names[t]!r} whose "
                                          "storage has no references left")
        self.s_ref_ext[s] -= 1
        self.sched.append((SCHED_RELEASE, t, rec))

    def _check_live(self, lineno: int, instr: str, names, tensors) -> None:
        for name, t in zip(names, tensors):
            if self.s_ref_ext[self.t_storage[t]] <= 0:
                raise _err(self.path, lineno, f"{instr} uses tensor {name!r} after all "
                                              "references to its storage were released")

    # -- records ---------------------------------------------------------------------
    def constant(self, rec: int, lineno: int, name: str, size: int) -> None:
        if name in self.tensor_map:
            raise _err(self.path, lineno, f"CONSTANT redefines tensor name {name!r}")
        op = self._new_op(rec, CONST_OP_NAME, [], 0, (size,), (-1,), (name,), True, lineno)
        t = self.op_out_start[op]
        self.name_ref.append(1)
        self._bind(name, t)
        self.sched.append((SCHED_PIN, t, rec))

    def call(self, rec, lineno, name, arg_names, results, sizes, aliases, cost) -> None:
        args = [self._lookup(lineno, "CALL", a) for a in arg_names]
        self._check_live(lineno, "CALL", arg_names, args)
        for r in results:
            if not isinstance(r, str):
                raise _err(self.path, lineno, f"CALL result name is not a string: {r!r}")
            if r in self.tensor_map:
                raise _err(self.path, lineno, f"CALL redefines tensor name {r!r}")
        if len(set(results)) != len(results):
            raise _err(self.path, lineno, "CALL lists the same result name twice")
        sizes = [0 if a != -1 else s for s, a in zip(sizes, aliases)]
        op = self._new_op(rec, name, args, cost, sizes, aliases, results, False, lineno)
        for i, r in enumerate(results):
            self.name_ref.append(1)
            self._bind(r, self.op_out_start[op] + i)

    def mutate(self, rec, lineno, name, arg_names, mutated, cost) -> None:
        args = [self._lookup(lineno, "MUTATE", a) for a in arg_names]
        self._check_live(lineno, "MUTATE", arg_names, args)
        for m in mutated:
            if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < len(args):
                raise _err(self.path, lineno, f"MUTATE index {m!r} out of range for "
                                              f"{len(args)} argument(s)")
        sizes = [self.t_storage_size[args[m]] for m in mutated]
        res_names = [self.t_names[args[m]] + "$" for m in mutated]
        op = self._new_op(rec, name, args, cost, sizes, [-1] * len(mutated), res_names, False,
                          lineno)
        for i, m in enumerate(mutated):
            old = self.tensor_map[arg_names[m]]
            new = self.op_out_start[op] + i
            self.name_ref.append(1)
            self._bind(arg_names[m], new)
            self.name_ref[old] -= 1
            self._release(rec, lineno, old, "MUTATE")

    def copy(self, rec, lineno, dst, src) -> None:
        if dst in self.tensor_map:
            raise _err(self.path, lineno, f"COPY destination {dst!r} is already defined")
        t = self._lookup(lineno, "COPY", src)
        self._get(rec, lineno, t, "COPY")
        self._bind(dst, t)
        self.name_ref[t] += 1

    def copy_from(self, rec, lineno, dst, src) -> None:
        old = self._lookup(lineno, "COPY_FROM", dst)
        t = self._lookup(lineno, "COPY_FROM", src)
        self._bind(dst, t)
        self.name_ref[old] -= 1
        self.name_ref[t] += 1
        self._release(rec, lineno, old, "COPY_FROM")
        self._get(rec, lineno, t, "COPY_FROM")

    def release(self, rec, lineno, name) -> None:
        if name in self.tensor_map:         # simrd ignores undefined releases
            t = self.tensor_map[name]
            self.name_ref[t] -= 1
            self._release(rec, lineno, t, "RELEASE")

    def finish(self, n_records: int, start_record: int) -> Trace:
        # simrd's OutputCondition.REMATERIALIZE: pin everything still referenced.
        for name, t in self.tensor_map.items():
            if self.name_ref[t] > 0:
                self.sched.append((SCHED_PIN, t, n_records))

        total_bytes = sum(self.s_size)
        if total_bytes >= MAX_TOTAL_BYTES:
            raise FormatError(f"{self.path}: the storages of the log add up to "
                              f"{_json_hooks.show_number(total_bytes)} bytes, beyond memopt's exact "
                              "limit of 2**62 for a trace's total (live bytes must fit in int64)")
        total_time = sum(c * n for c, n in zip(self.op_cost, self.op_nout))
        if total_time >= MAX_TOTAL_TIME:
            raise FormatError(f"{self.path}: the operators' TIME values (counted once per result) add "
                              f"up to {_json_hooks.show_number(total_time)}, beyond memopt's exact limit "
                              "of 2**60 for a trace's total compute")
        i64 = np.int64
        op_arg_start = np.zeros(len(self.op_args) + 1, dtype=i64)
        np.cumsum([len(a) for a in self.op_args], out=op_arg_start[1:])
        flat_args = np.array([a for args in self.op_args for a in args], dtype=i64)
        t_child_start = np.zeros(len(self.children) + 1, dtype=i64)
        np.cumsum([len(c) for c in self.children], out=t_child_start[1:])
        flat_children = np.array([c for cs in self.children for c in cs], dtype=i64)
        s_tensor_start = np.zeros(len(self.s_tensors) + 1, dtype=i64)
        np.cumsum([len(c) for c in self.s_tensors], out=s_tensor_start[1:])
        flat_s_tensors = np.array([t for ts in self.s_tensors for t in ts], dtype=i64)
        sched = np.array(self.sched, dtype=i64).reshape(-1, 3)
        return Trace(
            path=self.path,
            n_records=n_records,
            start_record=start_record,
            op_cost=np.array(self.op_cost, dtype=i64),
            op_out_start=np.array(self.op_out_start, dtype=i64),
            op_nout=np.array(self.op_nout, dtype=i64),
            op_arg_start=op_arg_start,
            op_args=flat_args,
            op_total_size=np.array(self.op_total, dtype=i64),
            op_is_const=np.array(self.op_is_const, dtype=np.bool_),
            op_record=np.array(self.op_record, dtype=i64),
            op_names=self.op_names,
            t_op=np.array(self.t_op, dtype=i64),
            t_index=np.array(self.t_index, dtype=i64),
            t_size=np.array(self.t_size, dtype=i64),
            t_storage=np.array(self.t_storage, dtype=i64),
            t_is_alias=np.array(self.t_alias, dtype=np.bool_),
            t_child_start=t_child_start,
            t_children=flat_children,
            t_names=self.t_names,
            s_size=np.array(self.s_size, dtype=i64),
            s_root=np.array(self.s_root, dtype=i64),
            s_tensor_start=s_tensor_start,
            s_tensors=flat_s_tensors,
            s_is_const=np.array(self.s_is_const, dtype=np.bool_),
            sched_kind=sched[:, 0].copy(),
            sched_arg=sched[:, 1].copy(),
            sched_record=sched[:, 2].copy(),
            name_storages={k: tuple(sorted(v)) for k, v in self.name_storages.items()},
        )
