"""The embedded configuration: run_create enqueues on commit, the in-process backend runs.

Twenty runs created at once all complete, each exactly once, on the private worker loop.

The test database of SQLite is in memory with a shared cache, where a second writer gets
"database table is locked" at once (no busy timeout applies, unlike the WAL file of the
real embedded setup). So the runs are created in one transaction (their tasks are
enqueued together when it commits) and the test polls with read_uncommitted, so the
polling never holds a lock the worker's writes would wait for.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.db.models import Count, Q

from tests.fixtures_world import WEATHER_SCRIPT
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall, ToolRegistration
from tools_app.runs import services, task_backend
from tools_app.tools.registry import sync_tools

from .support import assert_seqs_gapless, start, wait_until

RUNS = 20
DEADLINE_SECONDS = 60.0


@pytest.fixture
def inprocess_backend(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "tools_app.runs.task_backend.InProcessBackend"}}


@pytest.fixture
def world(transactional_db: None, make_endpoint: Any) -> tuple[Any, ToolRegistration, ErrorPolicy]:
    sync_tools(["tools_app.tools.example_tools"])
    policy = ErrorPolicy.objects.create(name="In-process policy", is_default=True)
    endpoint = make_endpoint(WEATHER_SCRIPT, name="weather")
    return endpoint, ToolRegistration.objects.get(name="get_weather"), policy


def test_twenty_concurrent_runs_all_complete_exactly_once(
    inprocess_backend: None, world: tuple[Any, ToolRegistration, ErrorPolicy],
    lock_free_polling: None,
) -> None:
    endpoint, tool, policy = world

    with transaction.atomic():
        runs = [start(endpoint, [tool], policy, f"Weather {i}") for i in range(RUNS)]
        assert task_backend.running_count() == 0  # nothing runs before the commit

    def all_done() -> bool:
        return not Run.objects.exclude(status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED,
                                                   RunStatus.CANCELLED]).exists()

    finished = wait_until(all_done)
    assert wait_until(lambda: task_backend.running_count() == 0)
    assert finished, list(Run.objects.values_list("status", flat=True))

    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}
    per_run = Run.objects.annotate(
        chats=Count("events", filter=Q(events__kind="chat_started")),
        finishes=Count("events", filter=Q(events__kind="run_status",
                                        events__payload__status="succeeded")),
    )
    assert sorted((r.chats, r.finishes, r.lease_token) for r in per_run) == [(1, 1, 1)] * RUNS
    assert ToolCall.objects.count() == 2 * RUNS
    assert not ToolCall.objects.exclude(state="succeeded").exists()
    for run in runs:
        run.refresh_from_db()
        assert (run.rounds_count, run.tool_calls_count) == (2, 2)
        assert run.final_text is not None
        assert run.final_text.startswith("Here you go: ")
        assert_seqs_gapless(run)


def test_a_run_is_enqueued_only_when_its_transaction_commits(
    world: tuple[Any, ToolRegistration, ErrorPolicy], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, tool, policy = world
    enqueued: list[str] = []
    monkeypatch.setattr(services, "enqueue_run", enqueued.append)

    def create_then_fail() -> None:
        with transaction.atomic():
            start(endpoint, [tool], policy)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        create_then_fail()
    assert enqueued == []
    assert not Run.objects.exists()

    with transaction.atomic():
        run = start(endpoint, [tool], policy)
        assert enqueued == []  # not before the commit
    assert enqueued == [str(run.pk)]


def test_a_task_closes_its_threads_database_connection_when_it_ends(
    world: tuple[Any, ToolRegistration, ErrorPolicy],
) -> None:
    """Each in-process task does its database work on a thread of its own, which ends
    with the task: its connection must be closed then, not left to the garbage
    collector (an open file, or a PostgreSQL backend, per finished run)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    used: list[Any] = []

    def query() -> None:
        Run.objects.exists()
        used.append(connections["default"])

    async def task() -> None:
        await sync_to_async(query)()
        assert used[0].connection is not None  # open while the task runs

    task_backend.submit(task()).result(timeout=DEADLINE_SECONDS)

    assert used[0] is not connections["default"]  # it was the task's own connection
    assert used[0].connection is None
