"""How the proxy forwards: a stream reaches the client chunk by chunk as the provider
sends it (never buffered), and only where the outbound policy lets runs connect."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.proxy.conftest import Proxy, serving
from tools_app.models import ModelEndpoint, Round, Run, RunStatus
from tools_app.proxy.exchanges import CLIENT_LEFT

pytestmark = pytest.mark.django_db(transaction=True)

GATE_TIMEOUT = 30.0


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-gated", "object": "chat.completion.chunk", "model": "gated",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


HEL = _chunk({"role": "assistant", "content": "Hel"})
LO_DONE = _chunk({"content": "lo"}, "stop") + b"data: [DONE]\n\n"


class GatedStream:
    """A provider that sends `first` of its stream, then waits until the test opens the
    gate before it sends `rest` and ends the response. By default the first chunk, then
    the rest once the test has read it through the proxy; `ended_late()`: the whole
    stream, [DONE] included, the response ended only at the gate (an SDK that stops
    reading at [DONE] has then returned before the proxy's relay ends and hands the
    exchange to the recorder)."""

    def __init__(self, first: bytes = HEL, rest: bytes = LO_DONE) -> None:
        self.first, self.rest = first, rest
        self.gate = threading.Event()
        self.opened_by_the_test = False

    @classmethod
    def ended_late(cls) -> GatedStream:
        return cls(first=HEL + LO_DONE, rest=b"")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "more_body": True, "body": self.first})
        self.opened_by_the_test = await asyncio.to_thread(self.gate.wait, GATE_TIMEOUT)
        await send({"type": "http.response.body", "more_body": False, "body": self.rest})


@pytest.fixture
def gated() -> Iterator[tuple[GatedStream, str]]:
    app = GatedStream()
    with serving(app) as served:
        yield app, served.url


@contextmanager
def gated_stream(proxy: Proxy, url: str) -> Iterator[httpx.Response]:
    """A streamed chat request through the proxy to the gated provider at `url`."""
    ModelEndpoint.objects.create(name="gated", kind="openai", base_url=f"{url}/v1",
                                 model="gated")
    body = {"model": "gated", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{proxy.openai_base('gated')}/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {proxy.token}"},
                      timeout=GATE_TIMEOUT * 2) as response:
        yield response


def test_a_stream_reaches_the_client_as_it_arrives(
        proxy: Proxy, gated: tuple[GatedStream, str]) -> None:
    app, url = gated
    with gated_stream(proxy, url) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        app.gate.set()  # the provider sends the rest only now
        rest = [line for line in lines if line.startswith("data:")]
    proxy.recorded()

    assert '"content": "Hel"' in first
    assert app.opened_by_the_test
    assert rest[-1] == "data: [DONE]"
    assert Round.objects.get(run__created_by=proxy.user).ai_text == "Hello"


def test_a_stream_the_client_left_at_its_last_event_is_recorded_once_it_ends(
        proxy: Proxy) -> None:
    app = GatedStream.ended_late()
    with serving(app) as provider:
        ModelEndpoint.objects.create(name="late", kind="openai",
                                     base_url=f"{provider.url}/v1", model="late")
        client = openai.OpenAI(base_url=proxy.openai_base("late"), api_key=proxy.token,
                               max_retries=0)
        with client.chat.completions.stream(
                model="late", messages=[{"role": "user", "content": "hi"}]) as events:
            answer = events.get_final_completion().choices[0].message.content
        app.gate.set()  # the relay ends and hands the exchange over only now
        proxy.recorded()

    assert answer == "Hello"
    round_ = Round.objects.get(run__created_by=proxy.user)
    assert (round_.status, round_.ai_text) == ("responded", "Hello")


def test_a_stream_the_client_left_before_its_end_is_recorded_as_failed(
        proxy: Proxy, gated: tuple[GatedStream, str]) -> None:
    app, url = gated
    with gated_stream(proxy, url) as response:
        first = next(line for line in response.iter_lines() if line.startswith("data:"))
    proxy.served.wait_answered()  # the server saw the client go, the provider still open
    app.gate.set()
    proxy.ended()  # the conversation gone idle

    assert '"content": "Hel"' in first
    assert Round.objects.get(run__created_by=proxy.user).status == "failed"
    run = Run.objects.get(created_by=proxy.user)
    assert (run.status, run.error_message) == (RunStatus.FAILED, CLIENT_LEFT)


def test_an_endpoint_the_outbound_policy_refuses_is_not_called(proxy: Proxy) -> None:
    ModelEndpoint.objects.create(name="private", kind="openai",
                                 base_url="http://10.255.255.1:9/v1", model="m")
    response = httpx.post(f"{proxy.openai_base('private')}/chat/completions",
                          json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                          headers={"Authorization": f"Bearer {proxy.token}"})
    proxy.ended()  # the conversation gone idle

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert "private" in response.json()["error"]["message"]
    run = Run.objects.get(created_by=proxy.user)
    assert run.status == RunStatus.FAILED
    assert "refused to connect" in run.error_message


def test_a_response_over_the_limit_is_passed_on_whole_but_not_recorded(
        proxy: Proxy, settings: Any) -> None:
    settings.AGENTFORGE_PROXY_MAX_BYTES = 1024
    body = {"model": "fake-model", "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{proxy.openai_base()}/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {proxy.token}"})
    proxy.recorded()

    assert len(response.content) > 1024
    assert response.text.rstrip().endswith("data: [DONE]")
    round_ = Round.objects.get(run__created_by=proxy.user)
    assert round_.status == "responded"
    assert round_.ai_text is None
    assert round_.request_json["messages"][-1]["content"] == "hi"
