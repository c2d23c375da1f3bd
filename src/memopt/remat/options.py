"""The question options of :func:`memopt.remat` and of the planners built on it
(:func:`memopt.adapters.training.plan`): exactly one question, and the memory ratio parsed
exactly (a decimal, so ``0.1`` is one tenth, not the nearest binary float).

Examples
--------
>>> exactly_one(memory_limit=None, memory_ratio="0.5", cost_budget=None)
'memory_ratio'
>>> limit_of_ratio(parse_ratio("0.5"), 15)   # floor(0.5 x 15)
7
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from memopt.errors import OptionError

__all__ = ["exactly_one", "parse_ratio", "limit_of_ratio"]


def exactly_one(**options) -> str:
    """The name of the one option given (not ``None``); :class:`OptionError` naming the given
    ones otherwise (options in the order passed)."""
    given = [k for k, v in options.items() if v is not None]
    if len(given) != 1:
        raise OptionError(f"give exactly one of {', '.join(options)}"
                          + (f" (got {', '.join(given)})" if given else ""))
    return given[0]


def parse_ratio(value, *, high=10**6, name: str = "memory ratio") -> Decimal:
    """``value`` as an exact :class:`~decimal.Decimal` in ``(0, high]``.

    Raises
    ------
    OptionError
        Not a number (a ``bool`` is not one), not finite, ``<= 0`` or ``> high``.
    """
    try:
        r = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise OptionError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not r.is_finite() or r <= 0 or r > high:
        raise OptionError(f"{name} must be finite, > 0 and <= {_number(high)}, got {value!r}")
    return r


def limit_of_ratio(ratio: Decimal, baseline: int) -> int:
    """``floor(ratio x baseline)``, exactly (in fractions: a decimal product is rounded to the
    context's 28 digits, which can carry it across an integer)."""
    return math.floor(Fraction(ratio) * baseline)


def _number(x) -> str:
    """``10**6`` as ``1e6``, other numbers as written."""
    text = str(x)
    return f"1e{len(text) - 1}" if len(text) > 4 and text.strip("0") == "1" else text
