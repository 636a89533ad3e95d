"""Bodies as real servers send them, through aiohttp's pool: compressed, chunked, and
read in one piece (JSON) or as a stream (SSE); and codings we cannot undo refused."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from tools_app.engine import ProviderError
from tools_app.engine.messages import ChatRequest, UserMessage
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.engine.providers.openai import OpenAIChatModel

from .loopback import read_request, serving
from .wire import openai_completion

REQUEST = ChatRequest(messages=(UserMessage(text="Hi"),))
Encoder = Callable[[bytes], bytes]
ENCODINGS: dict[str, Encoder] = {"identity": lambda body: body, "gzip": gzip.compress,
                                 "deflate": zlib.compress}


@asynccontextmanager
async def _serve(head: bytes, body_parts: list[bytes]) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback server answering every request alike; yields its base URL and the
    request heads it read."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            heads.append((await read_request(reader)).split(b"\r\n\r\n")[0])
            writer.write(head)
            for part in body_parts:
                writer.write(part)
                await writer.drain()

    async with serving(handle, path="/v1") as (base_url, _):
        yield base_url, heads


def _response_head(encoding: str, *, length: int | None, content_type: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", f"content-type: {content_type}"]
    if encoding != "identity":
        lines.append(f"content-encoding: {encoding}")
    lines.append(f"content-length: {length}" if length is not None
                 else "transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunked(body: bytes, size: int = 7) -> list[bytes]:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
             for i in range(0, len(body), size)]
    return [*parts, b"0\r\n\r\n"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
async def test_a_json_body_is_decoded_however_it_is_sent(encoding: str, chunked: bool) -> None:
    text = "Grüße aus Köln " * 40  # long enough to span chunks, not ASCII
    body = ENCODINGS[encoding](json.dumps(openai_completion(text=text)).encode())
    head = _response_head(encoding, length=None if chunked else len(body),
                          content_type="application/json")
    async with _serve(head, _chunked(body) if chunked else [body]) as (base_url, heads):
        model = OpenAIChatModel(base_url=base_url, model="m", api_key="sk-test-key-123456")
        first = await model.chat(REQUEST)
        second = await model.chat(REQUEST)  # the connection was left reusable
        await model.aclose()

    assert first.ai_message.text == second.ai_message.text == text
    assert len(heads) == 2
    request_head = heads[0].decode().lower()
    assert "accept-encoding: gzip, deflate" in request_head
    assert f"host: {base_url.split('//')[1].split('/')[0]}" in request_head


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_streamed_body_is_decoded_as_it_arrives(encoding: str) -> None:
    events = [{"id": "c1", "choices": [{"index": 0, "delta": {"content": piece}}]}
              for piece in ("Hel", "lo")]
    events.append({"id": "c1", "choices": [{"index": 0, "delta": {},
                                            "finish_reason": "stop"}]})
    sse = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    body = ENCODINGS[encoding](sse.encode())
    head = _response_head(encoding, length=None, content_type="text/event-stream")
    async with _serve(head, _chunked(body, size=11)) as (base_url, _):
        model = OpenAIChatModel(base_url=base_url, model="m", stream=True)
        response = await model.chat(REQUEST)
        await model.aclose()

    assert response.ai_message.text == "Hello"


def _head(*lines: str) -> bytes:
    return ("\r\n".join(["HTTP/1.1 200 OK", *lines]) + "\r\n\r\n").encode()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("head", "parts", "coding"), [
    (_head("content-type: application/json", "transfer-encoding: gzip, chunked"),
     "gzip-chunked", "transfer-encoding gzip"),
    (_head("content-type: application/json", "content-encoding: br",
           "transfer-encoding: chunked"), "chunked", "content-encoding br"),
    (_head("content-type: application/json", "content-encoding: compress",
           "content-length: LENGTH"), "plain", "content-encoding compress"),
], ids=["gzip-transfer-coding", "brotli", "compress"])
async def test_a_body_in_a_coding_we_cannot_undo_is_refused(
        head: bytes, parts: str, coding: str, stream: bool) -> None:
    body = gzip.compress(json.dumps(openai_completion(text="never read")).encode())
    head = head.replace(b"LENGTH", str(len(body)).encode())
    sent = {"gzip-chunked": _chunked(body), "chunked": _chunked(body), "plain": [body]}[parts]
    async with _serve(head, sent) as (base_url, heads):
        model = OpenAIChatModel(base_url=base_url, model="m", stream=stream,
                                retry=RetryPolicy(max_retries=2, initial_delay=0.001))
        with pytest.raises(ProviderError, match=f"uses {coding}, which this client cannot"
                                                " decode") as raised:
            await model.chat(REQUEST)
        await model.aclose()

    assert raised.value.retryable is False
    assert len(heads) == 1  # not retried
