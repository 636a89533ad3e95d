"""The task that drives a suite run started from a page or the API (it takes the id;
the logic is `runner.advance`). `run_suite` drives its suite run in its own process."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.db import transaction
from django.tasks import task

from tools_app.models import SuiteRun

from .runner import POLL_SECONDS, a_run_has_ended, advance


def _advance(suite_run_id: str) -> str:
    suite_run = SuiteRun.objects.get(pk=suite_run_id)
    advance(suite_run)
    return suite_run.status


@task
async def drive_suite_run(suite_run_id: str) -> str:
    """Advance the suite run until it has ended; its runs execute on the workers."""
    while True:
        status = await sync_to_async(_advance)(suite_run_id)
        if status != "running":
            return status
        # A run that ended during the step is advanced on at once, not a poll later.
        while not await sync_to_async(a_run_has_ended)(suite_run_id):
            await asyncio.sleep(POLL_SECONDS)


def enqueue_suite_run(suite_run: SuiteRun) -> None:
    """Enqueued once the suite run is committed (so the task can read it)."""
    suite_run_id = str(suite_run.pk)
    transaction.on_commit(lambda: drive_suite_run.enqueue(suite_run_id))
