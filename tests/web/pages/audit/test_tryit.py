"""Try it (#12): a tool page's form submits one call, which runs as a recorded try-it
run (a built-in one-call scripted model), shows in the audit log and the tool's
statistics, and whose result the page polls; arguments are checked against the schema
first (problems at their JSON pointers); recent inputs are the user's own, distinct."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone

from tests.runs.support import execute
from tests.web.support import Api, Tree, error_of, inside_hx_disable
from tools_app.audit.selectors import calls_for_user
from tools_app.audit.tool_stats import tool_stats
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall, ToolRegistration
from tools_app.runs import tasks
from tools_app.runs.debugger import rerun, tryit
from tools_app.tools.registry import compute_version_hash
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db
HOSTILE = "<img src=x onerror=alert(1)>"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def tryit_enqueued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Try-it runs are executed by the tests, never by a worker thread."""
    ids: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_run", ids.append)
    return ids


def registration(name: str, kind: str, schema: dict[str, Any], **fields: Any) -> ToolRegistration:
    tool = ToolRegistration(name=name, kind=kind, json_schema=schema, **fields)
    tool.version_hash = compute_version_hash(tool)
    tool.save()
    return tool


ECHO_SCHEMA = {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"},
    "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
    "tags": {"type": "array", "items": {"type": "string"}}}}


@pytest.fixture
def echo(policy: ErrorPolicy) -> ToolRegistration:
    return registration("echo", "mock", ECHO_SCHEMA,
                        config={"template": True, "result": "Echo {city} " + HOSTILE})


def try_it(client: Client, name: str, arguments: Any, **headers: Any) -> Any:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return client.post(f"/tools/{name}/try/", {"arguments": text}, **headers)


def run_of(response: Any) -> Run:
    found = re.search(r'data-run="([0-9a-f-]{36})"', response.content.decode())
    assert found, response.content.decode()
    return Run.objects.get(pk=found.group(1))


def test_a_python_tool_is_tried_through_a_recorded_run(
        bob: AbstractUser, bob_client: Client, demo_tools: dict[str, ToolRegistration],
        policy: ErrorPolicy, tryit_enqueued: list[str],
        django_capture_on_commit_callbacks: Any) -> None:
    arguments = {"value": 1, "from_unit": "km", "to_unit": "m"}
    with django_capture_on_commit_callbacks(execute=True):
        response = try_it(bob_client, "convert_units", arguments, **HTMX)
    assert response.status_code == 200
    run = run_of(response)
    assert tryit_enqueued == [str(run.pk)]
    assert (run.created_by, run.endpoint, run.policy, run.title) == (
        bob, None, policy, "Try it: convert_units")
    assert run.snapshot["tryit"] == {"tool": "convert_units", "arguments": arguments}
    assert run.snapshot["endpoint"]["kind"] == "scripted"
    assert run.snapshot["endpoint"]["id"] is None
    assert [t["name"] for t in run.snapshot["tools"]] == ["convert_units"]
    # Polled until the run ends: the panel asks again while it is queued.
    assert f'hx-get="/tools/convert_units/try/{run.pk}/"' in response.content.decode()

    execute(run)
    assert run.status == RunStatus.SUCCEEDED
    call = ToolCall.objects.get(run=run)
    assert (call.tool_name, call.arguments, call.state) == ("convert_units", arguments,
                                                            "succeeded")
    assert json.loads(call.result_text or "") == {"value": 1000.0, "unit": "m"}
    assert run.final_text == call.result_text  # the model's second step: the result

    page = bob_client.get(f"/tools/convert_units/try/{run.pk}/").content.decode()
    assert "hx-get" not in page  # finished: the panel stops polling
    assert 'data-state="succeeded"' in page
    assert "1000.0" in page
    assert f'href="/runs/{run.pk}/#call-{call.pk}"' in page
    # In the audit log: the calls the user may see and the tool's statistics.
    assert list(calls_for_user(bob).filter(tool_name="convert_units")) == [call]
    assert tool_stats(calls_for_user(bob).filter(tool_name="convert_units")).calls == 1
    assert bob_client.get("/calls/?tool=convert_units").content.decode().count(
        f"/runs/{run.pk}/#call-{call.pk}") == 1
    # in the runs list once asked for: it leaves try-it runs out by default
    assert f'href="/runs/{run.pk}/"' not in bob_client.get("/runs/").content.decode()
    assert f'href="/runs/{run.pk}/"' in bob_client.get("/runs/?tryit=any").content.decode()
    # Like any run it exports as a fixture (its built-in model included).
    exported = bob_client.get(f"/runs/{run.pk}/export.json")
    assert exported.status_code == 200
    assert json.loads(b"".join(exported.streaming_content) if exported.streaming
                      else exported.content)["snapshot"]["tryit"]["tool"] == "convert_units"


def test_a_mock_tools_output_is_shown_escaped(bob_client: Client, echo: ToolRegistration) -> None:
    run = run_of(try_it(bob_client, "echo", {"city": "Oslo"}, **HTMX))
    execute(run)
    assert run.status == RunStatus.SUCCEEDED
    html = bob_client.get(f"/tools/echo/try/{run.pk}/").content.decode()
    tree = Tree(html)
    texts = tree.texts_containing("Echo Oslo")
    assert texts
    assert all(inside_hx_disable(element) for _, element in texts)
    assert HOSTILE not in html
    assert "Echo Oslo &lt;img src=x onerror=alert(1)&gt;" in html


def test_arguments_are_checked_first_with_problems_at_their_pointers(
        bob_client: Client, echo: ToolRegistration) -> None:
    response = try_it(bob_client, "echo", {"where": {"lat": "north"}, "tags": [1]}, **HTMX)
    assert response.status_code == 400
    tree = Tree(response.content.decode())
    problems = {e.attrs["data-pointer"]: text for text, e in
                ((t, e) for t, e in tree.texts if e is not None and e.tag == "li")}
    assert set(problems) == {"/city", "/where/lat", "/tags/0"}
    assert "'city' is a required property" in problems["/city"]
    assert "'north' is not of type 'number'" in problems["/where/lat"]
    assert not Run.objects.exists()

    broken = try_it(bob_client, "echo", '{"city": ', **HTMX)
    assert broken.status_code == 400
    assert "The arguments are not valid JSON: Expecting value" in broken.content.decode()
    listed = try_it(bob_client, "echo", "[1]", **HTMX)
    assert "The arguments must be a JSON object" in listed.content.decode()
    assert not Run.objects.exists()


def test_without_htmx_a_try_goes_to_the_run_or_back_to_the_page(
        bob_client: Client, echo: ToolRegistration) -> None:
    refused = try_it(bob_client, "echo", {"city": 3})
    assert refused.status_code == 400
    page = refused.content.decode()
    assert 'id="tool-stats"' in page  # the whole tool page again...
    assert "3 is not of type &#x27;string&#x27;" in page  # ...with the problem
    assert "&quot;city&quot;: 3" in page  # and the arguments as typed
    started = try_it(bob_client, "echo", {"city": "Oslo"})
    run = Run.objects.get()
    assert (started.status_code, started["Location"]) == (302, f"/runs/{run.pk}/")


def test_disabled_unknown_and_anonymous(client: Client, bob_client: Client,
                                        echo: ToolRegistration) -> None:
    ToolRegistration.objects.filter(pk=echo.pk).update(enabled=False)
    response = try_it(bob_client, "echo", {"city": "Oslo"}, **HTMX)
    assert response.status_code == 409
    assert "The tool echo is disabled" in response.content.decode()
    assert 'id="tryit"' not in bob_client.get("/tools/echo/").content.decode()
    assert try_it(bob_client, "nothing", {}, **HTMX).status_code == 404
    assert try_it(client, "echo", {"city": "Oslo"}).status_code == 302  # to the login
    assert not Run.objects.exists()


def test_a_tool_that_requires_approval_waits_and_the_page_says_so(
        bob_client: Client, policy: ErrorPolicy) -> None:
    registration("guarded", "mock", ECHO_SCHEMA, config={"result": "done"},
                 requires_approval=True)
    assert "This tool requires approval" in bob_client.get("/tools/guarded/").content.decode()
    run = run_of(try_it(bob_client, "guarded", {"city": "Oslo"}, **HTMX))
    execute(run)
    assert run.status == RunStatus.WAITING
    page = bob_client.get(f"/tools/guarded/try/{run.pk}/").content.decode()
    assert "Waiting for approval" in page
    assert "hx-get" in page  # still polling: a decision may come from the timeline
    assert ToolCall.objects.get(run=run).state == "proposed"


def test_a_result_panel_is_only_for_the_users_own_try_it_runs_of_that_tool(
        bob_client: Client, echo: ToolRegistration, charlie: AbstractUser) -> None:
    run = run_of(try_it(bob_client, "echo", {"city": "Oslo"}, **HTMX))
    other = Client()
    other.force_login(charlie)
    assert other.get(f"/tools/echo/try/{run.pk}/").status_code == 404
    assert bob_client.get(f"/tools/calculator/try/{run.pk}/").status_code == 404


@pytest.mark.both  # JSON key lookups: SQLite's json_extract, PostgreSQL's jsonb
def test_recent_inputs_are_the_users_own_distinct_argument_sets_newest_first(
        bob: AbstractUser, bob_client: Client, charlie: AbstractUser,
        echo: ToolRegistration) -> None:
    made: list[Run] = []
    for city in ("A", "B", "A"):
        made.append(run_of(try_it(bob_client, "echo", {"city": city, "tags": ["x"]}, **HTMX)))
    # B again, its keys in another order
    made.append(run_of(try_it(bob_client, "echo", {"tags": ["x"], "city": "B"}, **HTMX)))
    made.append(tryit.tryit_create(user=charlie, tool=echo, arguments={"city": "C"}))
    made += [tryit.tryit_create(user=bob, tool=echo, arguments={"city": f"n{index}"})
             for index in range(12)]
    start = timezone.now() - timedelta(hours=1)
    for order, run in enumerate(made):  # distinct, known creation times
        Run.objects.filter(pk=run.pk).update(created_at=start + timedelta(seconds=order))
    recent = tryit.recent_arguments(bob, "echo")
    assert recent == [{"city": f"n{index}"} for index in range(11, 1, -1)]
    assert len(recent) == tryit.RECENT_LIMIT
    assert tryit.recent_arguments(bob, "echo", limit=14)[-2:] == [
        {"tags": ["x"], "city": "B"}, {"city": "A", "tags": ["x"]}]
    assert tryit.recent_arguments(charlie, "echo") == [{"city": "C"}]
    assert tryit.recent_arguments(bob, "calculator") == []

    page = bob_client.get("/tools/echo/").content.decode()
    refill = Tree(page).by_id("tryit-recent")
    assert "hx-disable" in refill.attrs
    assert 'data-arguments="{\n  &quot;city&quot;: &quot;n11&quot;\n}"' in page
    # A try answers with the recent inputs too, swapped in out of band.
    answer = try_it(bob_client, "echo", {"city": "newest"}, **HTMX).content.decode()
    assert 'id="tryit-recent" hx-swap-oob="true"' in answer
    assert "&quot;city&quot;: &quot;newest&quot;" in answer


def test_the_page_embeds_the_form_tree_or_says_why_there_is_none(
        bob_client: Client, echo: ToolRegistration) -> None:
    page = bob_client.get("/tools/echo/").content.decode()
    found = re.search(r'<script id="tryit-schema" type="application/json">(.*?)</script>',
                      page, re.DOTALL)
    assert found
    tree = json.loads(found.group(1))
    assert [p["name"] for p in tree["properties"]] == ["city", "where", "tags"]
    registration("choice", "mock", {"type": "object", "properties": {
        "v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}, config={"result": "ok"})
    other = bob_client.get("/tools/choice/").content.decode()
    assert "tryit-schema" not in other
    assert ("The form cannot show this tool's schema (/properties/v: anyOf has no "
            "form): edit the arguments as JSON.") in other


def test_the_api_tries_a_tool_and_answers_with_the_run(
        bob: AbstractUser, echo: ToolRegistration) -> None:
    api = Api(create_token(bob, "ci")[1])
    response = api.post("/api/tools/echo/try", {"arguments": {"city": "Oslo"}})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.created_by, run.snapshot["tryit"]) == (bob, {"tool": "echo",
                                                             "arguments": {"city": "Oslo"}})
    assert response.json() == {"id": str(run.pk), "status": "queued",
                               "url": f"/runs/{run.pk}/"}

    error = error_of(api.post("/api/tools/echo/try", {"arguments": {"city": 1}}), 400)
    assert error["code"] == "invalid_arguments"
    assert error["problems"] == [{"pointer": "/city", "message": "1 is not of type 'string'"}]
    assert error_of(api.post("/api/tools/echo/try", {"args": {}}), 400)["field"] == "args"
    assert error_of(api.post("/api/tools/nothing/try", {"arguments": {}}), 404)
    ToolRegistration.objects.filter(pk=echo.pk).update(enabled=False)
    assert error_of(api.post("/api/tools/echo/try", {"arguments": {"city": "x"}}),
                    409)["code"] == "conflict"
    assert Api(None).post("/api/tools/echo/try", {"arguments": {}}).status_code == 401


def test_a_try_it_run_is_marked_on_its_page_and_reruns_only_as_it_was(
        bob: AbstractUser, bob_client: Client, echo: ToolRegistration) -> None:
    run = tryit.tryit_create(user=bob, tool=echo, arguments={"city": "Oslo"})
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="tryit-mark"' in page
    assert 'href="/tools/echo/"' in page
    again = rerun.run_rerun(run=run, user=bob, mode="as_it_was")
    assert again.snapshot["tryit"] == run.snapshot["tryit"]
    with pytest.raises(rerun.RerunError, match="a try-it run has no endpoint"):
        rerun.run_rerun(run=run, user=bob, mode="current")


def test_a_failing_tool_shows_its_error(bob_client: Client, demo_tools: dict[str, ToolRegistration],
                                        policy: ErrorPolicy) -> None:
    run = run_of(try_it(bob_client, "always_fails", {"reason": HOSTILE}, **HTMX))
    execute(run)
    assert run.status == RunStatus.SUCCEEDED  # the error went to the model
    html = bob_client.get(f"/tools/always_fails/try/{run.pk}/").content.decode()
    tree = Tree(html)
    assert 'data-state="execution_error"' in html
    error = tree.by_id("tryit-error")
    assert inside_hx_disable(error)
    assert HOSTILE not in html
    assert "<code>ToolExecutionError</code>" in html
    assert "<pre>RuntimeError: &lt;img src=x onerror=alert(1)&gt;</pre>" in html
    assert 'id="tryit-output"' not in html


def test_arguments_are_checked_as_the_user_types(bob_client: Client,
                                                 echo: ToolRegistration) -> None:
    def check(body: bytes) -> Any:
        response = bob_client.post("/tools/echo/check-arguments/", body,
                                   content_type="text/plain")
        assert response.status_code == 200
        return response.json()

    assert check(b'{"city": "Oslo"}') == {"ok": True, "problems": []}
    assert check(b'{"where": {"lat": "x"}}')["problems"] == [
        {"pointer": "/city", "message": "'city' is a required property"},
        {"pointer": "/where/lat", "message": "'x' is not of type 'number'"}]
    assert check(b'{"city": ')["problems"][0]["message"].startswith(
        "not valid JSON: Expecting value")
    assert check(b"\xff")["problems"] == [{"pointer": "",
                                           "message": "the arguments are not UTF-8 text"}]
    assert not Run.objects.exists()  # nothing is stored or run
    assert bob_client.post("/tools/nothing/check-arguments/", b"{}",
                           content_type="text/plain").status_code == 404


def test_a_tool_whose_schema_points_at_nothing_cannot_be_tried(
        bob_client: Client, policy: ErrorPolicy) -> None:
    registration("dangling", "mock", {"type": "object", "properties": {
        "x": {"$ref": "#/$defs/Missing"}}}, config={"result": "ok"})
    response = try_it(bob_client, "dangling", {"x": 1}, **HTMX)
    assert response.status_code == 409
    assert "unresolvable reference" in response.content.decode()
    assert not Run.objects.exists()


def test_string_formats_are_checked_before_a_try_and_as_the_user_types(
        bob_client: Client, policy: ErrorPolicy) -> None:
    registration("book", "mock", {"type": "object", "required": ["day"], "properties": {
        "day": {"type": "string", "format": "date"},
        "link": {"type": "string", "format": "uri"}}}, config={"result": "booked"})
    response = try_it(bob_client, "book", {"day": "2026-02-30", "link": "example.com"}, **HTMX)
    assert response.status_code == 400
    html = response.content.decode()
    assert "<code>/day</code>: &#x27;2026-02-30&#x27; is not a &#x27;date&#x27;" in html
    assert "<code>/link</code>: &#x27;example.com&#x27; is not a &#x27;uri&#x27;" in html
    assert not Run.objects.exists()
    checked = bob_client.post("/tools/book/check-arguments/", b'{"day": "tomorrow"}',
                              content_type="text/plain").json()
    assert checked["problems"] == [{"pointer": "/day", "message": "'tomorrow' is not a 'date'"}]
    assert try_it(bob_client, "book", {"day": "2026-03-01"}, **HTMX).status_code == 200


def test_the_tool_pages_figures_come_again_when_a_try_it_run_ends(
        bob_client: Client, echo: ToolRegistration, alice_client: Client) -> None:
    page = Tree(bob_client.get("/tools/echo/").content.decode())
    figures = page.by_id("tool-figures")
    assert (figures.attrs["hx-get"], figures.attrs["hx-trigger"], figures.attrs["hx-swap"]) == (
        "/tools/echo/figures/", "tryit-finished from:body", "outerHTML")
    assert not inside_hx_disable(figures)
    before = Tree(bob_client.get("/tools/echo/figures/").content.decode())
    assert "".join(t for t, e in before.texts if e is before.by_id("stat-calls")) == "0"

    started = try_it(bob_client, "echo", {"city": "Oslo"}, **HTMX)
    assert "HX-Trigger" not in started  # queued: nothing to show yet
    run = run_of(started)
    assert "HX-Trigger" not in bob_client.get(f"/tools/echo/try/{run.pk}/")
    execute(run)
    ended = bob_client.get(f"/tools/echo/try/{run.pk}/")
    assert ended["HX-Trigger"] == "tryit-finished"  # the page's figures listen for it
    after = Tree(bob_client.get("/tools/echo/figures/").content.decode())
    assert after.by_id("tool-figures").attrs["hx-trigger"] == "tryit-finished from:body"
    assert "".join(t for t, e in after.texts if e is after.by_id("stat-calls")) == "1"
    assert 'data-outcome="ok"' in bob_client.get("/tools/echo/figures/").content.decode()
    # the figures are the viewer's, as on the page; a disabled tool's have no trigger
    echo.enabled = False
    echo.save()
    plain = Tree(alice_client.get("/tools/echo/figures/").content.decode())
    assert "hx-get" not in plain.by_id("tool-figures").attrs
    assert bob_client.get("/tools/nothing/figures/").status_code == 404
