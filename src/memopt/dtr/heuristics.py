"""Eviction heuristics of DTR (Kirisame et al., ICLR 2021, section 3 and appendix), as in simrd.

Every heuristic scores each evictable storage ``s`` and the runtime evicts the storage
with the *lowest* score (simrd's ``Heuristic.choose``: scan the pool in order, keep the
last storage whose score is ``<=`` the best so far, stop early at a score of exactly 0).
With ``c(s)`` the compute of the operators producing ``s``'s tensors, ``m(s)`` its size
and ``stale(s) = clock - last_access(s)``:

==================  ===========================================  ========================
name (CLI / simrd)  score                                        runtime state it needs
==================  ===========================================  ========================
dtr / DTR           (c(s) + c(e*(s))) / (m(s) * stale(s))         regions (both directions)
dtr-eqclass /       (c(s) + sum of distinct neighbouring          union-find of evicted
DTREqClass          evicted classes) / (m(s) * stale(s))          storages
dtr-local /         c(s) / (m(s) * stale(s))                      --
DTRLocal
msps / MSPS         (c(s) + c(evicted ancestors)) / m(s)          regions
lru / LRU           last_access(s)                                --
largest /           1 / m(s)                                      --
LargestStorage
==================  ===========================================  ========================

``e*(s)`` is the evicted neighbourhood: the evicted storages reachable from ``s``
through evicted storages, towards children (``region``) and towards parents
(``region_rev``), maintained incrementally exactly as simrd's ``Region`` does. A zero
denominator gives an infinite score; a storage never accessed has infinite staleness.

User-defined scores: subclass :class:`Heuristic` (or pass any callable
``score(view: StorageView) -> float``) and give it to :func:`memopt.dtr.replay` as
``heuristic``. The callable is called for every storage in the pool, in pool order,
under the same choose rule; it runs in Python, so it is much slower than the built-ins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memopt.dtr import _kernels as K
from memopt.errors import MemoptError

__all__ = ["Heuristic", "BuiltinHeuristic", "StorageView", "HEURISTICS", "resolve_heuristic",
           "FEATURE_REGIONS", "FEATURE_EQCLASS"]

FEATURE_REGIONS = "regions"
FEATURE_EQCLASS = "eq_class"


@dataclass(frozen=True)
class StorageView:
    """What a score function may look at for one evictable storage.

    ``last_access`` is ``None`` when the storage was never accessed (simrd's ``-inf``);
    ``staleness`` is then ``math.inf``. ``region_compute`` / ``region_rev_compute`` are
    the compute of the evicted neighbourhood towards children / parents (0 unless the
    heuristic declares the ``'regions'`` feature); ``eqclass_compute`` the compute of the
    distinct neighbouring evicted classes (0 unless it declares ``'eq_class'``).
    """

    storage: int
    tensor: str
    size: int
    compute: int
    last_access: int | None
    clock: int
    staleness: float | int
    region_compute: int
    region_rev_compute: int
    eqclass_compute: int


class Heuristic:
    """Base class of a user-defined eviction score (lower = evicted first).

    Override :meth:`score`; set ``features`` to the runtime state it needs
    (``{'regions'}`` for e* neighbourhood computes, ``{'eq_class'}`` for equivalence
    classes). ``name`` is used in results.
    """

    name: str = "user"
    features: frozenset[str] = frozenset()
    code: int = K.H_USER

    def score(self, view: StorageView) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<heuristic {self.name}>"


class _CallableHeuristic(Heuristic):
    """Wraps a plain ``score(view) -> float`` callable (all features maintained)."""

    def __init__(self, fn):
        self.fn = fn
        self.name = getattr(fn, "__name__", "user")
        self.features = frozenset({FEATURE_REGIONS, FEATURE_EQCLASS})

    def score(self, view: StorageView) -> float:
        return self.fn(view)


class BuiltinHeuristic(Heuristic):
    """One of simrd's heuristics, evaluated inside the compiled kernel."""

    def __init__(self, name: str, simrd_name: str, code: int, features, formula: str):
        self.name = name
        self.simrd_name = simrd_name
        self.code = code
        self.features = frozenset(features)
        self.formula = formula

    def score(self, view: StorageView) -> float:
        """The same score in Python (for inspection; the kernel uses its own copy)."""
        size, stale = view.size, view.staleness
        if self.code == K.H_LRU:
            return -math.inf if view.last_access is None else view.last_access
        if self.code == K.H_LARGEST:
            return 1 / size if size > 0 else math.inf
        if self.code == K.H_MSPS:
            return (view.compute + view.region_rev_compute) / size if size > 0 else math.inf
        if self.code == K.H_DTR:
            num = view.compute + view.region_compute + view.region_rev_compute
        elif self.code == K.H_EQCLASS:
            num = view.compute + view.eqclass_compute
        else:
            num = view.compute
        denom = size * stale
        return num / denom if denom > 0 else math.inf

    def __reduce__(self):
        return (_builtin, (self.name,))


def _builtin(name: str) -> BuiltinHeuristic:
    return HEURISTICS[name]


_BUILTINS = [
    BuiltinHeuristic("dtr", "DTR", K.H_DTR, {FEATURE_REGIONS},
                     "(c(s) + c(e*)) / (size * staleness)"),
    BuiltinHeuristic("dtr-eqclass", "DTREqClass", K.H_EQCLASS, {FEATURE_EQCLASS},
                     "(c(s) + c(evicted neighbour classes)) / (size * staleness)"),
    BuiltinHeuristic("dtr-local", "DTRLocal", K.H_LOCAL, set(), "c(s) / (size * staleness)"),
    BuiltinHeuristic("msps", "MSPS", K.H_MSPS, {FEATURE_REGIONS},
                     "(c(s) + c(evicted ancestors)) / size"),
    BuiltinHeuristic("lru", "LRU", K.H_LRU, set(), "last access time"),
    BuiltinHeuristic("largest", "LargestStorage", K.H_LARGEST, set(), "1 / size"),
]

#: CLI names and simrd class names -> heuristic
HEURISTICS: dict[str, BuiltinHeuristic] = {}
for _h in _BUILTINS:
    HEURISTICS[_h.name] = _h
    HEURISTICS[_h.simrd_name] = _h


def resolve_heuristic(heuristic) -> Heuristic:
    """A name from :data:`HEURISTICS`, a :class:`Heuristic` instance or class, or a callable."""
    if isinstance(heuristic, str):
        try:
            return HEURISTICS[heuristic]
        except KeyError:
            names = ", ".join(h.name for h in _BUILTINS)
            raise MemoptError(f"unknown DTR heuristic {heuristic!r} (known: {names}, "
                              "or simrd's class names)") from None
    if isinstance(heuristic, Heuristic):
        return heuristic
    if isinstance(heuristic, type) and issubclass(heuristic, Heuristic):
        return heuristic()
    if callable(heuristic):
        return _CallableHeuristic(heuristic)
    raise MemoptError(f"not a heuristic: {heuristic!r}")
