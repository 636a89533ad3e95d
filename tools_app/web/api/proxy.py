"""The recording proxy's views (tools_app/proxy does the work):

    POST /proxy/<endpoint>/v1/chat/completions   OpenAI Chat Completions
    POST /proxy/<endpoint>/v1/messages           Anthropic Messages

A client authenticates with an API token where its SDK sends its key (`Authorization:
Bearer`, or Anthropic's `x-api-key`); the body goes unchanged to the registered endpoint
with the endpoint's key; the answer comes back as the provider sent it (status, body,
headers; a stream chunk by chunk as it arrives). Refusals (no or a wrong token, an
unknown endpoint, a body too large or not JSON, a provider unreachable) are JSON in the
provider's own error shape. The exchange is recorded afterwards (`recorders.recorder()`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from tools_app.engine import json_nesting
from tools_app.models import ModelEndpoint
from tools_app.proxy import lookups, upstream
from tools_app.proxy.dialects import ANTHROPIC_MESSAGES, OPENAI_CHAT, Dialect
from tools_app.proxy.exchanges import Exchange
from tools_app.proxy.recorders import recorder
from tools_app.proxy.upstream import EndpointUnusable, Target
from tools_app.web.api.tokens import user_for_token

RUN_HEADER = "X-AgentForge-Run"


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@csrf_exempt
async def chat_completions(request: HttpRequest, endpoint: str) -> HttpResponseBase:
    return await _proxy(request, endpoint, OPENAI_CHAT)


@csrf_exempt
async def messages(request: HttpRequest, endpoint: str) -> HttpResponseBase:
    return await _proxy(request, endpoint, ANTHROPIC_MESSAGES)


async def _proxy(request: HttpRequest, reference: str, dialect: Dialect) -> HttpResponseBase:
    started = time.time_ns()
    try:
        if request.method != "POST":
            raise Refused(405, "method_not_allowed", "send a POST request")
        token = _token(request)
        user, target = await _looked_up(token, reference, dialect)
        body, stream = _body(request)
    except Refused as refusal:
        return _refusal(dialect, refusal)
    exchange = Exchange(user=user, target=target, dialect=dialect, request_body=body,
                        run_header=request.headers.get(RUN_HEADER, "")[:200],
                        started_ns=started, client_secret=token)
    try:
        response = await upstream.send(target, dialect, body, stream=stream,
                                       client_headers=request.headers)
    except httpx.TimeoutException as exc:
        exchange.failure = (f"the endpoint did not answer in time: "
                            f"{_told(target, exc) or type(exc).__name__}")
        _finish(exchange)
        return _refusal(dialect, Refused(504, "upstream_timeout", exchange.failure))
    except httpx.HTTPError as exc:
        exchange.failure = f"the endpoint could not be reached: {_told(target, exc)}"
        _finish(exchange)
        return _refusal(dialect, Refused(502, "upstream_unreachable", exchange.failure))
    exchange.status = response.status_code
    exchange.content_type = response.headers.get("content-type", "")
    headers = upstream.passed_back(response.headers)
    if "text/event-stream" in exchange.content_type:
        streamed = StreamingHttpResponse(_relay(response, exchange),
                                         status=response.status_code)
        return _with_headers(streamed, headers)
    try:
        content = await response.aread()
    except httpx.HTTPError as exc:
        exchange.failure = f"the endpoint's response broke off: {_told(target, exc)}"
        _finish(exchange)
        return _refusal(dialect, Refused(502, "upstream_broken", exchange.failure))
    finally:
        await response.aclose()
    exchange.keep(content, _limit())
    _finish(exchange, wake=False)
    return _with_headers(RecorderWokenWhenClosed(content, status=response.status_code),
                         headers)


class RecorderWokenWhenClosed(HttpResponse):
    """A whole answer whose exchange was queued (in order) without waking the recorder,
    woken when the server closes the response, once the answer is written: waking it
    before would have its thread compete with the writing for the GIL."""

    def close(self) -> None:
        super().close()
        recorder().wake()


async def _relay(response: httpx.Response, exchange: Exchange) -> AsyncIterator[bytes]:
    """The provider's stream passed on chunk by chunk; what was sent is kept for the
    record (up to the limit), which is made once the stream has ended."""
    try:
        async for chunk in response.aiter_bytes():
            exchange.keep(chunk, _limit())
            # Stamped before it is passed on: a client may send its next request as soon
            # as it has read the stream's last event, before this generator resumes.
            exchange.finished_ns = time.time_ns()
            yield chunk
    except httpx.HTTPError as exc:
        exchange.failure = f"the endpoint's stream broke off: {exc}"
    except BaseException:
        exchange.client_left = True  # a failure unless it was sent a whole answer
        raise
    finally:
        await response.aclose()
        _finish(exchange)


def _told(target: Target, error: Exception) -> str:
    """An HTTP error's text as the client may read it: the endpoint's secrets removed."""
    return target.adapter.http.redactor.text(str(error))


def _finish(exchange: Exchange, *, wake: bool = True) -> None:
    exchange.finished_ns = exchange.finished_ns or time.time_ns()
    recorder().submit(exchange, wake=wake)


def _token(request: HttpRequest) -> str:
    scheme, _, bearer = request.headers.get("Authorization", "").partition(" ")
    token = bearer.strip() if scheme.lower() == "bearer" else ""
    token = token or request.headers.get("x-api-key", "").strip()
    if not token:
        raise Refused(401, "missing_api_key", "send an AgentForge API token as the API key "
                                              "(Authorization: Bearer <token> or x-api-key)")
    return token


async def _looked_up(token: str, reference: str, dialect: Dialect) -> tuple[User, Target]:
    """The token's user and the endpoint, from the cache (no thread hop, no query) or
    from the database (then kept)."""
    user = lookups.cached_user(token)
    target = lookups.cached_target(reference, dialect.name)
    if user is not None and target is not None:
        return user, target
    return await sync_to_async(_authorized)(token, reference, dialect, user, target)


def _authorized(token: str, reference: str, dialect: Dialect, user: User | None,
                target: Target | None) -> tuple[User, Target]:
    if user is None:
        user = user_for_token(token)
        if user is None or not user.is_active:
            raise Refused(401, "invalid_api_key", "the API key is not a valid AgentForge "
                                                  "API token")
        lookups.keep_user(token, user)
    if target is None:
        endpoint = upstream.find_endpoint(reference, dialect)
        if endpoint is None:
            kinds = ", ".join(sorted(dialect.kinds))
            raise Refused(404, "endpoint_not_found", f"no registered endpoint named "
                                                     f"{reference[:100]!r} of kind {kinds}")
        target = _target(endpoint)
        lookups.keep_target(reference, dialect.name, target)
    return user, target


def _target(endpoint: ModelEndpoint) -> Target:
    try:
        return upstream.target_for(endpoint)
    except EndpointUnusable as exc:
        raise Refused(502, "endpoint_unusable", str(exc)) from None


def _limit() -> int:
    return int(settings.AGENTFORGE_PROXY_MAX_BYTES)


def _body(request: HttpRequest) -> tuple[bytes, bool]:
    """The body (refused past the limit before more is read) and its stream flag."""
    limit = _limit()
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        raise Refused(400, "invalid_request", "Content-Length is not a number") from None
    body = request.read(limit + 1) if declared <= limit else b""
    if declared > limit or len(body) > limit:
        raise Refused(413, "request_too_large", f"the body is larger than {limit} bytes")
    try:
        data: Any = json_nesting.loads(body)
    except ValueError:
        raise Refused(400, "invalid_request", "the body is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "invalid_request", "the body is not a JSON object")
    return body, data.get("stream") is True


def _refusal(dialect: Dialect, refusal: Refused) -> JsonResponse:
    return JsonResponse(dialect.error(refusal.status, refusal.code, str(refusal)),
                        status=refusal.status)


def _with_headers[R: HttpResponse | StreamingHttpResponse](
        response: R, headers: list[tuple[str, str]]) -> R:
    for name, value in headers:
        response[name] = value
    return response
