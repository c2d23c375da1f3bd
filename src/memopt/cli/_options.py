"""Validation of command-line options: every bad value is an :class:`OptionError` (one line, exit 2).

The one parser of the numbers options carry, used by every command family and by the
library's option-string parsers (grids, capacities, lags): whole numbers (:func:`whole`,
:func:`whole_or_inf`), exact decimals (:func:`decimal`, :func:`ratio`), arithmetic grids
(:func:`arithmetic_grid`) and time limits (:func:`seconds`). Text is checked before it is
converted, so a 5,000-digit number or ``1e-999999`` is refused at once by its size, never
materialised (Python refuses ``int()`` of more than 4,300 digits; a million-digit grid count
would take minutes). Nothing here imports numpy or a solver.
"""

from __future__ import annotations

import decimal as _decimal
import math
import os
import re
from decimal import Decimal, InvalidOperation

from memopt.errors import FormatError, OptionError

from memopt.clock import MAX_SECONDS, check_time_limit  # noqa: F401 -- MAX_SECONDS: part of this module's options
#: Largest budget ratio accepted before the baseline is known (budgets are exact int64 bytes;
#: far above 1 every budget behaves alike anyway).
MAX_RATIO = Decimal(10) ** 6
#: Largest number of worker processes of a sweep.
MAX_JOBS = 4096
INT64_MAX = 2**63 - 1
#: Significant digits an option's decimal may carry (decimal's default precision): a ratio,
#: grid end or step with more is a typo, and refusing it keeps every grid point exact.
MAX_DECIMAL_DIGITS = 28
#: Smallest decimal exponent an option's nonzero decimal may have: ``1e-30`` of any int64
#: peak is below one byte, so a smaller ratio or step names no experiment.
MIN_DECIMAL_EXPONENT = -30
#: Longest value shown in a message: a 5,000-digit option is named by its start and length.
SHOW_CHARS = 40

_WHOLE = re.compile(r"[+-]?[0-9]+")


def show(value) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) > SHOW_CHARS:
        text = f"{text[:SHOW_CHARS - 12]}... ({len(str(value))} characters)"
    return text


def whole(text, option: str, *, low: int = 0, high: int = INT64_MAX) -> int:
    """A whole number written in decimal digits, in ``[low, high]``; its length is checked
    before it is converted."""
    raw = str(text).strip()
    if not _WHOLE.fullmatch(raw):
        raise OptionError(f"{option} must be a whole number, got {show(text)}")
    digits = raw.lstrip("+-").lstrip("0")
    if len(digits) > len(str(max(abs(low), abs(high)))):
        raise OptionError(f"{option} {show(text)} is out of range (between {low} and {high})")
    return integer(int(raw), option, low=low, high=high)


def whole_or_inf(text, option: str, *, low: int = 0, high: int = INT64_MAX) -> int | float:
    """:func:`whole`, or ``inf``/``infinity`` (any case) as ``math.inf``."""
    if str(text).strip().lower() in ("inf", "infinity"):
        return math.inf
    return whole(text, option, low=low, high=high)


def decimal(text, option: str, *, low: Decimal | int | None = None, low_open: bool = False,
            high: Decimal | int | None = None) -> Decimal:
    """An exact decimal (``0.25``, ``1e-3``; no ``inf``/``nan``) in ``[low, high]`` (``(low,
    high]`` if ``low_open``), with at most :data:`MAX_DECIMAL_DIGITS` significant digits and,
    unless zero, an exponent of at least :data:`MIN_DECIMAL_EXPONENT`. Sizes are checked on
    the parsed digits and exponent, which Decimal holds without expanding them."""
    raw = str(text).strip()
    try:
        value = Decimal(raw)
    except (InvalidOperation, ValueError):
        raise OptionError(f"{option} {show(text)} is not a number") from None
    if not value.is_finite():
        raise OptionError(f"{option} must be a finite number, got {show(text)}")
    if value and value.adjusted() < MIN_DECIMAL_EXPONENT:
        raise OptionError(f"{option} {show(text)} is too small (a nonzero value must be at least "
                          f"1e{MIN_DECIMAL_EXPONENT})")
    if high is not None and value > high:
        raise OptionError(f"{option} {show(text)} is too large (at most {high})")
    if low is not None and (value < low or (low_open and value == low)):
        raise OptionError(f"{option} must be {'>' if low_open else '>='} {low}, got {show(text)}")
    if len("".join(map(str, value.as_tuple().digits)).strip("0")) > MAX_DECIMAL_DIGITS:  # normalize() rounds
        raise OptionError(f"{option} {show(text)} has more than {MAX_DECIMAL_DIGITS} significant digits")
    return value


def arithmetic_grid(start, stop, step, where: str, max_points: int) -> tuple:
    """``start, start + step, ...`` while ``<= stop``, exactly, for ints or decimals from
    :func:`whole` / :func:`decimal` (``step > 0``, ``stop >= start`` already checked); more
    than ``max_points`` points is an :class:`OptionError` raised before any point is built.
    Decimals run at a precision that holds every point of such a grid exactly."""
    with _decimal.localcontext() as ctx:
        ctx.prec = 4 * MAX_DECIMAL_DIGITS - 2 * MIN_DECIMAL_EXPONENT
        ctx.traps[_decimal.Inexact] = True     # a rounded point would be a bug, not a grid
        count = (stop - start) // step + 1
        if count > max_points:
            raise OptionError(f"{where}: {count} points (at most {max_points:,})")
        return tuple(start + k * step for k in range(int(count)))


def seconds(value: float | None, option: str, *, zero_ok: bool = True) -> float | None:
    """A time limit: :func:`memopt.clock.check_time_limit` (finite, >= 0, > 0 unless
    ``zero_ok``, at most :data:`MAX_SECONDS`), ``None`` kept."""
    if value is None:
        return None
    return check_time_limit(value, option, zero_ok=zero_ok)


def overhead_limit(value: float | None) -> float | None:
    """DTR's remat limit: a finite slowdown factor >= 1."""
    if value is not None and not (1.0 <= value < math.inf):
        raise OptionError(f"--overhead-limit must be a finite slowdown factor >= 1, got {show(value)}")
    return value


def integer(value: int, option: str, *, low: int, high: int | None = None) -> int:
    """An int already parsed (by argparse's ``type=int``) in ``[low, high]``."""
    if value < low or (high is not None and value > high):
        rng = f">= {low}" if high is None else f"between {low} and {high}"
        raise OptionError(f"{option} must be {rng}, got {show(value)}")
    return value


def ratio(text: str, option: str) -> Decimal:
    """A budget ratio (exact decimal): finite, > 0, at most :data:`MAX_RATIO`."""
    value = decimal(text, option, high=MAX_RATIO)
    if value <= 0:
        raise OptionError(f"{option} must be a finite positive budget ratio, got {show(text)}")
    return value


def budget_fits(value: Decimal, peak: int, option: str) -> None:
    """``int(ratio * baseline peak)`` (the budget simrd computes) must fit in int64."""
    product = float(value) * int(peak)
    if not math.isfinite(product) or product > INT64_MAX:
        raise OptionError(f"{option} {value} is too large for this trace: the budget {value} x {peak} B "
                          f"does not fit in a 64-bit integer")


#: The image formats matplotlib writes (by a ``--plot`` file's extension; none means PNG):
#: checked before a sweep runs, so that a typo does not cost the sweep.
PLOT_FORMATS = ("png", "svg", "svgz", "pdf", "ps", "eps", "jpg", "jpeg", "tif", "tiff", "webp", "pgf", "raw",
                "rgba")


def not_an_input(outputs: dict[str, str | None], inputs: list[str]) -> None:
    """Refuse an output path that is one of the inputs (or another output): ``-o`` must never
    overwrite the graph it was computed from. ``outputs`` maps option names to paths; a
    ``--plot`` path must name one of :data:`PLOT_FORMATS`."""
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
        ext = os.path.splitext(path)[1][1:].lower()
        if option.startswith("--plot") and ext and ext not in PLOT_FORMATS:
            raise OptionError(f"{option} {path!r}: matplotlib cannot write .{ext} files (use .png, .svg or .pdf)")
        seen[option] = path


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def not_a_device(path: str) -> None:
    """Refuse an input that is a character or block device (``/dev/zero``, ``/dev/urandom``,
    a terminal): reading one would never end. Pipes and regular files pass."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return  # a missing or unnamable file is reported by its reader, naming it
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise FormatError(f"{path} is a device, not a file (reading it would never end)")


def read_text_input(path: str, what: str = "file") -> None:
    """Fail early, naming the file, when an input cannot be opened (missing, a directory)."""
    if not os.path.exists(path):
        raise FormatError(f"{what} not found: {path}")
    if os.path.isdir(path):
        raise FormatError(f"{what} is a directory: {path}")
