"""Reading JSON with errors that name the file and the place, and exact-arithmetic limits.

Limits (documented in ``docs/formats.md``, "Limits"): every byte count is an integer in
``[0, MAX_BYTES)`` and so is every total a model adds up (all tensor sizes plus the largest
workspace of a graph; all input and allocation sizes plus the largest transient of a
program), so that every int64 sum memopt computes is exact. Compute costs are finite
numbers in ``[0, MAX_BYTES)``. JSON itself is read strictly: bare ``NaN``/``Infinity``
are refused, as are integers of more than :data:`MAX_INT_DIGITS` digits, floats that
overflow to infinity and nesting deeper than Python's parser can follow.
"""

from __future__ import annotations

import json
import math
import os
import re

from memopt.errors import FormatError

#: Every byte count, cost and total must be below this (so that any int64 sum of two is exact).
MAX_BYTES = 2**62
#: Longer integer literals are refused while parsing (they cannot be any memopt quantity,
#: and Python refuses to convert integers of more than 4300 digits to text).
MAX_INT_DIGITS = 300

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)|([\[{])|([\]}])', re.S)


class _BadNumber(Exception):
    def __init__(self, text: str, what: str):
        super().__init__(text)
        self.text, self.what = text, what


def show_number(val) -> str:
    """A short text for a number in a message (never a numpy repr, never 5000 digits)."""
    try:
        import numpy as np

        if isinstance(val, np.generic):
            val = val.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(val, bool):
        return repr(val)
    if isinstance(val, int):
        if abs(val) < 10**20:
            return str(val)
        digits = len(str(abs(val))) if abs(val).bit_length() < 14000 else None
        if digits is None:
            return "an integer of more than 4000 digits"
        return f"{float(val):.3e} (an integer of {digits} digits)" if digits < 309 else \
            f"an integer of {digits} digits"
    if isinstance(val, float):
        return repr(val)
    from fractions import Fraction

    if isinstance(val, Fraction):
        text = str(val)
        return text if len(text) <= 60 else f"about {float(val):.6e}"
    if isinstance(val, str):
        return repr(val if len(val) <= 60 else val[:57] + "...")
    text = repr(val)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + (text[0] == "-"):
        raise _BadNumber(text, f"an integer of {len(text.lstrip('-'))} digits is beyond memopt's "
                               "limit of 2**62")
    return int(text)


def _parse_float(text: str) -> float:
    val = float(text)
    if not math.isfinite(val):
        raise _BadNumber(text, f"the number {text[:40]}{'...' if len(text) > 40 else ''} "
                               "overflows a float (memopt needs finite numbers)")
    return val


class DecimalText(float):
    """A JSON number with a fraction or an exponent: the float value, and ``text``, the literal
    as written, from which :func:`exact_value` reads its exact decimal value."""

    __slots__ = ("text",)

    def __new__(cls, value: float, text: str):
        obj = super().__new__(cls, value)
        obj.text = text
        return obj

    def __reduce__(self):
        return (DecimalText, (float(self), self.text))


def _parse_float_text(text: str) -> DecimalText:
    return DecimalText(_parse_float(text), text)


#: Exact decimals with more digits after the point than this are refused (their exact value
#: would need a denominator of that many digits).
MAX_DECIMAL_PLACES = 300


def exact_value(val, what: str, error=FormatError):
    """The exact value of a number read from a file: an ``int`` stays one; a number written
    with a fraction or an exponent (:class:`DecimalText`) is the exact value of its decimal
    text (``0.1`` is ``Fraction(1, 10)``, ``5.0`` is ``5``); a string ``"p/q"`` or ``"p"``
    (integers, ``q > 0``) is that fraction; a bare float (data not read by :func:`loads`) is
    the value of its shortest text, as :func:`exact_json` writes it. An
    integral value is returned as an ``int``, any other as a ``Fraction``. Anything else
    raises ``error`` naming ``what``."""
    from decimal import Decimal, InvalidOperation
    from fractions import Fraction

    if isinstance(val, bool):
        raise error(f"{what} must be a number, got {show_number(val)}")
    if isinstance(val, int):
        return val
    if isinstance(val, Fraction):
        exact = val
    elif isinstance(val, DecimalText):
        try:
            dec = Decimal(val.text)
        except InvalidOperation:  # pragma: no cover (the JSON parser accepted it as a number)
            raise error(f"{what} is not a number: {show_number(val.text)}") from None
        exact = _decimal_fraction(dec, val.text, what, error)
    elif isinstance(val, float):
        if not math.isfinite(val):
            raise error(f"{what} must be a finite number, got {show_number(val)}")
        exact = Fraction(repr(val))
    elif isinstance(val, str):
        m = re.fullmatch(r"\s*(-?\d{1,300})\s*(?:/\s*(\d{1,300})\s*)?", val)
        if not m:
            raise error(f"{what} must be a number or an exact fraction text such as \"1/10\", "
                        f"got {show_number(val)}")
        den = int(m.group(2) or 1)
        if den == 0:
            raise error(f"{what} has a zero denominator: {show_number(val)}")
        exact = Fraction(int(m.group(1)), den)
    else:
        raise error(f"{what} must be a number, got {show_number(val)}")
    return int(exact) if exact.denominator == 1 else exact


def exact_from_text(text: str, what: str, error=FormatError):
    """The exact value of a number given as text (a command-line option): ``"p/q"``, or a
    decimal such as ``0.1`` or ``2.5e-3``, read as :func:`exact_value` reads a file's numbers
    (a huge exponent is refused, never expanded); ``error`` naming ``what`` otherwise."""
    from decimal import Decimal, InvalidOperation

    text = str(text).strip()
    if "/" in text or re.fullmatch(r"-?\d{1,300}", text):
        return exact_value(text, what, error)
    try:
        dec = Decimal(text)
    except InvalidOperation:
        raise error(f"{what} must be a number, got {show_number(text)}") from None
    if not dec.is_finite():
        raise error(f"{what} must be a finite number, got {show_number(text)}")
    exact = _decimal_fraction(dec, text, what, error)
    return int(exact) if exact.denominator == 1 else exact


def _decimal_fraction(dec, text: str, what: str, error):
    """The exact Fraction of a finite Decimal, refusing exponents that would need a
    denominator (or numerator) of more than :data:`MAX_DECIMAL_PLACES` digits."""
    from fractions import Fraction

    if dec.is_zero():
        return Fraction(0)
    exp = dec.as_tuple().exponent
    if exp < -MAX_DECIMAL_PLACES:
        raise error(f"{what} has more than {MAX_DECIMAL_PLACES} decimal places: {show_number(text)}")
    if dec.adjusted() > MAX_INT_DIGITS:
        raise error(f"{what} is {show_number(text)}, beyond memopt's limit of 2**62")
    return Fraction(dec)


def _parse_constant(text: str):
    raise _BadNumber(text, f"bare {text} is not valid JSON (memopt needs finite numbers)")


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _field_before(text: str, pos: int) -> str:
    """`` (field 'size')`` when the number at ``pos`` is the value of a key, else ``""``."""
    m = re.search(r'"((?:[^"\\]|\\.){1,60})"\s*:\s*-?$', text[max(0, pos - 200):pos])
    return f", field {m.group(1)!r}" if m else ""


def _bad_number_position(text: str, bad: _BadNumber) -> int:
    if bad.text in ("NaN", "Infinity", "-Infinity"):
        for m in _TOKEN.finditer(text):
            if m.group(1):
                return m.start(1)
        return 0
    pos = text.find(bad.text)
    return max(pos, 0)


def _deepest_position(text: str) -> int:
    depth = best = best_pos = 0
    for m in _TOKEN.finditer(text):
        if m.group(2):
            depth += 1
            if depth > best:
                best, best_pos = depth, m.start()
        elif m.group(3):
            depth -= 1
    return best_pos


def loads(text: str, where: str):
    """``json.loads`` for memopt: every failure is a :class:`FormatError` that starts with
    ``where`` and gives the line and column (and the field, for a number out of range)."""
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float_text,
                          parse_constant=_parse_constant)
    except _BadNumber as bad:
        pos = _bad_number_position(text, bad)
        line, col = _line_col(text, pos)
        raise FormatError(f"{where}: line {line}, column {col}{_field_before(text, pos)}: {bad.what}") from None
    except RecursionError:
        line, col = _line_col(text, _deepest_position(text))
        raise FormatError(f"{where}: JSON nested too deeply to read (line {line}, column {col})") from None
    except json.JSONDecodeError as exc:
        # the parser ran off the end of the text (or of an unclosed string): the file was cut short
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        what = "truncated JSON" if truncated else "malformed JSON"
        raise FormatError(f"{where}: {what} at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (ValueError, TypeError, OverflowError, MemoryError) as exc:  # defensive: never a bare error
        raise FormatError(f"{where}: unreadable JSON ({type(exc).__name__}: {str(exc)[:100]})") from None


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of a file; a missing, unreadable or non-text file raises FormatError."""
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        raise FormatError(f"{show_number(path)}: not a file path (a string or a path)")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None


def read_json(path: str | os.PathLike):
    """Parse a JSON file; a malformed or truncated file raises FormatError with line and column."""
    text = read_text(path)
    if not text.strip():
        raise FormatError(f"{path}: empty file")
    return loads(text, str(path))


def require(obj: dict, key: str, where: str, types=None):
    """``obj[key]``, or a FormatError naming ``where`` and the missing field."""
    if not isinstance(obj, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise FormatError(f"{where}: missing field {key!r}")
    val = obj[key]
    if types is not None and not isinstance(val, types):
        raise FormatError(f"{where}: field {key!r} has the wrong type ({type(val).__name__})")
    return val


def byte_count(val, what: str, error=FormatError) -> int:
    """``val`` as an exact byte count in ``[0, MAX_BYTES)`` (JSON ints, or floats with an
    integral value); otherwise ``error`` naming ``what``."""
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise error(f"{what} must be a number, got {show_number(val)}")
    if isinstance(val, float):
        if not math.isfinite(val) or not val.is_integer():
            raise error(f"{what} must be a whole number of bytes, got {show_number(val)}")
        if isinstance(val, DecimalText):
            # the value of the text, not of its float (1.0000000000000000001 is no whole number)
            exact = exact_value(val, what, error)
            if not isinstance(exact, int):
                raise error(f"{what} must be a whole number of bytes, got {show_number(val.text)}")
            val = exact
        elif val >= MAX_BYTES:
            raise error(f"{what} is {show_number(val)} bytes, beyond memopt's exact limit of 2**62")
        else:
            val = int(val)
    if val < 0:
        raise error(f"{what} is negative: {show_number(val)}")
    if val >= MAX_BYTES:
        raise error(f"{what} is {show_number(val)} bytes, beyond memopt's exact limit of 2**62")
    return val


def int_field(obj: dict, key: str, where: str, default=None) -> int:
    """An integer byte count (JSON ints, or floats with an integral value) in ``[0, 2**62)``.

    A negative value raises :class:`GraphError` (a well-formed file describing an invalid
    model); every other problem :class:`FormatError`."""
    if key not in obj and default is not None:
        return default
    val = require(obj, key, where)
    if not isinstance(val, bool) and isinstance(val, (int, float)) and val < 0:
        from memopt.errors import GraphError

        raise GraphError(f"{where}: field {key!r} is negative: {show_number(val)}")
    return byte_count(val, f"{where}: field {key!r}")


def cost_field(obj: dict, key: str, where: str, default=None):
    """A compute cost, exactly (:func:`exact_value`: an ``int``, or a ``Fraction`` such as
    ``Fraction(1, 10)`` for the text ``0.1`` or ``"1/10"``) in ``[0, 2**62)``."""
    if key not in obj and default is not None:
        return default
    val = require(obj, key, where)
    if isinstance(val, bool) or not isinstance(val, (int, float, str)):
        raise FormatError(f"{where}: field {key!r} must be a non-negative number, got {show_number(val)}")
    if isinstance(val, float) and not math.isfinite(val):
        raise FormatError(f"{where}: field {key!r} must be a finite number, got {show_number(val)}")
    val = exact_value(val, f"{where}: field {key!r}")
    if val < 0:
        from memopt.errors import GraphError

        raise GraphError(f"{where}: field {key!r} is negative: {show_number(val)}")
    if val >= MAX_BYTES:
        raise FormatError(f"{where}: field {key!r} is {show_number(val)}, beyond memopt's limit of 2**62")
    return val


def exact_json(x):
    """An exact number (``int`` or ``Fraction``) as JSON data that :func:`exact_value` reads back
    as exactly that number: an integer as a JSON integer; a ``Fraction`` as a JSON number when
    the shortest text of its nearest float is exactly its decimal value (``0.1`` for
    ``Fraction(1, 10)``), else as the string ``"p/q"`` (``"1/3"``). ``None`` stays ``None``."""
    from fractions import Fraction

    if x is None or isinstance(x, bool):
        return x
    if hasattr(x, "dtype") and hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):
        x = Fraction(x)
    if isinstance(x, int):
        return x
    if isinstance(x, Fraction):
        if x.denominator == 1:
            return x.numerator
        f = float(x)
        if Fraction(repr(f)) == x:
            return f
        return f"{x.numerator}/{x.denominator}"
    raise TypeError(f"not an exact number: {x!r}")


def bool_field(obj: dict, key: str, where: str, default: bool = False) -> bool:
    """A JSON boolean (a string such as "false" is an error, not a truthy value)."""
    val = obj.get(key, default)
    if not isinstance(val, bool):
        raise FormatError(f"{where}: field {key!r} must be true or false, got {show_number(val)}")
    return val


def is_id(x) -> bool:
    """Node ids of node-link files: JSON numbers or strings."""
    return isinstance(x, (int, str)) and not isinstance(x, bool)


#: the decoder of JSON-lines records (DTR logs, request traces, routes): strict numbers
LINE_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)


def decode_record(path: str, lineno: int, line: str, decoder: json.JSONDecoder = LINE_DECODER) -> dict:
    """One JSON-lines record as a dict, or a :class:`FormatError` naming ``path`` and the line:
    empty line, malformed or truncated JSON, a number beyond the limits, nesting too deep, or
    a record that is not an object. Shared by every JSON-lines reader of memopt."""
    def err(msg: str) -> FormatError:
        return FormatError(f"{path}: line {lineno}: {msg}")

    if line.strip() == "":
        raise err("empty line (expected a JSON record)")
    try:
        rec = decoder.decode(line)
    except json.JSONDecodeError as exc:
        raise err(f"invalid JSON ({exc.msg} at column {exc.colno}); truncated or corrupt record") from None
    except _BadNumber as bad:
        raise err(f"invalid JSON: {bad.what}") from None
    except RecursionError:
        raise err("invalid JSON: nested too deeply to read") from None
    except (ValueError, TypeError, OverflowError) as exc:  # defensive: never a bare error
        raise err(f"invalid JSON ({type(exc).__name__})") from None
    if not isinstance(rec, dict):
        raise err("record is not a JSON object")
    return rec


def plain_data(x, leaf=None):
    """``x`` as plain JSON data: dict keys as strings, tuples as lists, numpy arrays and
    scalars as Python lists and numbers; anything else goes through ``leaf`` (default: kept).
    What every result type's ``to_dict()`` uses for its free-form parts (stats, witnesses)."""
    if isinstance(x, dict):
        return {str(k): plain_data(v, leaf) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain_data(v, leaf) for v in x]
    if hasattr(x, "dtype") and hasattr(x, "tolist"):  # numpy arrays and scalars
        return x.tolist()
    return x if leaf is None else leaf(x)
