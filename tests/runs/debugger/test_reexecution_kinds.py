"""Re-executing a call runs the tool as frozen in the run with the executor of its kind
(mock, HTTP, Python), schema-validated, under a timeout, its secrets kept out of what is
stored (runs/debugger/reexecution.py, runs/worker/reexecute.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.urls import reverse

from tests.runs.support import (
    CANARY,
    EchoHeaders,
    calling,
    calls,
    execute,
    http_server,
    registration,
    start,
)
from tools_app.models import CallReexecution, ErrorPolicy, Run, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.debugger.reexecution import (
    ReexecutionError,
    ReexecutionRequest,
    request_reexecution,
)
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


def reexecute(run: Run, arguments: Any, user: AbstractUser | None = None,
              **options: Any) -> CallReexecution:
    """Request a re-execution of the run's first call and run the task's body."""
    [call, *_] = calls(run)
    made = request_reexecution(run=run, call=call, user=user,
                               request=ReexecutionRequest(arguments, **options))
    async_to_sync(tasks.execute_reexecution.acall)(made.pk)
    made.refresh_from_db()
    return made


def test_a_mock_tool_runs_again_from_the_run_s_snapshot(make_endpoint: Any,
                                                        policy: ErrorPolicy) -> None:
    tool = registration("forecast", "mock", {"template": True, "result": "Sunny in {city}"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)
    assert execute(run) == "succeeded"
    # The registration changes afterwards: the run's frozen definition is what runs.
    tool.config = {"template": True, "result": "Rain in {city}"}
    tool.save()

    done = reexecute(run, {"city": "Bergen"})

    assert (done.state, done.result_text, done.tool_kind) == ("succeeded", "Sunny in Bergen",
                                                              "mock")
    assert done.tool_version_hash == run.snapshot["tools"][0]["version_hash"]


def test_arguments_outside_the_schema_are_refused_before_anything_runs(
        make_endpoint: Any, policy: ErrorPolicy) -> None:
    tool = registration("forecast", "mock", {"result": "never"})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)
    execute(run)
    [call] = calls(run)

    with pytest.raises(ReexecutionError) as refused:
        request_reexecution(run=run, call=call, user=None,
                            request=ReexecutionRequest({"town": "Oslo"}))

    assert refused.value.problems == {
        "": "Additional properties are not allowed ('town' was unexpected)",
        "/city": "'city' is a required property"}
    assert not CallReexecution.objects.exists()


def test_a_tool_that_outlives_its_timeout_is_stopped(make_endpoint: Any,
                                                     demo_tools: dict[str, ToolRegistration],
                                                     policy: ErrorPolicy) -> None:
    run = start(make_endpoint(calling("slow_tool", {"seconds": 0.01})),
                [demo_tools["slow_tool"]], policy)
    assert execute(run) == "succeeded"
    snapshot = run.snapshot
    snapshot["tools"][0]["timeout_seconds"] = 0.05
    Run.objects.filter(pk=run.pk).update(snapshot=snapshot)
    run.refresh_from_db()

    done = reexecute(run, {"seconds": 600})  # far beyond the timeout: never finishes first

    assert done.state == "timed_out"
    assert done.error_type == "ToolTimeoutError"
    assert done.is_error


@pytest.fixture
def echo_url() -> Iterator[str]:
    with http_server(EchoHeaders, path="") as url:
        yield url


def test_an_http_tool_s_credential_is_never_stored_or_shown(
        monkeypatch: pytest.MonkeyPatch, echo_url: str, make_endpoint: Any,
        policy: ErrorPolicy, bob: AbstractUser, bob_client: Client) -> None:
    monkeypatch.setenv("AGENTFORGE_TEST_WEATHER_TOKEN", CANARY)
    tool = registration("forecast", "http", {
        "url": echo_url + "/forecast/{city}",
        "headers": {"Authorization": "env:AGENTFORGE_TEST_WEATHER_TOKEN"}})
    run = start(make_endpoint(calling("forecast", {"city": "Oslo"})), [tool], policy)
    Run.objects.filter(pk=run.pk).update(created_by=bob)
    execute(run)

    done = reexecute(run, {"city": "Bergen"}, user=bob)

    assert done.state == "succeeded"
    echoed = json.loads(done.result_text or "")
    assert echoed["path"] == "/forecast/Bergen"
    assert echoed["headers"]["authorization"] == "[redacted]"  # sent, and scrubbed
    stored = json.dumps(list(CallReexecution.objects.values()), default=str)
    assert CANARY not in stored
    call = done.tool_call
    bearer = {"Authorization": f"Bearer {create_token(bob, 'canary')[1]}"}
    texts = [bob_client.get(reverse("run_detail", args=[run.pk])).content.decode(),
             bob_client.get(reverse("call_execution", args=[run.pk, call.pk, 1])
                            ).content.decode(),
             bob_client.get(reverse("api_call_execution", args=[run.pk, call.pk, 1]),
                            headers=bearer).content.decode()]
    assert all("Bergen" in text for text in texts)
    assert all(CANARY not in text for text in texts)


def test_the_editor_of_a_tool_that_requires_approval_asks_for_it(
        make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
        bob: AbstractUser, bob_client: Client) -> None:
    run = start(make_endpoint(calling("calculator", {"expression": "1+1"})),
                [demo_tools["calculator"]], policy)
    execute(run)
    snapshot = run.snapshot
    snapshot["tools"][0]["requires_approval"] = True
    Run.objects.filter(pk=run.pk).update(snapshot=snapshot, created_by=bob)
    [call] = calls(run)
    url = reverse("call_reexecute", args=[run.pk, call.pk])

    editor = bob_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'name="approve"' in editor
    assert "Re-executing it is your approval" in editor
    refused = bob_client.post(url, {"arguments": '{"expression": "2"}'},
                              headers={"HX-Request": "true"})
    assert refused.status_code == 400
    assert "requires approval" in refused.content.decode()
    made = bob_client.post(url, {"arguments": '{"expression": "2"}', "approve": "on"},
                           headers={"HX-Request": "true"})

    assert made.status_code == 200
    stored = CallReexecution.objects.get()
    assert (stored.approved, stored.requested_by_id, stored.requested_by_label) == (
        True, bob.pk, "bob")
    assert "approved by re-executing" in made.content.decode()


class _Enqueued:
    def __init__(self) -> None:
        self.ids: list[int] = []

    def enqueue(self, pk: int) -> None:
        self.ids.append(pk)


def test_lost_re_executions_are_recovered(make_endpoint: Any, policy: ErrorPolicy,
                                          demo_tools: dict[str, ToolRegistration],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A pending one is enqueued again at a worker's start (its task may have died with
    the previous process); a running one whose worker died is stored as failed once past
    its timeout and a grace, never run again."""
    from datetime import timedelta

    from django.utils import timezone

    from tools_app.runs import sweeps
    from tools_app.runs.debugger import reexecution

    run = start(make_endpoint(calling("calculator", {"expression": "1+1"})),
                [demo_tools["calculator"]], policy)
    execute(run)
    [call] = calls(run)
    enqueued = _Enqueued()
    monkeypatch.setattr(reexecution, "execute_reexecution", enqueued)
    pending = request_reexecution(run=run, call=call, user=None,
                                  request=ReexecutionRequest({"expression": "2"}))
    running = request_reexecution(run=run, call=call, user=None,
                                  request=ReexecutionRequest({"expression": "3"}))
    recent = request_reexecution(run=run, call=call, user=None,
                                 request=ReexecutionRequest({"expression": "4"}))
    long_ago = timezone.now() - timedelta(
        seconds=reexecution.DEFAULT_TIMEOUT_SECONDS + reexecution.LOST_GRACE_SECONDS + 5)
    CallReexecution.objects.filter(pk=running.pk).update(state="running", started_at=long_ago)
    CallReexecution.objects.filter(pk=recent.pk).update(state="running",
                                                        started_at=timezone.now())

    sweeps.recover_at_start()

    assert enqueued.ids == [pending.pk]
    running.refresh_from_db()
    assert (running.state, running.error_type) == ("execution_error", "WorkerLost")
    assert "outcome is unknown" in (running.result_text or "")
    recent.refresh_from_db()
    assert recent.state == "running"  # still within its timeout: left alone
    sweeps.reap_and_enqueue()
    assert enqueued.ids == [pending.pk]  # the periodic sweep never re-enqueues
