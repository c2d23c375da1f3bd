"""Exceptions raised by memopt: one meaning each.

* :class:`MemoptError` and its subclasses mean **the input or the request is bad** (a cycle,
  a dangling name, a negative size, a truncated file, a number too large for exact int64
  arithmetic, a non-finite option, a false claim in a plan or certificate). The message names
  the offending item (file, op, tensor, buffer, line); the CLI prints it as one line and exits 2.
* :class:`InternalError` means **memopt broke one of its own invariants** (a verified plan
  whose peak disagrees with the checker, a lower bound above a verified peak, a max-flow
  solver that did not finish). It is deliberately *not* a :class:`MemoptError`: callers that
  catch bad input must not swallow a bug. The CLI prints it as one line asking for a report
  and exits 3. ``check`` names the invariant that failed.

No bare ``ValueError``/``RuntimeError`` leaves the public API: bad arguments are
:class:`MemoptError` subclasses (several also derive from ``ValueError`` so that generic
callers still recognise them), broken invariants are :class:`InternalError`.
"""

from __future__ import annotations


class MemoptError(Exception):
    """Base class of every error memopt raises on bad input or an impossible request."""


class GraphError(MemoptError, ValueError):
    """A graph or program is malformed: cycle, dangling name, negative size, two producers..."""


class ScheduleError(MemoptError, ValueError):
    """An order or plan is not valid for its graph (not topological, missing or repeated op)."""


class FormatError(MemoptError, ValueError):
    """A file cannot be read: missing, malformed or truncated JSON, unknown schema, wrong version,
    or a number outside what memopt's exact arithmetic can hold."""


class OptionError(MemoptError, ValueError):
    """An argument or option is out of range: a non-finite or negative time limit, an unknown
    method, a ratio that overflows, an output path that would overwrite an input."""


class CertificateError(MemoptError):
    """A certificate or plan failed independent verification: it claims something the
    instance does not justify."""


class InternalError(Exception):
    """A broken internal invariant: a bug in memopt, never the user's input.

    ``check`` is a short name of the invariant that failed (``"verified-peak"``,
    ``"bound-above-peak"``, ``"max-flow-status"``...), so that a report can be traced.
    """

    def __init__(self, check: str, message: str):
        super().__init__(f"{message} [check: {check}]")
        self.check = check
        self.detail = message


def require(condition: bool, check: str, message: str) -> None:
    """Raise :class:`InternalError` unless ``condition`` holds (an assertion that survives ``-O``)."""
    if not condition:
        raise InternalError(check, message)
