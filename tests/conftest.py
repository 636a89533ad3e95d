"""Shared test set-up: the named users and a small world of endpoints, tools, policies.

alice is staff (sees every run), bob and charlie are plain users (see their own).
"""

from __future__ import annotations

import os

# Importing the ASGI app must not start the embedded worker's recovery loop in tests.
os.environ.setdefault("AGENTFORGE_EMBEDDED_WORKER", "0")

import pytest

pytest_plugins = ["tests.fixtures_users", "tests.fixtures_world"]


@pytest.fixture(autouse=True)
def _fast_leases(settings: pytest.FixtureRequest) -> None:
    """Short leases so crash-recovery tests run in seconds, not minutes."""
    settings.AGENTFORGE_LEASE_SECONDS = 2.0  # type: ignore[attr-defined]
    settings.AGENTFORGE_HEARTBEAT_SECONDS = 0.3  # type: ignore[attr-defined]
