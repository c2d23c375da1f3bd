"""Shared test fixtures: where the shared data lives, and hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GRAPHS = SHARED / "data" / "checkmate-graphs"

settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def shared_graph(name: str) -> Path:
    """Path of a published graph in ../shared, or skip when the shared data is absent."""
    path = GRAPHS / name
    if not path.exists():
        pytest.skip(f"shared data not available: {path} (tests on published graphs run in CI, "
                    "where ../shared sits beside the checkout)")
    return path


def pytest_sessionstart(session):
    """In CI the shared data must be there: tests that read it skip only in a user's clone."""
    if os.environ.get("CI") and not (SHARED / "data").is_dir():
        raise pytest.UsageError(f"CI is set but the shared data is missing at {SHARED / 'data'}; "
                                "the tests on published graphs and DTR traces would all be skipped")
