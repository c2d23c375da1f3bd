"""Output helpers shared by every ``memopt`` sub-command.

One byte formatter (:func:`fmt_bytes`), one JSON writer (:func:`write_json`: exactly one
JSON document, one line, on stdout) and one table printer (:func:`print_table`: aligned
columns whatever the cell widths). Nothing here imports numpy: numpy values are
recognised by duck typing.
"""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from os import PathLike, fspath

__all__ = ["fmt_bytes", "fmt_count", "fmt_seconds", "jsonable", "write_json", "format_table", "print_table"]

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
