"""The playground on a fresh install (issue #16): its defaults start a run that works,
it says when a scripted endpoint ignores the message, and a probe comes back to it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client

from tests.web.support import Tree, playground_post
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.worker.runner import execute_run
from tools_app.web.pages.registry import endpoints

pytestmark = pytest.mark.django_db


def fresh_install() -> None:
    call_command("seed_demo", stdout=io.StringIO())


def form_values(page: str) -> dict[str, Any]:
    """What the browser would post for the playground form as it is shown."""
    tree = Tree(page)
    form = tree.by_id("playground-form")
    values: dict[str, Any] = {}
    for element in tree.elements:
        if form not in element.ancestors_or_self() or not element.attrs.get("name"):
            continue
        name = str(element.attrs["name"])
        if element.tag == "input" and element.attrs.get("type") in ("checkbox", "radio"):
            if "checked" in element.attrs:
                values.setdefault(name, []).append(element.attrs.get("value") or "on")
        elif element.tag == "input":
            values[name] = element.attrs.get("value") or ""
        elif element.tag == "select":
            options = [e for e in tree.elements if e.parent is element and e.tag == "option"]
            chosen = [o for o in options if "selected" in o.attrs] or options[:1]
            values[name] = chosen[0].attrs.get("value") or ""
    for text, element in tree.texts:  # textareas
        if element is not None and element.tag == "textarea" and element.attrs.get("name"):
            values[str(element.attrs["name"])] = text.strip()
    return values


def test_the_playgrounds_defaults_on_a_fresh_install_start_a_run_that_succeeds(
    alice_client: Client,
) -> None:
    fresh_install()
    page = alice_client.get("/playground/").content.decode()
    values = form_values(page)

    weather = ModelEndpoint.objects.get(name="Scripted: weather in parallel")
    assert values["endpoint"] == str(weather.pk)
    response = alice_client.post("/playground/", values)
    assert response.status_code == 302, response.content.decode()[:2000]
    [run] = Run.objects.all()
    async_to_sync(execute_run)(str(run.pk))
    run.refresh_from_db()
    assert (run.status, run.errors_count, run.error_message) == ("succeeded", 0, "")


def test_the_playground_says_a_scripted_endpoint_ignores_the_message(
    alice_client: Client, make_endpoint: Any,
) -> None:
    scripted = make_endpoint([{"text": "hi"}], name="a script")
    live = ModelEndpoint.objects.create(name="a live one", kind="openai_compatible",
                                        base_url="http://127.0.0.1:9/v1", model="m")
    tree = Tree(alice_client.get("/playground/").content.decode())
    note = tree.by_id("scripted-note")
    assert (note.attrs.get("data-scripted") or "").split() == [str(scripted.pk)]
    assert str(live.pk) not in (note.attrs.get("data-scripted") or "")
    [text] = [t for t, e in tree.texts if e is note]
    assert "ignores your messages" in text


def test_a_probe_asked_from_the_playground_returns_to_it(
    alice_client: Client, make_endpoint: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.cache import cache

    cache.clear()  # the probes' rate-limit counters
    monkeypatch.setattr(endpoints, "enqueue_probe", lambda endpoint_id: None)
    endpoint = make_endpoint([{"text": "hi"}], name="probe me")
    page = alice_client.get("/playground/").content.decode()
    assert 'name="back" value="playground"' in page

    back = alice_client.post(f"/endpoints/{endpoint.pk}/probe/", {"back": "playground"})
    assert (back.status_code, back["Location"]) == (302, "/playground/")
    elsewhere = alice_client.post(f"/endpoints/{endpoint.pk}/probe/",
                                  {"back": "https://evil.example/"})
    assert elsewhere["Location"] == "/endpoints/"


def test_the_prefilled_message_asks_what_the_default_endpoints_script_answers(
    alice_client: Client,
) -> None:
    fresh_install()
    values = form_values(alice_client.get("/playground/").content.decode())
    weather = ModelEndpoint.objects.get(pk=values["endpoint"])
    cities = [call["arguments"]["city"] for step in weather.script
              for call in step.get("tool_calls", [])]

    assert cities == ["Hangzhou", "London"]
    assert values["user_message"] == "What's the weather in Hangzhou and in London?"
    assert [t.name for t in ToolRegistration.objects.filter(pk__in=values["tools"])] == [
        "get_weather"]


def test_the_scripted_note_names_the_tools_each_script_calls(alice_client: Client) -> None:
    fresh_install()
    tree = Tree(alice_client.get("/playground/").content.decode())
    note = tree.by_id("scripted-note")
    by_name = {e.name: str(e.pk) for e in ModelEndpoint.objects.all()}
    tools = {t.name: str(t.pk) for t in ToolRegistration.objects.all()}

    scripts = json.loads(note.attrs["data-script-tools"] or "")
    assert scripts[by_name["Scripted: failing + slow tools"]] == [
        {"name": n, "id": tools[n]} for n in ("always_fails", "slow_tool", "calculator")]
    assert scripts[by_name["Scripted: hallucinated tool"]] == [
        {"name": "get_stock_price", "id": ""}]  # registered nowhere: nothing to tick
    # The default endpoint's, shown as the page opens (the script keeps it for others).
    text = "".join(t for t, e in tree.texts if e is not None
                   and tree.by_id("script-calls") in e.ancestors_or_self())
    assert text == "Its script calls get_weather: choosing it ticks that tool."


def test_named_tool_lists_the_ticked_tools_and_refuses_another(
    alice_client: Client, weather_endpoint: ModelEndpoint, policy: ErrorPolicy,
    demo_tools: dict[str, ToolRegistration],
) -> None:
    def named_options(page: str) -> list[tuple[str, str]]:
        tree = Tree(page)
        [select] = [e for e in tree.tags("select") if e.attrs.get("name") == "tool_choice_name"]
        return [(str(o.attrs.get("value")), "selected" if "selected" in o.attrs else "")
                for o in tree.elements if o.parent is select]

    ticked = [demo_tools["get_weather"], demo_tools["calculator"]]
    refused = alice_client.post("/playground/", playground_post(
        weather_endpoint, policy, ticked, tool_choice="named", tool_choice_name="slow_tool"))
    assert refused.status_code == 200
    assert "&#x27;slow_tool&#x27; is not among the selected tools." in refused.content.decode()
    # Shown again with the posted boxes: the named tool is one of them.
    assert named_options(refused.content.decode()) == [
        ("", ""), ("calculator", ""), ("get_weather", "")]

    started = alice_client.post("/playground/", playground_post(
        weather_endpoint, policy, ticked, tool_choice="named", tool_choice_name="calculator"))
    assert started.status_code == 302
    assert Run.objects.get().snapshot["parameters"]["tool_choice"] == {"name": "calculator"}
    # Remembered: the next page names it among the same ticked tools.
    assert named_options(alice_client.get("/playground/").content.decode()) == [
        ("", ""), ("calculator", "selected"), ("get_weather", "")]
