"""Task interfaces: they take ids and call the logic that lives elsewhere."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.tasks import task
from django_tasks_db import DatabaseBackend

from tools_app.models import Run, RunStatus
from tools_app.runs.loops.provider_clients import close_if_the_loop_ends
from tools_app.runs.store.db import pipelined
from tools_app.runs.store.eventlog import notify_child_after_commit
from tools_app.runs.store.lifecycle import create_queued
from tools_app.runs.worker import runner


@task
async def execute_run(run_id: str) -> str | None:
    try:
        status = await runner.execute_run(run_id)
    finally:
        await close_if_the_loop_ends()
    if status == RunStatus.INTERRUPTED:
        # Handed back (the worker is stopping): another worker resumes it.
        await sync_to_async(enqueue_run)(run_id)
    return status


def enqueue_run(run_id: str) -> None:
    execute_run.enqueue(run_id)


def queue_run(**fields: Any) -> Run:
    """The one way a run starts: stored queued with its first event
    (`lifecycle.create_queued`) and executed once the transaction commits. Its writes
    read nothing back, so on PostgreSQL they go in one round trip (`pipelined`)."""
    with transaction.atomic(), pipelined():
        run = create_queued(**fields)
        enqueue_run_at_commit(str(run.pk))
        if run.parent_id is not None:  # the parent's page lists it
            notify_child_after_commit(str(run.parent_id))
    return run


def queue_runs(fields: Sequence[Mapping[str, Any]]) -> list[Run]:
    """`queue_run` for several runs in one transaction (all stored, or none)."""
    with transaction.atomic(), pipelined():
        runs = [create_queued(**f) for f in fields]
        for run in runs:
            enqueue_run_at_commit(str(run.pk))
        for parent_id in dict.fromkeys(str(r.parent_id) for r in runs if r.parent_id):
            notify_child_after_commit(parent_id)
    return runs


def enqueue_run_at_commit(run_id: str) -> None:
    """Have the run executed once the caller's transaction commits.

    With the database task backend (the scale-out configuration) the task's row is
    written inside that transaction: stored with what queued the run or not at all, so
    a process dying at the commit leaves no queued run without a task (the reaper's
    orphan sweep stays the fallback), and a start costs one commit, not two. Any other
    backend may start the task at once, so it is enqueued after the commit, when the
    run can be claimed."""
    if uses_database_tasks():
        enqueue_run(run_id)
    else:
        transaction.on_commit(lambda: enqueue_run(run_id))


def uses_database_tasks() -> bool:
    """Whether runs are queued as django-tasks-db rows (the scale-out configuration)."""
    return isinstance(execute_run.get_backend(), DatabaseBackend)


@task
async def execute_reexecution(reexecution_id: int) -> str | None:
    """A person's re-execution of one tool call (runs/debugger/reexecution.py)."""
    from tools_app.runs.worker.reexecute import perform

    try:
        return await perform(reexecution_id)
    finally:
        await close_if_the_loop_ends()


@task
async def probe_endpoint(endpoint_id: str) -> str:
    from tools_app.runs.worker.probing import probe_and_store

    try:
        return await probe_and_store(endpoint_id)
    finally:
        await close_if_the_loop_ends()


def enqueue_probe(endpoint_id: str) -> None:
    probe_endpoint.enqueue(endpoint_id)


@task
def prune_old_runs(older_than: str, keep_failed: bool = False) -> str:
    """`manage.py prune_runs` as a task, for a scheduler to enqueue (a cron entry or a
    periodic job calling `prune_old_runs.enqueue("30d")`)."""
    from tools_app.runs.store.retention import parse_age, prune_runs

    return str(prune_runs(parse_age(older_than), keep_failed=keep_failed))
