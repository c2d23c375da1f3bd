"""The optional dependencies, imported when first needed, with one error where one is missing."""

from __future__ import annotations

from memopt.errors import OptionError

__all__ = ["import_torch"]


def import_torch(who: str):
    """The ``torch`` module, or an :class:`~memopt.errors.OptionError` saying that ``who``
    (e.g. ``"memopt.adapters.training"``) needs it and how to install it."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise OptionError(f"{who} needs torch: pip install 'memopt[torch]'") from exc
    return torch
