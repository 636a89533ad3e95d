"""A run on the OpenAI Responses API, through the product's path: an endpoint of kind
openai_responses registered with the registry's form (the API's and the admin's), a run
started and executed by the worker against the fake provider over loopback HTTP (strict,
as the real API), JSON and streamed, with parallel calls and reasoning items that must
come back, and the run page's timeline showing it like any other provider's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.providers.support import validate_responses_body
from tests.runs.support import calls, execute, expire_lease, fake_llm_server, rounds, start
from tests.runs.tools_for_tests import STATE, SimulatedCrash
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.runs.store.leases import reap_expired_runs
from tools_app.web.registry_forms import ModelEndpointForm

pytestmark = pytest.mark.both

SCRIPTS = {"scripts": {"gpt-5-mini": {"steps": [
    {"text": "Checking both cities.",
     "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "get_weather", "arguments": {"city": "Lima"}}]},
    {"text": "Done: {last_results}"},
]}}}


@pytest.fixture
def fake_server() -> Iterator[BackgroundServer]:
    with fake_llm_server(SCRIPTS) as server:
        yield server


def registered_endpoint(server: BackgroundServer, *, stream: bool,
                        custom: dict[str, Any] | None = None) -> ModelEndpoint:
    defaults = {"max_output_tokens": 2048,
                "custom": {"reasoning": {"effort": "low"}, **(custom or {})}}
    form = ModelEndpointForm(data={
        "name": f"responses-{stream}", "kind": "openai_responses", "model": "gpt-5-mini",
        "base_url": server.base_urls()["openai_responses"], "stream": stream,
        "default_parameters": json.dumps(defaults),
        "extra_headers": "{}", "script": "[]", "timeout_seconds": "30"})
    assert form.is_valid(), form.errors
    return form.save()


def provider_requests(server: BackgroundServer) -> list[dict[str, Any]]:
    """What the worker sent, each body checked against the openai SDK's request types."""
    with httpx.Client(base_url=server.url) as client:
        requests: list[dict[str, Any]] = client.get("/_fake/requests").json()["requests"]
    for request in requests:
        validate_responses_body(request["body"])
    return requests


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_run_with_parallel_calls_and_reasoning_items_completes(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    stream: bool,
) -> None:
    endpoint = registered_endpoint(fake_server, stream=stream)
    owner = get_user_model().objects.create_user("responses-user")
    run = start(endpoint, [tools["get_weather"]], policy, text="Weather in Paris and Lima?")
    run.created_by = owner
    run.save(update_fields=["created_by"])

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    first, second = rounds(run)
    assert [(c.tool_name, c.arguments, c.state) for c in calls(run)] == [
        ("get_weather", {"city": "Paris"}, "succeeded"),
        ("get_weather", {"city": "Lima"}, "succeeded")]
    assert first.thinking == "Deciding what to answer."
    assert (run.final_text or "").startswith("Done: ")
    sent = [r["body"] for r in provider_requests(fake_server)]
    assert [r["outcome"] for r in provider_requests(fake_server)] == ["reply", "reply"]
    assert all(b["stream"] is stream and b["store"] is False for b in sent)
    assert sent[0]["include"] == ["reasoning.encrypted_content"]
    assert sent[0]["reasoning"] == {"effort": "low"}
    returned = [i for i in sent[1]["input"] if i.get("type") == "reasoning"]
    received = (first.response or {})["ai_message"]["provider_blocks"]
    assert [i["id"] for i in returned] == [received[0]["id"]]
    assert returned[0]["encrypted_content"]
    assert (second.response or {})["ai_message"]["text"] == run.final_text

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.pk}/").content.decode()
    assert "Checking both cities." in page
    assert "Deciding what to answer." in page
    assert page.count("get_weather") >= 2
    assert "Lima" in page


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_chained_run_sends_only_what_came_after_the_stored_response(
    fake_server: BackgroundServer, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    stream: bool,
) -> None:
    endpoint = registered_endpoint(fake_server, stream=stream, custom={
        "store": True, "previous_response_id": "auto"})
    run = start(endpoint, [tools["get_weather"]], policy, text="Weather in Paris and Lima?")

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    first, _ = rounds(run)
    opening, follow_up = [r["body"] for r in provider_requests(fake_server)]
    assert "previous_response_id" not in opening
    assert follow_up["previous_response_id"] == (first.response or {})["response_id"]
    assert [i["type"] for i in follow_up["input"]] == ["function_call_output"] * 2
    assert (run.final_text or "").startswith("Done: ")


RESUMED = {"scripts": {"gpt-5-mini": {"steps": [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "r0"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "r1"}}]},
    {"text": "model saw: {last_results}"},
]}}}


@pytest.mark.parametrize("chained", [False, True], ids=["whole", "chained"])
def test_a_resumed_run_sends_the_stored_reasoning_items_back(
    tools: dict[str, ToolRegistration], policy: ErrorPolicy, chained: bool,
) -> None:
    """The worker dies in round 1's call; the next one rebuilds the conversation from the
    stored rounds, whose responses keep the output items (and the response id)."""
    with fake_llm_server(RESUMED) as server:
        custom = {"store": True, "previous_response_id": "auto"} if chained else {}
        endpoint = registered_endpoint(server, stream=False, custom=custom)
        run = start(endpoint, [tools["lookup"]], policy)
        STATE.on_enter["lookup"].append(lambda: None)  # round 0's call runs
        STATE.on_enter["lookup"].append(_crash)  # round 1's call kills the worker
        with pytest.raises(SimulatedCrash):
            execute(run)
        expire_lease(run)
        reap_expired_runs()

        assert execute(run) == "succeeded", (run.error_type, run.error_message)

        sent = [r["body"] for r in provider_requests(server)]
    first, second, _ = rounds(run)
    ids = [(r.response or {})["ai_message"]["provider_blocks"][0]["id"] for r in (first, second)]
    last = sent[-1]
    assert len(sent) == 3  # round 1's answer is not asked for again
    if chained:
        assert last["previous_response_id"] == (second.response or {})["response_id"]
        assert [i["type"] for i in last["input"]] == ["function_call_output"]
    else:
        assert [i["id"] for i in last["input"] if i.get("type") == "reasoning"] == ids
    assert run.final_text == "model saw: value of r1"


def _crash() -> None:
    raise SimulatedCrash("lookup")


def test_the_registry_form_refuses_what_the_responses_api_does_not_take(
        db: None) -> None:
    form = ModelEndpointForm(data={
        "name": "responses", "kind": "openai_responses", "model": "gpt-5",
        "default_parameters": '{"stop_sequences": ["END"], "custom": {"seed": 1}}',
        "extra_headers": "{}", "script": "[]", "timeout_seconds": "30"})

    assert not form.is_valid()
    errors = " ".join(map(str, form.errors["default_parameters"]))
    assert "stop_sequences: openai_responses endpoints have no stop sequences" in errors
    assert "custom.seed: not allowed for openai_responses endpoints" in errors
