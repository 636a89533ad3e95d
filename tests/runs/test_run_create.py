"""run_create refuses a request it cannot honour, with a message that says why."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django_tasks_db.models import DBTaskResult

from tools_app.engine import SystemMessage, UserMessage
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, ToolRegistration
from tools_app.runs.services import RunRequestError, conversation, run_create

pytestmark = pytest.mark.both


def test_a_run_needs_a_user_message(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    with pytest.raises(RunRequestError, match=r"^A run needs at least one user message$"):
        run_create(user=None, endpoint=weather_endpoint, tools=[demo_tools["get_weather"]],
                   policy=policy, messages=[SystemMessage(text="You are helpful")])

    assert not Run.objects.exists()
    assert not RunEvent.objects.exists()


def test_an_empty_conversation_is_refused(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    with pytest.raises(RunRequestError, match="at least one user message"):
        run_create(user=None, endpoint=weather_endpoint, tools=[], policy=policy, messages=[])


def test_a_disabled_tool_is_refused_by_name(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    for name in ("calculator", "slow_tool"):
        demo_tools[name].enabled = False
        demo_tools[name].save()

    with pytest.raises(RunRequestError,
                       match=r"^Disabled tools cannot be used: calculator, slow_tool$"):
        run_create(user=None, endpoint=weather_endpoint,
                   tools=[demo_tools["get_weather"], demo_tools["calculator"],
                          demo_tools["slow_tool"]],
                   policy=policy, messages=conversation(user_message="hi"))

    assert not Run.objects.exists()


def test_duplicate_tool_names_are_refused(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    tool = demo_tools["get_weather"]

    with pytest.raises(RunRequestError, match=r"^tool 'get_weather' is declared more than once$"):
        run_create(user=None, endpoint=weather_endpoint, tools=[tool, tool], policy=policy,
                   messages=conversation(user_message="hi"))

    assert not Run.objects.exists()


def test_a_valid_request_with_a_system_prompt_is_accepted(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    messages = conversation(system_prompt="Be brief", user_message="Weather?")
    assert [type(m) for m in messages] == [SystemMessage, UserMessage]

    run = run_create(user=None, endpoint=weather_endpoint, tools=[demo_tools["get_weather"]],
                     policy=policy, messages=messages)

    assert Run.objects.get() == run
    assert run.snapshot["messages"] == [{"type": "system", "text": "Be brief"},
                                        {"type": "user", "text": "Weather?"}]


@pytest.mark.django_db(transaction=True)
def test_with_the_database_backend_the_task_is_stored_with_the_run(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, settings: Any,
) -> None:
    """The scale-out configuration writes the run's task in the run's own transaction:
    both are stored, or neither (no queued run without a task if the process dies at
    the commit)."""
    settings.TASKS = {"default": {
        "BACKEND": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"}}

    def create(text: str) -> Run:
        return run_create(user=None, endpoint=weather_endpoint,
                          tools=[demo_tools["get_weather"]], policy=policy,
                          messages=conversation(user_message=text))

    def create_then_fail() -> None:
        with transaction.atomic():
            create("rolled back")
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        create_then_fail()
    assert not Run.objects.exists()
    assert not DBTaskResult.objects.exists()

    with transaction.atomic():
        run = create("kept")
        # Written before the commit, in the same transaction.
        [task] = DBTaskResult.objects.all()
    assert task.args_kwargs["args"] == [str(run.pk)]
    assert task.task_path == "tools_app.runs.tasks.execute_run"
    assert DBTaskResult.objects.get().status == "READY"
    assert [e.seq for e in RunEvent.objects.filter(run=run)] == [1]
    assert Run.objects.get(pk=run.pk).last_seq == 1


def test_the_new_run_is_the_row_stored(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, bob: Any,
) -> None:
    """The run returned (written by one precompiled INSERT, not the ORM's save) holds
    what the database stored, column by column, and is saved as an existing row."""
    parent = run_create(user=None, endpoint=weather_endpoint, tools=[], policy=policy,
                        messages=conversation(user_message="first"))
    run = run_create(user=bob, endpoint=weather_endpoint, tools=[demo_tools["get_weather"]],
                     policy=policy, messages=conversation(user_message="Weather\x00 in Paris?"),
                     parent=parent)

    stored = Run.objects.get(pk=run.pk)
    names = [field.attname for field in Run._meta.concrete_fields]
    assert {n: getattr(run, n) for n in names} == {n: getattr(stored, n) for n in names}
    assert (stored.status, stored.last_seq, stored.created_by_id, stored.parent_id) == \
        ("queued", 1, bob.pk, parent.pk)
    assert (stored.endpoint_id, stored.policy_id) == (weather_endpoint.pk, policy.pk)
    assert stored.created_at is not None
    assert stored.lease_token == 0
    assert stored.snapshot["tools"][0]["name"] == "get_weather"
    assert not run._state.adding
    run.title = "renamed"
    run.save(update_fields=["title"])
    assert Run.objects.count() == 2
    assert Run.objects.get(pk=run.pk).title == "renamed"
