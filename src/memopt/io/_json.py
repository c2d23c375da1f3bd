"""Reading JSON files with errors that name the file and the place."""

from __future__ import annotations

import json
import os

from memopt.errors import FormatError


def read_json(path: str | os.PathLike):
    """Parse a JSON file; a malformed or truncated file raises FormatError with line and column."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise FormatError(f"{path}: empty file")
    try:
        return json.loads(text)
    except RecursionError:
        raise FormatError(f"{path}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        # the parser ran off the end of the text (or of an unclosed string): the file was cut short
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        what = "truncated JSON" if truncated else "malformed JSON"
        raise FormatError(f"{path}: {what} at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


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


def int_field(obj: dict, key: str, where: str, default=None) -> int:
    """An integer byte count (JSON ints, or floats with an integral value)."""
    if key not in obj and default is not None:
        return default
    val = require(obj, key, where)
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise FormatError(f"{where}: field {key!r} must be a number, got {val!r}")
    if isinstance(val, float):
        if val != val or val in (float("inf"), float("-inf")) or not val.is_integer():
            raise FormatError(f"{where}: field {key!r} must be a whole number of bytes, got {val!r}")
        val = int(val)
    if val < 0:
        raise FormatError(f"{where}: field {key!r} is negative: {val}")
    if val >= 2**62:
        raise FormatError(f"{where}: field {key!r} is {val} bytes, beyond memopt's exact limit of 2**62")
    return val


def bool_field(obj: dict, key: str, where: str, default: bool = False) -> bool:
    """A JSON boolean (a string such as "false" is an error, not a truthy value)."""
    val = obj.get(key, default)
    if not isinstance(val, bool):
        raise FormatError(f"{where}: field {key!r} must be true or false, got {val!r}")
    return val


def is_id(x) -> bool:
    """Node ids of node-link files: JSON numbers or strings."""
    return isinstance(x, (int, str)) and not isinstance(x, bool)
