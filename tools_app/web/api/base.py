"""What every view of the JSON API shares: bearer-token auth, the error answer, reading
a JSON body and validating it with the model the view documents, and the run a token's
user may see.

Every error is `{"error": {"code", "message", "field"?, ...}}` with a 4xx status (or a
JSON 500 for a failure of the server: never Django's debug page).
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from tools_app.models import Run
from tools_app.runs.store import selectors
from tools_app.web.api.docs import operations_of
from tools_app.web.api.schemas import Body
from tools_app.web.api.tokens import user_for_token

MAX_BODY_BYTES = 1_000_000
MAX_ROW_ID = 2**63 - 1

logger = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra

    def response(self) -> JsonResponse:
        body = {"error": {"code": self.code, "message": str(self)} | self.extra}
        return JsonResponse(body, status=self.status)


View = Callable[..., HttpResponseBase]


def token_required(view: View) -> View:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return _authenticated(view, request, *args, **kwargs)
        except ApiError as error:
            return error.response()
        except Exception:
            # Never Django's debug page: it shows the stack frames' locals, the caller's
            # token among them. The error is logged with its traceback for the operator.
            logger.exception("API request %s %s failed", request.method, request.path)
            return ApiError(500, "internal_error",
                            "The server failed to answer; the error is logged").response()

    return wrapper


def _authenticated(view: View, request: HttpRequest, *args: Any,
                   **kwargs: Any) -> HttpResponseBase:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    user = user_for_token(token.strip()) if scheme.lower() == "bearer" and token else None
    if user is None or not user.is_active:
        response = ApiError(401, "unauthorized",
                            "Send a valid API token: Authorization: Bearer <token>").response()
        response["WWW-Authenticate"] = "Bearer"
        return response
    request.user = user
    return view(request, *args, **kwargs)


def visible(request: HttpRequest, run_id: Any) -> Run:
    """The run, if the token's user may see it (their own, or any for staff); else 404."""
    run = selectors.run_for_api(run_id, request.user)
    if run is None:
        raise ApiError(404, "not_found", "No such run")
    return run


# -- the body ---------------------------------------------------------------------------


def parse_body[B: Body](request: HttpRequest, model: type[B]) -> B:
    """The JSON body validated with `model`, which must be the body the URL's view
    documents for this method (so the documented body is the one validated). A body
    that does not fit is a 400 naming the field (`refusal`)."""
    documented = body_model(request)
    if documented is not model:
        raise LookupError(f"{request.path} documents {documented.__name__} for "
                          f"{request.method}, not {model.__name__}")
    raw = json_body(request)
    try:
        return model.parse(raw)
    except ValidationError as exc:
        raise refusal(model, exc) from exc


def body_model(request: HttpRequest) -> type[Body]:
    """The body model the resolved URL's view documents for the request's method."""
    match = request.resolver_match
    operation = operations_of(match.func if match else None).get(str(request.method).lower())
    if operation is None or operation.body is None:
        raise LookupError(f"{request.path} documents no body for {request.method}")
    return operation.body


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object: 413 over the size limit, 400 for anything that is not
    strict JSON (NaN, Infinity, too deep, lone surrogates) or not an object."""
    try:
        raw = request.body
    except RequestDataTooBig:  # over DATA_UPLOAD_MAX_MEMORY_SIZE: Django refuses to read it
        raw = None
    if raw is None or len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"The body is over {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"", parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "invalid_json", "The body is not valid JSON: nested too deeply"
                       ) from exc
    except ValueError as exc:  # NaN / Infinity, or an integer too long for int()
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "The body must be a JSON object")
    if (where := _lone_surrogate_at(body)) is not None:
        raise ApiError(400, "invalid_field", f"{where} holds a lone surrogate escape "
                       "(half of a UTF-16 pair), which is not text", field=where)
    return body


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity: Python's json accepts them, JSON does not (nor do the
    databases' JSON columns)."""
    raise ValueError(f"{name} is not a JSON value")


def _lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) that has no UTF-8 form, if any."""
    if isinstance(value, str):
        return path or "body" if not _is_text(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if not _is_text(key):
                return path or "body"
            if (found := _lone_surrogate_at(item, here)) is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _lone_surrogate_at(item, f"{path}[{index}]")) is not None:
                return found
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- a body that does not fit its model, as the API's 400 --------------------------------

EMPTY: tuple[Any, ...] = (None, "", [])
MUST_BE = {"string_type": "must be a string", "int_type": "must be an integer",
           "bool_type": "must be true or false", "dict_type": "must be an object",
           "list_type": "must be a list", "too_short": "must not be empty",
           "string_too_short": "must not be empty", "name_or_id": "must be a name or an id"}


def refusal(model: type[Body], exc: ValidationError) -> ApiError:
    """The first problem pydantic found, in the API's words: `field` is its JSON path
    (`tools[1]`, `arguments.call_1`), the message names it too. Left out, or null, ""
    or [] for a required field: `missing_field`; a field the model does not have:
    refused, naming it and the fields there are."""
    error = exc.errors(include_url=False)[0]
    loc = error["loc"]
    field, path = str(loc[0]) if loc else "", json_path(loc)
    if error["type"] == "extra_forbidden":
        return ApiError(400, "invalid_field", f"Unknown field {path}: the fields are "
                        f"{', '.join(model.model_fields)}", field=path)
    if "api_field" in error.get("ctx", {}):  # raised by the model itself (Body's `refuse`)
        return ApiError(400, error["type"], error["msg"], field=error["ctx"]["api_field"])
    info = model.model_fields.get(field)
    required = info is not None and info.is_required()
    if error["type"] == "missing" or (len(loc) == 1 and required and error["input"] in EMPTY):
        choices = _choices(model, field)
        told = model.expect.get(field) or ("one of " + ", ".join(choices) if choices else None)
        return ApiError(400, "missing_field",
                        f"'{field}' is required" + (f": {told}" if told else ""), field=field)
    return ApiError(400, model.codes.get(field, "invalid_field"),
                    _wrong_value(model, error, field, path), field=path)


def _wrong_value(model: type[Body], error: ErrorDetails, field: str, path: str) -> str:
    if error["type"] == "literal_error":
        what = "must be one of " + ", ".join(_choices(model, field))
    else:
        what = MUST_BE.get(error["type"], f"is not valid: {error['msg']}")
    told = model.expect.get(field)
    if told is None:
        return f"{path} {what}"
    return f"{field} must be {told}" + ("" if path == field else f": {path} {what}")


def _choices(model: type[Body], field: str) -> list[str]:
    info = model.model_fields.get(field)
    return [str(c) for c in _literal_values(info.annotation if info else None)]


def _literal_values(annotation: Any) -> Sequence[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    return [value for arg in typing.get_args(annotation) for value in _literal_values(arg)]


def json_path(loc: Sequence[int | str]) -> str:
    """("arguments", "call_1", "city") -> "arguments.call_1.city"; ("tools", 1) -> "tools[1]"."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def is_digits(text: str) -> bool:
    """0-9 only: str.isdigit() is also true for "²", which int() refuses."""
    return text.isascii() and text.isdigit()


def is_row_id(text: str) -> bool:
    """Digits that fit a 64-bit row id (databases refuse larger numbers, and int()
    refuses strings of more than 4,300 digits)."""
    return is_digits(text) and len(text) <= 19 and int(text) <= MAX_ROW_ID
