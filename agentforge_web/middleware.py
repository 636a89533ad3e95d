"""The database's absence answered as such: a 503 (JSON `database_unavailable` under
/api/, the provider's own error JSON under the recording proxy's /proxy/, a plain page
elsewhere), never a bare 500.

A request meets an outage in one of three ways, all covered:
- its view raises OperationalError / InterfaceError (`process_exception`; the JSON API
  lets those through its own handlers for this);
- a middleware below raises one and Django answers a 500: `got_request_exception`
  notes the cause on the request;
- the connection could not be opened at all (refused, pool timeout): Django marks the
  connection as failed and it has none, seen after the response.
The outage is logged once, and its end once, per process (runs.store.outage).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.core.signals import got_request_exception
from django.db import connections
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse

from tools_app.proxy.dialects import ANTHROPIC_MESSAGES, OPENAI_CHAT
from tools_app.runs.store.outage import DATABASE_ERRORS, Outage

logger = logging.getLogger(__name__)
_outage = Outage(logger, "web requests")

RETRY_AFTER_SECONDS = "5"
API_PREFIX = "/api/"
PROXY_PREFIX = "/proxy/"
UNAVAILABLE = "The database is unavailable; try again shortly"
PAGE = (b"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        b"<title>Service unavailable</title></head><body><h1>Service unavailable</h1>"
        b"<p>The database cannot be reached right now. Try again in a few seconds.</p>"
        b"</body></html>")


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """The 503 of a request that needed the database while it was unavailable."""
    response: HttpResponse
    if request.path.startswith(API_PREFIX):
        response = JsonResponse({"error": {
            "code": "database_unavailable", "message": UNAVAILABLE}}, status=503)
    elif request.path.startswith(PROXY_PREFIX):
        response = _proxy_unavailable(request.path)
    else:
        response = HttpResponse(PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


def _proxy_unavailable(path: str) -> JsonResponse:
    """The error body the proxied provider's SDK reads (the client sees a 503 it can
    retry on, not an HTML page)."""
    dialect = (ANTHROPIC_MESSAGES if path.endswith("/" + ANTHROPIC_MESSAGES.path)
               else OPENAI_CHAT)
    return JsonResponse(dialect.error(503, "database_unavailable", UNAVAILABLE), status=503)


_DATABASE_ERROR = "_agentforge_database_error"


@receiver(got_request_exception)
def _note_database_error(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django turned an exception into a 500 (one raised by a middleware below, which
    `process_exception` never sees): note it on the request when the database was the
    cause. Sent from inside the `except` block, so the exception is the current one."""
    error = sys.exception()
    if request is not None and isinstance(error, DATABASE_ERRORS):
        setattr(request, _DATABASE_ERROR, error)


def _failed_to_connect() -> bool:
    """A connection of this thread failed and has none: it could not be opened (or was
    closed after breaking inside a transaction)."""
    return any(conn.errors_occurred and conn.connection is None
               for conn in connections.all(initialized_only=True))


class DatabaseUnavailableMiddleware:
    """First in MIDDLEWARE, so that it also sees the 500s of the middleware below it.

    Both modes: synchronous in the site's chain, asynchronous in the chain of the routes
    served on the event loop (agentforge_web/handler.py), where a 500's connections are
    looked at on the request's thread (`sync_to_async`), the one its queries ran on."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._acall(request)
        response = self.get_response(request)
        return self._answer(request, response, response.status_code == 500
                            and _failed_to_connect())

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        response = await self.get_response(request)
        failed = (response.status_code == 500
                  and await sync_to_async(_failed_to_connect)())
        return self._answer(request, response, failed)

    @staticmethod
    def _answer(request: HttpRequest, response: HttpResponse,
                failed_to_connect: bool) -> HttpResponse:
        if response.status_code == 500:
            error = getattr(request, _DATABASE_ERROR, None)
            if error is not None or failed_to_connect:
                _outage.failed(error or ConnectionError("no connection could be opened"))
                return database_unavailable(request)
        if response.status_code < 500:
            _outage.succeeded()
        return response

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        _outage.failed(exception)
        return database_unavailable(request)
