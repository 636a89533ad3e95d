"""A loopback HTTP/1.1 server for the HTTP tool tests: routes by path, records requests."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    gzipped: bool = False


Route = Callable[[Seen], Reply]


@dataclass
class Server:
    url: str
    seen: list[Seen]


@asynccontextmanager
async def http_server(routes: dict[str, Route]) -> AsyncIterator[Server]:
    """Serves `routes` (path without query -> reply) on 127.0.0.1; 404 elsewhere."""
    seen: list[Seen] = []
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:
                request = await _read(reader)
                if request is None:
                    return
                seen.append(request)
                route = routes.get(request.target.split("?", 1)[0])
                reply = route(request) if route else Reply(404, b"no such path")
                writer.write(_encode(reply))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Server(f"http://127.0.0.1:{port}", seen)
    finally:
        server.close()
        for writer in writers:  # wait_closed() waits for the connections too
            writer.close()
        await server.wait_closed()


async def _read(reader: asyncio.StreamReader) -> Seen | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Seen(method, target, headers, body)


def _encode(reply: Reply) -> bytes:
    body = gzip.compress(reply.body) if reply.gzipped else reply.body
    headers = {"content-length": str(len(body)), **reply.headers}
    if reply.gzipped:
        headers["content-encoding"] = "gzip"
    head = f"HTTP/1.1 {reply.status} X\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    return head.encode("latin-1") + body
