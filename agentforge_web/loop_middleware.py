"""Django's own middleware, its request and response steps called on the event loop:
the chain of the routes agentforge_web/handler.py serves there (the proxy's).

Django runs a `MiddlewareMixin`'s steps in async mode through `sync_to_async`, two trips
to a thread per middleware. These steps only read the request and the settings and set
headers, never wait on anything, so they are called directly (`OnLoop`).

What applies to the proxy, which answers JSON and event streams to API clients that
authenticate with an API token (no cookie, no form, no page):
- `LoopCommonMiddleware`: the Host header checked against ALLOWED_HOSTS (DisallowedHost,
  answered 400 as Django answers it), DISALLOWED_USER_AGENTS, PREPEND_WWW, and the
  Content-Length of a whole answer.
- `LoopSecurityMiddleware`: X-Content-Type-Options: nosniff (a JSON error body that
  echoes a client's text is never sniffed as HTML); HSTS on HTTPS and
  SECURE_SSL_REDIRECT, the site's transport rules, the same for every path of the host;
  Referrer-Policy and Cross-Origin-Opener-Policy, which concern documents and cost
  nothing here, as the site sends them.
Not applied: sessions, CSRF, authentication, messages, the login lockout (no cookie or
login: the view checks the token itself), CSP and X-Frame-Options (the answers are
JSON or an event stream, not a page with scripts or one to frame; a path under
`/proxy/` that is no route gets Django's plain 404), htmx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware


class OnLoop:
    """A `MiddlewareMixin` whose `process_request` / `process_response` run on the
    event loop, in the chain's async mode only."""

    sync_capable = False
    async_capable = True

    if TYPE_CHECKING:  # what the Django middleware it is mixed into has
        get_response: Any

        def process_request(self, request: HttpRequest) -> HttpResponseBase | None: ...

        def process_response(self, request: HttpRequest,
                             response: HttpResponseBase) -> HttpResponseBase: ...

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.process_request(request)
        if response is None:
            response = await self.get_response(request)
        return self.process_response(request, response)


class LoopSecurityMiddleware(OnLoop, SecurityMiddleware):  # type: ignore[misc]
    pass


class LoopCommonMiddleware(OnLoop, CommonMiddleware):  # type: ignore[misc]
    pass
