"""One HTTP client per endpoint and event loop, shared; what runs over it.

A model without an injected client owns one per event loop: created on the first call,
reused by later and concurrent calls, closed by `aclose()`. Models given a
SharedHttpClients cache share one client (and its connections) per endpoint
configuration, whatever their keys; the cache's owner closes it. Real runs against the
fake server cover conversations, resets, cut streams and refused connections.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tools_app.engine import ProviderError, ToolService, UserMessage, tool
from tools_app.engine.events import ProviderAttempt
from tools_app.engine.messages import (
    AiMessage,
    ChatRequest,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from tools_app.engine.providers import build_chat_model
from tools_app.engine.providers.http.aiohttp_transport import AiohttpTransport
from tools_app.engine.providers.http.client import USER_AGENT
from tools_app.engine.providers.http.clients import EndpointConfig, SharedHttpClients
from tools_app.engine.providers.http.jsoncodec import encode_json
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.engine.providers.openai import OpenAIChatModel
from tools_app.fake_llm import BackgroundServer

from .loopback import read_request, serving
from .support import captured_events, json_response
from .wire import anthropic_message, gemini_response, openai_completion

FAST_RETRY = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.001)
REQUEST = ChatRequest(messages=(UserMessage(text="Hi"),))


class CountingTransport(httpx.MockTransport):
    """A mock pool that says how often it was closed and how many requests overlapped."""

    def __init__(self) -> None:
        super().__init__(self._handle)
        self.closed = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.requests = 0
        self.authorizations: list[str | None] = []

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.authorizations.append(request.headers.get("authorization"))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return json_response(200, openai_completion(text="Hello"))

    async def aclose(self) -> None:
        self.closed += 1


class Clients(SharedHttpClients):
    """A cache whose clients run on counting mock transports."""

    def __init__(self) -> None:
        self.made: list[CountingTransport] = []
        self.configs: list[EndpointConfig] = []
        super().__init__(self._make)

    def _make(self, config: EndpointConfig) -> httpx.AsyncClient:
        self.configs.append(config)
        self.made.append(CountingTransport())
        return httpx.AsyncClient(transport=self.made[-1])


def model_on(clients: SharedHttpClients, key: str = "k" * 12, **config: Any) -> OpenAIChatModel:
    return OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m", api_key=key,
                           clients=clients, **config)


async def test_one_client_serves_every_call() -> None:
    clients = Clients()
    model = model_on(clients)

    await model.chat(REQUEST)
    first = model.http.client()
    await model.chat(REQUEST)
    await model.chat(REQUEST)

    assert model.http.client() is first
    assert len(clients.made) == 1
    assert clients.made[0].requests == 3
    await clients.aclose_all()


async def test_concurrent_runs_sharing_a_model_share_the_client() -> None:
    clients = Clients()
    model = model_on(clients)

    responses = await asyncio.gather(*(model.chat(REQUEST) for _ in range(20)))
    await asyncio.gather(*(ToolService().chat(model, [UserMessage(text="Hi")])
                           for _ in range(10)))

    assert [r.ai_message.text for r in responses] == ["Hello"] * 20
    assert len(clients.made) == 1
    assert clients.made[0].requests == 30
    assert clients.made[0].most_in_flight > 1  # the calls did overlap
    await clients.aclose_all()


async def test_models_of_one_endpoint_share_a_client_whatever_their_keys() -> None:
    clients = Clients()
    alice, bob = model_on(clients, "sk-alice-0123456789"), model_on(clients, "sk-bob-0123456789")
    other_timeout = model_on(clients, read_timeout=30)

    await alice.chat(REQUEST)
    await bob.chat(REQUEST)
    await other_timeout.chat(REQUEST)

    assert len(clients.made) == 2  # a different configuration, a different client
    assert clients.made[0].authorizations == ["Bearer sk-alice-0123456789",
                                              "Bearer sk-bob-0123456789"]
    assert "Authorization" not in alice.http.client().headers  # keys are per request
    assert alice.http.redactor.secrets != bob.http.redactor.secrets
    await alice.aclose()  # a shared client is the cache owner's to close
    assert clients.made[0].closed == 0
    await clients.aclose_all()
    assert [t.closed for t in clients.made] == [1, 1]


async def test_aclose_closes_an_owned_client_and_a_later_call_opens_a_new_one() -> None:
    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m")
    first = model.http.client()

    await model.aclose()

    assert first.is_closed
    second = model.http.client()
    assert second is not first
    assert not second.is_closed
    async with model:
        pass
    assert second.is_closed


async def test_another_event_loop_gets_its_own_client() -> None:
    clients = Clients()
    model = model_on(clients)
    await model.chat(REQUEST)
    here = model.http.client()

    async def elsewhere() -> httpx.AsyncClient:
        await model.chat(REQUEST)
        return model.http.client()

    there = await asyncio.to_thread(asyncio.run, elsewhere())

    assert there is not here
    assert model.http.client() is here
    await clients.aclose_all()  # the other loop is gone: its client is dropped
    assert here.is_closed
    assert len(clients) == 0


def test_close_for_loop_closes_the_clients_of_a_loop_being_shut_down() -> None:
    clients = Clients()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(model_on(clients).chat(REQUEST))
        clients.close_for_loop(loop)
    finally:
        loop.close()
    assert clients.made[0].closed == 1
    assert len(clients) == 0


async def test_an_injected_client_is_used_as_it_is_and_left_open() -> None:
    transport = CountingTransport()
    client = httpx.AsyncClient(transport=transport)
    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m", http_client=client)

    await model.chat(REQUEST)
    await model.aclose()

    assert model.http.client() is client
    assert not client.is_closed
    assert transport.requests == 1
    await client.aclose()


async def test_an_injected_transport_is_used_in_every_loop_and_left_open() -> None:
    transport = CountingTransport()
    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m", transport=transport)

    await model.chat(REQUEST)
    await asyncio.to_thread(asyncio.run, model.chat(REQUEST))
    await model.aclose()

    assert transport.requests == 2
    assert transport.closed == 0


def test_the_model_constructors_take_the_endpoint_options() -> None:
    built: Any = build_chat_model("openai", model="m", proxy="http://proxy.invalid:3128",
                                  verify="/some/ca.pem", read_timeout=30)
    assert built.http.config == EndpointConfig.of(
        "https://api.openai.com/v1", proxy="http://proxy.invalid:3128", verify="/some/ca.pem",
        read_timeout=30)
    for kind in ("anthropic", "gemini"):
        assert build_chat_model(kind, model="m", proxy="http://p:1").http.config.proxy == (
            "http://p:1")  # type: ignore[attr-defined]


async def test_two_models_of_one_endpoint_open_one_connection() -> None:
    """The app's case: each run builds its own model; the cache gives them one pool."""
    ok = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
          b"\r\n")
    body = json.dumps(openai_completion(text="Hello")).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(ok % len(body) + body)
            await writer.drain()

    clients = SharedHttpClients()
    async with serving(answer, path="/v1") as (base_url, accepted):
        for key in ("sk-first-0123456789", "sk-second-0123456789"):
            model = OpenAIChatModel(base_url=base_url, model="m", api_key=key,
                                    clients=clients)
            assert (await model.chat(REQUEST)).ai_message.text == "Hello"
            await model.aclose()
        await clients.aclose_all()

    assert len(accepted) == 1


# -- real runs against the fake server ------------------------------------------------------


@tool(description="Current weather in one city")
async def get_weather(city: str) -> str:
    return f"Sunny in {city}"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer() as running:
        yield running


def set_script(server: BackgroundServer, name: str, script: dict[str, Any]) -> None:
    httpx.put(f"{server.url}/_fake/scripts/{name}", json=script, timeout=10).raise_for_status()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_runs_a_conversation(server: BackgroundServer, stream: bool) -> None:
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model="fake-k2-p2",
                            api_key="sk-test-key-123456", stream=stream)

    results = await asyncio.gather(*(ToolService().tools([get_weather]).chat(
        model, [UserMessage(text="Weather?")]) for _ in range(5)))

    assert [len(r.tool_executions) for r in results] == [4] * 5
    assert isinstance(model.http.client()._transport, AiohttpTransport)
    await model.aclose()


async def test_a_reset_connection_is_retried(server: BackgroundServer) -> None:
    name = "reset"
    set_script(server, name, {"steps": [
        {"faults": [{"kind": "reset"}],
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "Done: {last_result}"}]})
    attempts: list[ProviderAttempt] = []
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model=name, retry=FAST_RETRY)

    result = await ToolService().tools([get_weather]).chat(
        model, [UserMessage(text="Weather?")],
        observers=[lambda e: attempts.append(e) if isinstance(e, ProviderAttempt) else None])

    assert result.final_response.ai_message.text == "Done: Sunny in Oslo"
    assert [(a.status, a.retryable) for a in attempts] == [(None, True)]
    assert "connection failed" in attempts[0].error
    await model.aclose()


async def test_a_cut_stream_is_reported(server: BackgroundServer) -> None:
    name = "cut"
    set_script(server, name, {"steps": [{
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Somewhere far away"}}],
        "faults": [{"kind": "cut", "after_bytes": 400, "times": None}]}]})
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model=name, stream=True,
                            retry=FAST_RETRY)

    with pytest.raises(ProviderError, match="the response stream broke"):
        await model.chat(ChatRequest(messages=(UserMessage(text="Weather?"),)))
    await model.aclose()


async def test_a_refused_connection_is_a_connect_error_at_once() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel(base_url=f"http://127.0.0.1:{port}/v1", model="m",
                            retry=RetryPolicy(max_retries=0))

    started = asyncio.get_running_loop().time()
    with pytest.raises(ProviderError, match=r"connection failed \(ConnectError"):
        await model.chat(REQUEST)
    assert asyncio.get_running_loop().time() - started < 1  # not a timeout
    await model.aclose()


# -- request bodies -----------------------------------------------------------------------


def history(rounds: int) -> list[Any]:
    messages: list[Any] = [UserMessage(text="Weather in Zürich? \"quoted\" \u2603")]
    for index in range(rounds):
        calls = tuple(ToolExecutionRequest(id=f"call_{index}_{n}", name="get_weather",
                                           arguments=json.dumps({"city": f"City {n}"}))
                      for n in range(2))
        messages.append(AiMessage(text=None, tool_execution_requests=calls))
        messages += [ToolExecutionResultMessage(id=c.id, tool_name=c.name, text="Sunny")
                     for c in calls]
    return messages


async def test_the_body_sent_is_the_body_announced_byte_for_byte() -> None:
    sent: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return json_response(200, openai_completion(text="ok"))

    model = OpenAIChatModel(model="m", api_key="sk-test-key-123456",
                            transport=httpx.MockTransport(handle))
    messages = history(3)

    with captured_events() as events:
        await model.chat(ChatRequest(messages=tuple(messages)))
        await model.chat(ChatRequest(messages=(*messages, *history(1))))

    announced = [e.body for e in events if e.kind == "provider_wire_request"]
    assert [encode_json(body) for body in announced] == sent
    assert json.loads(sent[0])["messages"][0]["content"] == 'Weather in Zürich? "quoted" \u2603'


# -- a streamed body is read to its end, so its connection goes back to the pool -----------


class TrackedBody(httpx.AsyncByteStream):
    """An SSE body that records whether it was read to its end; optionally it never ends."""

    def __init__(self, text: str, *, hang: bool = False) -> None:
        self.text = text
        self.hang = hang
        self.finished = False

    async def __aiter__(self) -> Any:
        yield self.text.encode()
        if self.hang:
            await asyncio.sleep(3600)
        self.finished = True


def sse_body(body: TrackedBody) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=body))


DONE_THEN_MORE = ('data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},'
                  '"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n: trailing comment\n\n')


async def test_a_stream_is_read_to_the_end_of_its_body_after_done() -> None:
    body = TrackedBody(DONE_THEN_MORE)
    model = OpenAIChatModel(model="m", stream=True, transport=sse_body(body))

    response = await model.chat(REQUEST)

    assert response.ai_message.text == "Hi"
    assert body.finished


async def test_a_body_that_never_ends_after_done_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.engine.providers.http.client.DRAIN_TIMEOUT", 0.05)
    body = TrackedBody(DONE_THEN_MORE, hang=True)
    model = OpenAIChatModel(model="m", stream=True, transport=sse_body(body))

    response = await asyncio.wait_for(model.chat(REQUEST), 5)

    assert response.ai_message.text == "Hi"
    assert not body.finished


async def test_streamed_calls_reuse_one_connection(
        server: BackgroundServer, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    create_connection = asyncio.BaseEventLoop.create_connection

    async def counting(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return await create_connection(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", counting)
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model="fake-k3-p2",
                            stream=True)

    for _ in range(2):
        await ToolService().tools([get_weather]).chat(model, [UserMessage(text="Weather?")])

    assert len(opened) == 1  # 8 streamed requests, one connection
    await model.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_requests_carry_one_json_content_type(stream: bool) -> None:
    seen: list[httpx.Headers] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        if stream:
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=DONE_THEN_MORE.encode())
        return json_response(200, openai_completion(text="Hi"))

    plain = OpenAIChatModel(model="m", stream=stream, transport=httpx.MockTransport(handle))
    typed = OpenAIChatModel(model="m", stream=stream, transport=httpx.MockTransport(handle),
                            extra_headers={"Content-Type": "application/json; charset=utf-8"})
    await plain.chat(REQUEST)
    await typed.chat(REQUEST)

    assert [h.get_list("content-type") for h in seen] == [
        ["application/json"], ["application/json; charset=utf-8"]]
    assert [h.get("accept") for h in seen] == (["text/event-stream"] * 2 if stream
                                               else ["application/json"] * 2)
    assert {h["user-agent"] for h in seen} == {USER_AGENT}
    assert {h["accept-encoding"] for h in seen} == {"gzip, deflate"}
    assert {h["host"] for h in seen} == {"api.openai.com"}
    assert all(h.get_list("cookie") == [] for h in seen)


async def test_callers_headers_override_the_defaults_case_insensitively() -> None:
    seen: list[httpx.Headers] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return json_response(200, openai_completion(text="Hi"))

    model = OpenAIChatModel(model="m", transport=httpx.MockTransport(handle),
                            extra_headers={"User-Agent": "my-gateway/1", "ACCEPT": "*/*"})
    await model.chat(REQUEST)

    [headers] = seen
    assert headers.get_list("user-agent") == ["my-gateway/1"]
    assert headers.get_list("accept") == ["*/*"]


async def test_cookies_a_response_sets_are_never_sent_back() -> None:
    """One pooled client serves every run: a cookie from one response (a proxy's, a
    load balancer's) must not ride along on the next request, whoever's run it is."""
    cookies_sent: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        cookies_sent.append(request.headers.get("cookie"))
        response = json_response(200, openai_completion(text="ok"))
        response.headers["set-cookie"] = "session=abc123; Path=/"
        return response

    model = OpenAIChatModel(model="m", api_key="sk-test-key-123456",
                            transport=httpx.MockTransport(handle))
    for _ in range(3):
        await model.chat(REQUEST)
    await model.aclose()

    assert cookies_sent == [None, None, None]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
async def test_a_lone_surrogate_in_a_tool_result_is_sent_as_a_json_escape(
    provider: str,
) -> None:
    """Half a UTF-16 pair has no UTF-8 form: the request must still go out, as valid
    JSON carrying the character as its \\u escape, not fail the run."""
    sent: list[bytes] = []
    replies = {"openai": openai_completion(text="ok"), "anthropic": anthropic_message(text="ok"),
               "gemini": gemini_response(text="ok")}

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return json_response(200, replies[provider])

    model = build_chat_model(provider, model="m", api_key="sk-test-key-123456",
                             transport=httpx.MockTransport(handle))
    call = ToolExecutionRequest(id="c1", name="echo", arguments="{}")
    messages = (UserMessage(text="go"), AiMessage(text=None, tool_execution_requests=(call,)),
                ToolExecutionResultMessage(id="c1", tool_name="echo", text="half: \ud800"))
    await model.chat(ChatRequest(messages=messages))
    await model.aclose()

    [body] = sent
    assert b"\\ud800" in body
    assert "half: \ud800" in json.dumps(json.loads(body), ensure_ascii=False)
