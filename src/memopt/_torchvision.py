"""Make ``torchvision==0.28.0`` importable beside ``torch==2.13.0+cpu``.

That torchvision release is a CUDA build: on import, ``torchvision._meta_registrations``
registers meta kernels for compiled operators (``torchvision::nms``, ...) that the CPU torch
does not have, and the import fails with "operator torchvision::nms does not exist". The
models and transforms are pure Python and need none of it. ``transformers`` imports
torchvision whenever it is installed, so the same failure breaks every transformers model
(and memopt's KV-cache commands) on a machine that has torchvision. :func:`allow_import`
stubs that one module before torchvision is first imported; it is a no-op where torchvision
is absent or already imported. Call it before importing torchvision or transformers.
"""

from __future__ import annotations

import importlib.util
import sys
import types

__all__ = ["allow_import"]

_MODULE = "torchvision._meta_registrations"


def allow_import() -> None:
    """Stub ``torchvision._meta_registrations`` unless torchvision is absent or imported."""
    if "torchvision" in sys.modules or _MODULE in sys.modules:
        return
    try:
        found = importlib.util.find_spec("torchvision") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        sys.modules[_MODULE] = types.ModuleType(_MODULE)
