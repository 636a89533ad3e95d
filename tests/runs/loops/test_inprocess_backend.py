"""The embedded configuration: run_create enqueues on commit, the in-process backend runs.

Twenty runs created at once all complete, each exactly once, on the private worker loop.

The test database of SQLite is in memory with a shared cache, where a second writer gets
"database table is locked" at once (no busy timeout applies, unlike the WAL file of the
real embedded setup). So the runs are created in one transaction (their tasks are
enqueued together when it commits) and the test polls with read_uncommitted, so the
polling never holds a lock the worker's writes would wait for.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
import uvloop
from django.db import transaction
from django.db.models import Count, Q

from tests.fixtures_world import WEATHER_SCRIPT
from tests.runs.support import assert_seqs_gapless, start, wait_until
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.loops import task_backend
from tools_app.tools.registry import sync_tools

RUNS = 20
DEADLINE_SECONDS = 60.0


@pytest.fixture
def inprocess_backend(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "tools_app.runs.loops.task_backend.InProcessBackend"}}


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
    monkeypatch.setattr(tasks, "enqueue_run", enqueued.append)

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


def test_tasks_share_a_few_database_lanes_however_many_run_at_once(
    world: tuple[Any, ToolRegistration, ErrorPolicy], settings: Any,
) -> None:
    """A process holds AGENTFORGE_WORKER_DB_THREADS connections however many tasks it
    drives (a connection per run exhausted PostgreSQL's), and a task's database work
    stays on one thread from its start to its end."""
    import asyncio
    import threading
    import time

    from asgiref.sync import sync_to_async
    from django.db import connections

    lanes = settings.AGENTFORGE_WORKER_DB_THREADS
    threads_of: dict[int, set[int]] = {}
    connections_used: set[int] = set()
    gate = threading.Event()

    def query(task: int) -> None:
        Run.objects.exists()
        threads_of.setdefault(task, set()).add(threading.get_ident())
        connections_used.add(id(connections["default"]))

    async def task(number: int) -> None:
        await sync_to_async(query)(number)
        while not gate.is_set():  # all twelve are in flight at once
            await asyncio.sleep(0.01)
        await sync_to_async(query)(number)

    futures = [task_backend.submit(task(n)) for n in range(12)]
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(threads_of) < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    for future in futures:
        future.result(timeout=DEADLINE_SECONDS)

    assert sorted(threads_of) == list(range(12))
    assert all(len(threads) == 1 for threads in threads_of.values())
    assert lanes < 12
    assert len({t for threads in threads_of.values() for t in threads}) <= lanes
    assert len(connections_used) <= lanes


def test_a_lane_whose_holder_ended_is_replaced(
    world: tuple[Any, ToolRegistration, ErrorPolicy],
) -> None:
    """A lane's holder cancelled (a loop shutting down, a test's clean-up) leaves no
    thread behind it: the next task opens a new lane instead of failing."""
    import asyncio

    from asgiref.sync import sync_to_async

    async def end_the_lanes() -> int:
        holders = [t for t in asyncio.all_tasks() if t.get_name() == task_backend.LANE_TASK_NAME]
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        return len(holders)

    async def task() -> bool:
        return await sync_to_async(Run.objects.exists)()

    task_backend.submit(task()).result(timeout=DEADLINE_SECONDS)  # lanes are open
    ended = asyncio.run_coroutine_threadsafe(end_the_lanes(), task_backend.worker_loop())
    assert ended.result(timeout=DEADLINE_SECONDS) > 0

    assert task_backend.submit(task()).result(timeout=DEADLINE_SECONDS) is False


@pytest.mark.parametrize(("broken", "kept"), [(False, True), (True, False)])
def test_a_lane_keeps_its_connection_from_task_to_task_unless_it_broke(
    world: tuple[Any, ToolRegistration, ErrorPolicy], broken: bool, kept: bool,
) -> None:
    """A run's claim is its lane's first query: reconnecting there for every task cost
    each run 1.5-10 ms of its start on SQLite (and its lane-mates their connection).
    A connection a task broke (a database restart) is replaced, not handed on."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    def query(break_it: bool) -> Any:
        Run.objects.exists()
        conn = connections["default"]
        if break_it:
            conn.errors_occurred = True
            conn.is_usable = lambda: False  # type: ignore[method-assign]
        return conn.connection

    async def task(break_it: bool = False) -> Any:
        return await sync_to_async(query)(break_it)

    # One task at a time: each takes the first lane (the one with the fewest tasks).
    first = task_backend.submit(task(broken)).result(timeout=DEADLINE_SECONDS)
    second = task_backend.submit(task()).result(timeout=DEADLINE_SECONDS)

    assert (second is first) is kept  # `first` is referenced: its id cannot be reused


def test_the_runs_loop_is_uvloops_unless_asyncios_is_chosen(settings: Any) -> None:
    """AGENTFORGE_WORKER_EVENT_LOOP: uvloop's by default, the standard library's when
    chosen; both drive a coroutine with a database hop (a run's path: asgiref's thread
    pool, call_soon_threadsafe back)."""
    from asgiref.sync import sync_to_async

    def drive(loop: asyncio.AbstractEventLoop) -> int:
        try:
            return loop.run_until_complete(sync_to_async(lambda: 41 + 1)())
        finally:
            loop.close()

    loop = task_backend.new_worker_loop()
    assert isinstance(loop, uvloop.Loop)
    assert drive(loop) == 42
    settings.AGENTFORGE_WORKER_EVENT_LOOP = "asyncio"
    loop = task_backend.new_worker_loop()
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop)
    assert drive(loop) == 42


def test_without_uvloop_the_standard_loop_stands_in(
    settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A platform uvloop is not installed on (Windows) still runs its runs."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    settings.AGENTFORGE_WORKER_EVENT_LOOP = "uvloop"
    loop = task_backend.new_worker_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()
    assert "uvloop is not installed" in caplog.text


def test_the_worker_drives_its_runs_on_the_chosen_loop(
    inprocess_backend: None, world: tuple[Any, ToolRegistration, ErrorPolicy],
    lock_free_polling: None,
) -> None:
    """The process's worker loop (the embedded server's, a db_worker's) is uvloop's."""
    endpoint, tool, policy = world
    with transaction.atomic():
        run = start(endpoint, [tool], policy)
    assert wait_until(lambda: Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
                      timeout=DEADLINE_SECONDS)
    assert isinstance(task_backend.current_worker_loop(), uvloop.Loop)
