"""Export of a filtered selection of runs as CSV and JSON Lines, streamed, from the
pages (session) and the API (token); the same filters and the same visibility as the
list; spreadsheet formulas in untrusted text are neutralised."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.web.support import Api
from tools_app.models import Run
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def content(response: Any) -> str:
    assert response.status_code == 200, response.content
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def jsonl(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content(response).splitlines()]


def test_the_api_exports_what_it_would_list_with_the_same_filters(
    alice: AbstractUser, filter_world: dict[str, Run],
) -> None:
    api = Api(create_token(alice, "ops")[1])

    everything = jsonl(api.get("/api/runs/export.jsonl"))
    failed = jsonl(api.get("/api/runs/export.jsonl?status=failed"))

    assert [r["title"] for r in everything] == ["Later", "Divide by zero",
                                                "Weather in Paris, please"]
    assert [r["id"] for r in failed] == [str(filter_world["broken"].pk)]
    row = failed[0]
    assert (row["status"], row["endpoint"], row["tools"], row["started_by"]) == (
        "failed", "failing", ["calculator"], "bob")
    assert row["errors"] == 1
    assert "api_key_env" not in json.dumps(everything)  # no endpoint configuration


def test_a_user_exports_only_their_own_runs_as_csv(
    bob_client: Client, filter_world: dict[str, Run],
) -> None:
    response = bob_client.get("/runs/export.csv")

    assert response["Content-Disposition"] == 'attachment; filename="runs.csv"'
    rows = list(csv.DictReader(io.StringIO(content(response))))
    assert [r["title"] for r in rows] == ["Divide by zero", "Weather in Paris, please"]
    assert rows[1]["status"] == "succeeded"
    assert rows[1]["tools"] == "get_weather"


def test_formulas_in_untrusted_text_are_neutralised_in_csv(
    bob_client: Client, filter_world: dict[str, Run],
) -> None:
    Run.objects.filter(pk=filter_world["weather"].pk).update(
        title="=HYPERLINK(\"http://evil\",\"click\")", final_text="+1+2")

    rows = list(csv.DictReader(io.StringIO(content(bob_client.get("/runs/export.csv")))))

    weather = next(r for r in rows if r["id"] == str(filter_world["weather"].pk))
    assert weather["title"] == "'=HYPERLINK(\"http://evil\",\"click\")"
    assert weather["final_text"] == "'+1+2"


def test_bad_filters_are_refused_naming_them(
    alice: AbstractUser, bob_client: Client, filter_world: dict[str, Run],
) -> None:
    api = Api(create_token(alice, "ops")[1])
    error = api.get("/api/runs/export.csv?status=exploded").json()["error"]
    assert (error["code"], error["field"]) == ("invalid_filter", "status")
    assert api.get("/api/runs/export.csv?cursor=abc").json()["error"]["field"] == "cursor"
    page = bob_client.get("/runs/export.jsonl?since=yesterday")
    assert page.status_code == 400
    assert page.content.decode().startswith("since must be an ISO 8601")


def test_export_needs_a_login_or_a_token(client: Client) -> None:
    assert client.get("/runs/export.csv").status_code == 302
    assert Api(None).get("/api/runs/export.jsonl").status_code == 401
    assert client.get("/runs/export.xlsx").status_code == 404
