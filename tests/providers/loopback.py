"""A loopback HTTP/1.1 server for transport tests: a handler per connection."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler, tls: ssl.SSLContext | None = None, *,
                  path: str = "/v1/chat") -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback server running `handler` per connection; yields the URL of `path` on
    it and a list that gets one entry per connection accepted."""
    accepted: list[int] = []
    writers: list[asyncio.StreamWriter] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writers.append(writer)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}{path}", accepted
    finally:
        server.close()
        for writer in writers:  # wait_closed() waits for the connections too
            writer.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, head and body (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head + await reader.readexactly(length)


def hanging_after(data: bytes = b"") -> Handler:
    """Read one request, send `data` (maybe nothing, maybe part of a response), then
    keep the connection open without another byte."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if data:
            writer.write(data)
            await writer.drain()
        await asyncio.sleep(30)
    return handle
