"""The runs filters policy (as frozen in the run), error_type (the run's or any call's)
and has_errors (the run failed or a call errored): in the API, the exports and the
/runs/ page (in the URL, kept in the form); a bad value is a 400 naming the filter."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.web.support import Api, error_of, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolCall
from tools_app.web.api.tokens import create_token

pytestmark = [pytest.mark.django_db, pytest.mark.both]


@pytest.fixture
def staff_api(alice: AbstractUser) -> Api:
    return Api(create_token(alice, "ops")[1])


@pytest.fixture
def world(filter_world: dict[str, Run], bob: AbstractUser, weather_endpoint: ModelEndpoint,
          policy: ErrorPolicy) -> dict[str, Run]:
    """filter_world (weather: succeeded, no error; broken: failed with ProviderError after
    a ToolExecutionError call; queued), plus: the weather run's Paris call timed out (a
    call error in a run that succeeded), charlie's queued run failed without any call
    (WorkerLost), and a run under another policy; then the test policy is renamed."""
    ToolCall.objects.filter(run=filter_world["weather"], arguments_raw__contains="Paris") \
        .update(is_error=True, state="timed_out", error_type="TimeoutError")
    Run.objects.filter(pk=filter_world["queued"].pk).update(
        status=RunStatus.FAILED, error_type="WorkerLost", error_message="worker lost")
    strict = ErrorPolicy.objects.create(name="Strict")
    other = start_run(bob, weather_endpoint, [], strict, "Under the strict policy")
    ErrorPolicy.objects.filter(pk=policy.pk).update(name="Renamed since")
    return {name: Run.objects.get(pk=run.pk)
            for name, run in (filter_world | {"strict": other}).items()}


def names(api: Api, world: dict[str, Run], query: str) -> list[str]:
    response = api.get(f"/api/runs?{query}")
    assert response.status_code == 200, response.content
    by_id = {str(run.pk): name for name, run in world.items()}
    return [by_id[r["id"]] for r in response.json()["runs"]]


@pytest.mark.parametrize(("query", "expected"), [
    ("policy=Test+policy", ["queued", "broken", "weather"]),  # the name the runs froze
    ("policy=Renamed+since", []),  # today's name of that policy: no run used it
    ("policy=Strict", ["strict"]),
    ("error_type=ProviderError", ["broken"]),  # the run's own error
    ("error_type=ToolExecutionError", ["broken"]),  # a call's error
    ("error_type=TimeoutError", ["weather"]),  # a call's, in a run that succeeded
    ("error_type=WorkerLost", ["queued"]),
    ("error_type=providererror", []),  # exact, as stored
    ("has_errors=true", ["queued", "broken", "weather"]),
    ("has_errors=false", ["strict"]),
    ("has_errors=true&status=succeeded", ["weather"]),
    ("has_errors=true&policy=Test+policy&error_type=WorkerLost", ["queued"]),
])
def test_the_api_filters(staff_api: Api, world: dict[str, Run], query: str,
                         expected: list[str]) -> None:
    assert names(staff_api, world, query) == expected


def test_a_user_sees_only_their_own(bob: AbstractUser, world: dict[str, Run]) -> None:
    bob_api = Api(create_token(bob, "ci")[1])
    assert names(bob_api, world, "has_errors=true") == ["broken", "weather"]
    assert names(bob_api, world, "error_type=WorkerLost") == []


@pytest.mark.parametrize(("query", "field", "says"), [
    ("has_errors=yes", "has_errors", "has_errors must be true or false, not 'yes'"),
    ("has_errors=True", "has_errors", "true or false"),
    ("has_errors=", "has_errors", "true or false"),
    ("policy=", "policy", "1 to 100 characters"),
    (f"policy={'p' * 101}", "policy", "1 to 100 characters"),
    ("error_type=+", "error_type", "1 to 200 characters"),
    (f"error_type={'e' * 201}", "error_type", "1 to 200 characters"),
])
def test_bad_values_are_refused_by_name(staff_api: Api, world: dict[str, Run], query: str,
                                        field: str, says: str) -> None:
    error = error_of(staff_api.get(f"/api/runs?{query}"), 400)
    assert error["field"] == field
    assert says in error["message"]
    # the export refuses them the same way
    error = error_of(staff_api.get(f"/api/runs/export.jsonl?{query}"), 400)
    assert error["field"] == field


def test_the_export_applies_them(staff_api: Api, world: dict[str, Run]) -> None:
    response = staff_api.get("/api/runs/export.jsonl?has_errors=true&error_type=TimeoutError")
    assert response.status_code == 200
    rows = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [row["id"] for row in rows] == [str(world["weather"].pk)]


def titles(response: Any) -> list[str]:
    return re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>', response.content.decode())


def test_the_page_filters_and_keeps_them(alice_client: Client, world: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?has_errors=false&policy=Strict&error_type=")
    assert response.status_code == 200
    assert titles(response) == ["Under the strict policy"]
    html = response.content.decode()
    assert '<option value="false" selected>without errors</option>' in html
    assert "<option selected>Strict</option>" in html
    assert 'href="/runs/export.csv?has_errors=false&amp;policy=Strict&amp;tryit=false"' in html


def test_the_page_keeps_a_frozen_policy_name_no_policy_has_now(
    alice_client: Client, world: dict[str, Run],
) -> None:
    html = alice_client.get("/runs/?policy=Test+policy").content.decode()
    assert "<option selected>Test policy</option>" in html  # not in today's names
    assert "<option>Renamed since</option>" in html
    assert len(titles_of(html)) == 3


def titles_of(html: str) -> list[str]:
    return re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>', html)


def test_htmx_pushes_only_the_filters_in_use(alice_client: Client,
                                             world: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?has_errors=true&error_type=WorkerLost&policy=",
                                headers={"HX-Request": "true"})
    assert response["HX-Push-Url"] == "/runs/?has_errors=true&error_type=WorkerLost"
    assert titles(response) == ["Later"]


def test_the_page_says_which_filter_is_bad(alice_client: Client,
                                           world: dict[str, Run]) -> None:
    response = alice_client.get("/runs/?has_errors=maybe")
    assert response.status_code == 400
    assert "has_errors must be true or false" in response.content.decode()
    assert "has_errors: has_errors" not in response.content.decode()
    assert titles(response) == []


def test_a_hostile_policy_name_stays_text(alice_client: Client, world: dict[str, Run]) -> None:
    html = alice_client.get("/runs/?policy=%3Cscript%3Ex%3C/script%3E").content.decode()
    assert "<script>x</script>" not in html
    assert "<option selected>&lt;script&gt;x&lt;/script&gt;</option>" in html
