"""Starting a run from a whole conversation (OpenAI Chat Completions format), from the
API and the playground: validated with errors naming the message, frozen into the
snapshot, played by the model after the given messages, shown escaped on the run page,
and kept by a rerun."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, error_of, inside_hx_disable, playground_post
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.debugger.rerun import run_rerun

pytestmark = pytest.mark.django_db

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in <b>Paris</b>?"},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "prior-1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "prior-1", "content": "<script>alert(1)</script> 18 C"},
    {"role": "assistant", "content": "Paris: 18 C."},
    {"role": "user", "content": "And in Oslo?"},
]
# The script plays after the conversation's own two assistant messages.
OSLO_SCRIPT = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
               {"text": "Oslo: {last_result}"}]


@pytest.fixture
def oslo(make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
         policy: ErrorPolicy) -> ModelEndpoint:
    return make_endpoint(OSLO_SCRIPT, name="oslo")  # type: ignore[no-any-return]


def test_the_api_starts_from_a_whole_conversation(bob_api: Api, oslo: ModelEndpoint) -> None:
    response = bob_api.post("/api/runs", {"endpoint": "oslo", "tools": ["get_weather"],
                                          "messages": CONVERSATION})

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert [m["type"] for m in run.snapshot["messages"]] == [
        "system", "user", "ai", "tool_result", "ai", "user"]
    assert run.snapshot["messages"][3] == {"type": "tool_result", "id": "prior-1",
                                           "tool_name": "get_weather", "is_error": False,
                                           "text": "<script>alert(1)</script> 18 C"}
    assert execute(str(run.pk)) == "succeeded"
    run.refresh_from_db()
    assert run.final_text is not None
    assert run.final_text.startswith("Oslo: ")
    detail = bob_api.get(f"/api/runs/{run.pk}").json()
    assert [c["arguments"] for r in detail["rounds"] for c in r["tool_calls"]] == [
        '{"city": "Oslo"}']


@pytest.mark.parametrize(("messages", "field", "words"), [
    ([*CONVERSATION[:3], {"role": "tool", "tool_call_id": "x", "content": "?"}],
     "messages[3]", "messages[3]: tool_call_id 'x' answers no earlier tool call"),
    (CONVERSATION[:3] + CONVERSATION[5:], "messages[2]",
     "messages[2]: tool calls 'prior-1' have no tool result before messages[3] comes"),
    (CONVERSATION[:5], "messages[4]", "ends with an assistant message"),
])
def test_the_api_names_the_message_at_fault(bob_api: Api, oslo: ModelEndpoint,
                                            messages: Any, field: str, words: str) -> None:
    error = error_of(bob_api.post("/api/runs", {"endpoint": "oslo", "messages": messages}),
                     400)

    assert (error["code"], error["field"]) == ("invalid_field", field)
    assert words in error["message"]
    assert not Run.objects.exists()


def test_the_run_page_shows_the_starting_conversation_escaped(
    bob_api: Api, bob_client: Client, oslo: ModelEndpoint,
) -> None:
    run_id = bob_api.post("/api/runs", {"endpoint": "oslo", "tools": ["get_weather"],
                                        "messages": CONVERSATION}).json()["id"]

    page = bob_client.get(f"/runs/{run_id}/").content.decode()

    tree = Tree(page)
    section = tree.by_id("start-conversation")
    roles = [e.attrs["data-role"] for e in tree.tags("li")
             if e.attrs.get("data-role") and section in e.ancestors_or_self()]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; 18 C" in page
    assert "<b>Paris</b>" not in page
    shown = tree.texts_containing("alert(1)")
    assert shown
    assert all(inside_hx_disable(element) for _, element in shown)
    assert "prior-1" in page


def test_arguments_nested_too_deeply_to_parse_are_shown_as_they_came(
    bob_api: Api, bob_client: Client, oslo: ModelEndpoint,
) -> None:
    deep = "[" * 5000 + "]" * 5000
    call = {"id": "prior-1", "type": "function",
            "function": {"name": "get_weather", "arguments": deep}}
    conversation = [CONVERSATION[1], {"role": "assistant", "content": None,
                                      "tool_calls": [call]}, *CONVERSATION[3:]]
    created = bob_api.post("/api/runs", {"endpoint": "oslo", "tools": ["get_weather"],
                                         "messages": conversation})
    assert created.status_code == 201, created.content

    page = bob_client.get(f"/runs/{created.json()['id']}/")

    assert page.status_code == 200
    assert deep in page.content.decode()


def test_a_rerun_keeps_the_conversation(bob_api: Api, oslo: ModelEndpoint) -> None:
    run = Run.objects.get(pk=bob_api.post("/api/runs", {
        "endpoint": "oslo", "tools": ["get_weather"], "messages": CONVERSATION}).json()["id"])
    assert execute(str(run.pk)) == "succeeded"
    run.refresh_from_db()

    again = run_rerun(run=run, user=None, mode="current")

    assert again.snapshot["messages"] == run.snapshot["messages"]
    assert execute(str(again.pk)) == "succeeded"
    again.refresh_from_db()
    assert again.final_text == run.final_text


def test_the_playground_starts_from_a_pasted_conversation(
    bob_client: Client, oslo: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        oslo, policy, [demo_tools["get_weather"]], user_message="",
        input_mode="conversation", conversation_json=json.dumps(CONVERSATION)))

    run = Run.objects.get()
    assert response["Location"] == f"/runs/{run.pk}/"
    assert len(run.snapshot["messages"]) == len(CONVERSATION)
    assert run.title == "And in Oslo?"  # its latest request, not its first
    page = Tree(bob_client.get("/playground/").content.decode())
    checked = [e.attrs.get("value") for e in page.tags("input")
               if e.attrs.get("name") == "input_mode" and "checked" in e.attrs]
    assert checked == ["conversation"]


@pytest.mark.parametrize(("pasted", "words"), [
    ("", "Paste the conversation as a JSON list."),
    ("[{'role': 'user'}]", "Not valid JSON: "),
    ("[" * 5000 + "]" * 5000, "Not valid JSON: nested too deeply"),
    (json.dumps([*CONVERSATION[:3], {"role": "tool", "tool_call_id": "x", "content": "?"}]),
     "messages[3]: tool_call_id &#x27;x&#x27; answers no earlier tool call"),
])
def test_a_bad_conversation_is_a_form_error(
    bob_client: Client, oslo: ModelEndpoint, policy: ErrorPolicy, pasted: str, words: str,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        oslo, policy, [], input_mode="conversation", conversation_json=pasted))

    assert response.status_code == 200
    error = Tree(response.content.decode()).by_id("conversation-error")
    assert error.tag == "p"
    assert words in response.content.decode()
    assert not Run.objects.exists()
