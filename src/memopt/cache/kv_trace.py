"""Attention traces for KV-cache eviction: the versioned ``memopt-attention`` JSON-lines format.

An :class:`AttentionTrace` records one causal-LM pass over ``T`` tokens: for every decode step
``t`` (the query at position ``t``), every layer and every **KV head**, the attention each
position ``j <= t`` receives (``j = t`` is the token's attention to itself), plus whether the
model's prediction at that step (the argmax of the logits at position ``t``) equals token
``t + 1`` (``correct``).

**Exact integers.** Attention is stored as non-negative integers in units of ``1 / scale``
(``scale = 2**24`` by default): each query head's probability is rounded to the nearest unit,
then the query heads that share a KV head are **summed** (``combine = "sum"``; a KV head with
``group`` query heads therefore receives rows that add up to about ``group * scale``). Every
policy score and every retained-attention total is then an exact int64 sum, ties are
decided by position and never by float rounding, and the offline optimum is an exact integer
min-cost flow. Summing instead of averaging the group changes no decision: every score in
:mod:`memopt.cache.kv_policies` is linear in the attention, so the two differ by the constant
factor ``group``.

Format (``docs/cache.md``): a header line

    {"format": "memopt-attention", "version": 1, "name": "...", "steps": T, "layers": L,
     "kv_heads": H, "group": G, "scale": S, "combine": "sum", "model": "...", "text": "..."}

(``model`` and ``text`` optional free-form strings), then exactly ``T`` step lines in order:

    {"step": t, "token": 17, "correct": true, "attention": [[[a_0, ..., a_t] x H] x L]}

Every error names the file and the 1-based line (:class:`memopt.errors.FormatError`).

**Binary form** (``docs/formats.md``): the same trace as an uncompressed ``.npz`` archive
(format ``memopt-attention-npz``, version 1) of int32 lower triangles packed row by row, read
without unpickling; :func:`load_attention` tells the forms apart by their first bytes,
:func:`dump_attention` by the ``.npz`` suffix, and :func:`convert_attention` turns one into the
other. Both hold the same integers, so every policy result is identical.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from memopt.errors import FormatError, OptionError
from memopt.io import _json as _json_hooks

__all__ = ["AttentionTrace", "make_attention_trace", "load_attention", "parse_attention",
           "dump_attention", "ATTENTION_FORMAT", "ATTENTION_VERSION", "DEFAULT_SCALE",
           "load_attention_npz", "dump_attention_npz", "convert_attention", "is_npz", "NPZ_FORMAT",
           "NPZ_VERSION"]

ATTENTION_FORMAT = "memopt-attention"
ATTENTION_VERSION = 1
DEFAULT_SCALE = 2**24
#: ``group * scale`` (the largest value of one cell) must stay below this: cells are int32
_CELL_LIMIT = 2**31
_HEADER_KEYS = {"format", "version", "name", "steps", "layers", "kv_heads", "group", "scale",
                "combine", "model", "text"}
_STEP_KEYS = {"step", "token", "correct", "attention"}
_show = _json_hooks.show_number
_DECODER = json.JSONDecoder(parse_float=_json_hooks._parse_float,
                            parse_constant=_json_hooks._parse_constant)


@dataclass(frozen=True, eq=False)
class AttentionTrace:
    """Attention of one pass, per layer, KV head and step (build it with
    :func:`make_attention_trace`).

    ``attention[l, h, t, j]`` (int32, lower triangular: zero for ``j > t``) is the attention
    query ``t`` pays to position ``j`` in units of ``1 / scale``, summed over the ``group``
    query heads of KV head ``h``; ``correct[t]``: the prediction at step ``t`` was token
    ``t + 1``; ``tokens[t]``: the token id at position ``t``.
    """

    attention: np.ndarray
    correct: np.ndarray
    tokens: np.ndarray
    scale: int = DEFAULT_SCALE
    group: int = 1
    name: str = "<attention>"
    meta: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.attention.shape[2])

    @property
    def layers(self) -> int:
        return int(self.attention.shape[0])

    @property
    def kv_heads(self) -> int:
        return int(self.attention.shape[1])

    @property
    def n_heads(self) -> int:
        """Number of independent caches (``layers * kv_heads``)."""
        return self.layers * self.kv_heads

    def heads(self) -> np.ndarray:
        """The attention as ``(layers * kv_heads, T, T)``: cache ``k`` is layer ``k // kv_heads``,
        KV head ``k % kv_heads``."""
        return self.attention.reshape(self.n_heads, self.steps, self.steps)

    def __len__(self) -> int:
        return self.steps


def make_attention_trace(attention, correct, tokens=None, *, scale: int = DEFAULT_SCALE,
                         group: int = 1, name: str = "<attention>", meta: dict | None = None,
                         error=OptionError) -> AttentionTrace:
    """Validate and build an :class:`AttentionTrace` from an integer array ``(L, H, T, T)``
    (lower triangular, non-negative, each cell at most ``group * scale``), ``T`` correctness
    flags and (optionally) ``T`` token ids.

    >>> tr = make_attention_trace([[[[4, 0], [1, 3]]]], [True, False], scale=4)
    >>> tr.steps, tr.n_heads, int(tr.heads()[0, 1, 0])
    (2, 1, 1)
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise error(f"scale must be a positive integer, got {_show(scale)}")
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < 1:
        raise error(f"group must be a positive integer, got {_show(group)}")
    scale, group = int(scale), int(group)
    if scale * group >= _CELL_LIMIT:
        raise error(f"group * scale = {scale * group} must be below 2**31 (cells are int32)")
    a = np.asarray(attention)
    if a.ndim != 4 or a.shape[2] != a.shape[3]:
        raise error(f"attention must have shape (layers, kv_heads, T, T), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise error(f"attention must be integers (units of 1/scale), got dtype {a.dtype}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise error("attention needs at least one layer and one KV head")
    T = a.shape[2]
    if a.size:
        if a.min() < 0 or a.max() > group * scale:
            raise error(f"attention values must lie in [0, group * scale = {group * scale}]")
        if T and np.triu(a.reshape(-1, T, T), 1).any():
            raise error("attention must be lower triangular (a query attends to positions <= itself)")
    a = np.ascontiguousarray(a, dtype=np.int32)
    c = np.asarray(correct)
    if c.shape != (T,) or (c.size and c.dtype != np.bool_):
        raise error(f"correct must be {T} booleans")
    c = c.astype(np.bool_)
    tok = np.zeros(T, dtype=np.int64) if tokens is None else np.asarray(tokens)
    if tok.shape != (T,) or (tok.size and (not np.issubdtype(tok.dtype, np.integer) or tok.min() < 0)):
        raise error(f"tokens must be {T} non-negative integers")
    tok = tok.astype(np.int64)
    for arr in (a, c, tok):
        arr.setflags(write=False)
    return AttentionTrace(a, c, tok, scale, group, str(name), dict(meta or {}))


# ---------------------------------------------------------------------------- reading

def _err(path: str, lineno: int, msg: str) -> FormatError:
    return FormatError(f"{path}: line {lineno}: {msg}")


def _decode(path: str, lineno: int, line: str) -> dict:
    return _json_hooks.decode_record(path, lineno, line, _DECODER)


def _int_field(path, lineno, rec, key, what, *, minimum=0, limit=2**31):
    if key not in rec:
        raise _err(path, lineno, f"{what} lacks field {key!r}")
    val = rec[key]
    if isinstance(val, bool) or not isinstance(val, int):
        raise _err(path, lineno, f"field {key!r} must be an integer, got {_show(val)}")
    if val < minimum or val >= limit:
        raise _err(path, lineno, f"field {key!r} is {_show(val)}, outside [{minimum}, {limit})")
    return val


def parse_attention(lines, path: str = "<attention>") -> AttentionTrace:
    """Read ``memopt-attention`` lines (a list of strings without newlines)."""
    if not lines:
        raise FormatError(f"{path}: empty file (expected a memopt-attention header line)")
    head = _decode(path, 1, lines[0])
    if head.get("format") != ATTENTION_FORMAT:
        raise _err(path, 1, f"not a {ATTENTION_FORMAT} file (header \"format\" is {_show(head.get('format'))})")
    ver = head.get("version")
    if isinstance(ver, bool) or ver != ATTENTION_VERSION:
        raise _err(path, 1, f"unsupported {ATTENTION_FORMAT} version {_show(ver)} (this memopt reads "
                            f"version {ATTENTION_VERSION})")
    unknown = sorted(set(head) - _HEADER_KEYS)
    if unknown:
        raise _err(path, 1, f"unknown header field {unknown[0]!r}")
    T = _int_field(path, 1, head, "steps", "header", limit=2**16)
    L = _int_field(path, 1, head, "layers", "header", minimum=1, limit=2**12)
    H = _int_field(path, 1, head, "kv_heads", "header", minimum=1, limit=2**12)
    G = _int_field(path, 1, head, "group", "header", minimum=1, limit=2**12)
    S = _int_field(path, 1, head, "scale", "header", minimum=1, limit=2**31)
    if G * S >= _CELL_LIMIT:
        raise _err(path, 1, f"group * scale = {G * S} must be below 2**31")
    if head.get("combine") != "sum":
        raise _err(path, 1, f"field 'combine' must be \"sum\", got {_show(head.get('combine'))}")
    for key in ("name", "model", "text"):
        if key in head and not isinstance(head[key], str):
            raise _err(path, 1, f"field {key!r} must be a string")
    if len(lines) != T + 1:
        where = len(lines) + 1 if len(lines) < T + 1 else T + 2
        raise _err(path, where, f"the header announces {T} steps but the file has {len(lines) - 1} "
                                "step lines" + (" (truncated?)" if len(lines) < T + 1 else ""))
    att = np.zeros((L, H, T, T), dtype=np.int32)
    correct = np.zeros(T, dtype=np.bool_)
    tokens = np.zeros(T, dtype=np.int64)
    cell_max = G * S
    for t in range(T):
        lineno = t + 2
        rec = _decode(path, lineno, lines[t + 1])
        unknown = sorted(set(rec) - _STEP_KEYS)
        if unknown:
            raise _err(path, lineno, f"unknown field {unknown[0]!r} in a step record")
        step = _int_field(path, lineno, rec, "step", "step record", limit=2**16)
        if step != t:
            raise _err(path, lineno, f"expected step {t}, got step {step} (steps must come in order)")
        tokens[t] = _int_field(path, lineno, rec, "token", "step record", limit=2**62)
        if not isinstance(rec.get("correct"), bool):
            raise _err(path, lineno, f"field 'correct' must be true or false, got {_show(rec.get('correct'))}")
        correct[t] = rec["correct"]
        layers = rec.get("attention")
        if not isinstance(layers, list) or len(layers) != L:
            raise _err(path, lineno, f"field 'attention' must be a list of {L} layers")
        for li, heads in enumerate(layers):
            if not isinstance(heads, list) or len(heads) != H:
                raise _err(path, lineno, f"attention of layer {li} must be a list of {H} KV heads")
            for hi, row in enumerate(heads):
                if not isinstance(row, list) or len(row) != t + 1:
                    raise _err(path, lineno, f"layer {li}, KV head {hi}: expected {t + 1} attention "
                                             f"values (positions 0..{t}), got "
                                             f"{len(row) if isinstance(row, list) else _show(row)}")
                if not set(map(type, row)) <= {int}:
                    bad = next(v for v in row if type(v) is not int)
                    raise _err(path, lineno, f"layer {li}, KV head {hi}: attention values must be "
                                             f"integers (units of 1/scale), got {_show(bad)}")
                arr = np.array(row, dtype=object) if any(abs(v) >= 2**62 for v in row) else np.array(row)
                if arr.dtype == object or arr.min() < 0 or arr.max() > cell_max:
                    raise _err(path, lineno, f"layer {li}, KV head {hi}: attention values must lie in "
                                             f"[0, group * scale = {cell_max}]")
                att[li, hi, t, :t + 1] = arr
    meta = {k: head[k] for k in ("model", "text") if k in head}
    return make_attention_trace(att, correct, tokens, scale=S, group=G,
                                name=head.get("name", os.path.basename(path)), meta=meta, error=FormatError)


def load_attention(path) -> AttentionTrace:
    """Read a ``memopt-attention`` trace in either form, told apart by the first bytes: the
    binary ``.npz`` form (a zip archive, :func:`load_attention_npz`) or JSON lines.
    :class:`FormatError` names the file and the line (JSON) or the array (``.npz``)."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise OptionError(f"a trace path must be a string or a path, got {type(path).__name__}") from None
    if is_npz(path):
        return load_attention_npz(path)
    text = _json_hooks.read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return parse_attention([ln[:-1] if ln.endswith("\r") else ln for ln in lines], path)


def dump_attention(trace: AttentionTrace, path) -> None:
    """Write ``trace`` in the ``memopt-attention`` format: the binary form when ``path`` ends
    with ``.npz`` (:func:`dump_attention_npz`), else JSON lines. ``load_attention`` reads
    either back exactly."""
    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"dump_attention needs an AttentionTrace, got {type(trace).__name__}")
    if os.fspath(path).lower().endswith(".npz"):
        return dump_attention_npz(trace, path)
    head = {"format": ATTENTION_FORMAT, "version": ATTENTION_VERSION, "name": trace.name,
            "steps": trace.steps, "layers": trace.layers, "kv_heads": trace.kv_heads,
            "group": trace.group, "scale": trace.scale, "combine": "sum"}
    for key in ("model", "text"):
        if isinstance(trace.meta.get(key), str):
            head[key] = trace.meta[key]
    a = trace.attention
    with open(os.fspath(path), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(head) + "\n")
        for t in range(trace.steps):
            rows = a[:, :, t, :t + 1].tolist()
            fh.write(json.dumps({"step": t, "token": int(trace.tokens[t]),
                                 "correct": bool(trace.correct[t]), "attention": rows},
                                separators=(",", ":")) + "\n")


# ---------------------------------------------------------------------------- binary form (.npz)

#: the ``format`` array of the binary form (``docs/formats.md``)
NPZ_FORMAT = "memopt-attention-npz"
NPZ_VERSION = 1
_NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPZ_REQUIRED = ("format", "version", "scale", "group", "correct", "tokens", "attention")
_NPZ_OPTIONAL = ("name", "model", "text")


def is_npz(path) -> bool:
    """Whether ``path`` starts like a zip archive (the ``.npz`` form), by its magic bytes."""
    try:
        with open(os.fspath(path), "rb") as fh:
            return fh.read(4) in _NPZ_MAGIC
    except OSError:
        return False


def _row_offsets(T: int) -> np.ndarray:
    """Row ``t`` of a packed triangle is ``packed[off[t]:off[t + 1]]`` (positions ``0..t``)."""
    return np.concatenate([[0], np.cumsum(np.arange(1, T + 1, dtype=np.int64))])


def _pack(attention: np.ndarray) -> np.ndarray:
    L, H, T = attention.shape[:3]
    off = _row_offsets(T)
    out = np.empty((L, H, int(off[-1])), dtype=np.int32)
    for t in range(T):
        out[:, :, off[t]:off[t + 1]] = attention[:, :, t, :t + 1]
    return out


def _unpack(packed: np.ndarray, T: int) -> np.ndarray:
    L, H = packed.shape[:2]
    off = _row_offsets(T)
    out = np.zeros((L, H, T, T), dtype=np.int32)
    for t in range(T):
        out[:, :, t, :t + 1] = packed[:, :, off[t]:off[t + 1]]
    return out


def dump_attention_npz(trace: AttentionTrace, path) -> None:
    """Write ``trace`` in the binary form: an uncompressed ``.npz`` (``docs/formats.md``)
    holding the lower triangles of the attention, packed row by row, as int32.
    :func:`load_attention` reads it back exactly."""
    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"dump_attention needs an AttentionTrace, got {type(trace).__name__}")
    arrays = {"format": np.array(NPZ_FORMAT), "version": np.array(NPZ_VERSION, dtype=np.int64),
              "scale": np.array(trace.scale, dtype=np.int64), "group": np.array(trace.group, dtype=np.int64),
              "correct": trace.correct.astype(np.bool_), "tokens": trace.tokens.astype(np.int64),
              "attention": _pack(trace.attention), "name": np.array(trace.name)}
    for key in ("model", "text"):
        if isinstance(trace.meta.get(key), str):
            arrays[key] = np.array(trace.meta[key])
    with open(os.fspath(path), "wb") as fh:        # a file object: numpy adds no ".npz" suffix
        np.savez(fh, **arrays)


def _npz_arrays(path: str) -> dict:
    """Every array of the archive at ``path``, or a FormatError naming the file (and the array)."""
    import zipfile

    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise FormatError(f"{path}: not a readable .npz archive ({_one_line(exc)})") from None
    with archive:
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise FormatError(f"{path}: a single .npy array, not a {NPZ_FORMAT} archive")
        names = list(archive.files)
        unknown = sorted(set(names) - set(_NPZ_REQUIRED) - set(_NPZ_OPTIONAL))
        if unknown:
            raise FormatError(f"{path}: unknown array {unknown[0]!r} in a {NPZ_FORMAT} archive")
        missing = [k for k in _NPZ_REQUIRED if k not in names]
        if missing:
            raise FormatError(f"{path}: array {missing[0]!r} is missing (not a {NPZ_FORMAT} archive, "
                              "or a truncated one)")
        out = {}
        for key in names:
            try:
                out[key] = archive[key]
            except Exception as exc:  # noqa: BLE001 - zipfile, zlib and numpy raise many kinds
                raise FormatError(f"{path}: array {key!r} is unreadable, truncated or corrupt "
                                  f"({_one_line(exc)})") from None
    return out


def _one_line(exc: BaseException) -> str:
    return (" ".join(str(exc).split())[:120] or type(exc).__name__)


def _npz_scalar(path, arrays, key, kind, lo=None, hi=None):
    a = arrays[key]
    if a.shape != ():
        raise FormatError(f"{path}: array {key!r} must be a scalar (shape ()), got shape {a.shape}")
    if kind == "str":
        if a.dtype.kind != "U":
            raise FormatError(f"{path}: array {key!r} must be a unicode string, got dtype {a.dtype}")
        return str(a)
    if a.dtype.kind not in "iu":
        raise FormatError(f"{path}: array {key!r} must be an integer, got dtype {a.dtype}")
    v = int(a)
    if not lo <= v < hi:
        raise FormatError(f"{path}: array {key!r} is {v}, outside [{lo}, {hi})")
    return v


def _npz_array(path, arrays, key, dtype, shape) -> np.ndarray:
    a = arrays[key]
    if a.dtype != np.dtype(dtype):
        raise FormatError(f"{path}: array {key!r} must have dtype {np.dtype(dtype)}, got {a.dtype}")
    if a.shape != shape:
        raise FormatError(f"{path}: array {key!r} must have shape {shape}, got {a.shape}")
    return a


def load_attention_npz(path) -> AttentionTrace:
    """Read the binary form (``docs/formats.md``): every array is checked for dtype, shape and
    range; a problem is a :class:`FormatError` naming the file and the array. Never unpickles."""
    path = os.fspath(path)
    arrays = _npz_arrays(path)
    fmt = _npz_scalar(path, arrays, "format", "str")
    if fmt != NPZ_FORMAT:
        raise FormatError(f"{path}: array 'format' is {_show(fmt)}, not {NPZ_FORMAT!r}")
    ver = _npz_scalar(path, arrays, "version", "int", -2**62, 2**62)
    if ver != NPZ_VERSION:
        raise FormatError(f"{path}: unsupported {NPZ_FORMAT} version {ver} (this memopt reads version "
                          f"{NPZ_VERSION})")
    S = _npz_scalar(path, arrays, "scale", "int", 1, 2**31)
    G = _npz_scalar(path, arrays, "group", "int", 1, 2**12)
    if G * S >= _CELL_LIMIT:
        raise FormatError(f"{path}: group * scale = {G * S} must be below 2**31")
    strings = {k: _npz_scalar(path, arrays, k, "str") for k in _NPZ_OPTIONAL if k in arrays}
    correct = arrays["correct"]
    if correct.ndim != 1:
        raise FormatError(f"{path}: array 'correct' must be 1-d (one flag per step), got shape {correct.shape}")
    T = correct.shape[0]
    if T >= 2**16:
        raise FormatError(f"{path}: array 'correct' has {T} steps, beyond the limit of 2**16")
    _npz_array(path, arrays, "correct", np.bool_, (T,))
    tokens = _npz_array(path, arrays, "tokens", np.int64, (T,))
    if T and (tokens.min() < 0 or tokens.max() >= 2**62):
        raise FormatError(f"{path}: array 'tokens' holds a token id outside [0, 2**62)")
    packed = arrays["attention"]
    if packed.ndim != 3 or not 1 <= packed.shape[0] < 2**12 or not 1 <= packed.shape[1] < 2**12:
        raise FormatError(f"{path}: array 'attention' must have shape (layers, kv_heads, T (T + 1) / 2) "
                          f"with 1 to 4095 layers and KV heads, got {packed.shape}")
    packed = _npz_array(path, arrays, "attention", np.int32, packed.shape[:2] + (T * (T + 1) // 2,))
    if packed.size and int(packed.view(np.uint32).max()) > G * S:      # a negative value is >= 2**31 here
        raise FormatError(f"{path}: array 'attention' holds values outside [0, group * scale = {G * S}]")
    att = _unpack(packed, T)
    correct, tokens = correct.copy(), tokens.copy()
    for arr in (att, correct, tokens):
        arr.setflags(write=False)
    meta = {k: strings[k] for k in ("model", "text") if k in strings}
    return AttentionTrace(att, correct, tokens, S, G, strings.get("name", os.path.basename(path)), meta)


def convert_attention(src, dst) -> AttentionTrace:
    """Read the attention trace ``src`` (either form) and write it to ``dst`` in the form its
    name asks for (``.npz``: binary; anything else: JSON lines). Returns the trace."""
    trace = load_attention(src)
    dump_attention(trace, dst)
    return trace
