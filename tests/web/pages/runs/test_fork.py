"""Forking a run at round N: the new run starts from the original's conversation as
the model saw it at round N (inherited, marked so on its page) plus added messages in
the OpenAI format, and goes on live from there."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Api, Tree, conversation_labels, error_of, start_run
from tools_app.models import ErrorPolicy, Run, ToolCall, ToolRegistration
from tools_app.runs.debugger.fork import editable_messages, inherited_prefix
from tools_app.runs.debugger.rerun import run_rerun
from tools_app.runs.snapshot.frozen import dump_messages
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2*3"}}]},
    {"text": "last: {last_result}"},
]


@pytest.fixture
def original(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> Run:
    endpoint = make_endpoint(SCRIPT, name="calc")
    run = start_run(bob, endpoint, [demo_tools["calculator"]], policy, "Compute")
    execute(run)
    return run


def fork(api: Api, run: Run, body: dict[str, Any]) -> Any:
    return api.post(f"/api/runs/{run.pk}/fork", body)


def test_a_fork_inherits_the_rounds_before_n_and_goes_on_from_there(
    bob_api: Api, original: Run,
) -> None:
    made = fork(bob_api, original, {"round": 2})

    assert made.status_code == 201, made.content
    assert made.json()["fork"] == {"of": str(original.pk), "round": 2, "inherited": 3,
                                   "inherited_rounds": 1, "removed": 0, "changes": [],
                                   "marks": ["inherited", "inherited", "inherited"]}
    new = Run.objects.get(pk=made.json()["id"])
    execute(new)
    assert new.parent_id == original.pk
    assert [m["type"] for m in new.snapshot["messages"]] == ["user", "ai", "tool_result"]
    assert new.snapshot["messages"][2]["text"] == "2"
    assert new.status == "succeeded"
    # Round 2 of the script again, then its final text: the same ending as the original.
    assert [c.arguments for c in ToolCall.objects.filter(run=new)] == [{"expression": "2*3"}]
    assert new.final_text == original.final_text == "last: 6"


def test_added_messages_follow_the_inherited_ones(bob_api: Api, original: Run,
                                                  bob_client: Client) -> None:
    made = fork(bob_api, original, {"round": 3, "append": [
        {"role": "user", "content": "<i>Summarise</i>, please."}]})

    new = Run.objects.get(pk=made.json()["id"])
    execute(new)
    assert [m["type"] for m in new.snapshot["messages"]] == [
        "user", "ai", "tool_result", "ai", "tool_result", "user"]
    assert new.rounds_count == 1  # the script's final step answers at once
    assert new.final_text == "last: 6"
    page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    tree = Tree(page)
    inherited = [e for e in tree.tags("li") if e.attrs.get("data-inherited") == "true"]
    assert len(inherited) == 5
    assert tree.by_id("fork-added").tag == "li"
    assert tree.by_id("lineage-origin").attrs["data-made"] == "fork"
    assert "</a> · from round 3 · as it was · <a" in page
    assert conversation_labels(page) == (
        ["inherited"] * 5 + ["added"], ["inherited unchanged"] * 5 + ["added in the fork"],
        {"inherited unchanged": 5, "added in the fork": 1})
    assert "&lt;i&gt;Summarise&lt;/i&gt;" in page
    assert new.title == "<i>Summarise</i>, please."  # the fork's own request
    assert tree.by_id("compare-parent").attrs["href"] == (
        f"/runs/compare?a={original.pk}&b={new.pk}")


def test_an_edited_conversation_drives_the_rounds_after_it(bob_api: Api,
                                                           original: Run) -> None:
    edited = editable_messages(inherited_prefix(original, 3))
    assert [m["role"] for m in edited] == ["user", "assistant", "tool", "assistant", "tool"]
    edited[4] |= {"content": "forty-two", "is_error": True}
    edited.insert(3, {"role": "user", "content": "Now times 3"})

    made = fork(bob_api, original, {"round": 3, "messages": edited})

    assert made.status_code == 201, made.content
    assert made.json()["fork"]["marks"] == [
        "inherited", "inherited", "inherited", "added", "inherited", "edited"]
    new = Run.objects.get(pk=made.json()["id"])
    execute(new)
    assert new.snapshot["messages"][-1] | {"id": "?"} == {
        "type": "tool_result", "id": "?", "tool_name": "calculator", "text": "forty-two",
        "is_error": True}
    assert new.snapshot["messages"][:3] == original_prefix(original)[:3]
    assert new.final_text == "last: forty-two"  # the script's step 3 reads the edited result


def test_the_page_says_what_each_message_is_and_counts_the_same(
    bob_api: Api, original: Run, bob_client: Client,
) -> None:
    """Two results edited: the summary does not call the first five inherited."""
    edited = editable_messages(inherited_prefix(original, 3))
    edited[2]["content"] = "20"
    edited[4]["content"] = "60"

    new = Run.objects.get(pk=fork(bob_api, original, {"round": 3, "messages": edited}
                                  ).json()["id"])

    page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    marks, tags, counts = conversation_labels(page)
    assert marks == ["inherited", "inherited", "edited", "inherited", "edited"]
    assert tags == ["inherited unchanged", "inherited unchanged", "edited in the fork",
                    "inherited unchanged", "edited in the fork"]
    assert counts == {"inherited unchanged": 3, "edited in the fork": 2}
    summary = " ".join(t for t, e in Tree(page).texts if e is not None and any(
        a.attrs.get("id") == "fork-inherited" for a in e.ancestors_or_self()))
    assert "rounds 1 to 2, not executed again" in summary
    assert "3 inherited unchanged, 2 edited in the fork" in summary
    assert new.title == original.title == "Compute"  # no request of its own


def test_a_fork_whose_user_message_was_edited_is_titled_by_it(
    bob_api: Api, original: Run, bob_client: Client,
) -> None:
    edited = editable_messages(inherited_prefix(original, 1))
    edited[0]["content"] = "Compute  <b>twice</b>\nplease"

    new = Run.objects.get(pk=fork(bob_api, original, {"round": 1, "messages": edited}
                                  ).json()["id"])

    assert new.title == "Compute <b>twice</b> please"
    page = bob_client.get(f"/runs/{new.pk}/").content.decode()
    assert "Compute &lt;b&gt;twice&lt;/b&gt; please" in page
    assert conversation_labels(page)[2] == {"edited in the fork": 1}


def original_prefix(run: Run) -> list[dict[str, Any]]:
    return dump_messages(inherited_prefix(run, 3))


def test_a_fork_may_go_on_with_another_endpoint_tools_policy_and_parameters(
    bob_api: Api, original: Run, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
) -> None:
    other = make_endpoint([{"text": "other: {last_result}"}], name="other")
    strict = ErrorPolicy.objects.create(name="strict")
    tool_names = ["calculator", next(n for n in demo_tools if n != "calculator")]

    made = fork(bob_api, original, {
        "round": 2, "endpoint": "other", "tools": tool_names, "policy": strict.pk,
        "parameters": {"temperature": 0.5}, "policy_overrides": {"max_round_trips": 4}})

    assert made.status_code == 201, made.content
    new = Run.objects.get(pk=made.json()["id"])
    execute(new)
    assert (new.endpoint, new.policy) == (other, strict)
    assert new.snapshot["endpoint"]["name"] == "other"
    assert [t["name"] for t in new.snapshot["tools"]] == tool_names
    assert new.snapshot["policy"]["name"] == "strict"
    assert new.snapshot["policy"]["max_round_trips"] == 4
    assert new.snapshot["parameters"] == {"temperature": 0.5}
    assert made.json()["fork"]["changes"] == [
        "endpoint: calc → other", f"tools added: {tool_names[1]}",
        'parameters: {} → {"temperature": 0.5}', "policy: "
        f"{original.snapshot['policy']['name']} → strict",
        f"policy max_round_trips: {strict.max_round_trips!r} → 4"]
    assert new.final_text == "other: 2"


def test_a_rerun_of_a_fork_plays_on_from_the_same_round(bob_api: Api, original: Run) -> None:
    forked = Run.objects.get(pk=fork(bob_api, original, {"round": 2}).json()["id"])
    execute(forked)

    again = run_rerun(run=forked, user=None, mode="current")
    execute(again)

    assert again.snapshot["fork"] == forked.snapshot["fork"]
    assert again.final_text == forked.final_text == "last: 6"


@pytest.mark.parametrize(("body", "field", "words"), [
    ({}, "round", "'round' is required"),
    ({"round": 0}, "round", "round must be a round of the run: 1 to 3"),
    ({"round": 4}, "round", "round must be a round of the run: 1 to 3"),
    ({"round": "2"}, "round", "round must be a round of the run"),
    ({"round": 2, "append": {"role": "user"}}, "append", "append must be a list"),
    ({"round": 2, "append": [{"role": "tool", "tool_call_id": "x", "content": "?"}]},
     "append[0]", "append[0]: tool_call_id 'x' answers no earlier tool call"),
    ({"round": 2, "append": [{"role": "user", "content": "a"},
                             {"role": "assistant", "content": "b"}]},
     "append[1]", "append[1]: the conversation ends with an assistant message"),
    ({"round": 2, "messages": {"role": "user"}}, "messages", "messages must be a list"),
    ({"round": 2, "messages": [{"role": "user", "content": "a"},
                               {"role": "tool", "tool_call_id": "x", "content": "?"}]},
     "messages[1]", "messages[1]: tool_call_id 'x' answers no earlier tool call"),
    ({"round": 2, "messages": [{"role": "system", "content": "a"}]},
     "messages", "at least one user message"),
    ({"round": 2, "messages": [{"role": "user", "content": "a"}],
      "append": [{"role": "tool", "tool_call_id": "x", "content": "?"}]},
     "append[0]", "append[0]: tool_call_id 'x' answers no earlier tool call"),
    ({"round": 2, "tools": "calculator"}, "tools", "tools must be a list of tool names"),
    ({"round": 2, "tools": ["nope"]}, "tools", "Unknown tools: nope"),
    ({"round": 2, "parameters": {"temperature": "hot"}}, "parameters", "parameters are invalid"),
    ({"round": 2, "policy": "nope"}, "policy", "No policy named or with id 'nope'"),
    ({"round": 2, "policy_overrides": {"max_round_trips": 0}}, "policy_overrides",
     "max_round_trips"),
    ({"round": 2, "snapshot": "tomorrow"}, "snapshot", "snapshot must be one of same, current"),
])
def test_a_bad_fork_is_refused_naming_the_field(bob_api: Api, original: Run,
                                                body: dict[str, Any], field: str,
                                                words: str) -> None:
    error = error_of(fork(bob_api, original, body), 400)

    assert error["field"] == field
    assert words in error["message"]
    assert not Run.objects.filter(parent=original).exists()


def test_only_a_visible_run_is_forked(original: Run, charlie: AbstractUser) -> None:
    api = Api(create_token(charlie, "ci")[1])
    assert error_of(fork(api, original, {"round": 1}), 404)["code"] == "not_found"


def editor_messages(page: str) -> str:
    """The fork editor's conversation JSON, as the page holds it (the form submits it)."""
    found = re.search(r'<textarea name="messages" id="fork-messages"[^>]*>(.*?)</textarea>',
                      page, re.S)
    assert found is not None, "no conversation in the editor"
    return html.unescape(found.group(1))


def test_the_run_page_links_the_fork_editor(bob_client: Client, original: Run) -> None:
    tree = Tree(bob_client.get(f"/runs/{original.pk}/").content.decode())
    form = tree.by_id("fork-form")
    assert form.attrs["action"] == f"/runs/{original.pk}/fork/"
    assert form.attrs["method"] == "get"
    links = [e.attrs["href"] for e in tree.tags("a")
             if "fork-round" in (e.attrs.get("class") or "")]
    assert links == [f"/runs/{original.pk}/fork/?round={n}" for n in (1, 2, 3)]


def test_the_editor_shows_the_conversation_before_the_round(bob_client: Client,
                                                           original: Run) -> None:
    page = bob_client.get(f"/runs/{original.pk}/fork/?round=2").content.decode()

    shown = json.loads(editor_messages(page))
    assert [m["role"] for m in shown] == ["user", "assistant", "tool"]
    assert shown[1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert shown[2]["content"] == "2"


@pytest.mark.parametrize("chosen", ["99", "0", "two"])
def test_a_round_the_run_does_not_have_asks_only_for_another(bob_client: Client,
                                                             original: Run, chosen: str) -> None:
    response = bob_client.get(f"/runs/{original.pk}/fork/?round={chosen}")

    page = Tree(response.content.decode())
    assert response.status_code == 400
    assert page.by_id("fork-error").attrs["data-field"] == "round"
    assert [e.tag for e in page.elements if e.attrs.get("id") == "fork-round-form"] == ["form"]
    assert not [e for e in page.elements if e.attrs.get("id") in (
        "fork-editor-form", "fork-messages", "fork-submit")]


def test_the_editor_forks_with_an_edited_result(bob_client: Client, original: Run) -> None:
    page = bob_client.get(f"/runs/{original.pk}/fork/?round=2").content.decode()
    conversation = json.loads(editor_messages(page))
    conversation[2]["content"] = "<b>40</b>"
    conversation[2]["is_error"] = True

    response = bob_client.post(f"/runs/{original.pk}/fork/", {
        "round": "2", "messages": json.dumps(conversation),
        "endpoint": original.snapshot["endpoint"]["id"], "tools": ["calculator"],
        "policy": str(original.snapshot["policy"]["id"]), "temperature": "",
        "max_round_trips": str(original.snapshot["policy"]["max_round_trips"])})

    new = Run.objects.get(parent=original)
    assert response["Location"] == f"/runs/{new.pk}/"
    assert new.snapshot["fork"]["marks"] == ["inherited", "inherited", "edited"]
    assert new.snapshot["messages"][2] | {"text": "?"} == {
        "type": "tool_result", "id": new.snapshot["messages"][2]["id"],
        "tool_name": "calculator", "text": "?", "is_error": True}
    assert new.snapshot["messages"][2]["text"] == "<b>40</b>"
    shown = bob_client.get(f"/runs/{new.pk}/").content.decode()
    marked = [e for e in Tree(shown).tags("li") if e.attrs.get("data-fork-mark") == "edited"]
    assert len(marked) == 1
    assert "&lt;b&gt;40&lt;/b&gt;" in shown
    assert "<b>40</b>" not in shown
    assert "not executed again" in shown


def test_the_editor_goes_on_with_the_chosen_configuration(
    bob_client: Client, original: Run, make_endpoint: Any,
) -> None:
    other = make_endpoint([{"text": "other: {last_result}"}], name="other")
    page = bob_client.get(f"/runs/{original.pk}/fork/?round=2").content.decode()
    policy = original.snapshot["policy"]

    bob_client.post(f"/runs/{original.pk}/fork/", {
        "round": "2", "messages": editor_messages(page), "endpoint": str(other.pk),
        "policy": "", "tools": ["calculator"], "temperature": "0.25",
        "max_round_trips": "7"})  # parallel unticked

    new = Run.objects.get(parent=original)
    execute(new)
    assert new.endpoint == other
    assert new.snapshot["fork"]["marks"] == ["inherited"] * 3
    assert new.snapshot["fork"]["changes"] == [
        "endpoint: calc → other", 'parameters: {} → {"temperature": 0.25}',
        f"policy max_round_trips: {policy['max_round_trips']!r} → 7",
        f"policy parallel: {policy['parallel']!r} → False"]
    assert new.final_text == "other: 2"
    shown = Tree(bob_client.get(f"/runs/{new.pk}/").content.decode())
    assert [e.tag for e in shown.tags("ul") if e.attrs.get("id") == "fork-changes"] == ["ul"]


@pytest.mark.parametrize(("form", "field", "words"), [
    ({"round": "two"}, "round", "Cannot fork: round must be a round number"),
    ({"round": "9"}, "round", "Cannot fork: round must be a round of the run: 1 to 3"),
    ({"round": "2", "messages": "[{"}, "messages", "Cannot fork: messages are not valid JSON"),
    ({"round": "2", "messages": "[" * 5000 + "]" * 5000}, "messages",
     "Cannot fork: messages are not valid JSON: nested too deeply"),
    ({"round": "2", "endpoint": "not-an-id"}, "endpoint",
     "Cannot fork: the chosen endpoint does not exist"),
    ({"round": "2", "max_round_trips": "many"}, "max_round_trips",
     "Cannot fork: max_round_trips must be a number"),
    ({"round": "2", "temperature": "hot"}, "temperature",
     "Cannot fork: temperature must be a number"),
    ({"round": "2", "messages": '[{"role": "user", "content": "a"}, {"role": "tool", '
      '"tool_call_id": "x", "content": "?"}]'}, "messages[1]",
     "Cannot fork: messages[1]: tool_call_id &#x27;x&#x27; answers no earlier tool call"),
])
def test_a_bad_fork_from_the_editor_says_why_in_place(
    bob_client: Client, original: Run, form: dict[str, str], field: str, words: str,
) -> None:
    form = {"endpoint": original.snapshot["endpoint"]["id"],
            "policy": str(original.snapshot["policy"]["id"]), "tools": "calculator",
            "messages": '[{"role": "user", "content": "kept as typed"}]'} | form
    response = bob_client.post(f"/runs/{original.pk}/fork/", form)

    page = response.content.decode()
    assert response.status_code == 400
    assert words in page
    assert Tree(page).by_id("fork-error").attrs["data-field"] == field
    assert editor_messages(page) == form["messages"]
    assert not Run.objects.filter(parent=original).exists()


def test_another_user_cannot_fork_from_the_page(original: Run, charlie: AbstractUser) -> None:
    other = Client()
    other.force_login(charlie)
    assert other.post(f"/runs/{original.pk}/fork/", {"round": "1"}).status_code == 404
    assert other.get(f"/runs/{original.pk}/fork/?round=1").status_code == 404
