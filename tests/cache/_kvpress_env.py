"""The module-level guard of the tests that run memopt's presses inside kvpress.

kvpress 0.5.5 needs transformers < 5.3 (the main test environment has a newer one), so these
tests run in the kvpress environment of ``.ci/run`` and skip, saying why, everywhere else.
"""

from __future__ import annotations

import pytest


def require_kvpress():
    """Skip the calling test module unless kvpress runs here; return ``(torch, transformers, kvpress)``."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    kvpress = pytest.importorskip("kvpress", reason="kvpress is not installed (pip install 'memopt[kvpress]')")
    if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (5, 3):
        pytest.skip(f"kvpress 0.5.5 runs on transformers < 5.3, found {transformers.__version__} "
                    "(pip install 'memopt[kvpress]' installs a matching one)", allow_module_level=True)
    return torch, transformers, kvpress
