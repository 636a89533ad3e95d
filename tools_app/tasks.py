"""Task interfaces: they take ids and call the logic that lives elsewhere."""

from __future__ import annotations

from django.tasks import task

from . import runner


@task
async def execute_run(run_id: str) -> str | None:
    return await runner.execute_run(run_id)


def enqueue_run(run_id: str) -> None:
    execute_run.enqueue(run_id)


@task
async def probe_endpoint(endpoint_id: str) -> str:
    from .probing import probe_and_store

    return await probe_and_store(endpoint_id)


def enqueue_probe(endpoint_id: str) -> None:
    probe_endpoint.enqueue(endpoint_id)
