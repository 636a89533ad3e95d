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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """SQLite leaves the test database's -wal/-shm files behind when other threads still
    held connections as it was dropped; remove this process's leftovers."""
    from pathlib import Path

    from django.conf import settings

    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if test_name and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        for leftover in Path(test_name).parent.glob(Path(test_name).name + "*"):
            leftover.unlink(missing_ok=True)
