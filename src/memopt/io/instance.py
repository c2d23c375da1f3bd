"""Re-export of :class:`memopt.core.instance.Instance` (it lives in ``core`` so that the layers
below ``io`` can use it)."""

from memopt.core.instance import Instance

__all__ = ["Instance"]
