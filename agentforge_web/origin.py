"""A WebSocket handshake must come from this server's own origin.

Channels' AllowedHostsOriginValidator compares the Origin's host name with ALLOWED_HOSTS,
ports and schemes aside: any other web app on the same host (another port, as a
developer's machine has plenty) could open a socket with the user's cookies, which are
not port-bound. This checks the whole origin against the Host the browser connected to
(or an entry of CSRF_TRUSTED_ORIGINS, for a proxy that rewrites Host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings

if TYPE_CHECKING:  # names of Channels' type stubs only
    from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable
    from channels.consumer import _ChannelScope
    from channels.utils import _ChannelApplication

DEFAULT_PORTS = {"http": 80, "https": 443}


class SameOriginValidator:
    def __init__(self, application: _ChannelApplication) -> None:
        self.application = application

    async def __call__(
        self, scope: _ChannelScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "websocket" and not is_same_origin(_headers(scope)):
            return await WebsocketDenier()(scope, receive, send)
        # What it wraps (AuthMiddlewareStack) is an ASGI 3 app; Channels' stubs type it
        # as any Channels application, ASGI 2 classes included.
        inner = cast("ASGI3Application", self.application)
        return await inner(scope, receive, send)


def _headers(scope: _ChannelScope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


def is_same_origin(headers: dict[bytes, bytes]) -> bool:
    origin = headers.get(b"origin", b"").decode("latin-1").strip()
    host = headers.get(b"host", b"").decode("latin-1").strip()
    if not origin or not host:
        return False
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    try:
        parsed = urlsplit(origin)
        origin_port = parsed.port or DEFAULT_PORTS.get(parsed.scheme)
        served = urlsplit(f"//{host}")
        host_port = served.port
    except ValueError:  # a port that is not a number, or out of range
        return False
    if parsed.scheme not in DEFAULT_PORTS or not parsed.hostname or not served.hostname:
        return False
    if parsed.hostname != served.hostname:
        return False
    # No port in Host: the browser used its scheme's default (a proxy in front, say).
    return origin_port == (host_port if host_port is not None
                           else DEFAULT_PORTS[parsed.scheme])
