"""GET /api/runs/<id>: the rounds it reports are the page's, read without what only
the page shows; a run that stopped on its round-trip cap lists the calls its last
response proposed as never executed."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser

from tests.web.support import Api
from tools_app.models import CallDecision, ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import services
from tools_app.runs.debugger import timeline
from tools_app.runs.worker.runner import execute_run
from tools_app.web.api.runs import _round_json
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def capped_run(bob: AbstractUser, make_endpoint: Any,
               demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
              {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
              {"text": "never reached"}]
    run = services.run_create(user=bob, endpoint=make_endpoint(script),
                              tools=[demo_tools["calculator"]], policy=policy,
                              messages=services.conversation(user_message="Go"),
                              policy_overrides={"max_round_trips": 1})
    async_to_sync(execute_run)(str(run.pk))
    return run


def test_calls_a_capped_run_never_executed_are_listed_as_not_executed(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    run = capped_run(bob, make_endpoint, demo_tools, policy)

    response = Api(create_token(bob, "ci")[1]).get(f"/api/runs/{run.pk}")

    assert response.status_code == 200, response.content
    data = response.json()
    assert data["status"] == "failed"
    first, second = data["rounds"]
    assert [(c["state"], c["result"]) for c in first["tool_calls"]] == [("succeeded", "2")]
    (never,) = second["tool_calls"]
    assert (never["name"], never["arguments"], never["state"]) == (
        "calculator", '{"expression": "2+2"}', "not_executed")
    assert (never["row_id"], never["result"], never["reexecutions"]) == (None, None, [])


def reported_rounds(run: Run, *, display: bool) -> list[dict[str, Any]]:
    run = Run.objects.get(pk=run.pk)
    return [_round_json(view, str(run.pk))
            for view in timeline.round_views(run, display=display)]


@pytest.mark.parametrize("shape", ["succeeded", "capped", "waiting-one-decided"])
def test_the_api_reports_what_the_pages_views_hold(
    shape: str, bob: AbstractUser, make_endpoint: Any, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, request: Any,
) -> None:
    """Read without the page's display values (display=False), the rounds the API
    reports are exactly those of the page's full views."""
    if shape == "capped":
        run = capped_run(bob, make_endpoint, demo_tools, policy)
    elif shape == "succeeded":
        run = services.run_create(user=bob, endpoint=weather_endpoint,
                                  tools=[demo_tools["get_weather"]], policy=policy,
                                  messages=services.conversation(user_message="Weather?"))
        assert async_to_sync(execute_run)(str(run.pk)) == "succeeded"
    else:
        run = request.getfixturevalue("waiting")
        first = run.tool_calls.order_by("call_index").first()
        CallDecision.objects.create(run=run, tool_call=first, decision="edit",
                                    arguments={"city": "Lyon"}, decided_by_label="bob")

    light = reported_rounds(run, display=False)

    assert light == reported_rounds(run, display=True)
    assert sum(len(r["tool_calls"]) for r in light) >= 1
    if shape == "waiting-one-decided":
        decisions = [c["decision"] for c in light[0]["tool_calls"]]
        assert decisions[0]["arguments"] == {"city": "Lyon"}
        assert decisions[1] is None
