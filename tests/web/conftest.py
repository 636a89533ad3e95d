"""Fixtures shared by the web-layer tests (pages, API, live timeline)."""

from __future__ import annotations

import pytest

from tools_app.runs import services


@pytest.fixture(autouse=True)
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Runs are never handed to the in-process worker thread: the tests execute them."""
    ids: list[str] = []
    monkeypatch.setattr(services, "enqueue_run", ids.append)
    return ids
