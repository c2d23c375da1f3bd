"""Sphinx configuration of memopt's API reference, built from the numpydoc docstrings.

Built offline (no intersphinx, no theme download) with warnings as errors by
``tests/test_api_docs.py``: ``sphinx-build -W -b html docs/api OUT``.
"""

import os
import sys

# the source tree beside this folder, so that the reference documents this checkout
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src")))

project = "memopt"
author = "the memopt developers"
extensions = ["sphinx.ext.autodoc", "numpydoc"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
# numpydoc: document the members listed in each page, not every member of every class
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# the examples are run as doctests by pytest (--doctest-modules), not by Sphinx
