"""What every router of the JSON API shares: the bearer-token auth, the API's error (answered
as `{"error": {"code", "message", "field"?, ...}}`), the run a token's user may see, the
export-format path converter and the answers each operation documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest, JsonResponse
from django.urls import register_converter
from ninja.security import HttpBearer

from tools_app.models import Run
from tools_app.runs.store import selectors
from tools_app.web.api.schemas import ErrorResponse
from tools_app.web.api.tokens import user_for_token

MAX_ROW_ID = 2**63 - 1
# Statuses every token-authenticated operation may answer, besides its own.
ALWAYS = (401, 500)


class ApiError(Exception):
    """A refusal in the API's words: raised anywhere below a view, answered by app.py."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra

    def response(self) -> JsonResponse:
        body = {"error": {"code": self.code, "message": str(self)} | self.extra}
        return JsonResponse(body, status=self.status)


class BearerToken(HttpBearer):
    """`Authorization: Bearer <token>` (any case of the scheme): one token lookup per
    request (tokens.user_for_token); the token's active user becomes `request.user`.
    A logged-in session is no API credential."""

    openapi_description = "An API token (afw_...)"

    def __call__(self, request: HttpRequest) -> User | None:
        # Parsed here rather than by HttpBearer, which logs the header (a secret) in DEBUG.
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not token:
            return None
        return self.authenticate(request, token.strip())

    def authenticate(self, request: HttpRequest, token: str) -> User | None:
        user = user_for_token(token)
        if user is None or not user.is_active:
            return None
        request.user = user
        return user


def visible(request: HttpRequest, run_id: Any) -> Run:
    """The run, if the token's user may see it (their own, or any for staff); else 404."""
    run = selectors.run_for_api(run_id, request.user)
    if run is None:
        raise ApiError(404, "not_found", "No such run")
    return run


def answers(ok: Mapping[int, Any], *errors: int) -> dict[int, Any]:
    """An operation's documented answers: its successes (a schema, or None for a JSON
    object not modelled) and its error statuses, each an ErrorResponse."""
    documented: dict[int, Any] = {status: schema or dict[str, Any]
                                  for status, schema in ok.items()}
    return documented | {status: ErrorResponse for status in sorted({*errors, *ALWAYS})}


class ExportFormatConverter:
    """`csv` or `jsonl` in an export's path (`/api/runs/export.csv`); anything else is no
    route, so a 404."""

    regex = "csv|jsonl"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


# Registered on import: the routers' paths name it, and app.py imports them before it
# builds the URL patterns.
register_converter(ExportFormatConverter, "export_format")


def is_digits(text: str) -> bool:
    """0-9 only: str.isdigit() is also true for "²", which int() refuses."""
    return text.isascii() and text.isdigit()


def is_row_id(text: str) -> bool:
    """Digits that fit a 64-bit row id (databases refuse larger numbers, and int()
    refuses strings of more than 4,300 digits)."""
    return is_digits(text) and len(text) <= 19 and int(text) <= MAX_ROW_ID


def query(*names: str, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """`openapi_extra` documenting query parameters a view reads itself (all strings):
    filters refused by the audit filters' own checks, in the API's words."""
    return {"parameters": [{"in": "query", "name": name, "required": name in required,
                            "schema": {"type": "string"}} for name in names]}


def streamed(*content_types: str) -> dict[str, Any]:
    """`openapi_extra` documenting a streamed (non-JSON) 200 answer."""
    return {"responses": {200: {"description": "Streamed", "content": {
        kind: {"schema": {"type": "string"}} for kind in content_types}}}}
