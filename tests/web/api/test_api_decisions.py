"""POST /api/runs/<id>/decisions: deciding calls that await approval over the API, and
every refusal with the API's JSON error shape."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from tests.runs.support import execute
from tests.web.support import MISSING_RUN, Api, error_of, start_run
from tools_app.models import CallDecision, ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.services import run_cancel
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def api_of(user: AbstractUser) -> Api:
    return Api(create_token(user, "ci")[1])


def call_ids(run: Run) -> list[str]:
    return [c.call_id for c in run.tool_calls.order_by("call_index")]


def url(run: Run | str) -> str:
    return f"/api/runs/{run.pk if isinstance(run, Run) else run}/decisions"


def test_deciding_every_call_resumes_the_run_and_the_detail_shows_the_decisions(
    waiting: Run, bob: AbstractUser,
) -> None:
    api = api_of(bob)
    first, second = call_ids(waiting)

    approved = api.post(url(waiting), {"call_id": first, "decision": "approve"})
    edited = api.post(url(waiting), {"call_id": second, "decision": "edit",
                                     "arguments": {"city": "Lyon"}})

    assert approved.status_code == 201, approved.content
    assert approved.json() | {"decided_at": None} == {
        "call_id": first, "decision": "approve", "arguments": None, "message": "",
        "decided_by": "bob", "decided_at": None, "created": True, "run_status": "waiting"}
    assert edited.status_code == 201
    assert edited.json()["run_status"] == "queued"
    assert execute(str(waiting.pk)) == "succeeded"
    detail = api.get(f"/api/runs/{waiting.pk}").json()
    results = [c["result"] for c in detail["rounds"][0]["tool_calls"]]
    assert "Hangzhou" in results[0]
    assert "Lyon" in results[1]
    decisions = [c["decision"] for c in detail["rounds"][0]["tool_calls"]]
    assert [d["decision"] for d in decisions] == ["approve", "edit"]
    assert decisions[1]["arguments"] == {"city": "Lyon"}
    assert [c["awaiting_decision"] for c in detail["rounds"][0]["tool_calls"]] == [False, False]


def test_a_waiting_run_is_listed_as_waiting_with_its_calls_awaiting(
    waiting: Run, bob: AbstractUser,
) -> None:
    api = api_of(bob)

    listed = api.get("/api/runs?status=waiting").json()["runs"]
    detail = api.get(f"/api/runs/{waiting.pk}").json()

    assert [r["id"] for r in listed] == [str(waiting.pk)]
    assert listed[0]["status"] == "waiting"
    assert [c["awaiting_decision"] for c in detail["rounds"][0]["tool_calls"]] == [True, True]
    assert api.get("/api/runs?status=running").json()["runs"] == []


def test_the_same_decision_twice_changes_nothing_and_another_is_refused(
    waiting: Run, bob: AbstractUser,
) -> None:
    api = api_of(bob)
    first = call_ids(waiting)[0]
    api.post(url(waiting), {"call_id": first, "decision": "reject", "message": "no"})
    seq = Run.objects.get(pk=waiting.pk).last_seq

    again = api.post(url(waiting), {"call_id": first, "decision": "reject", "message": "no"})
    other = api.post(url(waiting), {"call_id": first, "decision": "approve"})

    assert again.status_code == 200
    assert again.json()["created"] is False
    assert error_of(other, 409)["code"] == "already_decided"
    assert Run.objects.get(pk=waiting.pk).last_seq == seq
    assert CallDecision.objects.count() == 1


@pytest.mark.parametrize(("body", "status", "code", "field"), [
    ({"decision": "approve"}, 400, "missing_field", "call_id"),
    ({"call_id": ["x"], "decision": "approve"}, 400, "missing_field", "call_id"),
    ({"call_id": "nope", "decision": "approve"}, 404, "unknown_call", None),
    ({"call_id": "{first}", "decision": "maybe"}, 400, "invalid_field", "decision"),
    ({"call_id": "{first}"}, 400, "missing_field", "decision"),
    ({"call_id": "{first}", "decision": "edit"}, 400, "missing_field", "arguments"),
    ({"call_id": "{first}", "decision": "reject", "message": 3}, 400, "invalid_field",
     "message"),
])
def test_bad_decisions_get_a_clear_error(
    waiting: Run, bob: AbstractUser, body: dict[str, Any], status: int, code: str,
    field: str | None,
) -> None:
    first = call_ids(waiting)[0]
    body = {k: (v.format(first=first) if isinstance(v, str) else v) for k, v in body.items()}

    error = error_of(api_of(bob).post(url(waiting), body), status)

    assert error["code"] == code
    assert error.get("field") == field
    assert not CallDecision.objects.exists()


def test_edited_arguments_that_do_not_fit_the_schema_are_refused_by_argument(
    waiting: Run, bob: AbstractUser,
) -> None:
    first = call_ids(waiting)[0]

    wrong_type = error_of(api_of(bob).post(url(waiting), {
        "call_id": first, "decision": "edit", "arguments": {"city": 7}}), 400)
    missing = error_of(api_of(bob).post(url(waiting), {
        "call_id": first, "decision": "edit", "arguments": {}}), 400)

    assert wrong_type["code"] == "invalid_arguments"
    assert list(wrong_type["problems"]) == ["city"]
    assert list(missing["problems"]) == ["city"]
    assert not CallDecision.objects.exists()


def test_only_the_owner_or_staff_may_decide(
    waiting: Run, charlie: AbstractUser, alice: AbstractUser,
) -> None:
    first, second = call_ids(waiting)

    refused = api_of(charlie).post(url(waiting), {"call_id": first, "decision": "approve"})
    by_staff = api_of(alice).post(url(waiting), {"call_id": second, "decision": "approve"})

    assert error_of(refused, 404)["code"] == "not_found"
    assert by_staff.status_code == 201
    assert list(CallDecision.objects.values_list("decided_by_label", flat=True)) == ["alice"]


def test_decisions_for_unknown_cancelled_or_finished_runs_are_refused(
    waiting: Run, bob: AbstractUser, weather_endpoint: ModelEndpoint, policy: ErrorPolicy,
) -> None:
    api = api_of(bob)
    first = call_ids(waiting)[0]
    unknown = api.post(url(MISSING_RUN), {"call_id": first, "decision": "approve"})
    run_cancel(run=waiting)
    cancelled = api.post(url(waiting), {"call_id": first, "decision": "approve"})
    finished = start_run(bob, weather_endpoint, [ToolRegistration.objects.get(
        name="convert_units")], policy)
    Run.objects.filter(pk=finished.pk).update(status="succeeded")
    done = api.post(url(finished), {"call_id": first, "decision": "approve"})

    assert error_of(unknown, 404)["code"] == "not_found"
    assert error_of(cancelled, 409)["code"] == "run_finished"
    assert error_of(cancelled, 409)["message"] == (
        "The run has ended (cancelled): it takes no decisions")
    assert error_of(done, 409)["code"] == "run_finished"
    assert not CallDecision.objects.exists()
