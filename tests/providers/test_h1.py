"""The HTTP/1.1 transport of our own (providers/h1.py) against servers that misbehave.

Every backend also runs the shared suites (test_pooling.py, test_transport_bodies.py:
conversations, resets, cut streams, refused connections, compressed and chunked
bodies). These are what only this transport decides: timeouts, the pool, keep-alive,
what it refuses to send and to receive, TLS.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools_app.engine.providers.h1 import MAX_HEADER_BYTES, H1Transport, connection_count
from tools_app.engine.providers.transports import READ_BODY

from .loopback import Handler, hanging_after, read_request, serving

LIMITS = httpx.Limits(max_connections=10, max_keepalive_connections=10, keepalive_expiry=5)
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


async def post(transport: H1Transport, url: str, *, read_body: bool = True,
               timeout: httpx.Timeout | None = None, **headers: str) -> httpx.Response:
    extensions: dict[str, Any] = {"timeout": (timeout or httpx.Timeout(5)).as_dict()}
    if read_body:
        extensions[READ_BODY] = True
    request = httpx.Request("POST", url, content=b'{"q": 1}', headers=headers,
                            extensions=extensions)
    return await transport.handle_async_request(request)


# -- keep-alive and the pool -------------------------------------------------------------


async def test_requests_share_one_keep_alive_connection() -> None:
    transport = H1Transport(LIMITS)
    async with serving(answering(OK)) as (url, accepted):
        for _ in range(3):
            response = await post(transport, url)
            assert (response.status_code, response.content) == (200, b"{}")
    await transport.aclose()
    assert len(accepted) == 1


async def test_a_response_that_closes_its_connection_is_not_reused() -> None:
    closing = OK.replace(b"content-length", b"connection: close\r\ncontent-length")
    transport = H1Transport(LIMITS)
    async with serving(answering(closing, then_close=True)) as (url, accepted):
        for _ in range(2):
            assert (await post(transport, url)).content == b"{}"
    await transport.aclose()
    assert len(accepted) == 2


async def test_an_idle_connection_the_server_closed_is_replaced_quietly() -> None:
    transport = H1Transport(LIMITS)
    async with serving(answering(OK, then_close=True)) as (url, accepted):
        await post(transport, url)
        await asyncio.sleep(0.05)  # the server has hung up on the idle connection
        assert (await post(transport, url)).content == b"{}"
    await transport.aclose()
    assert len(accepted) == 2


async def test_connections_idle_longer_than_the_expiry_are_not_reused() -> None:
    transport = H1Transport(httpx.Limits(max_connections=10, keepalive_expiry=0.05))
    async with serving(answering(OK)) as (url, accepted):
        await post(transport, url)
        await asyncio.sleep(0.1)
        await post(transport, url)
    await transport.aclose()
    assert len(accepted) == 2


async def test_a_full_pool_makes_requests_wait_and_then_time_out() -> None:
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await release.wait()
            writer.write(OK)
            await writer.drain()

    transport = H1Transport(httpx.Limits(max_connections=1))
    async with serving(slow) as (url, _):
        first = asyncio.create_task(post(transport, url))
        await asyncio.sleep(0.05)
        with pytest.raises(httpx.PoolTimeout, match="1 requests in flight"):
            await post(transport, url, timeout=httpx.Timeout(5, pool=0.1))
        waiting = asyncio.create_task(post(transport, url))  # no pool timeout: it waits
        await asyncio.sleep(0.05)
        assert not waiting.done()
        release.set()
        assert (await first).content == (await waiting).content == b"{}"
    await transport.aclose()


async def test_a_cancelled_request_closes_its_connection() -> None:
    transport = H1Transport(LIMITS)
    async with serving(hanging_after()) as (url, _):
        task = asyncio.create_task(post(transport, url))
        await asyncio.sleep(0.05)
        assert connection_count(transport) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert connection_count(transport) == 0
    await transport.aclose()


async def test_a_stream_dropped_before_its_end_closes_its_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 20\r\n\r\n"

    transport = H1Transport(LIMITS)
    async with serving(hanging_after(head + b"data: 1\n\n")) as (url, _):
        response = await post(transport, url, read_body=False)
        chunks = aiter(response.aiter_raw())
        assert await anext(chunks) == b"data: 1\n\n"
        await response.aclose()
        assert connection_count(transport) == 0
    await transport.aclose()


async def test_a_large_streamed_body_arrives_whole_at_the_readers_pace() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: reading pauses and resumes on the way
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)
    transport = H1Transport(LIMITS)
    async with serving(answering(head + body)) as (url, accepted):
        response = await post(transport, url, read_body=False)
        received = bytearray()
        async for chunk in response.aiter_raw():
            received += chunk
            await asyncio.sleep(0)
        assert bytes(received) == body
        assert (await post(transport, url)).content == body  # and it was reusable
    await transport.aclose()
    assert len(accepted) == 1


# -- timeouts ------------------------------------------------------------------------------


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    transport = H1Transport(LIMITS)
    async with serving(hanging_after()) as (url, _):
        with pytest.raises(httpx.ReadTimeout, match=r"no response data within 0\.1 s"):
            await post(transport, url, timeout=httpx.Timeout(5, read=0.1))
    await transport.aclose()


async def test_a_body_that_stalls_is_a_read_timeout() -> None:
    partial = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"a\""
    transport = H1Transport(LIMITS)
    async with serving(hanging_after(partial)) as (url, _):
        with pytest.raises(httpx.ReadTimeout):
            await post(transport, url, timeout=httpx.Timeout(5, read=0.1))
        assert connection_count(transport) == 0
    await transport.aclose()


async def test_a_connection_that_cannot_be_made_in_time_is_a_connect_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def hangs(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(30)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", hangs)
    transport = H1Transport(LIMITS)
    with pytest.raises(httpx.ConnectTimeout, match=r"within 0\.1 s"):
        await post(transport, "http://127.0.0.1:9/v1", timeout=httpx.Timeout(5, connect=0.1))
    await transport.aclose()


# -- what it refuses -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [("x-team", "blue\r\nx-injected: yes"),
                                         ("x-team", "nul\x00"), ("bad name", "v"),
                                         ("x-a\ninjected", "yes"), ("x-a\r\ninjected", "yes")])
async def test_a_header_that_would_break_the_request_head_is_refused(name: str,
                                                                     value: str) -> None:
    transport = H1Transport(LIMITS)
    async with serving(answering(OK)) as (url, accepted):
        with pytest.raises(httpx.LocalProtocolError,
                           match=r"invalid (header name|value for header)"):
            await post(transport, url, **{name: value})
    await transport.aclose()
    assert accepted == []  # nothing was sent


@pytest.mark.parametrize(("reply", "message"), [
    (b"HTTP/1.1 200 OK\r\nnot a header line\r\n\r\n", "invalid HTTP response"),
    (b"<html>proxy error</html>", "invalid HTTP response"),
    (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (MAX_HEADER_BYTES + 1) + b"\r\n\r\n",
     f"head exceeds {MAX_HEADER_BYTES} bytes"),
])
async def test_a_response_that_is_not_http_is_a_protocol_error(reply: bytes,
                                                              message: str) -> None:
    transport = H1Transport(LIMITS)
    async with serving(answering(reply)) as (url, _):
        with pytest.raises(httpx.RemoteProtocolError, match=message):
            await post(transport, url)
    await transport.aclose()


async def test_a_server_that_hangs_up_before_answering_is_a_protocol_error() -> None:
    async def hangs_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    transport = H1Transport(LIMITS)
    async with serving(hangs_up) as (url, _):
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await post(transport, url)
    await transport.aclose()


async def test_a_body_cut_short_is_a_read_error() -> None:
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\""
    transport = H1Transport(LIMITS)
    async with serving(answering(cut, then_close=True)) as (url, _):
        with pytest.raises(httpx.ReadError, match="before the response ended"):
            await post(transport, url)
    await transport.aclose()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http:///no-host"])
async def test_only_http_and_https_urls_are_sent(url: str) -> None:
    with pytest.raises(httpx.UnsupportedProtocol):
        await post(H1Transport(LIMITS), url)


# -- what it takes -------------------------------------------------------------------------


async def test_informational_responses_are_skipped() -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>\r\n\r\n" + OK
    transport = H1Transport(LIMITS)
    async with serving(answering(early)) as (url, _):
        response = await post(transport, url)
    await transport.aclose()
    assert (response.status_code, response.content) == (200, b"{}")
    assert "link" not in response.headers


async def test_a_body_delimited_by_the_end_of_the_connection_is_read_whole() -> None:
    until_close = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"done\": true}"
    transport = H1Transport(LIMITS)
    async with serving(answering(until_close, then_close=True)) as (url, _):
        response = await post(transport, url)
    await transport.aclose()
    assert response.json() == {"done": True}
    assert connection_count(transport) == 0


async def test_the_request_goes_out_as_written() -> None:
    seen: list[bytes] = []

    async def recording(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(OK)
        await writer.drain()

    transport = H1Transport(LIMITS)
    async with serving(recording) as (url, _):
        await post(transport, url + "?key=a%20b", **{"x-team": "blue"})
    await transport.aclose()
    [raw] = seen
    head, body = raw.split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat?key=a%20b HTTP/1.1"
    assert b"x-team: blue" in lines
    assert b"content-length: 8" in [line.lower() for line in lines]
    assert body == b'{"q": 1}'


# -- TLS -----------------------------------------------------------------------------------


def _certificates(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A throwaway CA and a certificate for 127.0.0.1 it signed: (server, client)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentforge test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    (directory / "key.pem").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    client = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    return server, client


async def test_https_is_verified_and_spoken(tmp_path: Path) -> None:
    server_tls, client_tls = _certificates(tmp_path)
    trusting = H1Transport(LIMITS, ssl_context=client_tls)
    untrusting = H1Transport(LIMITS, ssl_context=ssl.create_default_context())
    async with serving(answering(OK), tls=server_tls) as (url, accepted):
        assert (await post(trusting, url)).content == b"{}"
        assert (await post(trusting, url)).content == b"{}"
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await post(untrusting, url)
    await trusting.aclose()
    await untrusting.aclose()
    assert len(accepted) == 1  # one kept-alive TLS connection; the refused one never was


async def test_a_response_nobody_asked_for_retires_the_connection() -> None:
    transport = H1Transport(LIMITS)
    async with serving(answering(OK + OK)) as (url, accepted):  # two answers to one request
        first = await post(transport, url)
        await asyncio.sleep(0.05)
        second = await post(transport, url)
    await transport.aclose()
    assert first.content == second.content == b"{}"
    assert len(accepted) == 2  # the confused connection was not used again


@pytest.mark.parametrize("method", ["GET /admin HTTP/1.1\r\nX", "GET\nX-Injected", "P OST"])
async def test_a_method_that_is_not_a_token_is_refused(method: str) -> None:
    request = httpx.Request(method, "http://127.0.0.1:9/v1")
    with pytest.raises(httpx.LocalProtocolError, match="invalid request method"):
        await H1Transport(LIMITS).handle_async_request(request)


@pytest.mark.parametrize(("headers", "message"), [
    ({"transfer-encoding": "chunked"}, "both Content-Length and Transfer-Encoding"),
    ({"content-length": "3"}, "Content-Length 3 for a body of 8 bytes"),
])
async def test_a_body_its_headers_misdescribe_is_refused(headers: dict[str, str],
                                                         message: str) -> None:
    """Nothing a server could read as a second, smuggled request."""
    transport = H1Transport(LIMITS)
    async with serving(answering(OK)) as (url, accepted):
        request = httpx.Request("POST", url, content=b'{"q": 1}',
                                extensions={"timeout": httpx.Timeout(5).as_dict()})
        request.headers.update(headers)
        with pytest.raises(httpx.LocalProtocolError, match=message):
            await transport.handle_async_request(request)
    await transport.aclose()
    assert accepted == []


async def test_a_streamed_upload_goes_out_chunked() -> None:
    seen: list[bytes] = []

    async def recording(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head + await reader.readuntil(b"0\r\n\r\n"))
        writer.write(OK)
        await writer.drain()

    async def parts() -> AsyncIterator[bytes]:
        yield b'{"q":'
        yield b" 1}"

    transport = H1Transport(LIMITS)
    async with serving(recording) as (url, _):
        request = httpx.Request("POST", url, content=parts(),
                                extensions={"timeout": httpx.Timeout(5).as_dict()})
        response = await transport.handle_async_request(request)
        await response.aread()
    await transport.aclose()
    [raw] = seen
    assert b"transfer-encoding: chunked" in raw.lower()
    assert raw.endswith(b'\r\n\r\n8\r\n{"q": 1}\r\n0\r\n\r\n')


async def test_a_stream_finalized_late_leaves_a_reused_connection_alone() -> None:
    """A consumer that stops at the end of a body by raising leaves the generators
    under aiter_lines() to be closed later by the event loop; by then the connection
    serves another request, which must not be cut."""
    sse = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
           b"transfer-encoding: chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    late = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(sse)
        while True:
            await read_request(reader)
            await asyncio.sleep(0.2)
            writer.write(late)
            await writer.drain()

    transport = H1Transport(LIMITS)
    async with serving(handle) as (url, accepted):
        response = await post(transport, url, read_body=False)

        async def consume() -> None:
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    raise ValueError("stop here")  # as the adapters do on an error event

        with pytest.raises(ValueError, match="stop here"):
            await consume()
        await response.aclose()
        second = await post(transport, url)
    await transport.aclose()
    assert second.content == b"{}"
    assert len(accepted) == 1


async def test_an_endless_header_is_refused_early() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nx-big: ")
        for _ in range(64):  # 4 MiB of one header value, never finished
            writer.write(b"a" * 65536)
            await writer.drain()
        await asyncio.sleep(30)

    transport = H1Transport(LIMITS)
    async with serving(endless) as (url, _):
        with pytest.raises(httpx.RemoteProtocolError, match="head exceeds"):
            await post(transport, url)
    await transport.aclose()


async def test_a_body_cut_by_our_own_close_is_an_error() -> None:
    trickle = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"partial\": "
    transport = H1Transport(LIMITS)
    async with serving(hanging_after(trickle)) as (url, _):
        task = asyncio.create_task(post(transport, url))
        await asyncio.sleep(0.1)
        await transport.aclose()  # shutting down while the body still comes
        with pytest.raises(httpx.ReadError, match="closed before the response ended"):
            await task


async def test_a_body_with_a_non_chunked_coding_runs_to_the_end_of_the_connection() -> None:
    reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\n{\"done\": true}"
    transport = H1Transport(LIMITS)
    async with serving(answering(reply, then_close=True)) as (url, _):
        response = await post(transport, url)
    await transport.aclose()
    assert response.json() == {"done": True}
