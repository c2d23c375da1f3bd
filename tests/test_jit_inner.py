"""Inner kernels (no Python entry point) and the local search's own shuffle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from memopt import _jit
from memopt.schedule import greedy, ideal_search, local_search


def test_inner_kernels_build_no_wrappers_and_keep_their_twins():
    for d in (local_search._permute, local_search._best_closure_move, ideal_search._run_cascade, greedy._less):
        assert d.targetoptions.get("no_cpython_wrapper") is True
        assert d.targetoptions.get("no_cfunc_wrapper") is True
        assert not _jit._is_dispatcher(_jit.pure(d))
    assert not local_search._ils.targetoptions.get("no_cpython_wrapper", False)   # called from Python


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 300))
def test_permute_draws_numpys_legacy_permutation(seed, m):
    """``_permute`` replaces ``np.random.permutation`` in the local search: same numbers, so the
    search is unchanged seed for seed (numba's permutation is the same Fisher-Yates loop)."""
    twin = _jit.pure(local_search._permute)
    twin.__globals__["np"].random.seed(seed)
    perm = np.full(m + 3, -1, np.int64)
    twin(perm, np.int64(m))
    assert perm[:m].tolist() == np.random.RandomState(seed).permutation(m).tolist()
    assert perm[m:].tolist() == [-1, -1, -1]
