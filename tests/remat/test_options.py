"""The shared question options of memopt.remat and the training planner."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from memopt.errors import OptionError
from memopt.remat.options import exactly_one, limit_of_ratio, parse_ratio


@given(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(0, 10**15))
def test_limit_of_ratio_is_the_exact_floor(num, den, baseline):
    r = Decimal(num) / Decimal(den)
    assert limit_of_ratio(r, baseline) == (Fraction(r) * baseline).__floor__()


@pytest.mark.parametrize("value, high, match", [
    ("abc", 1, "must be a number"), (True, 1, "must be a number"), (float("nan"), 1, "must be finite"),
    (0, 1, r"> 0 and <= 1,"), (1.5, 1, r"<= 1,"), (2 * 10**6, 10**6, r"<= 1e6,")])
def test_parse_ratio_refuses(value, high, match):
    with pytest.raises(OptionError, match=match):
        parse_ratio(value, high=high)


def test_parse_ratio_is_decimal_exact():
    assert parse_ratio(0.1) == Decimal("0.1") and parse_ratio("1", high=1) == 1


def test_exactly_one_names_the_given_options():
    assert exactly_one(a=None, b=0) == "b"
    with pytest.raises(OptionError, match=r"give exactly one of a, b \(got a, b\)"):
        exactly_one(a=1, b=2)
    with pytest.raises(OptionError, match=r"give exactly one of a, b$"):
        exactly_one(a=None, b=None)
