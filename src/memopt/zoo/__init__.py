"""A model zoo of hand-written architectures with random weights (needs the extra ``memopt[torch]``).

>>> from memopt.zoo import names
>>> len(names()) >= 12
True
"""

from __future__ import annotations

__all__ = ["names", "build", "family"]


def names() -> list[str]:
    """Every zoo model's name (importing torch lazily)."""
    from memopt.zoo.models import names as _names

    return _names()


def build(name: str, seed: int = 0):
    """``(model, example_inputs)``: see :func:`memopt.zoo.models.build`."""
    from memopt.zoo.models import build as _build

    return _build(name, seed)


def family(name: str) -> str:
    from memopt.zoo.models import family as _family

    return _family(name)
