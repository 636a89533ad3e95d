"""Scale-out recovery of queued runs no task will run: a db_worker claims its tasks
before their runs claim themselves, and one killed in between leaves the tasks
"running" and the runs queued (runs/sweeps.orphaned_runs)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from tests.runs.support import start
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolRegistration
from tools_app.runs import sweeps
from tools_app.runs.tasks import execute_run

pytestmark = [pytest.mark.django_db, pytest.mark.both]

LEASE = 30.0
TEXT = [{"text": "hello"}]


@pytest.fixture(autouse=True)
def lease(settings: Any) -> None:
    settings.AGENTFORGE_LEASE_SECONDS = LEASE


def queued(make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy, *,
           age_s: float, status: str = RunStatus.QUEUED) -> Run:
    run = start(make_endpoint(TEXT, name=f"e-{age_s}-{status}-{Run.objects.count()}"),
                [tools["lookup"]], policy)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=age_s),
                                         status=status)
    return run


def task_for(run: Run, status: str, started_s_ago: float | None = None) -> None:
    started = (timezone.now() - timedelta(seconds=started_s_ago)
               if started_s_ago is not None else None)
    DBTaskResult.objects.create(args_kwargs={"args": [str(run.pk)], "kwargs": {}},
                                task_path=execute_run.module_path, backend_name="default",
                                run_after=get_date_max(), status=status, started_at=started,
                                worker_ids=["w-dead"] if started else [])


def test_a_queued_run_whose_task_a_lost_worker_holds_is_orphaned(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    lost = queued(make_endpoint, tools, policy, age_s=3 * LEASE)
    task_for(lost, "RUNNING", started_s_ago=2 * LEASE)  # claimed, then the worker died
    never = queued(make_endpoint, tools, policy, age_s=3 * LEASE)  # its enqueue was lost
    handed_back = queued(make_endpoint, tools, policy, age_s=3 * LEASE,
                         status=RunStatus.INTERRUPTED)
    task_for(handed_back, "SUCCESSFUL", started_s_ago=2 * LEASE)  # the try it ended

    assert set(sweeps.orphaned_runs()) == {str(lost.pk), str(never.pk), str(handed_back.pk)}


def test_runs_a_task_will_still_run_are_left(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    waiting = queued(make_endpoint, tools, policy, age_s=3 * LEASE)
    task_for(waiting, "READY")  # a backlog: it waits for a free slot
    starting = queued(make_endpoint, tools, policy, age_s=3 * LEASE)
    task_for(starting, "RUNNING", started_s_ago=1)  # its worker is claiming it now
    queued(make_endpoint, tools, policy, age_s=1)  # just created: its task may be on its way
    queued(make_endpoint, tools, policy, age_s=3 * LEASE, status=RunStatus.RUNNING)

    assert sweeps.orphaned_runs() == []


def test_the_reaper_enqueues_orphans_only_with_the_database_task_backend(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The in-process backend keeps its queue in memory and recovers at start: there no
    run has a task row, and every queued run would look orphaned."""
    run = queued(make_endpoint, tools, policy, age_s=3 * LEASE)
    enqueued: list[str] = []
    monkeypatch.setattr(sweeps, "enqueue_run", enqueued.append)

    assert not sweeps.uses_database_tasks()  # the tests' in-process backend
    assert sweeps.reap_and_enqueue() == []

    monkeypatch.setattr(sweeps, "uses_database_tasks", lambda: True)
    assert sweeps.reap_and_enqueue() == [str(run.pk)]
    assert enqueued == [str(run.pk)]


def test_an_orphan_enqueued_twice_still_runs_once(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """Enqueued again while its first task is alive after all (a slow worker), the run's
    own claim lets one task through; the other ends without running it."""
    from tests.runs.support import execute

    run = queued(make_endpoint, tools, policy, age_s=3 * LEASE)
    assert execute(run) == "succeeded"
    assert execute(run) is None  # the second task finds it no longer claimable
    assert run.status == RunStatus.SUCCEEDED
