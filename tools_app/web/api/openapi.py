"""`GET /api/openapi.json`: the JSON API described as OpenAPI 3.1, built from the URLconf.

Paths are the `/api/` URL patterns as routed; each operation is its view's
`api_docs.Operation`; the schemas are the pydantic (django-ninja) models the views
parse bodies with, rendered by ninja's JSON-schema generator. Nothing is listed by hand,
so the document cannot drift from the routes. No interactive docs page: ninja's loads
its assets from a CDN.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, get_resolver
from django.views.decorators.http import require_GET
from ninja.openapi.schema import REF_TEMPLATE
from ninja.schema import NinjaGenerateJsonSchema
from pydantic.json_schema import models_json_schema

from tools_app.web.api.docs import Operation, documented, operations_of
from tools_app.web.api.schemas import ErrorResponse

JsonObject = dict[str, Any]
ERROR_TEXT = {400: "Bad input (the field or filter is named)", 401: "No valid token",
              404: "Not found, or not visible to the token's user", 409: "Not possible now",
              413: "The body is too large", 500: "The server failed (logged)"}
CONVERTER_SCHEMAS = {"uuid": {"type": "string", "format": "uuid"}, "int": {"type": "integer"}}
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?P<body>[^)]*)\)")
_CONVERTER = re.compile(r"<(?:(?P<converter>\w+):)?(?P<name>\w+)>")


def api_routes() -> Iterator[tuple[str, URLPattern]]:
    """Every `/api/...` URL pattern with its full route, in URLconf order."""
    yield from (route for route in _routes(get_resolver(), "")
                if route[0].startswith("api/"))


def _routes(resolver: URLResolver, prefix: str) -> Iterator[tuple[str, URLPattern]]:
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern).removeprefix("^").removesuffix("$")
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        else:
            yield route, entry


def openapi_path(route: str) -> tuple[str, list[JsonObject]]:
    """`api/runs/<uuid:run_id>` -> (`/api/runs/{run_id}`, its path parameters)."""
    parameters: list[JsonObject] = []

    def from_group(match: re.Match[str]) -> str:
        schema = {"type": "string", "enum": match["body"].split("|")}
        parameters.append(_path_parameter(match["name"], schema))
        return "{" + match["name"] + "}"

    def from_converter(match: re.Match[str]) -> str:
        schema = CONVERTER_SCHEMAS.get(match["converter"] or "str", {"type": "string"})
        parameters.append(_path_parameter(match["name"], schema))
        return "{" + match["name"] + "}"

    path = _CONVERTER.sub(from_converter, _GROUP.sub(from_group, route))
    return "/" + path.replace("\\", ""), parameters


def _path_parameter(name: str, schema: JsonObject) -> JsonObject:
    return {"in": "path", "name": name, "required": True, "schema": schema}


def build_document() -> JsonObject:
    paths: dict[str, JsonObject] = {}
    for route, pattern in api_routes():
        path, parameters = openapi_path(route)
        operations = operations_of(pattern.callback)
        paths[path] = {method: _operation(op, parameters, pattern.name)
                       for method, op in operations.items()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "AgentForge Web API", "version": "1",
                 "description": "Bearer-token JSON API; every error is "
                                "{\"error\": {\"code\", \"message\", \"field\"?, ...}}."},
        "paths": paths,
        "components": {"schemas": _schemas(),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "An API token (afw_...)"}}},
        "security": [{"bearer": []}],
    }


def _operation(op: Operation, parameters: list[JsonObject], name: str | None) -> JsonObject:
    query = [{"in": "query", "name": q, "required": q in op.required_query,
              "schema": {"type": "string"}} for q in op.query]
    result: JsonObject = {"operationId": name, "summary": op.summary,
                          "parameters": parameters + query, "responses": _responses(op)}
    if op.body is not None:
        result["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _ref(op.body)}}}
    if not op.auth:
        result["security"] = []
    return result


def _responses(op: Operation) -> JsonObject:
    responses: JsonObject = {}
    for status, (model, description) in op.responses.items():
        schema = _ref(model) if model is not None else {"type": "object"}
        responses[str(status)] = {"description": description,
                                  "content": {"application/json": {"schema": schema}}}
    if op.streams:
        responses["200"] = {"description": "Streamed",
                            "content": {kind: {"schema": {"type": "string"}}
                                        for kind in op.streams}}
    errors = (*op.errors, *((401,) if op.auth else ()), 500)
    for status in sorted(set(errors)):
        responses[str(status)] = {"description": ERROR_TEXT[status], "content": {
            "application/json": {"schema": _ref(ErrorResponse)}}}
    return responses


def _ref(model: type[Any]) -> JsonObject:
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def _schemas() -> JsonObject:
    models: set[type[Any]] = {ErrorResponse}
    for _route, pattern in api_routes():
        for op in operations_of(pattern.callback).values():
            models.update(m for m, _text in op.responses.values() if m is not None)
            models.update({op.body} if op.body is not None else set())
    ordered = sorted(models, key=lambda m: m.__name__)
    _keys, schema = models_json_schema([(m, "validation") for m in ordered],
                                       ref_template=REF_TEMPLATE,
                                       schema_generator=NinjaGenerateJsonSchema)
    return dict(schema.get("$defs", {}))


@documented(get=Operation("This document", auth=False,
                          responses={200: (None, "The OpenAPI 3.1 document")}))
@require_GET
def openapi_json(request: HttpRequest) -> JsonResponse:
    """Public: it names routes and shapes, no data; a client reads it before it has a token."""
    return JsonResponse(build_document())
