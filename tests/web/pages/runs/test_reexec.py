"""Re-executing one tool call with edited arguments, and splicing the result into a new
run that goes on from the next model call (issue #16): the API, the lane's area, the
refusals."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, conversation_labels, error_of, start_run
from tools_app.models import (
    CallReexecution,
    ErrorPolicy,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs import tasks

pytestmark = pytest.mark.django_db

CALC_SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"text": "last: {last_result}"},
]
HOSTILE = "<img src=x onerror=alert(1)>"


def perform(execution_id: int) -> str | None:
    """The re-execution task's body, as a worker runs it."""
    return async_to_sync(tasks.execute_reexecution.acall)(execution_id)  # type: ignore[no-any-return]


@pytest.fixture
def calc_run(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    endpoint = make_endpoint(CALC_SCRIPT, name="calc")
    run = start_run(bob, endpoint, [demo_tools["calculator"]], policy, "Add")
    execute(run)
    return run


@pytest.fixture
def call(calc_run: Run) -> ToolCall:
    return ToolCall.objects.get(run=calc_run)


def execute_url(run: Run, call: ToolCall) -> str:
    return f"/api/runs/{run.pk}/calls/{call.pk}/execute"


def test_a_call_is_executed_again_with_edited_arguments_and_stored_beside_the_original(
    bob_api: Api, calc_run: Run, call: ToolCall,
) -> None:
    assert calc_run.status == "succeeded"
    assert call.result_text == "2"

    made = bob_api.post(execute_url(calc_run, call), {"arguments": {"expression": "2+3"}})

    assert made.status_code == 202, made.content
    answer = made.json()
    assert (answer["number"], answer["state"]) == (1, "pending")
    assert answer["url"] == f"/api/runs/{calc_run.pk}/calls/{call.pk}/executions/1"
    assert perform(answer["id"]) == "succeeded"
    shown = bob_api.get(answer["url"]).json()
    assert shown["state"] == "succeeded"
    assert (shown["result"], shown["is_error"], shown["arguments"]) == (
        "5", False, {"expression": "2+3"})
    assert shown["requested_by"] == "bob"
    assert shown["tool"] == {"name": "calculator", "kind": "python",
                             "version_hash": calc_run.snapshot["tools"][0]["version_hash"]}
    assert "-2" in shown["result_diff"]
    assert "+5" in shown["result_diff"]
    assert shown["same_result"] is False
    assert shown["duration_ms"] is not None
    assert shown["approved"] is False
    # The run itself is untouched; its history says who executed the call again.
    call.refresh_from_db()
    assert call.result_text == "2"
    events = RunEvent.objects.filter(run=calc_run, kind="call_reexecution").order_by("seq")
    assert [e.payload["state"] for e in events] == ["pending", "succeeded"]
    assert events[0].payload["by"] == "bob"
    detail = bob_api.get(f"/api/runs/{calc_run.pk}").json()
    listed = detail["rounds"][0]["tool_calls"][0]
    assert listed["row_id"] == call.pk
    assert [e["number"] for e in listed["reexecutions"]] == [1]


def test_re_executions_are_numbered_per_call_and_listed_latest_first(
    bob_api: Api, calc_run: Run, call: ToolCall,
) -> None:
    for expression in ("3*3", "1+1"):
        made = bob_api.post(execute_url(calc_run, call), {"arguments": {"expression": expression}})
        perform(made.json()["id"])

    listed = bob_api.get(f"/api/runs/{calc_run.pk}").json()["rounds"][0]["tool_calls"][0]

    assert [(e["number"], e["result"]) for e in listed["reexecutions"]] == [(2, "2"), (1, "9")]
    assert listed["reexecutions"][0]["same_result"] is True


def test_a_failing_re_execution_is_stored_as_an_error(bob_api: Api, calc_run: Run,
                                                     call: ToolCall) -> None:
    made = bob_api.post(execute_url(calc_run, call), {"arguments": {"expression": "1/0"}})

    assert perform(made.json()["id"]) == "execution_error"
    stored = CallReexecution.objects.get(pk=made.json()["id"])
    assert stored.is_error
    assert stored.error_type == "ToolExecutionError"
    assert stored.result_text == stored.error_message == "ValueError: division by zero"


@pytest.mark.parametrize(("body", "status", "code", "problems"), [
    ({"arguments": {"expression": 5}}, 400, "invalid_arguments",
     {"/expression": "5 is not of type 'string'"}),
    ({"arguments": {}}, 400, "invalid_arguments",
     {"/expression": "'expression' is a required property"}),
    # Refused by the body's model (ExecuteBody): the message names the field instead.
    ({"arguments": ["1+1"]}, 400, "invalid_arguments", None),
    ({}, 400, "missing_field", None),
    ({"arguments": {"expression": "1"}, "approve": "yes"}, 400, "invalid_field", None),
])
def test_bad_arguments_are_refused_by_json_pointer(
    bob_api: Api, calc_run: Run, call: ToolCall, body: dict[str, Any], status: int, code: str,
    problems: dict[str, str] | None,
) -> None:
    error = error_of(bob_api.post(execute_url(calc_run, call), body), status)

    assert error["code"] == code
    assert error.get("problems") == problems
    assert not CallReexecution.objects.exists()


def test_only_users_who_may_see_the_run_re_execute(calc_run: Run, call: ToolCall,
                                                   charlie: AbstractUser,
                                                   alice: AbstractUser) -> None:
    from tools_app.web.api.tokens import create_token

    charlie_api = Api(create_token(charlie, "ci")[1])
    body = {"arguments": {"expression": "2"}}
    assert error_of(charlie_api.post(execute_url(calc_run, call), body), 404)["code"] == \
        "not_found"
    alice_api = Api(create_token(alice, "ci")[1])  # staff
    assert alice_api.post(execute_url(calc_run, call), body).status_code == 202
    assert error_of(alice_api.post(f"/api/runs/{calc_run.pk}/calls/{call.pk + 99}/execute",
                                   body), 404)["code"] == "unknown_call"
    assert error_of(charlie_api.get(
        f"/api/runs/{calc_run.pk}/calls/{call.pk}/executions/1"), 404)["code"] == "not_found"


def test_a_tool_no_longer_runnable_is_refused(bob_api: Api, calc_run: Run,
                                              call: ToolCall) -> None:
    body = {"arguments": {"expression": "2"}}
    ToolRegistration.objects.filter(name="calculator").update(enabled=False)
    error = error_of(bob_api.post(execute_url(calc_run, call), body), 409)
    assert (error["code"], "disabled" in error["message"]) == ("tool_unavailable", True)

    ToolRegistration.objects.filter(name="calculator").update(enabled=True)
    snapshot = calc_run.snapshot
    snapshot["tools"][0]["python_path"] = "tools_app.tools.example_tools.gone"
    Run.objects.filter(pk=calc_run.pk).update(snapshot=snapshot)
    error = error_of(bob_api.post(execute_url(calc_run, call), body), 409)
    assert error["code"] == "tool_unavailable"
    assert "cannot run here any more" in error["message"]
    assert not CallReexecution.objects.exists()


def test_a_hallucinated_tool_is_refused(bob: AbstractUser, bob_api: Api, make_endpoint: Any,
                                        demo_tools: dict[str, ToolRegistration]) -> None:
    policy = ErrorPolicy.objects.create(name="tell", hallucinated_tool="tell_model")
    endpoint = make_endpoint([{"tool_calls": [{"name": "get_stock_price", "arguments": {}}]},
                              {"text": "ok"}], name="dreams")
    run = start_run(bob, endpoint, [demo_tools["calculator"]], policy)
    execute(run)
    call = ToolCall.objects.get(run=run)
    assert call.state == "hallucinated"

    error = error_of(bob_api.post(execute_url(run, call), {"arguments": {}}), 409)

    assert error["code"] == "hallucinated_tool"
    assert "get_stock_price" in error["message"]


def test_a_tool_that_requires_approval_is_approved_by_the_person_re_executing_it(
    bob_api: Api, calc_run: Run, call: ToolCall,
) -> None:
    snapshot = calc_run.snapshot
    snapshot["tools"][0]["requires_approval"] = True
    Run.objects.filter(pk=calc_run.pk).update(snapshot=snapshot)
    body: dict[str, Any] = {"arguments": {"expression": "4*4"}}

    error = error_of(bob_api.post(execute_url(calc_run, call), body), 400)
    assert error["code"] == "approval_required"

    made = bob_api.post(execute_url(calc_run, call), body | {"approve": True})
    assert made.status_code == 202
    perform(made.json()["id"])
    shown = bob_api.get(made.json()["url"]).json()
    assert (shown["approved"], shown["requested_by"], shown["result"]) == (True, "bob", "16")


def test_splice_and_continue_goes_on_with_the_re_executed_result(
    bob_api: Api, calc_run: Run, call: ToolCall,
) -> None:
    made = bob_api.post(execute_url(calc_run, call), {"arguments": {"expression": "2+3"}})
    splice_url = made.json()["url"] + "/splice"
    error = error_of(bob_api.post(splice_url, {}), 409)
    assert error["code"] == "not_finished"
    perform(made.json()["id"])

    spliced = bob_api.post(splice_url, {})

    assert spliced.status_code == 201, spliced.content
    new = Run.objects.get(pk=spliced.json()["id"])
    assert new.parent_id == calc_run.pk
    assert spliced.json()["splice"]["original"]["text"] == "2"
    assert spliced.json()["splice"]["spliced"]["text"] == "5"
    assert [m["type"] for m in new.snapshot["messages"]] == ["user", "ai", "tool_result"]
    assert new.snapshot["messages"][2]["text"] == "5"
    assert new.snapshot["messages"][2]["id"] == call.call_id
    execute(new)
    # The scripted model plays on from round 2: its answer quotes the spliced result.
    assert (new.status, new.final_text, new.rounds_count) == ("succeeded", "last: 5", 1)
    assert bob_api.get(f"/api/runs/{new.pk}").json()["splice"]["execution"] == 1


def test_the_lane_re_executes_and_shows_the_result_and_its_diff_escaped(
    bob_client: Client, bob: AbstractUser, weather_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    run = start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)
    execute(run)
    call = ToolCall.objects.filter(run=run).order_by("call_index").first()
    assert call is not None
    page = Tree(bob_client.get(f"/runs/{run.pk}/").content.decode())
    button = page.by_id(f"reexec-{call.pk}")
    assert button.tag == "div"
    area_url = f"/runs/{run.pk}/calls/{call.pk}/reexecute/"
    editor = bob_client.get(area_url, headers={"HX-Request": "true"}).content.decode()
    assert '"city": "Hangzhou"' in editor.replace("&quot;", '"')

    refused = bob_client.post(area_url, {"arguments": '{"city": 3}'},
                              headers={"HX-Request": "true"})
    assert refused.status_code == 400
    assert "/city: 3 is not of type &#x27;string&#x27;" in refused.content.decode()

    made = bob_client.post(area_url, {"arguments": f'{{"city": "{HOSTILE}"}}'},
                           headers={"HX-Request": "true"})
    assert made.status_code == 200
    pending = Tree(made.content.decode()).by_id(f"reexec-{call.pk}-1")
    assert pending.attrs["data-state"] == "pending"
    assert pending.attrs["data-poll-url"] == f"/runs/{run.pk}/calls/{call.pk}/executions/1/"
    execution = CallReexecution.objects.get()
    perform(execution.pk)

    shown = bob_client.get(f"/runs/{run.pk}/calls/{call.pk}/executions/1/").content.decode()
    item = Tree(shown).by_id(f"reexec-{call.pk}-1")
    assert item.attrs["data-state"] == "succeeded"
    assert "data-poll-url" not in item.attrs
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown
    assert HOSTILE not in shown
    assert "No weather data for" in shown
    page_html = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'id="reexec-{call.pk}-1"' in page_html
    assert HOSTILE not in page_html


def test_the_live_check_names_problems_by_json_pointer(bob_client: Client, calc_run: Run,
                                                       call: ToolCall) -> None:
    url = f"/runs/{calc_run.pk}/calls/{call.pk}/reexecute/check"

    def check(text: str) -> Any:
        return bob_client.post(url, text, content_type="text/plain").json()

    assert check('{"expression": "1"}') == {"ok": True, "problems": {}}
    assert check('{"expression": []}')["problems"] == {
        "/expression": "[] is not of type 'string'"}
    assert check("{").get("ok") is False


def test_splice_from_the_page_opens_the_new_run_showing_what_was_spliced(
    bob_client: Client, calc_run: Run, call: ToolCall,
) -> None:
    bob_client.post(f"/runs/{calc_run.pk}/calls/{call.pk}/reexecute/",
                    {"arguments": '{"expression": "6*7"}'})
    perform(CallReexecution.objects.get().pk)

    response = bob_client.post(f"/runs/{calc_run.pk}/calls/{call.pk}/executions/1/splice/")

    new = Run.objects.get(parent=calc_run)
    assert response["Location"] == f"/runs/{new.pk}/"
    page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    spliced = Tree(page).by_id("spliced")
    assert spliced.tag == "details"
    assert "Spliced result" in page
    assert "42" in page
    # The result in the conversation is the spliced one, and says so.
    assert conversation_labels(page) == (
        ["inherited", "inherited", "spliced"],
        ["inherited unchanged", "inherited unchanged", "spliced result"],
        {"inherited unchanged": 2, "spliced result": 1})
    assert new.title == calc_run.title


def test_the_lane_s_views_are_refused_to_users_who_may_not_see_the_run(
    calc_run: Run, call: ToolCall, charlie: AbstractUser,
) -> None:
    client = Client()
    client.force_login(charlie)
    base = f"/runs/{calc_run.pk}/calls/{call.pk}"

    assert client.get(f"{base}/reexecute/").status_code == 404
    assert client.post(f"{base}/reexecute/", {"arguments": "{}"}).status_code == 404
    assert client.post(f"{base}/reexecute/check", "{}", content_type="text/plain"
                       ).status_code == 404
    assert client.post(f"{base}/executions/1/splice/").status_code == 404
    assert not CallReexecution.objects.exists()


def test_a_long_result_is_shown_up_to_the_display_limit(
    bob_client: Client, calc_run: Run, call: ToolCall, settings: Any,
) -> None:
    settings.AGENTFORGE_DISPLAY_LIMIT = 100
    bob_client.post(f"/runs/{calc_run.pk}/calls/{call.pk}/reexecute/",
                    {"arguments": '{"expression": "7**200"}'})
    perform(CallReexecution.objects.get().pk)
    full = CallReexecution.objects.get().result_text or ""
    assert len(full) > 100

    shown = bob_client.get(f"/runs/{calc_run.pk}/calls/{call.pk}/executions/1/"
                           ).content.decode()

    assert full[:100] in shown
    assert full not in shown
    assert f"… {len(full)} characters" in shown


def test_a_rerun_of_a_spliced_run_keeps_what_was_spliced(bob_api: Api, calc_run: Run,
                                                         call: ToolCall) -> None:
    from tools_app.runs.debugger.rerun import run_rerun

    made = bob_api.post(execute_url(calc_run, call), {"arguments": {"expression": "2+3"}})
    perform(made.json()["id"])
    spliced = Run.objects.get(pk=bob_api.post(made.json()["url"] + "/splice", {}).json()["id"])

    for mode in ("as_it_was", "current"):
        again = run_rerun(run=spliced, user=None, mode=mode)  # type: ignore[arg-type]
        execute(again)
        assert again.snapshot["splice"] == spliced.snapshot["splice"]
        assert again.final_text == "last: 5"
