"""One clock per call: the time limit, checked once, as a deadline that every part of the call works to.

A call that takes a ``time_limit`` checks it with :func:`check_time_limit` (the library's one
validator: the CLI, :func:`memopt.schedule`, :func:`memopt.remat` and the cache's offline
optimum use it) and makes one :class:`Clock` from it. The parts of the call get the clock or
a :meth:`Clock.child` of it: a sub-deadline at a named share of the time left, from one table
of shares given when the clock is made (recomputation's is
:data:`memopt.time_shares.SHARES`). A part never turns seconds into a deadline again; a
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

import atexit
import contextlib
import gc
import math
import threading
import time
from typing import Mapping, NamedTuple

from memopt.errors import OptionError

__all__ = ["Clock", "Share", "check_time_limit", "MAX_SECONDS", "full_collections_held", "solve_by"]

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


# the CP-SAT solves running now (thread, solver), each removed by its own thread as it ends;
# the ones still there at exit were dropped at their deadline (see solve_by)
_running_lock = threading.Lock()
_running: set = set()


def solve_by(solver, model, end: float, callback=None):
    """CP-SAT's ``solver.solve(model, callback)``, back by ``end`` (a :func:`time.perf_counter`
    reading) whatever the solver does: the status, or ``None`` when it had not returned by then.

    Why: CP-SAT's workers look at their time limit between steps, and under load some steps run
    long. On a ResNet-50 training graph, under a load of 5 on two cores, a solve given 8.1 s
    returned after 13.8 s (its full-problem worker stopped 11.4 s into its search). So the solve
    runs in a thread of its own: CP-SAT's limit is the time to ``end`` less the share
    ``solver.stop`` of :data:`memopt.time_shares.SHARES` (what a solver that obeys its limit
    needs to stop); at ``end`` it is told to stop (``stop_search``) and, if it has still not
    returned, its answer is dropped (``None``: the caller reads nothing from ``solver``, which
    the solve may still write to) and it ends in the background. A solve still running when the
    process exits is stopped and waited for first.

    ``solver`` is a ``cp_model.CpSolver`` with its other parameters set; this module imports no
    solver. A solve that returns in time is the plain ``solve``: same status, same values.
    """
    from memopt.time_shares import SHARES

    stop = SHARES["solver.stop"]
    left = max(0.0, end - time.perf_counter())
    keep = stop.fraction * left if stop.most is None else min(stop.most, stop.fraction * left)
    solver.parameters.max_time_in_seconds = max(0.0, left - keep)
    out = []

    def solve():
        try:
            out.append((True, solver.solve(model, callback)))
        except BaseException as e:  # handed to the caller's thread
            out.append((False, e))
        finally:
            with _running_lock:
                _running.discard((run, solver))

    run = threading.Thread(target=solve, daemon=True, name="memopt-cpsat")
    with _running_lock:
        _running.add((run, solver))
    run.start()
    run.join(max(0.0, end - time.perf_counter()))
    if not run.is_alive():
        ok, value = out[0]
        if not ok:
            raise value
        return value
    solver.stop_search()
    return None


@atexit.register
def _stop_running():
    """A dropped solve still running at exit is stopped and waited for (the solver's threads
    must not outlive the interpreter)."""
    with _running_lock:
        left = list(_running)
    for run, solver in left:
        solver.stop_search()
        run.join()
