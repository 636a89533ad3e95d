"""OTLP out from a `db_worker` process: a run it executes is exported by that process
(the hook and the exporter's threads live in every process that runs runs) to the
product's receiver on a live server, and the received run compares equal."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tools_app.models import ErrorPolicy, Run, RunStatus, ToolRegistration, TraceExportStatus
from tools_app.runs.debugger.compare import compare_runs
from tools_app.web.api.tokens import create_token

from .conftest import RUN_TIMEOUT, WorkerPool, start_run, wait_terminal, wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

SCRIPT = [
    {"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "alpha"}},
                    {"name": "tally", "arguments": {"tag": "beta"}}]},
    {"text": "Done. Results: {last_results}"},
]


def test_a_worker_process_exports_its_runs(
        workers: WorkerPool, live_server: Any, bob: AbstractUser, make_endpoint: Any,
        slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> None:
    _, token = create_token(bob, "otlp out")
    endpoint = make_endpoint(SCRIPT, name="two rounds")
    original = start_run(endpoint, [slow_tools["slow_lookup"], slow_tools["tally"]], policy)

    worker = workers.start("w-otlp", AGENTFORGE_OTLP_ENDPOINT=live_server.url,
                           AGENTFORGE_OTLP_HEADERS=f"authorization=Bearer%20{token}")
    original = wait_terminal(original, workers)
    assert original.status == RunStatus.SUCCEEDED

    received = wait_until(
        lambda: Run.objects.filter(created_by=bob, status=RunStatus.SUCCEEDED).first(),
        RUN_TIMEOUT, "the exported run to arrive", workers)
    compared = compare_runs(original, received)
    assert compared["same_calls"], compared["first_divergent_round"]
    assert received.final_text == original.final_text
    status = wait_until(
        lambda: TraceExportStatus.objects.filter(process__endswith=f":{worker.pid}",
                                                 sent=1 + 2 + 2).first(),
        RUN_TIMEOUT, "the worker's export counts", workers)
    assert (status.dropped, status.failed) == (0, 0)
