"""Request traces for bounded-memory caches: expert-routing logs and ``memopt-requests`` files.

A :class:`RequestTrace` is a sequence of requests for *objects* of known integer byte sizes,
each object belonging to one *cache* (one global cache by default; one cache per MoE layer
with ``per_layer=True``). Policies, offline optima and certificates all consume it.

Two readers:

* :func:`load_routes` reads the JSON-lines expert-routing logs written by the vLLM
  ``select_experts`` logging patch (the public traces ``docs/cache.md`` names): a ``meta`` line, then one
  ``route`` line per routed token row ``{"token_idx", "layer", "topk_ids", ...}``.
  **Default reading**: requests in file order, each record's ``topk_ids`` in listed
  order, object = ``(layer, expert)``, one global cache. Several files (one per layer of the
  same run) are lined up pass by pass: a *pass* is a maximal run of rows in which
  ``token_idx`` keeps increasing (a boundary is where it restarts, i.e. does not exceed the
  previous value); within each pass the files' rows come layer after layer (ascending layer),
  as a forward pass calls the router of layer 0 for every row of the batch before layer 8.
  The files must then have the same pass structure. Options: ``per_layer`` (one cache per
  layer), ``drop_warmup`` (drop the dummy warm-up rows, detected as documented in
  :func:`warmup_rows`), ``skip_passes`` / ``skip_rows`` (drop a given prefix).
* :func:`load_requests` reads the versioned ``memopt-requests`` JSON-lines format (see
  ``docs/cache.md``); :func:`dump_requests` writes it.

**Speed.** A route file is parsed in one ``json.loads`` call and checked with numpy when the
bulk reading can show that this gives the line-by-line result (see ``_read_route_file_bulk``);
any other file is read line by line, so what is refused, and the message, never depend on
which reading ran. Loading the five Qwen files takes less time than a bare ``json.loads`` loop
over them (``benchmarks/trace_loading.py``).

Malformed input raises :class:`memopt.errors.FormatError` naming the file and the 1-based
line; bad arguments raise :class:`memopt.errors.OptionError`. Every byte count is an integer
in ``[0, 2**62)`` and so is the total of all requested bytes (each request counted), so every
traffic sum a policy computes is exact in int64.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller

import numpy as np

from memopt.errors import FormatError, OptionError
from memopt.io import _json as _json_hooks

__all__ = ["RequestTrace", "make_trace", "load_routes", "load_requests", "dump_requests",
           "parse_requests", "warmup_rows", "REQUESTS_FORMAT", "REQUESTS_VERSION", "MAX_BYTES"]

REQUESTS_FORMAT = "memopt-requests"
REQUESTS_VERSION = 1
#: every byte count, and the total of all requested bytes, is below this
MAX_BYTES = 2**62

_DECODER = json.JSONDecoder(parse_int=_json_hooks._parse_int, parse_float=_json_hooks._parse_float,
                            parse_constant=_json_hooks._parse_constant)
_show = _json_hooks.show_number


@dataclass(frozen=True, eq=False)
class RequestTrace:
    """A request trace over objects with integer byte sizes (build it with :func:`make_trace`).

    ``requests[i]`` is the object index of request ``i``; ``sizes[o]`` the bytes of object
    ``o``; ``cache_of[o]`` the index (into ``caches``) of the cache holding ``o``; ``objects[o]``
    its label (``(layer, expert)`` for routes, the JSON id for ``memopt-requests``). ``meta``
    records how the trace was read (files, passes, dropped rows).
    """

    requests: np.ndarray
    sizes: np.ndarray
    objects: tuple
    cache_of: np.ndarray
    caches: tuple
    name: str = "<trace>"
    meta: dict = field(default_factory=dict)

    @property
    def n_requests(self) -> int:
        return int(self.requests.shape[0])

    @property
    def n_objects(self) -> int:
        return int(self.sizes.shape[0])

    def __len__(self) -> int:
        return self.n_requests

    def digest(self) -> str:
        """SHA-256 of what every number depends on, in a canonical form that does not depend on
        labels or on how objects are numbered: the requests with objects renumbered in order of
        first request, their sizes and caches in that order, and the number of caches."""
        first, inverse = np.unique(self.requests, return_index=True, return_inverse=True)[1:]
        order = np.argsort(first, kind="stable")          # objects by first request
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        objs = np.unique(self.requests)[order]
        h = hashlib.sha256(b"memopt-requests/1\0")
        for arr in (rank[inverse.reshape(-1)] if self.requests.size else self.requests,
                    self.sizes[objs], self.cache_of[objs]):
            a = np.ascontiguousarray(arr, dtype="<i8")
            h.update(len(a).to_bytes(8, "little"))
            h.update(a.tobytes())
        h.update(len(self.caches).to_bytes(8, "little"))
        return h.hexdigest()

    def cache_requests(self, cache: int) -> np.ndarray:
        """The requests (object indices, in trace order) that go to cache ``cache``."""
        if len(self.caches) == 1:
            return self.requests
        return self.requests[self.cache_of[self.requests] == cache]

    def equal_sizes(self) -> bool:
        """True when all requested objects of each cache have the same size."""
        for c in range(len(self.caches)):
            used = np.unique(self.cache_requests(c))
            if used.size and np.unique(self.sizes[used]).size > 1:
                return False
        return True

    def semantic_demand(self) -> int:
        """Bytes of the duplicate-free union of the requested objects."""
        used = np.unique(self.requests)
        return int(self.sizes[used].sum()) if used.size else 0

    def requested_bytes(self) -> int:
        """Bytes of all requests, each counted (the traffic of a cache that holds nothing)."""
        return int(self.sizes[self.requests].sum()) if self.n_requests else 0


def _total_requested(requests: np.ndarray, sizes: np.ndarray) -> int:
    counts = np.bincount(requests, minlength=sizes.shape[0]) if requests.size else \
        np.zeros(sizes.shape[0], dtype=np.int64)
    approx = float(np.dot(counts.astype(np.float64), sizes.astype(np.float64)))
    if approx < 2.0**61:
        return int(np.dot(counts.astype(np.int64), sizes.astype(np.int64)))
    return sum(int(c) * int(s) for c, s in zip(counts.tolist(), sizes.tolist()))


def make_trace(requests, sizes, *, objects=None, cache_of=None, caches=None, name: str = "<trace>",
               meta: dict | None = None, error=OptionError) -> RequestTrace:
    """Validate and build a :class:`RequestTrace`.

    ``requests``: object indices; ``sizes``: bytes per object (integers in ``[0, 2**62)``);
    ``objects``: labels (default ``0..m-1``); ``cache_of``: cache index per object (default
    all 0); ``caches``: cache names (default ``("global",)`` or ``("cache 0", ...)``).
    ``error`` is the exception class for bad input (:class:`OptionError` for arguments).

    >>> tr = make_trace([0, 1, 0], [10, 20])
    >>> tr.n_requests, tr.semantic_demand(), tr.requested_bytes()
    (3, 30, 40)
    """
    if isinstance(sizes, np.ndarray) and sizes.ndim == 1 and np.issubdtype(sizes.dtype, np.integer) \
            and sizes.dtype.itemsize <= 8 and (sizes.size == 0 or (sizes.min() >= 0 and sizes.max() < MAX_BYTES)):
        sizes_arr = sizes.astype(np.int64)           # fast path: already exact byte counts
    else:
        try:
            sz = [_json_hooks.byte_count(v, f"size of object {i}", error) for i, v in enumerate(
                sizes.tolist() if isinstance(sizes, np.ndarray) else list(sizes))]
        except TypeError:
            raise error("sizes must be a sequence of integer byte counts") from None
        sizes_arr = np.asarray(sz, dtype=np.int64).reshape(-1)
    m = sizes_arr.shape[0]
    req = np.asarray(requests)
    if req.size == 0:
        req = np.zeros(0, dtype=np.int64)
    if req.ndim != 1 or not (np.issubdtype(req.dtype, np.integer)):
        raise error("requests must be a 1-d sequence of integer object indices")
    req = req.astype(np.int64)
    if req.size and (req.min() < 0 or req.max() >= m):
        bad = int(np.flatnonzero((req < 0) | (req >= m))[0])
        raise error(f"request {bad} names object {int(req[bad])}, but there are {m} objects")
    if cache_of is None:
        co = np.zeros(m, dtype=np.int64)
    else:
        co = np.asarray(cache_of)
        if co.shape != (m,) or (co.size and not np.issubdtype(co.dtype, np.integer)):
            raise error(f"cache_of must give one integer cache index per object ({m})")
        co = co.astype(np.int64)
    n_caches = int(co.max()) + 1 if co.size else 1
    if co.size and co.min() < 0:
        raise error("cache_of holds a negative cache index")
    if caches is None:
        caches = ("global",) if n_caches == 1 else tuple(f"cache {i}" for i in range(n_caches))
    caches = tuple(str(c) for c in caches)
    if len(caches) < n_caches:
        raise error(f"cache_of uses {n_caches} caches but only {len(caches)} are named")
    if len(set(caches)) != len(caches):
        raise error("cache names must be distinct")
    if objects is None:
        objects = tuple(range(m))
    objects = tuple(objects)
    if len(objects) != m:
        raise error(f"{len(objects)} object labels for {m} objects")
    total = _total_requested(req, sizes_arr)
    if total >= MAX_BYTES:
        raise error(f"{name}: the requests add up to {_show(total)} bytes, beyond memopt's exact "
                    "limit of 2**62 (traffic sums must stay exact)")
    for a in (req, sizes_arr, co):
        a.setflags(write=False)
    return RequestTrace(req, sizes_arr, objects, co, caches, str(name), dict(meta or {}))


# ---------------------------------------------------------------------------- reading lines

def _err(path: str, lineno: int, msg: str) -> FormatError:
    return FormatError(f"{path}: line {lineno}: {msg}")


def _decode(path: str, lineno: int, line: str) -> dict:
    return _json_hooks.decode_record(path, lineno, line, _DECODER)


def _read_lines(path) -> tuple[str, list[str]]:
    try:
        path = os.fspath(path)
    except TypeError:
        raise OptionError(f"a trace path must be a string or a path, got {type(path).__name__}") from None
    text = _json_hooks.read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return path, [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _small_int(path, lineno, rec, key, what, *, minimum=0, limit=2**31):
    val = rec.get(key)
    if key not in rec:
        raise _err(path, lineno, f"{what} lacks field {key!r}")
    if isinstance(val, float) and math.isfinite(val) and val.is_integer():
        val = int(val)
    if isinstance(val, bool) or not isinstance(val, int):
        raise _err(path, lineno, f"field {key!r} must be an integer, got {_show(val)}")
    if val < minimum or val >= limit:
        raise _err(path, lineno, f"field {key!r} is {_show(val)}, outside [{minimum}, {limit})")
    return val


# ---------------------------------------------------------------------------- route files

@dataclass
class _RouteFile:
    path: str
    meta: dict
    token_idx: np.ndarray   # per row
    layer: np.ndarray       # per row
    ids_flat: np.ndarray    # every row's expert ids, row after row
    ids_start: np.ndarray   # row r's ids are ids_flat[ids_start[r]:ids_start[r + 1]]
    uniform: np.ndarray     # per row: all topk_weights equal
    lines: np.ndarray       # per row: 1-based line number
    pass_start: np.ndarray  # row index where each pass starts (+ final len)

    @property
    def n_rows(self) -> int:
        return int(self.token_idx.shape[0])


def _route_file(path, meta, tok, lay, ids_flat, ids_start, uni, lno) -> _RouteFile:
    tok_a = np.asarray(tok, dtype=np.int64)
    n = tok_a.size
    # a pass starts where token_idx does not exceed the previous row's
    pass_start = np.concatenate([[0], np.flatnonzero(tok_a[1:] <= tok_a[:-1]) + 1, [n]]) if n else np.zeros(1)
    pass_start = pass_start.astype(np.int64)
    return _RouteFile(path, meta, tok_a, np.asarray(lay, dtype=np.int64), np.asarray(ids_flat, dtype=np.int64),
                      np.asarray(ids_start, dtype=np.int64), np.asarray(uni, dtype=bool),
                      np.asarray(lno, dtype=np.int64), pass_start)


def _read_meta(path: str, line: str) -> tuple[dict, int | None, int | None]:
    meta = _decode(path, 1, line)
    if meta.get("type") != "meta":
        raise _err(path, 1, f"the first line must be the meta record (\"type\": \"meta\"), got type "
                            f"{_show(meta.get('type'))}")
    top_k = meta.get("top_k")
    if top_k is not None:
        top_k = _small_int(path, 1, meta, "top_k", "meta", minimum=1, limit=2**20)
    n_exp = meta.get("num_experts")
    if n_exp is not None:
        n_exp = _small_int(path, 1, meta, "num_experts", "meta", minimum=1, limit=2**31)
    return meta, top_k, n_exp


def _read_route_file(path) -> _RouteFile:
    """One route file: the bulk reading (:func:`_read_route_file_bulk`) when it can vouch for
    the file, else the line-by-line reading, which accepts exactly the same files with the
    same result and names the first bad line."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise OptionError(f"a trace path must be a string or a path, got {type(path).__name__}") from None
    enabled = gc.isenabled()
    gc.disable()        # the records form no cycles; collecting while they pile up costs 40 %
    try:
        rf = _read_route_file_bulk(path)
    finally:
        if enabled:
            gc.enable()
    return rf if rf is not None else _read_route_file_by_line(path)


def _read_route_file_by_line(path: str) -> _RouteFile:
    path, lines = _read_lines(path)
    if not lines:
        raise FormatError(f"{path}: empty file (expected a meta line and route lines)")
    meta, top_k, n_exp = _read_meta(path, lines[0])
    tok, lay, ids, uni, lno = [], [], [], [], []
    for i in range(1, len(lines)):
        lineno = i + 1
        rec = _decode(path, lineno, lines[i])
        typ = rec.get("type")
        if typ != "route":
            raise _err(path, lineno, f"expected a route record (\"type\": \"route\"), got type {_show(typ)}")
        t = _small_int(path, lineno, rec, "token_idx", "route record", limit=2**62)
        layer = _small_int(path, lineno, rec, "layer", "route record")
        if "topk_ids" not in rec:
            raise _err(path, lineno, "route record lacks field 'topk_ids'")
        e = rec["topk_ids"]
        if not isinstance(e, list) or not e:
            raise _err(path, lineno, "field 'topk_ids' must be a non-empty list of expert ids")
        for x in e:
            if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x >= (n_exp or 2**31):
                lim = f" (num_experts is {n_exp})" if n_exp else ""
                raise _err(path, lineno, f"expert id {_show(x)} in 'topk_ids' is not an integer in "
                                         f"[0, {n_exp or 2**31}){lim}")
        if len(set(e)) != len(e):
            raise _err(path, lineno, f"'topk_ids' lists an expert twice: {_show(e)}")
        if top_k is not None and len(e) != top_k:
            raise _err(path, lineno, f"'topk_ids' has {len(e)} experts, the meta line says top_k={top_k}")
        w = rec.get("topk_weights")
        if w is not None:
            if not isinstance(w, list) or len(w) != len(e) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in w):
                raise _err(path, lineno, "field 'topk_weights' must be a list of numbers, one per expert")
        tok.append(t)
        lay.append(layer)
        ids.append(e)
        uni.append(w is not None and len(w) > 1 and all(v == w[0] for v in w))
        lno.append(lineno)
    ids_start = np.concatenate([[0], np.cumsum([len(e) for e in ids], dtype=np.int64)])
    return _route_file(path, meta, tok, lay, list(itertools.chain.from_iterable(ids)), ids_start, uni, lno)


# The bulk reading parses every route line in one ``json.loads`` call with the standard
# decoder (no per-number hook) and checks the records with numpy. It returns None -- and the
# line-by-line reading takes over -- unless it can show that its result is the line-by-line
# one: no backslash or carriage return (so strings run from quote to quote), each line one
# bracketed object (so the array's elements are the lines), no true/false after the meta line
# (so numpy's dtype tells integers from everything else), only the known fields, each of the
# exact type the bulk checks cover. The strict number hooks of memopt.io._json then change
# nothing: NaN and Infinity still raise, and any number beyond their limits would fail the
# int64 ranges or the |weight| < 2**53 test.

#: what a route record may hold for the bulk reading
_ROUTE_KEYS = frozenset({"type", "req_id", "token_idx", "layer", "topk_ids", "topk_weights"})
#: every byte but newline, quote and brackets
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'\n"[]{}')))
_BULK_DECODER = json.JSONDecoder(parse_constant=_json_hooks._parse_constant)


def _one_object_per_line(body: bytes) -> int | None:
    """The number of lines of ``body`` when the newlines, quotes and brackets of each line form
    one bracketed group that starts with ``{`` (outside strings, the depth reaches zero only at
    its last bracket), else None. Then ``"[" + lines joined by "," + "]"`` has at least one
    element per line, and exactly one if it has as many elements as lines. ``body`` has no
    backslash, so strings run from quote to quote."""
    k = np.frombuffer(body.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    in_string = (np.cumsum(k == 34, dtype=np.int64) & 1).astype(bool)
    delta = (k == 123).astype(np.int8) + (k == 91) - (k == 125) - (k == 93)
    delta[in_string] = 0
    depth = np.cumsum(delta, dtype=np.int64)
    newline = np.flatnonzero(k == 10)
    firsts = np.concatenate([[0], newline + 1])
    lasts = np.concatenate([newline - 1, [k.size - 1]])
    if k.size == 0 or (lasts < firsts).any() or (k[firsts] != 123).any() or in_string[newline].any():
        return None
    # the last bracket of every line and every newline are at depth 0, and nothing else is
    if depth[lasts].any() or in_string[lasts].any() or np.count_nonzero(depth == 0) != lasts.size + newline.size:
        return None
    return int(lasts.size)


def _read_route_file_bulk(path: str) -> _RouteFile | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        nl = data.find(b"\n")
        body = data[nl + 1:-1] if data.endswith(b"\n") else data[nl + 1:]
        if nl < 0 or not body or b"\\" in data or b"\r" in data or b"true" in body or b"false" in body:
            return None
        head, body_text = data[:nl].decode("utf-8"), body.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    n = _one_object_per_line(body)
    if n is None:
        return None
    meta, top_k, n_exp = _read_meta(path, head)
    try:
        recs = _BULK_DECODER.decode("[" + body_text.replace("\n", ",") + "]")
    except (ValueError, _json_hooks._BadNumber, RecursionError):
        return None
    if len(recs) != n or set(map(type, recs)) != {dict}:
        return None
    return _check_routes_bulk(path, meta, recs, top_k, n_exp)


def _int_array(values, lo: int, hi: int) -> np.ndarray | None:
    """``values`` (ints, or equally long lists of ints) as an int64 array when each lies in
    ``[lo, hi)``, else None. A float or a string would make the dtype float or text, a too
    large integer an object array or an OverflowError; the caller has ruled out booleans."""
    try:
        a = np.array(values)
    except (ValueError, OverflowError):
        return None
    if a.dtype != np.int64 or a.min() < lo or a.max() >= hi:
        return None
    return a


_ROUTE_FIELDS = itemgetter("type", "token_idx", "layer", "topk_ids", "topk_weights")
_REQ_ID = methodcaller("get", "req_id", "")


def _check_routes_bulk(path, meta, recs, top_k, n_exp) -> _RouteFile | None:
    """The checks of the line-by-line reading on all records at once (None if any fails, or
    if a record falls outside what they cover: no ``topk_weights``, rows of different
    lengths, integer weights beyond 2**53 that float comparison could not tell apart)."""
    try:
        typ, tok, lay, ids, weights = zip(*map(_ROUTE_FIELDS, recs))
    except KeyError:
        return None
    if typ.count("route") != len(recs) or not set(itertools.chain.from_iterable(recs)) <= _ROUTE_KEYS or \
            not set(map(type, map(_REQ_ID, recs))) <= {str}:
        return None
    tok_a, lay_a = _int_array(tok, 0, 2**62), _int_array(lay, 0, 2**31)
    ids_a = _int_array(ids, 0, n_exp or 2**31)
    if tok_a is None or lay_a is None or ids_a is None or ids_a.ndim != 2 or not ids_a.shape[1] or \
            (top_k is not None and ids_a.shape[1] != top_k) or set(map(type, ids)) != {list}:
        return None
    by_row = np.sort(ids_a, axis=1)
    if (by_row[:, 1:] == by_row[:, :-1]).any():                # an expert listed twice in a row
        return None
    try:
        w = np.array(weights)
    except (ValueError, OverflowError):
        return None
    if w.shape != ids_a.shape or w.dtype != np.float64 or set(map(type, weights)) != {list} or \
            not (np.abs(w) < 2**53).all():
        return None
    n, k = ids_a.shape
    uni = (w == w[:, :1]).all(axis=1) if k > 1 else np.zeros(n, dtype=bool)
    return _route_file(path, meta, tok_a, lay_a, ids_a.reshape(-1), np.arange(0, n * k + 1, k),
                       uni, np.arange(2, n + 2, dtype=np.int64))


def _same_ids(rf: _RouteFile, a: int, b: int) -> bool:
    """Whether rows ``a..b-1`` all route to the experts of row ``a``, in the same order."""
    lens = np.diff(rf.ids_start[a:b + 1])
    if (lens != lens[0]).any():
        return False
    seg = rf.ids_flat[rf.ids_start[a]:rf.ids_start[b]].reshape(b - a, int(lens[0]))
    return bool((seg == seg[0]).all())


def warmup_rows(rf: _RouteFile) -> int:
    """Number of leading rows of a route file that are dummy warm-up rows (``drop_warmup``):

    1. leading passes of at least two rows in which every row routes to the same experts
       (vLLM's warm-up runs on dummy input: the Qwen files' first two passes, 8192 and 256 rows);
    2. then leading rows whose ``topk_weights`` are all equal (the OLMoE file's first 2048
       rows, uniform 0.125 weights).
    """
    start = 0
    ps = rf.pass_start.tolist()
    for a, b in zip(ps[:-1], ps[1:]):
        if b - a >= 2 and _same_ids(rf, a, b):
            start = b
        else:
            break
    rest = np.flatnonzero(~rf.uniform[start:])
    return start + int(rest[0]) if rest.size else rf.n_rows


def _passes_after(rf: _RouteFile, row: int) -> list[int]:
    ps = [p for p in rf.pass_start.tolist() if p > row]
    return [row] + ps if ps[:1] != [row] else ps


def load_routes(paths, *, object_bytes=1, per_layer: bool = False, drop_warmup: bool = False,
                skip_passes: int = 0, skip_rows: int = 0, name: str | None = None) -> RequestTrace:
    """Read expert-routing logs as a :class:`RequestTrace` (the reading: module docstring).

    Parameters
    ----------
    paths : str, os.PathLike or list of them
        One path or a list (e.g. one file per layer).
    object_bytes : int or dict, default 1
        Bytes of one expert, or ``{layer: bytes}`` (1: a capacity counts experts).
    per_layer : bool, default False
        One cache per layer (named ``"layer L"``) instead of one global cache.
    drop_warmup : bool, default False
        Drop the warm-up rows of each file (:func:`warmup_rows`).
    skip_passes, skip_rows : int, default 0
        Then drop that many further leading passes / rows of each file. With several files,
        the kept rows must form the same passes in every file; the requests then come pass by
        pass, layer after layer.
    name : str, optional
        The trace's name (default: from the file names).

    Returns
    -------
    RequestTrace
        Objects are ``(layer, expert)``.

    Raises
    ------
    FormatError
        A missing or malformed file, naming the file and the 1-based line.
    OptionError
        A bad argument.

    Examples
    --------
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "routes.jsonl")
    >>> with open(path, "w") as f:
    ...     f.writelines(json.dumps(r) + chr(10) for r in [{"type": "meta", "top_k": 2},
    ...         {"type": "route", "token_idx": 0, "layer": 0, "topk_ids": [3, 1]},
    ...         {"type": "route", "token_idx": 1, "layer": 0, "topk_ids": [1, 2]}])
    >>> tr = load_routes(path)
    >>> tr.objects, tr.requests.tolist()
    (((0, 1), (0, 2), (0, 3)), [2, 0, 0, 1])
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise OptionError("load_routes needs at least one route file")
    for opt, v in (("skip_passes", skip_passes), ("skip_rows", skip_rows)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise OptionError(f"{opt} must be a non-negative integer, got {_show(v)}")
    seen = set()
    for p in paths:
        key = os.path.realpath(os.fspath(p)) if isinstance(p, (str, os.PathLike)) else None
        if key is not None and key in seen:
            raise OptionError(f"{p}: route file given twice")
        seen.add(key)
    files = [_read_route_file(p) for p in paths]
    segments = []   # per file: list of (start, end) row ranges, one per kept pass
    dropped = []
    for rf in files:
        start = warmup_rows(rf) if drop_warmup else 0
        ps = _passes_after(rf, start)
        if skip_passes:
            if skip_passes >= len(ps) - 1:
                raise OptionError(f"{rf.path}: skip_passes={skip_passes} drops every pass "
                                  f"({len(ps) - 1} left after warm-up)")
            start = ps[skip_passes]
        start += int(skip_rows)
        if start >= rf.n_rows:
            raise OptionError(f"{rf.path}: nothing left after dropping {start} of {rf.n_rows} rows "
                              "(drop_warmup, skip_passes, skip_rows)")
        ps = _passes_after(rf, start)
        segments.append(list(zip(ps[:-1], ps[1:])))
        dropped.append(start)
    if len(files) > 1:
        ref = [b - a for a, b in segments[0]]
        for rf, seg in zip(files[1:], segments[1:]):
            lens = [b - a for a, b in seg]
            if lens != ref:
                k = next((i for i, (x, y) in enumerate(zip(lens, ref)) if x != y), min(len(lens), len(ref)))
                raise FormatError(f"{rf.path}: its passes do not line up with {files[0].path} "
                                  f"(pass {k} of the kept rows: {lens[k] if k < len(lens) else 'none'} "
                                  f"rows vs {ref[k] if k < len(ref) else 'none'}); route files of "
                                  "one run must have the same pass structure")
    # order of rows: pass by pass, files by ascending first layer, rows in file order
    order = sorted(range(len(files)), key=lambda f: (int(files[f].layer[dropped[f]]), f))
    experts, layer_of = [], []   # per request, in order
    n_rows = 0
    n_pass = len(segments[0])
    for p in range(n_pass):
        for f in order:
            rf, (a, b) = files[f], segments[f][p]
            experts.append(rf.ids_flat[rf.ids_start[a]:rf.ids_start[b]])
            layer_of.append(np.repeat(rf.layer[a:b], np.diff(rf.ids_start[a:b + 1])))
            n_rows += b - a
    experts, layer_of = np.concatenate(experts), np.concatenate(layer_of)
    if not experts.size:
        raise FormatError(f"{files[0].path}: no route records")
    # objects = (layer, expert), sorted: layer and expert are below 2**31
    keys, requests = np.unique(layer_of * 2**31 + experts, return_inverse=True)
    requests = requests.reshape(-1).astype(np.int64)
    labels = list(zip((keys >> 31).tolist(), (keys & (2**31 - 1)).tolist()))
    layers = sorted({lab[0] for lab in labels})
    sizes = []
    for layer, _e in labels:
        if isinstance(object_bytes, dict):
            if layer not in object_bytes:
                raise OptionError(f"object_bytes gives no size for layer {layer}")
            b = object_bytes[layer]
        else:
            b = object_bytes
        sizes.append(_json_hooks.byte_count(b, f"object_bytes (layer {layer})", OptionError))
    if per_layer:
        lid = {layer: i for i, layer in enumerate(layers)}
        cache_of = [lid[lab[0]] for lab in labels]
        caches = tuple(f"layer {layer}" for layer in layers)
    else:
        cache_of, caches = [0] * len(labels), ("global",)
    meta = {"reading": "routes", "files": [rf.path for rf in files],
            "models": sorted({str(rf.meta.get("model_id", "")) for rf in files}),
            "layers": layers, "rows": n_rows, "passes": n_pass,
            "dropped_rows": {rf.path: d for rf, d in zip(files, dropped)},
            "per_layer": bool(per_layer)}
    nm = name if name is not None else "+".join(os.path.basename(rf.path) for rf in files)
    return make_trace(requests, sizes, objects=labels, cache_of=cache_of, caches=caches,
                      name=nm, meta=meta, error=OptionError)


# ---------------------------------------------------------------------------- memopt-requests

def _object_id(path, lineno, val):
    if isinstance(val, bool) or not isinstance(val, (str, int)):
        raise _err(path, lineno, f"field 'object' must be a string or an integer, got {_show(val)}")
    if isinstance(val, int) and not (-2**62 < val < 2**62):
        raise _err(path, lineno, f"object id {_show(val)} is out of range")
    return val


def parse_requests(lines, *, path: str = "<requests>") -> RequestTrace:
    """Parse ``memopt-requests`` lines (see :func:`load_requests` and ``docs/cache.md``).

    >>> tr = parse_requests(['{"format": "memopt-requests", "version": 1}',
    ...                      '{"object": "a", "size": 3}', '{"object": "b", "size": 5}',
    ...                      '{"object": "a"}'])
    >>> tr.requests.tolist(), tr.sizes.tolist(), tr.objects
    ([0, 1, 0], [3, 5], ('a', 'b'))
    """
    lines = [ln.rstrip("\r\n") for ln in lines]
    if not lines:
        raise FormatError(f"{path}: empty file (expected a memopt-requests header line)")
    head = _decode(path, 1, lines[0])
    if head.get("format") != REQUESTS_FORMAT:
        raise _err(path, 1, f"not a {REQUESTS_FORMAT} file (the header's \"format\" is "
                            f"{_show(head.get('format'))})")
    ver = head.get("version")
    if ver != REQUESTS_VERSION or isinstance(ver, bool):
        raise _err(path, 1, f"unsupported {REQUESTS_FORMAT} version {_show(ver)} (this memopt reads "
                            f"version {REQUESTS_VERSION})")
    nm = head.get("name", os.path.basename(path))
    if not isinstance(nm, str):
        raise _err(path, 1, "field 'name' must be a string")
    index: dict = {}
    sizes: list[int] = []
    cache_names: list[str] = []
    cache_index: dict = {}
    cache_of: list[int] = []
    first_line: list[int] = []
    req: list[int] = []
    total = 0
    for i in range(1, len(lines)):
        lineno = i + 1
        rec = _decode(path, lineno, lines[i])
        if "object" not in rec:
            raise _err(path, lineno, "request lacks field 'object'")
        unknown = set(rec) - {"object", "size", "cache"}
        if unknown:
            raise _err(path, lineno, f"unknown field {sorted(unknown)[0]!r} (a request has 'object', "
                                     "'size' and optionally 'cache')")
        obj = _object_id(path, lineno, rec["object"])
        key = (type(obj).__name__, obj)
        cache = rec.get("cache", "global")
        if not isinstance(cache, str):
            raise _err(path, lineno, f"field 'cache' must be a string, got {_show(cache)}")
        o = index.get(key)
        if o is None:
            if "size" not in rec:
                raise _err(path, lineno, f"first request of object {_show(obj)} lacks field 'size'")
            try:
                s = _json_hooks.byte_count(rec["size"], f"size of object {_show(obj)}")
            except FormatError as exc:
                raise _err(path, lineno, str(exc)) from None
            o = len(sizes)
            index[key] = o
            sizes.append(s)
            first_line.append(lineno)
            if cache not in cache_index:
                cache_index[cache] = len(cache_names)
                cache_names.append(cache)
            cache_of.append(cache_index[cache])
        else:
            if "size" in rec and (isinstance(rec["size"], bool) or rec["size"] != sizes[o]):
                raise _err(path, lineno, f"object {_show(obj)} has size {_show(rec['size'])} here but "
                                         f"{sizes[o]} at line {first_line[o]}")
            if "cache" in rec and cache_index.get(cache) != cache_of[o]:
                raise _err(path, lineno, f"object {_show(obj)} is in cache {cache!r} here but in "
                                         f"{cache_names[cache_of[o]]!r} at line {first_line[o]}")
        req.append(o)
        total += sizes[o]
        if total >= MAX_BYTES:
            raise _err(path, lineno, f"the requests up to this line add up to {_show(total)} bytes, "
                                     "beyond memopt's exact limit of 2**62 (traffic sums must stay exact)")
    objects = tuple(k[1] for k in index)
    try:
        return make_trace(np.asarray(req, dtype=np.int64), sizes, objects=objects, cache_of=cache_of,
                          caches=tuple(cache_names) or ("global",), name=nm,
                          meta={"reading": REQUESTS_FORMAT, "files": [path]}, error=FormatError)
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None


def load_requests(path) -> RequestTrace:
    """Read a ``memopt-requests`` v1 file: a header line ``{"format": "memopt-requests",
    "version": 1}`` (optional ``"name"``), then one request per line ``{"object": ID, "size":
    BYTES, "cache": NAME}``; ``size`` is required on an object's first request and must agree
    if repeated; ``cache`` defaults to ``"global"`` and is fixed per object."""
    p, lines = _read_lines(path)
    return parse_requests(lines, path=p)


def dump_requests(trace: RequestTrace, path) -> None:
    """Write ``trace`` as a ``memopt-requests`` v1 file (sizes on first requests only; route
    objects ``(layer, expert)`` become ids ``"L{layer}/E{expert}"``)."""
    def ident(lab):
        if isinstance(lab, tuple) and len(lab) == 2:
            return f"L{lab[0]}/E{lab[1]}"
        return lab if isinstance(lab, (str, int)) and not isinstance(lab, bool) else str(lab)

    ids = [ident(lab) for lab in trace.objects]
    multi = len(trace.caches) > 1
    seen = np.zeros(trace.n_objects, dtype=bool)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"format": REQUESTS_FORMAT, "version": REQUESTS_VERSION,
                             "name": trace.name}) + "\n")
        for o in trace.requests.tolist():
            rec = {"object": ids[o]}
            if not seen[o]:
                seen[o] = True
                rec["size"] = int(trace.sizes[o])
                if multi:
                    rec["cache"] = trace.caches[int(trace.cache_of[o])]
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
