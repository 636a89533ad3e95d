"""What the proxy refuses, in the provider's own error shape, and a provider's error
passed through unchanged (status and body) and recorded on the run."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.proxy.conftest import Proxy
from tools_app.models import IngestedSpan, Round, Run, RunEvent, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

BAD_REQUEST = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
               "foo": 1}


def test_a_provider_error_passes_through_unchanged_and_is_recorded(proxy: Proxy) -> None:
    direct = httpx.post(f"{proxy.fake.base_urls()['openai']}/chat/completions",
                        json=BAD_REQUEST, headers={"Authorization": "Bearer sk-any"})
    client = openai.OpenAI(base_url=proxy.openai_base(), api_key=proxy.token, max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="fake-model", extra_body={"foo": 1},
                                       messages=[{"role": "user", "content": "hi"}])
    proxy.ended()  # the conversation gone idle

    assert direct.status_code == 400
    assert raised.value.response.status_code == direct.status_code
    assert raised.value.response.content == direct.content
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.FAILED
    assert "Unrecognized request argument supplied: foo" in run.error_message
    assert Round.objects.get(run=run).status == "failed"


def test_an_anthropic_error_passes_through_unchanged(proxy: Proxy) -> None:
    body = {"model": "fake-model", "max_tokens": 16, "foo": 1,
            "messages": [{"role": "user", "content": "hi"}]}
    direct = httpx.post(f"{proxy.fake.base_urls()['anthropic']}/v1/messages", json=body,
                        headers={"x-api-key": "sk-any", "anthropic-version": "2023-06-01"})
    client = anthropic.Anthropic(base_url=proxy.anthropic_base(), api_key=proxy.token,
                                 max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="fake-model", max_tokens=16, extra_body={"foo": 1},
                               messages=[{"role": "user", "content": "hi"}])
    proxy.ended()  # the conversation gone idle

    assert direct.status_code == 400
    assert raised.value.response.status_code == direct.status_code
    # The same error, but for its own request's id.
    assert _without_request_id(raised.value.response.json()) == _without_request_id(
        direct.json())
    assert "foo: Extra inputs are not permitted" in Run.objects.get(
        created_by=proxy.user).error_message


def _without_request_id(body: dict[str, Any]) -> dict[str, Any]:
    assert "request_id" in body
    return {k: v for k, v in body.items() if k != "request_id"}


def _post(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, json=BAD_REQUEST, headers=headers)


def _openai_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def _anthropic_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert body["type"] == "error"
    return dict(body["error"])


def test_openai_refusals(proxy: Proxy) -> None:
    url = f"{proxy.openai_base()}/chat/completions"
    missing = _post(url, {})
    wrong = _post(url, {"Authorization": "Bearer afw_not-a-token"})
    unknown = _post(f"{proxy.openai_base('nowhere')}/chat/completions",
                    {"Authorization": f"Bearer {proxy.token}"})
    other_kind = _post(f"{proxy.openai_base('fake-anthropic')}/chat/completions",
                       {"Authorization": f"Bearer {proxy.token}"})
    not_json = httpx.post(url, content=b"{not json", headers={
        "Authorization": f"Bearer {proxy.token}", "Content-Type": "application/json"})
    too_deep = httpx.post(url, content=b"[" * 5000 + b"]" * 5000, headers={
        "Authorization": f"Bearer {proxy.token}", "Content-Type": "application/json"})

    assert (missing.status_code, _openai_error(missing)["code"]) == (401, "missing_api_key")
    assert (wrong.status_code, _openai_error(wrong)["code"]) == (401, "invalid_api_key")
    assert (unknown.status_code, _openai_error(unknown)["code"]) == (404, "endpoint_not_found")
    assert "'nowhere'" in _openai_error(unknown)["message"]
    assert other_kind.status_code == 404
    assert (not_json.status_code, _openai_error(not_json)["code"]) == (400, "invalid_request")
    assert (too_deep.status_code, _openai_error(too_deep)["code"]) == (400, "invalid_request")
    proxy.recorded()
    assert not Run.objects.exists()
    assert not IngestedSpan.objects.exists()


def test_anthropic_refusals_reach_the_sdk_as_its_errors(proxy: Proxy) -> None:
    wrong = anthropic.Anthropic(base_url=proxy.anthropic_base(), api_key="afw_wrong",
                                max_retries=0)
    unknown = anthropic.Anthropic(base_url=proxy.anthropic_base("nowhere"),
                                  api_key=proxy.token, max_retries=0)
    messages: Any = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(model="fake-model", max_tokens=16, messages=messages)
    with pytest.raises(anthropic.NotFoundError) as not_found:
        unknown.messages.create(model="fake-model", max_tokens=16, messages=messages)
    missing = _post(f"{proxy.anthropic_base()}/v1/messages", {})

    assert refused.value.body == {"type": "error", "error": {
        "type": "authentication_error",
        "message": "the API key is not a valid AgentForge API token"}}
    assert isinstance(not_found.value.body, dict)
    assert not_found.value.body["error"]["type"] == "not_found_error"
    assert (missing.status_code, _anthropic_error(missing)["type"]) == (
        401, "authentication_error")
    assert not Run.objects.exists()


def test_a_body_over_the_limit_is_refused_before_it_is_sent(
        proxy: Proxy, settings: Any) -> None:
    settings.AGENTFORGE_PROXY_MAX_BYTES = 2048
    body = json.dumps({"model": "fake-model",
                       "messages": [{"role": "user", "content": "x" * 4096}]})
    response = httpx.post(f"{proxy.openai_base()}/chat/completions", content=body,
                          headers={"Authorization": f"Bearer {proxy.token}",
                                   "Content-Type": "application/json"})

    assert (response.status_code, _openai_error(response)["code"]) == (
        413, "request_too_large")
    assert not any(r["path"].endswith("/chat/completions")
                   for r in proxy.fake.app.requests)


@pytest.mark.both
def test_an_exchange_after_the_run_ended_failed_is_filled_in_and_keeps_its_error(
        proxy: Proxy) -> None:
    """The conversation goes on after the sweep ended its run failed: the run stays
    ended as it was (failed, with the provider's error), its late exchange is its next
    round, and the round's events say they came late."""
    client = openai.OpenAI(base_url=proxy.openai_base(), api_key=proxy.token, max_retries=0)
    first = [{"role": "user", "content": "hello"}]
    answer = client.chat.completions.create(model="fake-model", messages=first)  # type: ignore[arg-type]
    later = [*first, {"role": "assistant", "content": answer.choices[0].message.content},
             {"role": "user", "content": "more"}]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake-model", messages=later,  # type: ignore[arg-type]
                                       extra_body={"foo": 1})
    assert len(proxy.ended()) == 1
    ended = Run.objects.get(created_by=proxy.user)
    assert (ended.status, ended.error_type) == (RunStatus.FAILED, "invalid_request_error")
    assert "Unrecognized request argument supplied: foo" in ended.error_message

    client.chat.completions.create(model="fake-model", messages=later)  # type: ignore[arg-type]
    proxy.recorded()

    run = Run.objects.get(created_by=proxy.user)
    assert (run.status, run.error_type, run.error_message) == (
        RunStatus.FAILED, ended.error_type, ended.error_message)
    assert run.rounds_count == 3
    late = RunEvent.objects.filter(run=run, seq__gt=ended.last_seq)
    assert late.exists()
    assert all(e.kind == "spans_received" and e.payload["late"] for e in late)
    assert proxy.ended() == []  # ended once
