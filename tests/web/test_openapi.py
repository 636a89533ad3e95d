"""GET /api/openapi.json: the JSON API described from the URLconf, with the body models
the views parse with, the error shape and the bearer scheme; nothing secret in it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.test import Client, RequestFactory
from django.urls import resolve

from tools_app.models import Run, ToolRegistration
from tools_app.web import urls
from tools_app.web.api import base
from tools_app.web.api.schemas import Body, RerunBody, StartRunBody, TryBody
from tools_app.web.api.tokens import create_token

from .test_api import Api, bob_api, body  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

BODY_SCHEMAS = {
    ("/api/runs", "post"): "StartRunBody",
    ("/api/runs/{run_id}/rerun", "post"): "RerunBody",
    ("/api/runs/{run_id}/fork", "post"): "ForkBody",
    ("/api/runs/{run_id}/decisions", "post"): "DecisionBody",
    ("/api/runs/{run_id}/continue", "post"): "ContinueBody",
    ("/api/runs/{run_id}/calls/{call_id}/execute", "post"): "ExecuteBody",
    ("/api/tools/{name}/try", "post"): "TryBody",
}
SAMPLE_IDS = {"run_id": "00000000-0000-0000-0000-000000000000", "call_id": "1",
              "number": "1", "name": "get_weather", "fmt": "csv"}


@pytest.fixture
def document() -> dict[str, Any]:
    response = Client().get("/api/openapi.json")  # no token: the document is public
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    return response.json()  # type: ignore[no-any-return]


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items()
            for method, op in item.items()]


def test_every_api_url_is_documented_and_nothing_else(document: dict[str, Any]) -> None:
    api_names = {p.name for p in urls.urlpatterns if str(p.pattern).lstrip("^").startswith("api/")}
    documented = {op["operationId"] for _path, _method, op in operations(document)}
    assert documented == api_names
    assert len(document["paths"]) == len(api_names)
    for path in document["paths"]:  # each documented path routes to a view
        resolve(re.sub(r"\{(\w+)\}", lambda m: SAMPLE_IDS[m[1]], path))


def test_the_document_is_well_formed_openapi(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"]
    schemas = document["components"]["schemas"]
    for path, method, op in operations(document):
        assert method in {"get", "post"}
        assert op["responses"], (path, method)
        declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path))
    for ref in re.findall(r'"\$ref": "#/components/schemas/(\w+)"', json.dumps(document)):
        assert ref in schemas


def test_bodies_have_their_schemas(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for (path, method), name in BODY_SCHEMAS.items():
        body_schema = document["paths"][path][method]["requestBody"]["content"][
            "application/json"]["schema"]
        assert body_schema == {"$ref": f"#/components/schemas/{name}"}
    assert schemas["ForkBody"]["required"] == ["round"]
    assert set(schemas["DecisionBody"]["required"]) == {"call_id", "decision"}
    assert schemas["ContinueBody"]["properties"]["step"]["enum"] == ["run", "call", "round",
                                                                    "abort"]
    assert "arguments" in schemas["ExecuteBody"]["required"]
    assert set(schemas["RerunBody"]["properties"]) >= {"snapshot", "model", "tools",
                                                      "on_divergence"}
    assert "arguments" in schemas["TryBody"]["properties"]
    for name in BODY_SCHEMAS.values():  # every body refuses fields it does not have
        assert schemas[name]["additionalProperties"] is False, name
    bodies = {(path, method) for path, method, op in operations(document) if "requestBody" in op}
    assert bodies == set(BODY_SCHEMAS)


def test_documented_body_is_the_model_the_view_parses_with(document: dict[str, Any]) -> None:
    for (path, method), name in BODY_SCHEMAS.items():
        url = re.sub(r"\{(\w+)\}", lambda m: SAMPLE_IDS[m[1]], path)
        request = RequestFactory().generic(method.upper(), url)
        request.resolver_match = resolve(url)
        model = base.body_model(request)
        assert issubclass(model, Body)
        assert model.__name__ == name


def test_views_parse_bodies_through_the_models(
        monkeypatch: pytest.MonkeyPatch, bob_api: Api, body: dict[str, Any],  # noqa: F811
        demo_tools: dict[str, ToolRegistration]) -> None:
    parsed: list[type[Body]] = []
    original = Body.parse.__func__  # type: ignore[attr-defined]

    def spy(cls: type[Body], raw: dict[str, Any]) -> Body:
        parsed.append(cls)
        return original(cls, raw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Body, "parse", classmethod(spy))
    assert bob_api.post("/api/runs", body).status_code == 201
    assert bob_api.post("/api/tools/get_weather/try", {"arguments": {"city": "Oslo"}}
                        ).status_code in {201, 400}
    # A key that is no field of the model is refused, named, whatever its name.
    runs = Run.objects.count()
    refused = bob_api.post("/api/runs", body | {"_fields_set": 1})
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "_fields_set"
    assert parsed == [StartRunBody, TryBody, StartRunBody]
    assert Run.objects.count() == runs


def test_a_view_cannot_validate_with_another_model_than_it_documents(
        bob_api: Api, body: dict[str, Any]) -> None:  # noqa: F811
    request = RequestFactory().post("/api/runs", body, content_type="application/json")
    request.resolver_match = resolve("/api/runs")
    assert isinstance(base.parse_body(request, StartRunBody), StartRunBody)
    with pytest.raises(LookupError, match="documents StartRunBody for POST, not RerunBody"):
        base.parse_body(request, RerunBody)


def test_errors_security_and_streams_are_described(document: dict[str, Any]) -> None:
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["required"]) == {"code", "message"}
    assert "field" in error["properties"]
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "An API token (afw_...)"}
    assert document["security"] == [{"bearer": []}]
    for path, _method, op in operations(document):
        public = path == "/api/openapi.json"
        assert ("401" in op["responses"]) is not public
        assert (op.get("security") == []) is public
    fork = document["paths"]["/api/runs/{run_id}/fork"]["post"]["responses"]
    assert fork["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"}
    export = document["paths"]["/api/runs/export.{fmt}"]["get"]
    assert set(export["responses"]["200"]["content"]) == {"text/csv", "application/x-ndjson"}
    assert {p["name"]: p["schema"] for p in export["parameters"]}["fmt"]["enum"] == ["csv",
                                                                                    "jsonl"]
    compare = document["paths"]["/api/runs/compare"]["get"]["parameters"]
    assert all(p["required"] for p in compare if p["name"] in {"a", "b"})


def test_no_secrets_and_no_cdn_docs_page(bob: AbstractUser) -> None:
    _token, plaintext = create_token(bob, "ci")
    text = Client().get("/api/openapi.json").content.decode()
    assert plaintext not in text
    assert settings.SECRET_KEY not in text
    assert not re.search(r"afw_[A-Za-z0-9_-]{8,}", text)
    assert "http://" not in text  # no CDN-hosted docs assets referred to
    assert "https://" not in text
    assert Client().get("/api/docs").status_code == 404
    assert Client().post("/api/openapi.json").status_code == 405
