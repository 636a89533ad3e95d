"""One pooled HTTP client per model and event loop; the pluggable pool under it.

The client is created on the first call, reused by later and concurrent calls, closed
by `aclose()` (and when its loop shuts down or the model is collected), and a model
used from another event loop gets a client of its own there. Every `http_backend`
carries a real run against the fake server, faults included.
"""

from __future__ import annotations

import asyncio
import gc
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
from tools_app.engine.providers.adapter import encode_json_body
from tools_app.engine.providers.h1 import H1Transport
from tools_app.engine.providers.http import USER_AGENT, RetryPolicy, encode_json
from tools_app.engine.providers.openai import OpenAIChatModel
from tools_app.engine.providers.transports import (
    DEFAULT_HTTP_BACKEND,
    DEFAULT_LIMITS,
    HTTP_BACKENDS,
    AiohttpTransport,
    Httpcore2Transport,
)
from tools_app.fake_llm import BackgroundServer

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

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return json_response(200, openai_completion(text="Hello"))

    async def aclose(self) -> None:
        self.closed += 1


class Pools:
    """A transport factory that keeps every transport it made."""

    def __init__(self) -> None:
        self.made: list[CountingTransport] = []
        self.limits: list[httpx.Limits] = []

    def __call__(self, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
        self.limits.append(limits)
        self.made.append(CountingTransport())
        return self.made[-1]


def model_on(pools: Pools, **config: Any) -> OpenAIChatModel:
    return OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m", api_key="k" * 12,
                           http_backend=pools, **config)


async def test_one_client_serves_every_call() -> None:
    pools = Pools()
    model = model_on(pools)

    await model.chat(REQUEST)
    first = await model.http.transport()
    await model.chat(REQUEST)
    await model.chat(REQUEST)

    assert await model.http.transport() is first
    assert len(pools.made) == 1
    assert pools.made[0].requests == 3
    assert pools.limits == [DEFAULT_LIMITS]
    await model.aclose()


async def test_concurrent_calls_share_the_client() -> None:
    pools = Pools()
    model = model_on(pools)

    responses = await asyncio.gather(*(model.chat(REQUEST) for _ in range(20)))

    assert [r.ai_message.text for r in responses] == ["Hello"] * 20
    assert len(pools.made) == 1
    assert pools.made[0].requests == 20
    assert pools.made[0].most_in_flight > 1  # the calls did overlap
    await model.aclose()


async def test_concurrent_runs_sharing_a_model_share_the_client() -> None:
    pools = Pools()
    model = model_on(pools)

    await asyncio.gather(*(ToolService().chat(model, [UserMessage(text="Hi")])
                           for _ in range(10)))

    assert len(pools.made) == 1
    assert pools.made[0].requests == 10
    await model.aclose()


async def test_aclose_closes_the_client_and_a_later_call_opens_a_new_one() -> None:
    pools = Pools()
    model = model_on(pools)
    await model.chat(REQUEST)
    transport = await model.http.transport()

    await model.aclose()

    assert transport is pools.made[0]
    assert pools.made[0].closed == 1
    await model.chat(REQUEST)
    assert len(pools.made) == 2
    assert await model.http.transport() is not transport
    await model.aclose()
    assert pools.made[1].closed == 1


async def test_the_model_is_an_async_context_manager() -> None:
    pools = Pools()

    async with model_on(pools) as model:
        await model.chat(REQUEST)

    assert pools.made[0].closed == 1


async def test_another_event_loop_gets_its_own_client() -> None:
    pools = Pools()
    model = model_on(pools)
    await model.chat(REQUEST)
    here = await model.http.transport()

    async def elsewhere() -> httpx.AsyncBaseTransport:
        await model.chat(REQUEST)
        return await model.http.transport()

    there = await asyncio.to_thread(asyncio.run, elsewhere())

    assert there is not here
    assert pools.made == [here, there]
    # asyncio.run shut its loop down, and the pool of that loop with it.
    assert pools.made[1].closed == 1
    assert pools.made[0].closed == 0
    await model.chat(REQUEST)
    assert await model.http.transport() is here
    await model.aclose()
    assert pools.made[0].closed == 1


async def test_a_client_is_closed_when_its_model_is_collected() -> None:
    pools = Pools()
    model = model_on(pools)
    await model.chat(REQUEST)

    del model
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)

    assert pools.made[0].closed == 1


async def test_an_injected_transport_is_used_in_every_loop_and_left_open() -> None:
    transport = CountingTransport()
    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", model="m", transport=transport)

    await model.chat(REQUEST)
    await asyncio.to_thread(asyncio.run, model.chat(REQUEST))
    await model.aclose()

    assert transport.requests == 2
    assert transport.closed == 0


def test_the_backend_is_chosen_by_name_or_factory() -> None:
    assert DEFAULT_HTTP_BACKEND in HTTP_BACKENDS
    built: Any = build_chat_model("openai", model="m", http_backend="httpx2")
    assert built.http.http_backend == "httpx2"
    assert OpenAIChatModel(model="m").http.http_backend == DEFAULT_HTTP_BACKEND
    with pytest.raises(ValueError, match="unknown http_backend 'curl'"):
        OpenAIChatModel(model="m", http_backend="curl")  # type: ignore[arg-type]


# -- each backend against the fake server ---------------------------------------------------


@tool(description="Current weather in one city")
async def get_weather(city: str) -> str:
    return f"Sunny in {city}"


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer() as running:
        yield running


def set_script(server: BackgroundServer, name: str, script: dict[str, Any]) -> None:
    httpx.put(f"{server.url}/_fake/scripts/{name}", json=script, timeout=10).raise_for_status()


BACKEND_TRANSPORTS = {"httpx": httpx.AsyncHTTPTransport, "httpx2": Httpcore2Transport,
                      "aiohttp": AiohttpTransport, "h1": H1Transport}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("backend", HTTP_BACKENDS)
async def test_every_backend_runs_a_conversation(server: BackgroundServer, backend: str,
                                                 stream: bool) -> None:
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model="fake-k2-p2",
                            api_key="sk-test-key-123456", stream=stream,
                            http_backend=backend)  # type: ignore[arg-type]

    results = await asyncio.gather(*(ToolService().tools([get_weather]).chat(
        model, [UserMessage(text="Weather?")]) for _ in range(5)))

    assert [len(r.tool_executions) for r in results] == [4] * 5
    assert isinstance(model.http._pools.pools[asyncio.get_running_loop()].pool.transport,
                      BACKEND_TRANSPORTS[backend])
    await model.aclose()


@pytest.mark.parametrize("backend", HTTP_BACKENDS)
async def test_every_backend_retries_a_reset_connection(server: BackgroundServer,
                                                        backend: str) -> None:
    name = f"reset-{backend}"
    set_script(server, name, {"steps": [
        {"faults": [{"kind": "reset"}],
         "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        {"text": "Done: {last_result}"}]})
    attempts: list[ProviderAttempt] = []
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model=name, retry=FAST_RETRY,
                            http_backend=backend)  # type: ignore[arg-type]

    result = await ToolService().tools([get_weather]).chat(
        model, [UserMessage(text="Weather?")],
        observers=[lambda e: attempts.append(e) if isinstance(e, ProviderAttempt) else None])

    assert result.final_response.ai_message.text == "Done: Sunny in Oslo"
    assert [(a.status, a.retryable) for a in attempts] == [(None, True)]
    assert "connection failed" in attempts[0].error
    await model.aclose()


@pytest.mark.parametrize("backend", HTTP_BACKENDS)
async def test_every_backend_reports_a_cut_stream(server: BackgroundServer,
                                                  backend: str) -> None:
    name = f"cut-{backend}"
    set_script(server, name, {"steps": [{
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Somewhere far away"}}],
        "faults": [{"kind": "cut", "after_bytes": 400, "times": None}]}]})
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model=name, stream=True,
                            retry=FAST_RETRY, http_backend=backend)  # type: ignore[arg-type]

    with pytest.raises(ProviderError, match="the response stream broke"):
        await model.chat(ChatRequest(messages=(UserMessage(text="Weather?"),)))
    await model.aclose()


@pytest.mark.parametrize("backend", HTTP_BACKENDS)
async def test_every_backend_reports_a_refused_connection(backend: str) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel(base_url=f"http://127.0.0.1:{port}/v1", model="m",
                            retry=RetryPolicy(max_retries=0),
                            http_backend=backend)  # type: ignore[arg-type]

    with pytest.raises(ProviderError, match=r"connection failed \(ConnectError"):
        await model.chat(REQUEST)
    await model.aclose()


# -- request bodies: the history is translated and encoded once ----------------------------


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


def test_a_message_is_translated_once() -> None:
    model = OpenAIChatModel(model="m")
    messages = history(2)

    first = model.build_body(messages, model.parameters, model="m", stream=False)
    again = model.build_body(messages, model.parameters, model="m", stream=False)

    assert all(a is b for a, b in zip(first["messages"], again["messages"], strict=True))
    assert len(model.messages) == len(messages)
    assert model.encode_body(again) == encode_json(again)


def test_a_body_whose_messages_were_replaced_is_encoded_whole() -> None:
    model = OpenAIChatModel(model="m")
    body = model.build_body(history(1), model.parameters, model="m", stream=False)
    body["messages"] = [{"role": "user", "content": "custom"}]

    assert model.encode_body(body) is None


def test_splicing_gives_the_same_text_as_encoding() -> None:
    body = {"model": "m", "messages": [{"a": 1}, {"b": "é\u0000"}], "stream": False,
            "tools": [{"type": "function"}]}

    spliced = encode_json_body(body, {"messages": encode_json(body["messages"]),
                                      "tools": encode_json(body["tools"])})

    assert spliced == encode_json(body)
    assert encode_json_body({"model": "m"}, {"messages": b"[]"}) == encode_json({"model": "m"})


def test_the_tools_are_mapped_once_and_spliced() -> None:
    model = OpenAIChatModel(model="m")
    parameters = ToolService().tools([get_weather]).request_parameters(None)

    first = model.build_body(history(1), parameters, model="m", stream=False)
    again = model.build_body(history(1), parameters, model="m", stream=False)

    assert first["tools"] is again["tools"]
    assert model.encode_body(again) == encode_json(again)


def test_the_cache_is_bounded() -> None:
    model = OpenAIChatModel(model="m")
    model.messages._limit = 10
    messages = history(10)

    model.build_body(messages, model.parameters, model="m", stream=False)

    assert len(model.messages) == 10
    body = model.build_body(messages, model.parameters, model="m", stream=False)
    assert model.encode_body(body) in (None, encode_json(body))  # None: encoded whole


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
    monkeypatch.setattr("tools_app.engine.providers.http.DRAIN_TIMEOUT", 0.05)
    body = TrackedBody(DONE_THEN_MORE, hang=True)
    model = OpenAIChatModel(model="m", stream=True, transport=sse_body(body))

    response = await asyncio.wait_for(model.chat(REQUEST), 5)

    assert response.ai_message.text == "Hi"
    assert not body.finished


@pytest.mark.parametrize("backend", HTTP_BACKENDS)
async def test_streamed_calls_reuse_one_connection(
        server: BackgroundServer, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []
    create_connection = asyncio.BaseEventLoop.create_connection

    async def counting(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return await create_connection(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", counting)
    model = OpenAIChatModel(base_url=server.base_urls()["openai"], model="fake-k3-p2",
                            stream=True, http_backend=backend)  # type: ignore[arg-type]

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
