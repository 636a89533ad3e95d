"""`POST /v1/traces`: the OTLP/HTTP trace receiver (tools_app/ingest does the work).

Authenticated as the JSON API is (`Authorization: Bearer <API token>`, which OTLP
exporters send through their headers setting). Answers as the OTLP specification says:
200 with an ExportTraceServiceResponse (its partial_success counting refused spans), in
the request's encoding; 400 for a body that does not decode, 401 without a valid token,
413 for a body too large, 415 for a content type or encoding it does not speak, 429
with Retry-After past the user's rate. Refusals carry a google.rpc.Status.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from django_ratelimit.core import get_usage

from tools_app.ingest import receive, spans, wire
from tools_app.ingest.wire import OtlpError
from tools_app.web.api.tokens import user_for_token


@csrf_exempt
@require_POST
def receive_traces(request: HttpRequest) -> HttpResponse:
    media = wire.JSON
    try:
        user = _authenticate(request)
        media = wire.media_type(request.headers.get("Content-Type", ""))
        _throttle(request)
        body = _body(request)
        export = wire.decode_request(body, media=media, limit=_limit(),
                                     encoding=request.headers.get("Content-Encoding", ""))
    except OtlpError as exc:
        return _refusal(exc, media)
    refusal = spans.Refusal()
    records = spans.records(export, refusal)
    if records:
        receive.receive(records, user, refusal)
    content, content_type = wire.encode_response(rejected=refusal.count,
                                                 message=refusal.reason, media=media)
    return HttpResponse(content, content_type=content_type)


def _authenticate(request: HttpRequest) -> User:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    user = user_for_token(token.strip()) if scheme.lower() == "bearer" and token else None
    if user is None or not user.is_active:
        raise OtlpError(401, "send an API token: Authorization: Bearer <token>")
    request.user = user
    return user


def _throttle(request: HttpRequest) -> None:
    usage = get_usage(request, group="otlp-traces", key="user",
                      rate=settings.AGENTFORGE_OTLP_RATE, increment=True)
    if usage is not None and usage["should_limit"]:
        raise Throttled(max(1, int(usage["time_left"])))


class Throttled(OtlpError):
    def __init__(self, retry_after: int) -> None:
        super().__init__(429, f"too many export requests: at most "
                              f"{settings.AGENTFORGE_OTLP_RATE} per user; retry in "
                              f"{retry_after} s")
        self.retry_after = retry_after


def _limit() -> int:
    return int(settings.AGENTFORGE_OTLP_MAX_BYTES)


def _body(request: HttpRequest) -> bytes:
    """The body, refused (413) past the limit before more than the limit is read."""
    limit = _limit()
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        raise OtlpError(400, "Content-Length is not a number") from None
    if declared > limit:
        raise OtlpError(413, f"the body is larger than {limit} bytes")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise OtlpError(413, f"the body is larger than {limit} bytes")
    return body


def _refusal(exc: OtlpError, media: str) -> HttpResponse:
    response = HttpResponse(wire.error_body(exc.status, str(exc), media),
                            content_type=media, status=exc.status)
    if isinstance(exc, Throttled):
        response["Retry-After"] = str(exc.retry_after)
    return response
