"""Registries of methods reached by name: what every solver family of memopt shares.

A family (scheduling in :mod:`memopt.schedule.registry`, recomputation in
:mod:`memopt.remat.registry`) fixes one signature for its methods, like networkx's
``flow_func``, and keeps a :class:`Registry` of :class:`Method` entries. An entry names its
function as a ``"module:function"`` target that is imported only when the method runs, so
reading a registry (``memopt --help``) imports no solver. Adding a method is one module plus
one :meth:`Registry.register` call.

Also shared: :class:`NotApplicable` (a method outside its class), :class:`TimeLimitReached`
and :func:`deadline_checker` (time limits inside long pure-Python loops).

>>> r = Registry("demo", kinds=("heuristic",))
>>> _ = r.register(Method("first", "builtins:len", "heuristic", "the length"))
>>> r.names(), r.get("first").load()([1, 2])
(('first',), 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from memopt.errors import OptionError, ScheduleError

__all__ = ["Method", "Registry", "NotApplicable", "TimeLimitReached", "deadline_checker"]


class NotApplicable(ScheduleError):
    """The method does not apply to this problem (it is outside the method's class)."""


class TimeLimitReached(Exception):
    """Control flow inside a method: its time limit ran out (the method then returns its best
    result so far, or none). Never escapes a registered method."""


def deadline_checker(deadline: float | None):
    """A cheap check for long pure-Python loops: the returned function raises
    :class:`TimeLimitReached` once ``time.perf_counter()`` passes ``deadline`` (it looks at the
    clock every 1024 calls). ``None``: no deadline."""
    if deadline is None:
        return lambda: None
    import time

    count = [0]

    def check():
        count[0] += 1
        if count[0] & 1023 == 0 and time.perf_counter() > deadline:
            raise TimeLimitReached("time limit reached")

    return check


@dataclass(frozen=True)
class Method:
    """A registered method: its ``name``, ``target`` (``"module:function"``), ``kind`` (one of
    its registry's kinds), a one-line ``summary``, and the ``models`` it accepts."""

    name: str
    target: str
    kind: str
    summary: str
    models: tuple = ("graph", "program", "dag")

    def load(self):
        """The method's function (imports its module on first use)."""
        module, _, attr = self.target.partition(":")
        return getattr(import_module(module), attr)


class Registry:
    """Methods of one family by name, in registration order."""

    def __init__(self, family: str, kinds: tuple[str, ...], extra_names: tuple[str, ...] = ()):
        self.family = family
        self.kinds = kinds
        self.extra_names = extra_names  # names the family accepts besides its methods (e.g. "auto")
        self.entries: dict[str, Method] = {}

    def register(self, method: Method) -> Method:
        """Add (or replace) a method; returns it."""
        if method.kind not in self.kinds:
            raise OptionError(f"{self.family + ' ' if self.family else ''}method {method.name!r}: unknown kind {method.kind!r}; "
                              f"choose from {', '.join(self.kinds)}")
        self.entries[method.name] = method
        return method

    def get(self, name: str) -> Method:
        try:
            return self.entries[name]
        except KeyError:
            raise OptionError(f"unknown {self.family + ' ' if self.family else ''}method {name!r}; choose from "
                              f"{', '.join(self.extra_names + self.names())}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def of_kind(self, kind: str | None = None) -> list[Method]:
        return [m for m in self.entries.values() if kind is None or m.kind == kind]
