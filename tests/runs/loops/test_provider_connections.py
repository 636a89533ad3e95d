"""Runs share their provider's connections: one client per endpoint configuration and
event loop (the embedded worker has one long-lived loop), closed when it is done with."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import transaction

from tests.runs.support import execute, fake_llm_server, start, wait_until
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.loops import task_backend
from tools_app.runs.loops.provider_clients import PROVIDER_CLIENTS

SCRIPTS = {"scripts": {"weather": {"steps": [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "Done: {last_result}"},
]}}}


@pytest.fixture
def fake_server() -> Iterator[BackgroundServer]:
    with fake_llm_server(SCRIPTS) as server:
        yield server


def connections_used(server: BackgroundServer) -> set[tuple[str, int]]:
    log = httpx.get(f"{server.url}/_fake/requests", timeout=10).json()["requests"]
    assert log, "the fake server saw no request"
    return {tuple(record["client"]) for record in log}


@pytest.mark.django_db(transaction=True)
def test_two_runs_in_a_row_on_the_embedded_worker_share_one_connection(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    settings: Any, lock_free_polling: None,
) -> None:
    settings.TASKS = {"default": {"BACKEND": "tools_app.runs.loops.task_backend.InProcessBackend"}}
    endpoint = ModelEndpoint.objects.create(
        name="fake openai", kind="openai_compatible", model="weather",
        base_url=fake_server.base_urls()["openai"])

    for _ in range(2):
        with transaction.atomic():
            run = start(endpoint, [tools["get_weather"]], policy)
        assert wait_until(lambda run=run: Run.objects.get(pk=run.pk).is_terminal)
        assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED

    assert len(connections_used(fake_server)) == 1  # 4 model calls, 2 runs, 1 connection
    assert len(PROVIDER_CLIENTS) == 1
    loop = task_backend.current_worker_loop()
    assert loop is not None
    PROVIDER_CLIENTS.close_for_loop(loop)  # what the server does when it stops
    assert len(PROVIDER_CLIENTS) == 0


@pytest.mark.both
def test_a_run_on_a_loop_of_its_own_closes_its_client_when_it_ends(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    """A db_worker runs each run in an event loop made for it: the run's rounds share
    one connection, and its client is closed before that loop goes."""
    endpoint = ModelEndpoint.objects.create(
        name="fake openai", kind="openai_compatible", model="weather",
        base_url=fake_server.base_urls()["openai"])
    run = start(endpoint, [tools["get_weather"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    assert len(connections_used(fake_server)) == 1
    assert len(PROVIDER_CLIENTS) == 0


@pytest.mark.both
def test_an_endpoint_on_a_loopback_address_is_refused_unless_the_operator_allows_it(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    settings: Any,
) -> None:
    """An endpoint edited to point at a local service (or cloud metadata) must not make
    the server call it: the run fails saying why, and nothing is sent."""
    settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = False  # DEBUG off: a production server
    endpoint = ModelEndpoint.objects.create(
        name="local service", kind="openai_compatible", model="weather",
        base_url=fake_server.base_urls()["openai"])
    run = start(endpoint, [tools["get_weather"]], policy)

    assert execute(run) == "failed"

    assert run.error_type == "ProviderError"
    assert "refused to connect to 127.0.0.1 (127.0.0.1: loopback)" in run.error_message
    log = httpx.get(f"{fake_server.url}/_fake/requests", timeout=10).json()["requests"]
    assert log == []

    settings.AGENTFORGE_OUTBOUND_ALLOW = ["127.0.0.1/32"]  # the operator allows it
    run = start(endpoint, [tools["get_weather"]], policy)
    assert execute(run) == "succeeded", (run.error_type, run.error_message)
