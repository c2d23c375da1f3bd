"""Output helpers shared by every ``memopt`` sub-command.

One byte formatter (:func:`fmt_bytes`), one JSON writer (:func:`write_json`: exactly one
JSON document, one line, on stdout), one table printer (:func:`print_table`: aligned
columns whatever the cell widths) and one guard of every output file (:func:`writing`,
:func:`write_file`: a write that fails is an error naming the file, never a success).
Nothing here imports numpy: numpy values are recognised by duck typing.
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from decimal import Decimal
from os import PathLike, fspath

from memopt.errors import OptionError

__all__ = ["fmt_bytes", "fmt_count", "fmt_seconds", "jsonable", "write_json", "format_table", "print_table", "writing",
           "write_file", "write_json_file", "verdict_on_failure"]


@contextmanager
def writing(path, what: str):
    """Run a block that writes ``path``; any error writing it (a missing folder, a full disk
    such as ``/dev/full``, a read-only file; often raised only when the file is closed, with
    no file name) becomes one :class:`OptionError` naming ``what`` (the option) and the file.
    An error naming another file (an input) passes through unchanged."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None and not _same_path(exc.filename, path):
            raise
        raise OptionError(f"{what} {fspath(path)}: cannot write: {exc.strerror or exc}") from None


def _same_path(a, b) -> bool:
    return os.path.realpath(fspath(a)) == os.path.realpath(fspath(b))


@contextmanager
def verdict_on_failure(as_json: bool, fields: dict):
    """For the ``verify`` commands' ``--json``: when the block refuses its input (a
    :class:`~memopt.errors.MemoptError`), print the verdict ``{"ok": false, **fields,
    "reason": ..., "error": class name}`` on stdout, then let the error reach the one-line
    message and exit 2. A verdict is printed either way; success prints its own."""
    from memopt.errors import MemoptError

    try:
        yield
    except MemoptError as exc:
        if as_json:
            write_json({"ok": False, **fields, "reason": " ".join(str(exc).split()), "error": type(exc).__name__})
        raise


def write_file(path, data: bytes | str, what: str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` under :func:`writing`."""
    with writing(path, what):
        with open(path, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def write_json_file(path, doc, what: str) -> None:
    """Write ``doc`` to ``path`` as one strict JSON document (:func:`jsonable`) and a newline."""
    write_file(path, json.dumps(jsonable(doc), allow_nan=False) + "\n", what)

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def fmt_bytes(n) -> str:
    """``12345`` -> ``'12345 B (12.06 KiB)'``; below 1 KiB just ``'512 B'``; ``None`` -> ``'-'``."""
    if n is None:
        return "-"
    n = int(n)
    x, k = float(abs(n)), 0
    while x >= 1024 and k < len(_UNITS) - 1:
        x /= 1024
        k += 1
    if k == 0:
        return f"{n} B"
    return f"{n} B ({'-' if n < 0 else ''}{x:.2f} {_UNITS[k]})"


def fmt_seconds(res) -> str:
    """A result's solve seconds, and the seconds spent compiling kernels before its clock
    started (``stats["compile_seconds"]``) when there were any."""
    text = f"{res.seconds:.3f}"
    compiling = (getattr(res, "stats", None) or {}).get("compile_seconds") or 0
    return text + (f" (+ {compiling:.3f} s compiling or loading kernels)" if compiling >= 0.0005 else "")


def fmt_count(n) -> str:
    """A count with thousands separators (``1,234,567``); ``None`` -> ``'-'``."""
    return "-" if n is None else f"{int(n):,}"


def jsonable(obj):
    """Plain JSON data from result objects: ``to_dict()`` is called, numpy scalars and arrays
    become Python numbers and lists, ``Decimal`` a float, tuples/sets lists, paths strings,
    non-finite floats ``null`` (strict JSON has no NaN/Infinity)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Decimal):
        return jsonable(float(obj))
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((jsonable(v) for v in obj), key=repr)
    if isinstance(obj, PathLike):
        return fspath(obj)
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return jsonable(obj.item())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def write_json(obj, stream=None) -> None:
    """Write ``obj`` as exactly one JSON document on one line (stdout by default)."""
    stream = sys.stdout if stream is None else stream
    stream.write(json.dumps(jsonable(obj), allow_nan=False) + "\n")
    stream.flush()


def format_table(rows, *, header=None, align=None, indent: int = 0, gap: int = 2, min_widths=()) -> str:
    """Rows of cells as text with aligned columns.

    Every column is as wide as its widest cell (header included), so no long name shifts
    the columns after it. ``align``: one character per column, ``"l"`` or ``"r"`` (default:
    all left). ``min_widths``: least width of the first columns (to line up with another
    table). Trailing blanks are removed.
    """
    table = [[str(c) for c in row] for row in ([header] if header else []) + [list(r) for r in rows]]
    if not table:
        return ""
    ncols = max(len(r) for r in table)
    for r in table:
        r.extend([""] * (ncols - len(r)))
    align = (align or "l" * ncols).ljust(ncols, "l")
    widths = [max(len(r[j]) for r in table) for j in range(ncols)]
    for j, w in enumerate(list(min_widths)[:ncols]):
        widths[j] = max(widths[j], w)
    lines = []
    for r in table:
        cells = [r[j].rjust(widths[j]) if align[j] == "r" else r[j].ljust(widths[j]) for j in range(ncols)]
        lines.append((" " * indent + (" " * gap).join(cells)).rstrip())
    return "\n".join(lines)


def print_table(rows, *, header=None, align=None, indent: int = 0, gap: int = 2, min_widths=(),
                title: str | None = None) -> None:
    """Print :func:`format_table` (preceded by ``title`` on its own line, if given)."""
    if title:
        print(title)
    text = format_table(rows, header=header, align=align, indent=indent, gap=gap, min_widths=min_widths)
    if text:
        print(text)
