"""Shared test set-up: the named users and a small world of endpoints, tools, policies.

alice is staff (sees every run), bob and charlie are plain users (see their own).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync

from tests import async_orm_thread

# Importing the ASGI app must not start the embedded worker's recovery loop in tests:
# its reaper would interrupt and re-queue the runs whose leases tests expire by hand.
# Forced, not defaulted: a shell that exports AGENTFORGE_EMBEDDED_WORKER=1 for a dev
# server must not turn it on here. (Servers that tests start as subprocesses drop it.)
os.environ["AGENTFORGE_EMBEDDED_WORKER"] = "0"

# A task backend that stores what is enqueued and never executes it.
NEVER_EXECUTES = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
# An upper bound for the in-process tasks of a test to finish after it, never a duration.
LEFTOVER_GRACE_SECONDS = 5.0

pytest_plugins = ["tests.fixtures_users", "tests.fixtures_world"]


@pytest.fixture(autouse=True)
def _fast_leases(settings: pytest.FixtureRequest) -> None:
    """Short leases so crash-recovery tests run in seconds, not minutes."""
    settings.AGENTFORGE_LEASE_SECONDS = 2.0  # type: ignore[attr-defined]
    settings.AGENTFORGE_HEARTBEAT_SECONDS = 0.3  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _loopback_model_servers(settings: pytest.FixtureRequest) -> None:
    """The fake model servers tests start listen on loopback, which the outbound policy
    allows only with DEBUG (and pytest-django turns DEBUG off); the tests of the policy
    turn this off again."""
    settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = True  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _tasks_never_run_behind_a_tests_back(settings: pytest.FixtureRequest) -> None:
    """No test has a run executed by a worker it did not ask for.

    run_create enqueues `execute_run` on commit, and in a transactional test (or under
    django_capture_on_commit_callbacks(execute=True)) that commit is real: with the
    configured embedded backend, the in-process worker thread would then claim the run
    at once, racing a test that claims or executes it itself, and keep executing it
    after the test ended. So every test enqueues into a backend that never executes;
    a test of a real backend sets settings.TASKS itself (tests/runs/loops/
    test_inprocess_backend.py, the scale-out harness)."""
    settings.TASKS = NEVER_EXECUTES  # type: ignore[attr-defined]


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions `sync_to_async` ran in a thread, in order."""
    seen: list[str] = []
    real = SyncToAsync.__call__

    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__name__", type(self.func).__name__))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", recorded)
    return seen


@pytest.fixture(autouse=True)
def _no_connection_left_on_the_sync_to_async_thread() -> Generator[None, None, None]:
    """An async test's ORM calls open a connection on asgiref's shared thread that
    nothing else closes (tests/async_orm_thread.py); closed after the test's other
    function fixtures are torn down, so none is left when the test database is dropped."""
    yield
    async_orm_thread.close_connections()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """No in-process task outlives the test that started it.

    Checked before any fixture is torn down: a task still running would write while the
    database is flushed, then claim, reap or write the runs of the next test. Leftovers
    get a few seconds to finish, then they are cancelled and the test fails saying so.
    """
    leftovers = _finish_or_cancel_in_process_tasks()
    result = yield
    if leftovers:
        raise AssertionError(leftovers)
    return result


def _finish_or_cancel_in_process_tasks() -> str:
    """What was still running on the in-process worker's loop after a test ("" if
    nothing); it is cancelled."""
    from tools_app.runs.loops import task_backend

    loop = task_backend._worker_loop  # None until a test used the in-process backend
    if loop is None or loop.is_closed():
        return ""
    try:
        cancelled = asyncio.run_coroutine_threadsafe(_finish_or_cancel(), loop).result(
            timeout=3 * LEFTOVER_GRACE_SECONDS)
    except TimeoutError:
        return "the in-process worker's loop did not answer: something blocks it"
    if not cancelled:
        return ""
    return ("in-process tasks still ran after the test and were cancelled (a test of the "
            "in-process backend waits for its tasks): " + "; ".join(cancelled))


async def _finish_or_cancel() -> list[str]:
    from tools_app.runs.loops.task_backend import LANE_TASK_NAME

    this = asyncio.current_task()
    # The database lanes' holders live as long as the loop, by design.
    others = {task for task in asyncio.all_tasks()
              if task is not this and task.get_name() != LANE_TASK_NAME}
    if not others:
        return []
    _, pending = await asyncio.wait(others, timeout=LEFTOVER_GRACE_SECONDS)
    awaiting = sorted(_awaiting(task) for task in pending)
    for task in pending:
        task.cancel()
    if pending:  # a cancelled task unwinds first: its finally blocks close connections
        await asyncio.wait(pending, timeout=LEFTOVER_GRACE_SECONDS)
    return awaiting


def _awaiting(task: asyncio.Task[object]) -> str:
    """The chain of coroutines a task is suspended in, outermost first."""
    names = []
    coroutine = task.get_coro()
    while coroutine is not None and hasattr(coroutine, "cr_code"):
        names.append(coroutine.cr_code.co_qualname)
        coroutine = coroutine.cr_await
    return " > ".join(names) or repr(task)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """SQLite leaves the test database's -wal/-shm files behind when other threads still
    held connections as it was dropped; remove this process's leftovers."""
    from pathlib import Path

    from django.conf import settings

    test_name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if test_name and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        for leftover in Path(test_name).parent.glob(Path(test_name).name + "*"):
            leftover.unlink(missing_ok=True)
