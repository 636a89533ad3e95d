"""Task interfaces: they take ids and call the logic that lives elsewhere."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.tasks import task

from ..models import RunStatus
from . import runner
from .provider_clients import close_if_the_loop_ends


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


@task
async def execute_reexecution(reexecution_id: int) -> str | None:
    """A person's re-execution of one tool call (runs/reexecution.py)."""
    from .reexec_runner import perform

    try:
        return await perform(reexecution_id)
    finally:
        await close_if_the_loop_ends()


@task
async def probe_endpoint(endpoint_id: str) -> str:
    from .probing import probe_and_store

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
    from .retention import parse_age, prune_runs

    return str(prune_runs(parse_age(older_than), keep_failed=keep_failed))
