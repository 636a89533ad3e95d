"""Request bodies in the API's words: ninja reads a body with `JsonObjectParser` (strict
JSON, an object, under the size limit) and validates it with the operation's model
(schemas.py); `refusal` turns the first problem pydantic found into the API's 400
naming the field by its JSON path (`tools[1]`, `arguments.call_1`)."""

from __future__ import annotations

import json
import typing
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja.parser import Parser
from pydantic_core import ErrorDetails

from tools_app.web.api.base import ApiError
from tools_app.web.api.schemas import Body

MAX_BODY_BYTES = 1_000_000


class JsonObjectParser(Parser):
    """Ninja's body reader: refusals are ApiErrors, which app.py answers as they are
    (ninja wraps them in an HttpError whose cause they are)."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        return json_body(request)


def too_large() -> ApiError:
    return ApiError(413, "too_large", f"The body is over {MAX_BODY_BYTES} bytes")


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object: 413 over the size limit, 400 for anything that is not
    strict JSON (NaN, Infinity, too deep, lone surrogates) or not an object."""
    try:
        raw = request.body
    except RequestDataTooBig as exc:  # over DATA_UPLOAD_MAX_MEMORY_SIZE
        raise too_large() from exc
    if len(raw) > MAX_BODY_BYTES:
        raise too_large()
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
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


def refusal(model: type[Body], error: ErrorDetails) -> ApiError:
    """`error` (its `loc` inside the body) in the API's words: `field` is its JSON path,
    the message names it too. Left out, or null, "" or [] for a required field:
    `missing_field`; a field the model does not have: refused, naming it and the fields
    there are."""
    loc = error["loc"]
    field, path = str(loc[0]) if loc else "", json_path(loc)
    if error["type"] == "extra_forbidden":
        return ApiError(400, "invalid_field", f"Unknown field {path}: the fields are "
                        f"{', '.join(model.model_fields)}", field=path)
    if "api_field" in error.get("ctx", {}):  # raised by the model itself (schemas.refuse)
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
