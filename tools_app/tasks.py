"""Task interfaces: they take ids and call the runner (the logic lives there)."""

from __future__ import annotations

from django.tasks import task

from . import runner


@task
async def execute_run(run_id: str) -> str | None:
    return await runner.execute_run(run_id)


def enqueue_run(run_id: str) -> None:
    execute_run.enqueue(run_id)
