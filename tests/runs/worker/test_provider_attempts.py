"""A provider's failed attempts end up where the user looks: the round's stored attempts
and the run page, over real loopback HTTP to the fake provider server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.runs.support import execute, fake_llm_server, rounds, start
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration

pytestmark = pytest.mark.both

SCRIPTS = {"scripts": {"flaky-weather": {"steps": [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
     "faults": [{"kind": "status", "status": 503, "retry_after_ms": 10, "times": 1}]},
    {"text": "Done: {last_result}"},
]}}}


@pytest.fixture
def fake_server() -> Iterator[BackgroundServer]:
    with fake_llm_server(SCRIPTS) as server:
        yield server


def test_a_retried_model_call_shows_its_failed_attempt_in_the_timeline(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = ModelEndpoint.objects.create(
        name="flaky", kind="openai_compatible", base_url=fake_server.base_urls()["openai"],
        model="flaky-weather")
    owner = get_user_model().objects.create_user("watcher")
    run = start(endpoint, [tools["get_weather"]], policy)
    run.created_by = owner
    run.save(update_fields=["created_by"])

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    first, second = rounds(run)
    [attempt] = first.attempts
    assert (attempt["attempt"], attempt["status"], attempt["retryable"]) == (1, 503, True)
    assert attempt["wait_s"] == pytest.approx(0.01, abs=0.005)  # the server's retry-after-ms
    assert second.attempts == []
    assert run.final_text.startswith("Done: ")

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "1 failed attempt" in page
    assert "attempt 1: 503" in page
