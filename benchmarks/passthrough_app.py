"""A bare pass-through on the product's server stack, for bench_proxy's floor: an ASGI
app served by daphne that forwards each POST body to PASSTHROUGH_UPSTREAM + its path
with one kept aiohttp session (the proxy's upstream client) and returns the answer. No
Django, no lookups, no recording: what any proxy served by daphne adds at least.

Run: PASSTHROUGH_UPSTREAM=http://127.0.0.1:PORT daphne benchmarks.passthrough_app:app
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp

UPSTREAM = os.environ.get("PASSTHROUGH_UPSTREAM", "")
_session: aiohttp.ClientSession | None = None


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    global _session
    if _session is None:
        _session = aiohttp.ClientSession()
    headers = {name.decode(): value.decode() for name, value in scope["headers"]
               if name in (b"authorization", b"content-type")}
    async with _session.post(UPSTREAM + scope["path"], data=body, headers=headers) as answer:
        data = await answer.read()
        status = answer.status
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": data})
