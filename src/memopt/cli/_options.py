"""Validation of command-line options: every bad value is an :class:`OptionError` (one line, exit 2).

Nothing here imports numpy or a solver.
"""

from __future__ import annotations

import math
import os
from decimal import Decimal, InvalidOperation

from memopt.errors import FormatError, OptionError

#: Longest time limit accepted (seconds, ~11.6 days): anything above is a typo or a unit mix-up.
MAX_SECONDS = 1e6
#: Largest budget ratio accepted before the baseline is known (budgets are exact int64 bytes;
#: far above 1 every budget behaves alike anyway).
MAX_RATIO = Decimal(10) ** 6
#: Largest number of worker processes of a sweep.
MAX_JOBS = 4096
INT64_MAX = 2**63 - 1


def _show(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def seconds(value: float | None, option: str, *, zero_ok: bool = True) -> float | None:
    """A time limit: finite, >= 0 (> 0 unless ``zero_ok``) and at most :data:`MAX_SECONDS`."""
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        raise OptionError(f"{option} must be a finite number of seconds, got {_show(value)}")
    if value < 0 or (value == 0 and not zero_ok):
        raise OptionError(f"{option} must be {'>= 0' if zero_ok else '> 0'} seconds, got {_show(value)}")
    if value > MAX_SECONDS:
        raise OptionError(f"{option} {_show(value)} is too large (at most {MAX_SECONDS:.0e} seconds)")
    return value


def overhead_limit(value: float | None) -> float | None:
    """DTR's remat limit: a finite slowdown factor >= 1."""
    if value is not None and not (1.0 <= value < math.inf):
        raise OptionError(f"--overhead-limit must be a finite slowdown factor >= 1, got {_show(value)}")
    return value


def integer(value: int, option: str, *, low: int, high: int | None = None) -> int:
    if value < low or (high is not None and value > high):
        rng = f">= {low}" if high is None else f"between {low} and {high}"
        raise OptionError(f"{option} must be {rng}, got {value}")
    return value


def ratio(text: str, option: str) -> Decimal:
    """A budget ratio (exact decimal): finite, > 0, at most :data:`MAX_RATIO`."""
    try:
        value = Decimal(text.strip())
    except (InvalidOperation, AttributeError):
        raise OptionError(f"{option} {text!r} is not a number") from None
    if not value.is_finite() or value <= 0:
        raise OptionError(f"{option} must be a finite positive budget ratio, got {text!r}")
    if value > MAX_RATIO:
        raise OptionError(f"{option} {text!r} is too large: budget ratios above 1e6 are not supported")
    if float(value) <= 0:
        raise OptionError(f"{option} {text!r} is too small to be a budget ratio")
    return value


def budget_fits(value: Decimal, peak: int, option: str) -> None:
    """``int(ratio * baseline peak)`` (the budget simrd computes) must fit in int64."""
    product = float(value) * int(peak)
    if not math.isfinite(product) or product > INT64_MAX:
        raise OptionError(f"{option} {value} is too large for this trace: the budget {value} x {peak} B "
                          f"does not fit in a 64-bit integer")


def not_an_input(outputs: dict[str, str | None], inputs: list[str]) -> None:
    """Refuse an output path that is one of the inputs (or another output): ``-o`` must never
    overwrite the graph it was computed from. ``outputs`` maps option names to paths."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        for other in inputs:
            if _same_file(path, other):
                raise OptionError(f"{option} {path!r} is an input file; refusing to overwrite it")
        for prev_option, prev in seen.items():
            if _same_file(path, prev):
                raise OptionError(f"{option} and {prev_option} name the same file {path!r}")
        if os.path.isdir(path):
            raise OptionError(f"{option} {path!r} is a directory")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise OptionError(f"{option} {path!r}: folder {folder!r} does not exist or is not writable")
        seen[option] = path


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def read_text_input(path: str, what: str = "file") -> None:
    """Fail early, naming the file, when an input cannot be opened (missing, a directory)."""
    if not os.path.exists(path):
        raise FormatError(f"{what} not found: {path}")
    if os.path.isdir(path):
        raise FormatError(f"{what} is a directory: {path}")
