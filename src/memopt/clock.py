"""One clock per call: the time limit, checked once, as a deadline that every part of the call works to.

A call that takes a ``time_limit`` checks it with :func:`check_time_limit` (the library's one
validator: the CLI, :func:`memopt.schedule`, :func:`memopt.remat` and the cache's offline
optimum use it) and makes one :class:`Clock` from it. The parts of the call get the clock or
a :meth:`Clock.child` of it: a sub-deadline at a named share of the time left, from one table
of shares given when the clock is made (recomputation's is
:data:`memopt.remat.time_shares.SHARES`). A part never turns seconds into a deadline again; a
solver that takes seconds (CP-SAT's ``max_time_in_seconds``, SCIP's ``limits/time``, the
scheduler's ``time_limit``) gets :meth:`Clock.left` at the moment it starts.

>>> c = Clock(10.0, shares={"half": Share(0.5), "short": Share(0.5, most=1.0)})
>>> 9.0 < c.left() <= 10.0 and not c.expired()
True
>>> 4.0 < c.child("half").left() <= 5.0, c.child("short").left() <= 1.0
(True, True)
>>> c.child("half").end <= c.end            # a child never ends after its parent
True
>>> Clock(0).expired(), Clock(0).left()
(True, 0.0)
>>> check_time_limit(float("nan"))
Traceback (most recent call last):
...
memopt.errors.OptionError: time limit must be a finite number of seconds, got nan
"""

from __future__ import annotations

import contextlib
import gc
import math
import threading
import time
from typing import Mapping, NamedTuple

from memopt.errors import OptionError

__all__ = ["Clock", "Share", "check_time_limit", "MAX_SECONDS", "full_collections_held"]

#: the longest time limit accepted (seconds, about 11.6 days): anything above is a typo or a unit mix-up
MAX_SECONDS = 1e6


def check_time_limit(value, option: str = "time limit", *, zero_ok: bool = True) -> float:
    """The library's one time-limit check.

    Parameters
    ----------
    value : float
        Seconds.
    option : str, default "time limit"
        The name used in the error (``"--time-limit"`` on the command line).
    zero_ok : bool, default True
        Whether 0 is accepted (a call with no time returns its first answer at once).

    Returns
    -------
    float
        ``value`` as a float.

    Raises
    ------
    OptionError
        Not a number, a bool, not finite, negative (or 0 unless ``zero_ok``), or above
        :data:`MAX_SECONDS`; one line naming ``option``.

    Examples
    --------
    >>> check_time_limit(3), check_time_limit(0)
    (3.0, 0.0)
    >>> check_time_limit(True, "--time-limit")
    Traceback (most recent call last):
    ...
    memopt.errors.OptionError: --time-limit must be a number of seconds, got True
    """
    if isinstance(value, bool):
        raise OptionError(f"{option} must be a number of seconds, got {value!r}")
    try:
        t = float(value)
    except (TypeError, ValueError, OverflowError):
        raise OptionError(f"{option} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(t):
        raise OptionError(f"{option} must be a finite number of seconds, got {value!r}")
    if t < 0 or (t == 0 and not zero_ok):
        raise OptionError(f"{option} must be {'>= 0' if zero_ok else '> 0'} seconds, got {value!r}")
    if t > MAX_SECONDS:
        raise OptionError(f"{option} {value!r} is too large (at most {MAX_SECONDS:.0e} seconds)")
    return t


#: generation 2's threshold while full collections are held (:func:`full_collections_held`): the
#: most :func:`gc.set_threshold` takes, a count of younger collections no call reaches
NEVER = 2**31 - 1

# the calls inside full_collections_held() now, and the thresholds to restore after the last
_held_lock = threading.Lock()
_held_depth = 0
_held_thresholds = None


@contextlib.contextmanager
def full_collections_held():
    """Within it, Python's garbage collector makes no automatic full (generation-2)
    collection; at its end the thresholds are restored and the next allocations trigger the
    collection as usual. Young collections and explicit :func:`gc.collect` calls go on.

    Why: a full collection visits every object of the process and cannot be interrupted. In
    the benchmark table's process, under a load of 10 on two cores, eight of them took 9.7 s of
    a 60 s recomputation call (up to 1.5 s each): one landing after the parts' closing reserve
    takes the call past its deadline. Objects that die in a reference cycle during the call
    are collected after it (the numerical parts make few cycles).

    Re-entrant (a call inside a call, or calls in several threads: the first to enter saves
    the thresholds, the last to leave restores them).

    >>> t = gc.get_threshold()
    >>> with full_collections_held():
    ...     gc.get_threshold()[2] == NEVER
    True
    >>> gc.get_threshold() == t
    True
    """
    global _held_depth, _held_thresholds
    with _held_lock:
        if _held_depth == 0:
            _held_thresholds = gc.get_threshold()
            gc.set_threshold(*_held_thresholds[:2], NEVER)
        _held_depth += 1
    try:
        yield
    finally:
        with _held_lock:
            _held_depth -= 1
            if _held_depth == 0:
                gc.set_threshold(*_held_thresholds)
                _held_thresholds = None


class Share(NamedTuple):
    """One entry of a table of shares: ``fraction`` of the time left when the part starts (of
    the clock's whole time with ``of_total``), at most ``most`` seconds."""

    fraction: float
    most: float | None = None
    of_total: bool = False


class Clock:
    """A deadline (``end``, on :func:`time.perf_counter`) and the table of shares its parts use.

    Parameters
    ----------
    seconds : float
        Time from now (or from ``now``) to the deadline; negative counts as 0.
    shares : mapping of str to Share, optional
        The named shares :meth:`child` hands out; children inherit it.
    now : float, optional
        The start, a :func:`time.perf_counter` reading (default: now).

    Examples
    --------
    >>> c = Clock(2.0)
    >>> c.until(c.start + 1.0).end == c.start + 1.0, c.until(c.end + 5).end == c.end
    (True, True)
    """

    __slots__ = ("start", "end", "shares")

    def __init__(self, seconds: float, *, shares: Mapping[str, Share] | None = None, now: float | None = None):
        self.start = time.perf_counter() if now is None else float(now)
        self.end = self.start + max(0.0, float(seconds))
        self.shares = {} if shares is None else shares

    def __repr__(self) -> str:
        return f"Clock(left={self.left():.3f}s)"

    def left(self) -> float:
        """Seconds to the deadline (0 once it has passed)."""
        return max(0.0, self.end - time.perf_counter())

    def expired(self) -> bool:
        return time.perf_counter() >= self.end

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _sub(self, now: float, end: float) -> Clock:
        """A clock started at ``now`` that ends at ``end`` or at this one's deadline (never later)."""
        sub = Clock(0.0, shares=self.shares, now=now)
        sub.end = max(now, min(float(end), self.end))
        return sub

    def until(self, end: float) -> Clock:
        """A clock that ends at ``end`` (a :func:`time.perf_counter` reading) or at this one's
        deadline, whichever is first."""
        return self._sub(time.perf_counter(), end)

    def part(self, fraction: float, most: float | None = None) -> Clock:
        """A clock for ``fraction`` of the time left (at most ``most`` seconds), started now:
        for splits computed at run time (equal slices of a loop); fixed shares come from
        :meth:`child`. ``part(1.0)``: the same deadline, counted from now."""
        now = time.perf_counter()
        if float(fraction) >= 1.0 and most is None:
            return self._sub(now, self.end)
        span = max(0.0, float(fraction)) * max(0.0, self.end - now)
        if most is not None:
            span = min(span, float(most))
        return self._sub(now, now + span)

    def child(self, name: str) -> Clock:
        """The sub-deadline of the share ``name`` of the table (a ``KeyError`` names a share
        missing from it: a bug, not bad input)."""
        s = self.shares[name]
        if s.of_total:
            now = time.perf_counter()
            end = self.start + s.fraction * (self.end - self.start)
            if s.most is not None:
                end = min(end, now + s.most)
            return self.until(end)
        return self.part(s.fraction, s.most)

    def seconds(self, name: str | None = None) -> float:
        """:meth:`left`, or that of the share ``name``: for a solver that takes seconds."""
        return self.left() if name is None else self.child(name).left()
