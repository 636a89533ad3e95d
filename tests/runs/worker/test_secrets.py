"""A provider key (a canary value) never reaches the database, an error or a log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.support import (
    EchoingModel,
    QuietHandler,
    execute,
    http_server,
    start,
    stored_strings,
)
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.worker import recorder
from tools_app.runs.worker.recorder import RAW_STREAM_WITHHELD

pytestmark = pytest.mark.both

CANARY_KEY = "sk-canary-7f3a9c1e5b2d4068"
CANARY_HEADER = "hdr-canary-2b8e6d0f4a1c"


@pytest.fixture
def canary_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFORGE_TEST_CANARY_API_KEY", CANARY_KEY)
    monkeypatch.setenv("AGENTFORGE_TEST_CANARY_TOKEN", CANARY_HEADER)


def leaks(run: Run, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every stored string and log line of the run that contains a canary."""
    texts = [*stored_strings(run), run.error_message]
    for record in caplog.records:
        texts.append(record.getMessage())
        texts.append(record.exc_text or "")
        texts.append(repr(record.args))
    texts.append(caplog.text)
    return [t for t in texts if CANARY_KEY in t or CANARY_HEADER in t]


def test_a_scripted_endpoint_never_stores_its_key(
    canary_env: None, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
              {"text": "model saw: {last_result}"}]
    endpoint = make_endpoint(script, api_key_env="AGENTFORGE_TEST_CANARY_API_KEY",
                             extra_headers={"X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"})
    run = start(endpoint, [demo_tools["calculator"]], policy)

    assert execute(run) == "succeeded"

    assert run.snapshot["endpoint"]["api_key_env"] == "AGENTFORGE_TEST_CANARY_API_KEY"
    assert leaks(run, caplog) == []


def test_a_failing_openai_compatible_endpoint_never_leaks_its_key(
    canary_env: None, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    policy.provider_max_retries = 1  # one retry is logged too, with the transport error
    policy.save()
    endpoint = ModelEndpoint.objects.create(
        name="local fake", kind="openai_compatible",
        base_url="http://127.0.0.1:9/v1",  # the discard port: nothing listens, it fails fast
        model="fake-model", api_key_env="AGENTFORGE_TEST_CANARY_API_KEY",
        extra_headers={"X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"},
    )
    run = start(endpoint, [demo_tools["calculator"]], policy, f"my key is not {CANARY_KEY[:6]}")

    assert execute(run) == "failed"

    assert run.status == RunStatus.FAILED
    assert run.error_type == "ProviderError"
    assert run.error_message  # says what went wrong...
    assert run.snapshot["endpoint"]["api_key_env"] == "AGENTFORGE_TEST_CANARY_API_KEY"
    assert run.snapshot["endpoint"]["extra_headers"] == {
        "X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"}
    assert leaks(run, caplog) == []  # ...without the key anywhere


def test_a_missing_key_fails_the_run_naming_only_the_variable(
    monkeypatch: pytest.MonkeyPatch, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    monkeypatch.delenv("AGENTFORGE_TEST_CANARY_API_KEY", raising=False)
    endpoint = ModelEndpoint.objects.create(
        name="no key", kind="openai_compatible", base_url="http://127.0.0.1:9/v1",
        model="fake-model", api_key_env="AGENTFORGE_TEST_CANARY_API_KEY")
    run = start(endpoint, [demo_tools["calculator"]], policy)

    assert execute(run) == "failed"

    assert run.error_type == "ImproperlyConfigured"
    assert "AGENTFORGE_TEST_CANARY_API_KEY" in run.error_message
    assert "not set" in run.error_message


class EchoingProvider(QuietHandler):
    """A hostile provider: answers 401 and echoes the credentials it got in the error."""

    received: list[dict[str, str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        got = {"authorization": self.headers.get("authorization", ""),
               "x-api-key": self.headers.get("x-api-key", "")}
        EchoingProvider.received.append(got)
        body = json.dumps({"error": {
            "message": f"Incorrect API key provided: {got['authorization']} / {got['x-api-key']}",
            "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
        self.answer(401, "application/json", body)


@pytest.fixture
def echoing_provider() -> Iterator[str]:
    EchoingProvider.received = []
    with http_server(EchoingProvider) as url:
        yield url


def test_a_provider_that_echoes_the_key_in_its_error_never_leaks_it(
    canary_env: None, echoing_provider: str, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint = ModelEndpoint.objects.create(
        name="echoing fake", kind="openai_compatible", base_url=echoing_provider,
        model="fake-model", api_key_env="AGENTFORGE_TEST_CANARY_API_KEY",
        extra_headers={"X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"},
    )
    run = start(endpoint, [demo_tools["calculator"]], policy)

    assert execute(run) == "failed"

    # The credentials did travel (in headers), and the provider sent them back...
    assert EchoingProvider.received == [
        {"authorization": f"Bearer {CANARY_KEY}", "x-api-key": CANARY_HEADER}]
    assert run.error_type == "ProviderError"
    assert "Incorrect API key provided" in run.error_message
    # ...but they are nowhere in the database, the error or the logs.
    assert leaks(run, caplog) == []


@pytest.fixture
def echoing_model() -> Iterator[str]:
    with http_server(EchoingModel) as url:
        yield url


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_that_echoes_the_key_in_its_answers_never_stores_it(
    canary_env: None, echoing_model: str, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, caplog: pytest.LogCaptureFixture, stream: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    endpoint = ModelEndpoint.objects.create(
        name="echoing model", kind="openai_compatible", base_url=echoing_model,
        model="fake-model", api_key_env="AGENTFORGE_TEST_CANARY_API_KEY", stream=stream,
        extra_headers={"X-Api-Key": "env:AGENTFORGE_TEST_CANARY_TOKEN"},
    )
    run = start(endpoint, [demo_tools["calculator"]], policy)
    shown: list[str] = []  # what live viewers were sent

    async def viewers(run_id: str, message: dict[str, Any]) -> None:
        shown.append(json.dumps(message))

    monkeypatch.setattr(recorder, "notify", viewers)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    fragments = [json.loads(m)["fragment"] for m in shown if '"fragment"' in m]
    assert len(fragments) > 10 if stream else fragments == []
    seen = "".join(f.get("delta") or f.get("arguments_delta") or "" for f in fragments)
    assert CANARY_KEY not in seen  # as a viewer's page puts the pieces together
    assert CANARY_HEADER not in seen
    assert ("[redacted]" in seen) is stream
    assert run.final_text is not None
    assert run.final_text.startswith("done, your keys: ")
    assert "[redacted]" in run.final_text
    [call] = run.tool_calls.all()
    assert "[redacted]" in call.arguments_raw
    # The raw event stream, which splits the key into harmless-looking pieces, is not
    # kept for a response that carried it.
    raw = [r.raw_stream for r in run.rounds.order_by("index")]
    assert raw == ([RAW_STREAM_WITHHELD] * 2 if stream else [None, None])
    assert leaks(run, caplog) == []
