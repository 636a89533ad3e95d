"""GET /api/openapi.json and /api/docs, from django-ninja: a valid OpenAPI document listing
every /api/ route, each body as the model the route validates with, the error shape and
the bearer scheme, nothing secret; the docs page behind login with no asset from another
host; any other /api/ path a JSON 404."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from openapi_spec_validator import validate

from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

MISSING_RUN = "00000000-0000-0000-0000-000000000000"
BODY_SCHEMAS = {
    ("/api/runs", "post"): "StartRunBody",
    ("/api/runs/{run_id}/rerun", "post"): "RerunBody",
    ("/api/runs/{run_id}/fork", "post"): "ForkBody",
    ("/api/runs/{run_id}/decisions", "post"): "DecisionBody",
    ("/api/runs/{run_id}/continue", "post"): "ContinueBody",
    ("/api/runs/{run_id}/calls/{call_id}/execute", "post"): "ExecuteBody",
    ("/api/tools/{name}/try", "post"): "TryBody",
    ("/api/tools", "post"): "ToolBody",
    ("/api/tools/{tool}", "patch"): "ToolPatchBody",
    ("/api/endpoints", "post"): "EndpointBody",
    ("/api/endpoints/{endpoint}", "patch"): "EndpointPatchBody",
    ("/api/mcp-servers", "post"): "McpServerBody",
    ("/api/mcp-servers/{server}", "patch"): "McpServerPatchBody",
    ("/api/suites", "post"): "SuiteBody",
    ("/api/suites/{name}/cases", "post"): "CaseBody",
    ("/api/suites/{name}/runs", "post"): "SuiteRunBody",
}
# The required fields of each body, so that the one field too many is the first problem.
REQUIRED = {"StartRunBody": {"endpoint": "e", "messages": [{"role": "user"}]},
            "ForkBody": {"round": 1}, "DecisionBody": {"call_id": "c", "decision": "approve"},
            "ExecuteBody": {"arguments": {}}, "ToolBody": {"name": "t", "kind": "mock"},
            "EndpointBody": {"name": "e", "kind": "scripted"}, "McpServerBody": {"name": "m"},
            "SuiteBody": {"name": "s"}, "CaseBody": {"name": "c", "messages": [{"role": "user"}]},
            "SuiteRunBody": {"endpoints": ["e"]}}
SAMPLES = {"run_id": MISSING_RUN, "call_id": "1", "number": "1", "name": "get_weather",
           "fmt": "csv", "tool": "get_weather", "endpoint": "scripted", "server": "time",
           "suite_run_id": MISSING_RUN}


@pytest.fixture
def document() -> dict[str, Any]:
    response = Client().get("/api/openapi.json")  # no token: the document is public
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture
def bearer(bob: AbstractUser) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(bob, 'ci')[1]}"}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items()
            for method, op in item.items()]


def sample_url(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: SAMPLES[m[1]], path)


def api_routes(resolver: URLResolver | None = None,
               prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """Every routed `/api/` endpoint (URL names api_*; the document and its page aside)."""
    for entry in (resolver or get_resolver()).url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from api_routes(entry, route)
        elif route.startswith("api/") and (entry.name or "").startswith("api_") \
                and entry.name not in {"api_openapi", "api_docs"}:
            yield route, entry


# -- the document ----------------------------------------------------------------------


def test_the_document_is_valid_openapi_with_unique_operation_ids(
        document: dict[str, Any]) -> None:
    validate(document)  # raises on any violation of the OpenAPI 3.1 specification
    ids = [op["operationId"] for _path, _method, op in operations(document)]
    assert len(ids) == len(set(ids)), sorted(ids)


def test_every_api_route_is_documented_and_nothing_else(document: dict[str, Any]) -> None:
    routed = set()
    for _route, pattern in api_routes():
        kwargs = {name: SAMPLES[name] for name in pattern.pattern.converters}
        routed.add(reverse(str(pattern.name), kwargs=kwargs))
    documented = {sample_url(path) for path in document["paths"]}
    assert documented == routed
    for path, method, op in operations(document):  # each documented path routes to a view
        match = resolve(sample_url(path))
        assert match.url_name, (path, method)
        assert op["responses"], (path, method)
        declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path))
    for ref in re.findall(r'"\$ref": "#/components/schemas/(\w+)"', json.dumps(document)):
        assert ref in document["components"]["schemas"]


def test_bodies_have_their_schemas(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for (path, method), name in BODY_SCHEMAS.items():
        body = document["paths"][path][method]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        assert schema.get("allOf", [schema])[0] == {"$ref": f"#/components/schemas/{name}"}
        assert schemas[name]["additionalProperties"] is False, name  # unknown fields refused
        assert body["required"] is (name != "RerunBody")  # a rerun may send no body
    bodies = {(path, method) for path, method, op in operations(document) if "requestBody" in op}
    assert bodies == set(BODY_SCHEMAS)
    assert schemas["ForkBody"]["required"] == ["round"]
    assert set(schemas["DecisionBody"]["required"]) == {"call_id", "decision"}
    assert schemas["ContinueBody"]["properties"]["step"]["enum"] == ["run", "call", "round",
                                                                    "abort"]
    assert "arguments" in schemas["ExecuteBody"]["required"]


def test_each_route_validates_its_body_with_the_documented_model(
        document: dict[str, Any], bearer: dict[str, str]) -> None:
    """A field no model has is refused naming the fields of the model that validated the
    body: they are the documented schema's, in order. The body is refused before the
    view looks for the run (none exists here)."""
    schemas = document["components"]["schemas"]
    for (path, method), name in BODY_SCHEMAS.items():
        sent = REQUIRED.get(name, {}) | {"_x": 1}
        response = Client().generic(method.upper(), sample_url(path), json.dumps(sent),
                                    content_type="application/json", headers=bearer)
        assert response.status_code == 400, (path, response.content)
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_field", "_x")
        fields = ", ".join(schemas[name]["properties"])
        assert error["message"] == f"Unknown field _x: the fields are {fields}", path


def test_errors_security_and_streams_are_described(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert set(schemas["ErrorDetail"]["required"]) == {"code", "message"}
    assert {"field", "problems"} <= set(schemas["ErrorDetail"]["properties"])
    assert schemas["ErrorResponse"]["required"] == ["error"]
    [(scheme, bearer)] = document["components"]["securitySchemes"].items()
    assert bearer == {"type": "http", "scheme": "bearer",
                      "description": "An API token (afw_...)"}
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, method, op in operations(document):
        assert op["security"] == [{scheme: []}], (path, method)
        for status in ("401", "500"):
            assert op["responses"][status]["content"]["application/json"]["schema"] == error
        for status, answer in op["responses"].items():
            if status.startswith(("4", "5")):
                assert answer["content"]["application/json"]["schema"] == error
    fork = document["paths"]["/api/runs/{run_id}/fork"]["post"]["responses"]
    assert {"400", "404", "409", "413"} <= set(fork)
    export = document["paths"]["/api/runs/export.{fmt}"]["get"]
    assert set(export["responses"]["200"]["content"]) == {"text/csv", "application/x-ndjson"}
    assert {p["name"]: p["schema"] for p in export["parameters"]}["fmt"]["enum"] == ["csv",
                                                                                    "jsonl"]
    compare = document["paths"]["/api/runs/compare"]["get"]["parameters"]
    assert {p["name"] for p in compare if p["required"]} == {"a", "b"}


def test_no_secrets_and_no_other_host_in_the_document(bob: AbstractUser) -> None:
    _token, plaintext = create_token(bob, "ci")
    text = Client().get("/api/openapi.json").content.decode()
    assert plaintext not in text
    assert settings.SECRET_KEY not in text
    assert not re.search(r"afw_[A-Za-z0-9_-]{8,}", text)
    assert "http://" not in text
    assert "https://" not in text
    assert Client().post("/api/openapi.json").status_code == 405


# -- the docs page -----------------------------------------------------------------------


def test_the_docs_page_is_for_logged_in_users(client: Client) -> None:
    response = client.get("/api/docs")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_docs_page_loads_its_assets_from_the_projects_static_files(
        alice_client: Client) -> None:
    response = alice_client.get("/api/docs")
    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert f"{settings.STATIC_URL}ninja/swagger-ui-bundle.js" in assets
    for asset in assets:
        assert asset.startswith(settings.STATIC_URL), asset  # no CDN, no other host
        assert finders.find(asset.removeprefix(settings.STATIC_URL)), asset
    assert "http://" not in page
    assert "https://" not in page
    assert '"url": "/api/openapi.json"' in page


# -- any other /api/ path ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/", "/api/nope", "/api/runs/", "/api/runs/not-a-uuid",
                                  "/api/runs/export.xml", "/api/openapi.json/x",
                                  f"/api/runs/{MISSING_RUN}/nothing"])
def test_an_unknown_api_path_is_a_json_404(alice_client: Client, path: str,
                                           settings: Any) -> None:
    settings.DEBUG = True  # not Django's debug page, which lists the URL patterns
    for response in (alice_client.get(path), alice_client.post(path, {})):
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "not_found"
