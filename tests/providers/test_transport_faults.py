"""The single provider stack (httpx over aiohttp's pool, clients.new_client) against
servers that misbehave: keep-alive and the pool, timeouts, broken answers, TLS. Each
failure must arrive as the httpx exception it is, so the retry policy judges it right."""

# ruff: noqa: SIM117 -- a server, then a client on it: one `with` each reads better

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import httpx
import pytest
import trustme

from tools_app.engine.providers.http.clients import EndpointConfig, new_client

from .loopback import Handler, hanging_after, read_request, serving

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def answering(*responses: bytes, then_close: bool = False) -> Handler:
    """Answer the requests of a connection with `responses` in turn (the last one
    again once they run out)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = 0
        while True:
            await read_request(reader)
            writer.write(responses[min(index, len(responses) - 1)])
            await writer.drain()
            index += 1
            if then_close:
                return
    return handle


def client_for(url: str, **options: Any) -> httpx.AsyncClient:
    return new_client(EndpointConfig.of(url, **options))


async def post(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.post(url, content=b'{"q": 1}')


async def test_requests_share_one_keep_alive_connection() -> None:
    async with serving(answering(OK)) as (url, accepted), client_for(url) as client:
        for _ in range(3):
            response = await post(client, url)
            assert (response.status_code, response.content) == (200, b"{}")
    assert len(accepted) == 1


async def test_a_response_that_closes_its_connection_is_not_reused() -> None:
    closing = OK.replace(b"content-length", b"connection: close\r\ncontent-length")
    async with serving(answering(closing, then_close=True)) as (url, accepted):
        async with client_for(url) as client:
            for _ in range(2):
                assert (await post(client, url)).content == b"{}"
    assert len(accepted) == 2


async def test_connections_idle_longer_than_the_expiry_are_not_reused() -> None:
    limits = httpx.Limits(max_connections=10, keepalive_expiry=0.05)
    async with serving(answering(OK)) as (url, accepted):
        async with client_for(url, limits=limits) as client:
            await post(client, url)
            await asyncio.sleep(0.2)
            await post(client, url)
    assert len(accepted) == 2


async def test_a_full_pool_makes_requests_wait_and_then_time_out() -> None:
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await release.wait()
            writer.write(OK)
            await writer.drain()

    async with serving(slow) as (url, accepted):
        async with client_for(url, limits=httpx.Limits(max_connections=1),
                              connect_timeout=0.2) as client:
            first = asyncio.create_task(post(client, url))
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.ConnectTimeout):  # waited for a connection too long
                await post(client, url)
            waiting = asyncio.create_task(client.post(url, content=b"{}", timeout=5))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            release.set()
            assert (await first).content == (await waiting).content == b"{}"
    assert len(accepted) == 1


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async with serving(hanging_after()) as (url, _):
        async with client_for(url, read_timeout=0.1) as client:
            with pytest.raises(httpx.ReadTimeout):
                await post(client, url)


async def test_a_body_that_stalls_is_a_read_timeout() -> None:
    partial = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"a\""
    async with serving(hanging_after(partial)) as (url, _):
        async with client_for(url, read_timeout=0.1) as client:
            with pytest.raises(httpx.ReadTimeout):
                await post(client, url)


async def test_a_connection_that_cannot_be_made_in_time_is_a_connect_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def hangs(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", hangs)
    monkeypatch.setattr(asyncio.selector_events.BaseSelectorEventLoop, "sock_connect", hangs)
    url = "http://127.0.0.1:9/v1"
    async with client_for(url, connect_timeout=0.1) as client:
        with pytest.raises(httpx.ConnectTimeout):
            await post(client, url)


@pytest.mark.parametrize(("reply", "error"), [
    (b"", httpx.RemoteProtocolError),  # hangs up before answering
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", httpx.RemoteProtocolError),  # not HTTP at all
    (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}", httpx.RemoteProtocolError),  # cut
], ids=["hang-up", "not-http", "cut-body"])
async def test_a_broken_answer_is_a_protocol_error(reply: bytes, error: type[Exception]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with serving(handle) as (url, _), client_for(url) as client:
        with pytest.raises(error):
            await post(client, url)  # the body is read too


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with serving(answering(OK)) as (url, _):
        pass  # the port is free again
    async with client_for(url) as client:
        with pytest.raises(httpx.ConnectError):
            await post(client, url)


async def test_https_is_verified_against_the_given_trust() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    async with serving(answering(OK), tls=server_context) as (url, _):
        async with client_for(url, verify=trusted) as client:
            assert (await post(client, url)).content == b"{}"
        async with client_for(url) as client:  # the default trust does not know this CA
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await post(client, url)
