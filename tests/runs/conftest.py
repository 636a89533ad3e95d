"""Fixtures of the run-lifecycle tests (tests/runs).

Markers used here:
  both  the test drives a run through runner.execute_run directly (no particular task
        backend), so it is meant to run on SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tools_app.engine import AiMessage, ChatRequest, ChatResponse, ScriptedChatModel
from tools_app.models import ErrorPolicy, Run, ToolRegistration
from tools_app.tools.registry import sync_tools

from .support import WAIT_SCRIPT, ModelSpy, start
from .tools_for_tests import STATE, SimulatedCrash, ToolState


def pytest_configure(config: pytest.Config) -> None:
    # --strict-markers is on; registering here keeps this directory self-contained
    # (a duplicate registration in pyproject.toml is harmless).
    config.addinivalue_line(
        "markers", "both: drives runner.execute_run directly; runs on SQLite and PostgreSQL"
    )


@pytest.fixture
def lock_free_polling() -> Iterator[None]:
    """Polls that never hold a lock the worker's writes would wait for (SQLite's
    in-memory test database gives a second writer "table is locked" at once)."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA read_uncommitted = 1")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 0")


@pytest.fixture(autouse=True)
def tool_state() -> Iterator[ToolState]:
    STATE.reset()
    yield STATE
    STATE.reset()


@pytest.fixture
def tools(db: None) -> dict[str, ToolRegistration]:
    """The demo tools plus the counting tools of tests/runs/tools_for_tests.py."""
    sync_tools(["tools_app.tools.example_tools", "tests.runs.tools_for_tests"])
    return {t.name: t for t in ToolRegistration.objects.all()}


@pytest.fixture
def model_spy(monkeypatch: pytest.MonkeyPatch) -> ModelSpy:
    spy = ModelSpy()
    original = ScriptedChatModel.chat

    async def chat(self: ScriptedChatModel, request: ChatRequest) -> ChatResponse:
        step = sum(1 for m in request.messages if isinstance(m, AiMessage))
        spy.steps.append(step)
        if step in spy.crash_once_at:
            spy.crash_once_at.discard(step)
            raise SimulatedCrash(f"worker killed while step {step} was requested")
        return await original(self, request)

    monkeypatch.setattr(ScriptedChatModel, "chat", chat)
    return spy


@pytest.fixture
def queued_run(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> Run:
    return start(make_endpoint(WAIT_SCRIPT), [tools["wait_here"]], policy)
