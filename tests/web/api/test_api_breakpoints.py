"""Breakpoints over the API: set with POST /api/runs, shown by GET /api/runs/<id>,
gone on from with POST /api/runs/<id>/continue; every refusal a JSON error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import execute
from tests.web.support import MISSING_RUN, Api, error_of
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(bob: AbstractUser) -> Api:
    return Api(create_token(bob, "ci")[1])


@pytest.fixture
def body(weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> dict[str, Any]:
    return {"endpoint": "weather", "tools": ["get_weather"],
            "messages": [{"role": "user", "content": "Weather in Hangzhou and Paris?"}]}


def paused_run(api: Api, body: dict[str, Any], breakpoints: list[dict[str, Any]]) -> str:
    created = api.post("/api/runs", body | {"breakpoints": breakpoints})
    assert created.status_code == 201, created.content
    run_id = str(created.json()["id"])
    assert execute(run_id) == "waiting"
    return run_id


def test_a_run_paused_at_a_call_breakpoint_steps_and_continues(
    api: Api, body: dict[str, Any],
) -> None:
    run_id = paused_run(api, body, [{"kind": "condition", "tool": "get_weather",
                                     "pointer": "/city", "value": "Paris"}])
    detail = api.get(f"/api/runs/{run_id}").json()
    paris = detail["rounds"][0]["tool_calls"][1]["id"]

    assert detail["status"] == "waiting"
    assert detail["breakpoints"] == [{"kind": "condition", "tool": "get_weather",
                                      "pointer": "/city", "value": "Paris"}]
    assert detail["paused"] == {"round": 1, "before": "calls", "calls": [paris],
                                "reason": 'get_weather with /city = "Paris"',
                                "resolution": None, "resolved_by": None}
    assert detail["rounds"][0]["tool_calls"][0]["state"] == "succeeded"  # Hangzhou ran

    answer = api.post(f"/api/runs/{run_id}/continue",
                      {"step": "run", "arguments": {paris: {"city": "Lyon"}}})
    assert answer.status_code == 200, answer.content
    assert answer.json()["run_status"] == "queued"
    assert answer.json()["pause"]["resolution"] == "run"
    assert execute(run_id) == "succeeded"
    hangzhou, lyon = api.get(f"/api/runs/{run_id}").json()["rounds"][0]["tool_calls"]
    assert "Lyon" in lyon["result"]
    # The call keeps the model's arguments and records the ones it ran with.
    assert json.loads(lyon["arguments"]) == {"city": "Paris"}
    assert lyon["breakpoint_edit"]["arguments"] == {"city": "Lyon"}
    assert lyon["breakpoint_edit"]["edited_by"] == "bob"
    assert lyon["breakpoint_edit"]["edited_at"]
    assert hangzhou["breakpoint_edit"] is None


def test_step_round_and_a_message_before_the_model_call(
    api: Api, body: dict[str, Any],
) -> None:
    run_id = paused_run(api, body, [{"kind": "before_round", "round": 1}])

    stepped = api.post(f"/api/runs/{run_id}/continue", {"step": "round", "message": "Brief."})
    assert stepped.status_code == 200
    assert execute(run_id) == "waiting"
    paused = api.get(f"/api/runs/{run_id}").json()["paused"]
    assert (paused["round"], paused["before"]) == (2, "model")
    assert api.post(f"/api/runs/{run_id}/continue", {}).status_code == 200
    assert execute(run_id) == "succeeded"


@pytest.mark.parametrize(("payload", "status", "code"), [
    ({"step": "jump"}, 400, "invalid_field"),
    ({"step": 3}, 400, "invalid_field"),
    ({"message": ["x"]}, 400, "invalid_field"),
    ({"message": "only before a model call"}, 400, "invalid_field"),
    ({"arguments": {"nope": {}}}, 400, "not_pending"),
    ({"arguments": "city"}, 400, "invalid_field"),
])
def test_bad_continues_get_a_clear_error(
    api: Api, body: dict[str, Any], payload: dict[str, Any], status: int, code: str,
) -> None:
    run_id = paused_run(api, body, [{"kind": "before_tool", "tool": "get_weather"}])

    assert error_of(api.post(f"/api/runs/{run_id}/continue", payload), status)["code"] == code
    assert Run.objects.get(pk=run_id).status == "waiting"


def test_edited_arguments_that_do_not_fit_are_refused_by_argument(
    api: Api, body: dict[str, Any],
) -> None:
    run_id = paused_run(api, body, [{"kind": "before_tool", "tool": "get_weather"}])
    first = api.get(f"/api/runs/{run_id}").json()["paused"]["calls"][0]

    error = error_of(api.post(f"/api/runs/{run_id}/continue",
                              {"arguments": {first: {"city": 5}}}), 400)

    assert (error["code"], list(error["problems"])) == ("invalid_arguments", ["city"])


def test_continue_on_a_run_not_paused_unknown_or_not_yours_is_refused(
    api: Api, body: dict[str, Any], charlie: AbstractUser,
) -> None:
    run_id = paused_run(api, body, [{"kind": "before_round", "round": 1}])
    strangers = Api(create_token(charlie, "ci")[1])

    assert error_of(strangers.post(f"/api/runs/{run_id}/continue", {}), 404)["code"] == \
        "not_found"
    assert error_of(api.post(f"/api/runs/{MISSING_RUN}/continue", {}), 404)["code"] == \
        "not_found"
    assert api.post(f"/api/runs/{run_id}/continue", {"step": "abort"}).status_code == 200
    finished = error_of(api.post(f"/api/runs/{run_id}/continue", {}), 409)
    assert finished["code"] == "run_finished"
    assert finished["message"] == "The run has ended (cancelled): it cannot continue"
    assert Run.objects.get(pk=run_id).status == "cancelled"
    plain = api.post("/api/runs", body)
    assert error_of(api.post(f"/api/runs/{plain.json()['id']}/continue", {}), 409)[
        "code"] == "not_paused"


def test_bad_breakpoints_are_a_400_naming_the_field(api: Api, body: dict[str, Any]) -> None:
    error = error_of(api.post("/api/runs", body | {"breakpoints": [{"kind": "before_tool",
                                                                    "tool": "calculator"}]}),
                     400)

    assert (error["code"], error["field"]) == ("invalid_field", "breakpoints")
    assert "tool must be one of the run's tools (get_weather)" in error["message"]
    assert not Run.objects.exists()
