"""Every JSON body is validated with the model its view documents (web/api/schemas.py):
a wrong type anywhere in it, nested included, or a field the model does not have, is a
400 naming its JSON path, before the view does anything with the body."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import execute
from tests.web.support import Api, error_of
from tools_app.models import CallDecision, CallReexecution, Run, ToolCall

pytestmark = pytest.mark.django_db


@pytest.fixture
def urls(bob_api: Api, body: dict[str, Any]) -> dict[str, str]:
    """The URL of every view that takes a body, on a finished run of bob's."""
    run_id = bob_api.post("/api/runs", body).json()["id"]
    assert execute(run_id) == "succeeded"
    call = ToolCall.objects.filter(run_id=run_id).order_by("pk").first()
    assert call is not None
    return {"runs": "/api/runs", "rerun": f"/api/runs/{run_id}/rerun",
            "fork": f"/api/runs/{run_id}/fork", "decisions": f"/api/runs/{run_id}/decisions",
            "continue": f"/api/runs/{run_id}/continue",
            "execute": f"/api/runs/{run_id}/calls/{call.pk}/execute",
            "try": "/api/tools/get_weather/try"}


START = {"endpoint": "weather", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("view", "sent", "code", "field", "words"), [
    # Nested values of the wrong type, named by their JSON path.
    ("runs", START | {"tools": ["get_weather", 5]}, "invalid_field", "tools[1]",
     "tools must be a list of tool names: tools[1] must be a string"),
    ("runs", START | {"breakpoints": [{"kind": "before_round", "round": 1}, "x"]},
     "invalid_field", "breakpoints[1]", "breakpoints[1] must be an object"),
    ("runs", START | {"messages": [{"role": "user", "content": "hi"}, 7]}, "invalid_field",
     "messages[1]", "messages[1] must be an object"),
    ("fork", {"round": 1, "append": [{"role": "user", "content": "a"}, "b"]},
     "invalid_field", "append[1]", "append[1] must be an object"),
    ("fork", {"round": 1, "tools": ["get_weather", None]}, "invalid_field", "tools[1]",
     "tools[1] must be a string"),
    ("continue", {"arguments": {"call_0_0": "Oslo"}}, "invalid_field", "arguments.call_0_0",
     "arguments.call_0_0 must be an object"),
    # Strict types: no coercion of a boolean, a number or a string.
    ("runs", START | {"policy": True}, "invalid_field", "policy",
     "policy must be a name or an id"),
    ("runs", START | {"policy_overrides": ["parallel"]}, "invalid_field", "policy_overrides",
     "policy_overrides must be an object"),
    ("fork", {"round": True}, "invalid_field", "round", "round must be a round of the run"),
    ("rerun", {"tools": 1}, "invalid_field", "tools", "tools must be one of recorded, live, mock"),
    ("continue", {"message": None}, "invalid_field", "message", "message must be a string"),
    ("execute", {"arguments": {"city": "Oslo"}, "approve": 1}, "invalid_field", "approve",
     "approve must be true or false"),
    ("decisions", {"call_id": "call_0_0", "decision": "edit", "arguments": ["Oslo"]},
     "invalid_arguments", "arguments", "arguments must be a JSON object"),
    ("try", {"arguments": "Oslo"}, "invalid_arguments", "arguments",
     "arguments must be a JSON object"),
    # Required fields: left out or empty.
    ("runs", {"messages": START["messages"]}, "missing_field", "endpoint",
     "'endpoint' is required"),
    ("decisions", {"decision": "approve"}, "missing_field", "call_id",
     "'call_id' is required: a tool call's id"),
    ("decisions", {"call_id": "call_0_0"}, "missing_field", "decision",
     "'decision' is required: one of approve, reject, edit"),
    ("decisions", {"call_id": "call_0_0", "decision": "edit"}, "missing_field", "arguments",
     "an edit needs 'arguments'"),
    ("execute", {}, "missing_field", "arguments", "'arguments' is required"),
    # Fields the model does not have, named with the fields there are.
    ("runs", START | {"temprature": 0.2}, "invalid_field", "temprature",
     "Unknown field temprature: the fields are endpoint, messages, tools, policy"),
    ("rerun", {"model": "recorded", "colour": "red"}, "invalid_field", "colour",
     "Unknown field colour"),
    ("fork", {"round": 1, "message": []}, "invalid_field", "message", "Unknown field message"),
    ("decisions", {"call_id": "call_0_0", "decision": "approve", "reason": "ok"},
     "invalid_field", "reason", "Unknown field reason"),
    ("continue", {"step": "run", "steps": 2}, "invalid_field", "steps", "Unknown field steps"),
    ("execute", {"arguments": {"city": "Oslo"}, "dry_run": True}, "invalid_field", "dry_run",
     "Unknown field dry_run: the fields are arguments, approve"),
    ("try", {"arguments": {"city": "Oslo"}, "args": {}}, "invalid_field", "args",
     "Unknown field args: the fields are arguments"),
])
def test_a_body_that_does_not_fit_its_model_is_a_400_naming_the_path(
        bob_api: Api, urls: dict[str, str], view: str, sent: dict[str, Any],
        code: str, field: str, words: str) -> None:
    runs = Run.objects.count()

    error = error_of(bob_api.post(urls[view], sent), 400)

    assert (error["code"], error["field"]) == (code, field)
    assert words in error["message"]
    # Refused before anything was done: no run, decision or re-execution made.
    assert Run.objects.count() == runs
    assert not CallDecision.objects.exists()
    assert not CallReexecution.objects.exists()


def test_the_model_answers_before_the_run_is_asked(
        bob_api: Api, urls: dict[str, str]) -> None:
    """The run is finished: a body that fits is refused by the run (409); one that does
    not fit is refused by its model first (400)."""
    assert error_of(bob_api.post(urls["continue"], {"step": "run"}), 409)["code"] == \
        "run_finished"
    assert error_of(bob_api.post(urls["continue"], {"step": "later"}), 400)["field"] == "step"
    assert error_of(bob_api.post(urls["decisions"], {"call_id": "call_0_0",
                                                     "decision": "approve"}), 409)["code"] == \
        "run_finished"
    assert error_of(bob_api.post(urls["decisions"], {"call_id": "call_0_0",
                                                     "decision": "approve", "message": 1}),
                    400)["field"] == "message"
