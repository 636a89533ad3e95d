"""Two identical splice requests make one run: the second answers 200 with the run the
first made (a client's retry, a double click), never a second run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tools_app.models import ErrorPolicy, Run, ToolCall, ToolRegistration
from tools_app.runs import services, tasks
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

CALC_SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"text": "last: {last_result}"},
]


class Api:
    """JSON with a bearer token, CSRF checks on."""

    def __init__(self, token: str) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(path, json.dumps(body), content_type="application/json",
                                headers=self.headers)


@pytest.fixture
def finished_call(bob: AbstractUser, make_endpoint: Any,
                  demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> ToolCall:
    run = services.run_create(user=bob, endpoint=make_endpoint(CALC_SCRIPT, name="calc"),
                              tools=[demo_tools["calculator"]], policy=policy,
                              messages=services.conversation(user_message="Add"))
    async_to_sync(tasks.execute_run.acall)(str(run.pk))
    return ToolCall.objects.get(run=run)


def test_the_same_splice_twice_makes_one_run(bob: AbstractUser,
                                             finished_call: ToolCall) -> None:
    api = Api(create_token(bob, "ci")[1])
    run_id = finished_call.run_id
    made = api.post(f"/api/runs/{run_id}/calls/{finished_call.pk}/execute",
                    {"arguments": {"expression": "2+3"}})
    assert made.status_code == 202, made.content
    async_to_sync(tasks.execute_reexecution.acall)(made.json()["id"])
    splice_url = made.json()["url"] + "/splice"

    first = api.post(splice_url, {})
    again = api.post(splice_url, {})

    assert first.status_code == 201, first.content
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["splice"] == first.json()["splice"]
    assert list(Run.objects.filter(parent_id=run_id).values_list("pk", flat=True)) == [
        Run.objects.get(pk=first.json()["id"]).pk]
