"""Mock and HTTP tools in runs (#12): executed from the snapshot, arguments checked
against the schema first, errors and refusals recorded as tool errors, and the
credentials an HTTP tool's headers name never stored, shown or exported."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from tests.runs.support import (
    CANARY,
    CITY_SCHEMA,
    EchoHeaders,
    calling,
    calls,
    execute,
    http_server,
    registration,
    start,
    stored_strings,
)
from tools_app.engine import SchemaValidatingExecutor, ToolSpecification
from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.sources import MockToolExecutor
from tools_app.models import ErrorPolicy, Run, ToolCallState
from tools_app.runs.snapshot.executors import (
    EXECUTOR_BUILDERS,
    BuiltExecutor,
    ToolContext,
    build_executor,
)
from tools_app.runs.snapshot.model import ToolSnapshot
from tools_app.web.api.tokens import create_token


def test_every_kind_has_one_builder() -> None:
    assert set(EXECUTOR_BUILDERS) >= {"python", "mock", "http"}


def test_every_kind_but_python_is_schema_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind added to the table (as MCP will be) is validated without asking for it."""
    inner = MockToolExecutor({})
    monkeypatch.setitem(EXECUTOR_BUILDERS, "new_kind",
                        lambda tool, context: BuiltExecutor(inner, ("s3cr3t-value",)))
    spec = ToolSpecification(name="t", parameters=CITY_SCHEMA)
    context = ToolContext(read_secret=lambda name: "", outbound=OutboundPolicy())
    built = build_executor(ToolSnapshot(name="t", kind="new_kind"), spec, context)
    assert isinstance(built.executor, SchemaValidatingExecutor)
    assert built.executor.inner is inner
    assert built.secrets == ("s3cr3t-value",)
    python = build_executor(ToolSnapshot(name="calculator", kind="python",
                                         python_path="tools_app.tools.example_tools.calculator"),
                            spec, context)
    assert not isinstance(python.executor, SchemaValidatingExecutor)


def test_a_mock_tool_runs_end_to_end(make_endpoint: Any, policy: ErrorPolicy) -> None:
    tool = registration("forecast", "mock", {"template": True, "result": "Sunny in {city}"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.SUCCEEDED
    assert call.result_text == "Sunny in Oslo"
    assert run.final_text == "model saw: Sunny in Oslo"


def test_schema_violations_go_through_the_arguments_policy(
        make_endpoint: Any, policy: ErrorPolicy, alice_client: Client) -> None:
    policy.arguments_error = "to_model"
    policy.save()
    tool = registration("forecast", "mock", {"result": "never"})
    run = start(make_endpoint(calling("forecast", {"town": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.ARGUMENTS_ERROR
    assert "/city: 'city' is a required property" in call.error_message
    assert "(root): Additional properties are not allowed" in call.error_message
    page = alice_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "<li>/city: &#x27;city&#x27; is a required property</li>" in page


def test_a_mock_error_is_an_execution_error_the_model_sees(
        make_endpoint: Any, policy: ErrorPolicy) -> None:
    tool = registration("forecast", "mock", {"error": "weather service down"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.EXECUTION_ERROR
    assert run.final_text == "model saw: weather service down"


def test_an_invalid_stored_configuration_fails_the_run_saying_why(
        make_endpoint: Any, policy: ErrorPolicy) -> None:
    tool = registration("forecast", "http", {"url": "ftp://nowhere"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "failed"

    assert "invalid http configuration" in run.error_message
    assert "url" in run.error_message


@pytest.fixture
def echo_url() -> Iterator[str]:
    with http_server(EchoHeaders, path="") as url:
        yield url


@pytest.fixture
def canary_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFORGE_TEST_WEATHER_TOKEN", CANARY)


def test_an_http_tool_runs_and_its_credential_is_never_shown(
        canary_env: None, echo_url: str, make_endpoint: Any, policy: ErrorPolicy,
        alice: AbstractUser, alice_client: Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tool = registration("forecast", "http", {
        "url": echo_url + "/forecast/{city}",
        "headers": {"Authorization": "env:AGENTFORGE_TEST_WEATHER_TOKEN"}})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.SUCCEEDED
    echoed = json.loads(call.result_text or "")
    assert echoed["path"] == "/forecast/Oslo"
    assert echoed["headers"]["authorization"] == "[redacted]"  # sent, and scrubbed
    assert CANARY not in json.dumps(run.snapshot)
    for text in [*stored_strings(run), caplog.text, *_pages(alice_client, alice, run)]:
        assert CANARY not in text


def _pages(client: Client, user: AbstractUser, run: Run) -> list[str]:
    """Everything a viewer can fetch about the run: pages, downloads, API, exports."""
    bearer = {"Authorization": f"Bearer {create_token(user, 'canary')[1]}"}
    [call] = calls(run)
    urls = [reverse("run_detail", args=[run.pk]),
            reverse("call_result", args=[run.pk, call.pk]),
            reverse("api_run_detail", args=[run.pk]),
            reverse("api_run_events", args=[run.pk]),
            reverse("runs_export", args=["csv"]), reverse("runs_export", args=["jsonl"]),
            reverse("api_runs_export", args=["jsonl"])]
    urls += [reverse("round_wire", args=[run.pk, index, which])
             for index in (0, 1, 2) for which in ("request", "response")]
    urls += [reverse("round_wire_panel", args=[run.pk, index]) for index in (0, 1, 2)]
    texts = []
    for url in urls:
        response = client.get(url, headers=bearer if url.startswith("/api/") else {})
        assert response.status_code in (200, 404), url
        texts.append(b"".join(response.streaming_content).decode()
                     if response.streaming else response.content.decode())
    assert any("forecast" in text for text in texts)
    return texts


def test_an_error_body_that_echoes_the_credential_is_redacted(
        canary_env: None, echo_url: str, make_endpoint: Any, policy: ErrorPolicy,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tool = registration("forecast", "http", {
        "url": echo_url + "/deny/{city}",
        "headers": {"Authorization": "env:AGENTFORGE_TEST_WEATHER_TOKEN"}})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.EXECUTION_ERROR
    assert "answered 403" in call.error_message
    assert '"authorization": "[redacted]"' in call.error_message
    for text in [*stored_strings(run), caplog.text]:
        assert CANARY not in text


def test_an_http_refusal_is_a_tool_error_on_record(
        echo_url: str, make_endpoint: Any, policy: ErrorPolicy, settings: Any) -> None:
    settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = False
    tool = registration("forecast", "http", {"url": echo_url + "/forecast/{city}"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.EXECUTION_ERROR
    assert "refused to connect to 127.0.0.1 (loopback)" in call.error_message
    assert "refused to connect" in (run.final_text or "")


def test_a_credential_outside_the_allowed_variables_is_refused_per_call(
        echo_url: str, make_endpoint: Any, policy: ErrorPolicy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_PASSWORD", CANARY)
    tool = registration("forecast", "http", {
        "url": echo_url + "/forecast/{city}", "headers": {"X-Key": "env:DATABASE_PASSWORD"}})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == ToolCallState.EXECUTION_ERROR
    assert "DATABASE_PASSWORD is not one endpoints may read" in call.error_message
    assert all(CANARY not in text for text in stored_strings(run))
