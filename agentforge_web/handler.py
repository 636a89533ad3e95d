"""Django's ASGI handler with the middleware chain run as one synchronous call.

Django's `ASGIHandler` loads the middleware in async mode. Django's own middleware
(`MiddlewareMixin`) then calls each `process_request` / `process_response` /
`process_view` through `sync_to_async`, and the view (synchronous: the ORM) through one
more: 19 trips between the event loop and a thread for one request, each a context copy
and two thread switches, about 2 ms of CPU (docs/benchmarks/product-path.md). Every
view here is synchronous, so a request ends up in a thread anyway: loaded in sync mode,
the whole chain and the view run in the one `sync_to_async` call this handler makes (in
the request's own thread-sensitive context, as Django's adaptation would). An async view
would still work (Django's sync path runs it with `async_to_sync`). The WebSockets have
their own stack (channels), untouched.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Any = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)
