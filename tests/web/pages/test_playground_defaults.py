"""The playground on a fresh install (issue #16): its defaults start a run that works,
it says when a scripted endpoint ignores the message, and a probe comes back to it."""

from __future__ import annotations

import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client

from tests.web.support import Tree
from tools_app.models import ModelEndpoint, Run
from tools_app.runs.worker.runner import execute_run
from tools_app.web.pages import views

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
    monkeypatch.setattr(views, "enqueue_probe", lambda endpoint_id: None)
    endpoint = make_endpoint([{"text": "hi"}], name="probe me")
    page = alice_client.get("/playground/").content.decode()
    assert 'name="back" value="playground"' in page

    back = alice_client.post(f"/endpoints/{endpoint.pk}/probe/", {"back": "playground"})
    assert (back.status_code, back["Location"]) == (302, "/playground/")
    elsewhere = alice_client.post(f"/endpoints/{endpoint.pk}/probe/",
                                  {"back": "https://evil.example/"})
    assert elsewhere["Location"] == "/endpoints/"
