"""An MCP server (stdio, or streamable HTTP with --http PORT) that misbehaves on request.

Tools: echo, pid (its process id: a new one means a new session), hang (blocks its own
event loop: the whole server stops answering), crash (exits mid-call), garbage (writes
a line that is not JSON-RPC to stdout instead of answering), fail (an isError result),
image (a PNG of --image-bytes bytes), huge (a text of N characters), markup (text with
HTML in it). --start-delay S sleeps before serving (a slow start).

Besides tools, a resource and a prompt (what a sync lists besides tools); the prompt's
description repeats the MISBEHAVING_MOTTO variable it was given (a server repeating a
secret, which a sync's record must redact) and the resource's title carries markup.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("misbehaving")
# The SDK's stdio server diverts file descriptor 1 to stderr while it serves, so that a
# stray print cannot corrupt the protocol; a copy made before that still writes to the
# pipe the client reads.
WIRE = os.dup(1)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=True))
async def hang() -> str:
    """Never answer: block the server's event loop."""
    time.sleep(3600)
    return "unreachable"


@server.tool()
def crash() -> str:
    """Exit in the middle of the call."""
    os._exit(3)


@server.tool()
def exit_soon() -> str:
    """Answer, then exit a moment later (a server that dies between calls)."""
    threading.Timer(0.2, os._exit, args=(5,)).start()
    return str(os.getpid())


@server.tool()
def garbage() -> str:
    """Write a line that is not JSON-RPC where the answer should be, then never answer."""
    os.write(WIRE, b"this is not JSON-RPC <script>alert(1)</script>\n")
    time.sleep(3600)
    return "unreachable"


@server.tool()
def fail() -> str:
    """Fail: an isError result."""
    raise ToolError("the <b>fail</b> tool failed on purpose")


@server.tool()
def image(size: int) -> list[ImageContent | TextContent]:
    """An image of `size` bytes and a caption."""
    data = base64.b64encode(b"\x89PNG" + b"\x00" * (size - 4)).decode()
    return [TextContent(type="text", text="a picture:"),
            ImageContent(type="image", data=data, mime_type="image/png")]


@server.tool()
def huge(size: int) -> str:
    """A text of `size` characters."""
    return "x" * size


@server.tool()
def markup() -> str:
    """Text with markup in it."""
    return "<img src=x onerror=alert(1)><script>alert(2)</script>"


@server.tool()
def environment(name: str) -> str:
    """The value of one of this server's environment variables (or '(unset)')."""
    return os.environ.get(name, "(unset)")


@server.tool()
def has_environment(name: str) -> str:
    """Whether one of this server's environment variables is set (never its value)."""
    return "set" if os.environ.get(name) else "unset"


@server.tool()
def has_header(name: str, ctx: Context) -> str:
    """Whether the HTTP request carried a header (never its value)."""
    headers = ctx.headers or {}
    return "set" if headers.get(name.lower()) else "unset"


@server.resource("notes://readme", name="readme", title="Read <b>me</b>",
                 description="The server's notes.", mime_type="text/plain")
def readme() -> str:
    return "Nothing to see."


@server.prompt(description="Greets someone. Motto: "
               + os.environ.get("MISBEHAVING_MOTTO", "(none)"))
def greet(who: str) -> str:
    return f"Say hello to {who}."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-delay", type=float, default=0.0)
    parser.add_argument("--banner", action="store_true",
                        help="write a line that is not JSON-RPC before serving")
    parser.add_argument("--http", type=int, default=0, help="serve HTTP on this port")
    options = parser.parse_args()
    if options.start_delay:
        time.sleep(options.start_delay)
    if options.banner:
        os.write(WIRE, b"Starting the misbehaving server...\n")
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
