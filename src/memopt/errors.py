"""Exceptions raised by memopt.

Every error that bad input can cause is a :class:`MemoptError`; its message names the
offending item (op, tensor, buffer, file line) so that the CLI can print it as one line.
"""


class MemoptError(Exception):
    """Base class of every error memopt raises on bad input or an impossible request."""


class GraphError(MemoptError, ValueError):
    """A graph or program is malformed: cycle, dangling name, negative size, two producers..."""


class ScheduleError(MemoptError, ValueError):
    """An order or plan is not valid for its graph (not topological, missing or repeated op)."""


class FormatError(MemoptError, ValueError):
    """A file cannot be read: malformed or truncated JSON, unknown schema, wrong version."""


class CertificateError(MemoptError):
    """A certificate or plan failed independent verification."""
