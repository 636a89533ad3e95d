"""The HTML pages: login everywhere, the playground, the runs list, a run's page, its
cancel and download, and the browser-side hardening (CSP nonce, local htmx, htmx config).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils import timezone

from tests.web.support import Tree, playground_post, start_run
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    PlaygroundState,
    Round,
    Run,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.worker.runner import execute_run
from tools_app.web.pages.forms import PlaygroundForm

pytestmark = pytest.mark.django_db

RUN_ID = "00000000-0000-0000-0000-000000000001"


@pytest.fixture
def bobs_run(bob: AbstractUser, weather_endpoint: ModelEndpoint,
             demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    return start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy)


def with_large_result(run: Run, text: str) -> ToolCall:
    round_ = Round.objects.create(run=run, index=0, status="responded")
    return ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="c0",
                                   tool_name="get_weather", state="succeeded",
                                   result_text=text)


# -- login -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/playground/", "/runs/", f"/runs/{RUN_ID}/",
                                  "/endpoints/", f"/runs/{RUN_ID}/calls/1/result.txt"])
def test_every_page_needs_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"


def test_the_pages_of_a_real_run_need_login_too(client: Client, bobs_run: Run) -> None:
    call = with_large_result(bobs_run, "x")
    for path in (f"/runs/{bobs_run.pk}/", f"/runs/{bobs_run.pk}/calls/{call.pk}/result.txt"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    response = client.post(f"/runs/{bobs_run.pk}/cancel/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    bobs_run.refresh_from_db()
    assert bobs_run.status == "queued"


def test_the_login_page_is_public(client: Client) -> None:
    assert client.get("/accounts/login/").status_code == 200


def test_every_page_has_the_favicon_and_the_old_name_leads_to_it(client: Client) -> None:
    page = client.get("/accounts/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    icon = finders.find("favicon.svg")
    assert icon is not None
    assert Path(icon).read_text().startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    response = client.get("/favicon.ico")  # no login needed: browsers ask before it
    assert (response.status_code, response["Location"]) == (301, "/static/favicon.svg")


def test_home_sends_a_user_to_the_playground(bob_client: Client) -> None:
    response = bob_client.get("/")
    assert (response.status_code, response["Location"]) == (302, "/playground/")


# -- playground ------------------------------------------------------------------------


def test_the_playground_lists_endpoints_tools_and_policies(
    bob_client: Client, weather_endpoint: ModelEndpoint, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    make_endpoint([{"text": "hi"}], name="second-endpoint")
    ErrorPolicy.objects.create(name="Strict policy")
    ToolRegistration.objects.filter(name="slow_tool").update(enabled=False)

    response = bob_client.get("/playground/")

    assert response.status_code == 200
    tree = Tree(response.content.decode())
    options = {e.attrs.get("value") for e in tree.tags("option")}
    assert {str(weather_endpoint.pk), str(policy.pk)} <= options
    html = response.content.decode()
    for name in ("weather", "second-endpoint", "Test policy", "Strict policy"):
        assert name in html
    boxes = {e.attrs.get("value") for e in tree.tags("input") if e.attrs.get("name") == "tools"}
    enabled = {str(t.pk) for t in demo_tools.values() if t.name != "slow_tool"}
    assert boxes == enabled
    assert "slow_tool" not in html


def test_posting_the_playground_starts_a_run_and_redirects_to_it(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, enqueued: list[str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = bob_client.post("/playground/", playground_post(
            weather_endpoint, policy, [demo_tools["get_weather"]]))

    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    assert (run.created_by, run.status, run.title) == (bob, "queued", "Weather in Paris?")
    assert [t["name"] for t in run.snapshot["tools"]] == ["get_weather"]
    assert [m["type"] for m in run.snapshot["messages"]] == ["system", "user"]
    assert run.snapshot["parameters"]["tool_choice"] == "auto"
    assert enqueued == [str(run.pk)]


def test_an_htmx_post_gets_an_hx_redirect(
    bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [demo_tools["get_weather"]]), headers={"HX-Request": "true"})

    run = Run.objects.get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/runs/{run.pk}/"


def test_a_named_tool_choice_is_frozen_into_the_run(
    bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [demo_tools["get_weather"], demo_tools["calculator"]],
        tool_choice="named", tool_choice_name=" calculator ", max_round_trips="7", parallel=""))
    assert response.status_code == 302
    run = Run.objects.get()
    assert run.snapshot["parameters"]["tool_choice"] == {"name": "calculator"}
    assert run.snapshot["policy"]["max_round_trips"] == 7
    assert run.snapshot["policy"]["parallel"] is False


def test_the_playground_remembers_the_inputs_per_user(
    bob_client: Client, alice_client: Client, weather_endpoint: ModelEndpoint,
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    other = make_endpoint([{"text": "hi"}], name="other")
    strict = ErrorPolicy.objects.create(name="Strict policy")
    chosen = [demo_tools["calculator"], demo_tools["lookup_order"]]
    bob_client.post("/playground/", playground_post(
        other, strict, chosen, user_message="Bob's own question 42", system_prompt="Sys 7",
        tool_choice="required"))

    tree = Tree(bob_client.get("/playground/").content.decode())

    selected = {(e.parent.attrs.get("name") if e.parent else None, e.attrs.get("value"))
                for e in tree.tags("option") if "selected" in e.attrs}
    assert ("endpoint", str(other.pk)) in selected
    assert ("policy", str(strict.pk)) in selected
    assert ("tool_choice", "required") in selected
    checked = {e.attrs.get("value") for e in tree.tags("input")
               if e.attrs.get("name") == "tools" and "checked" in e.attrs}
    assert checked == {str(t.pk) for t in chosen}
    texts = [t.strip() for t, _ in tree.texts]
    assert "Bob's own question 42" in texts
    assert "Sys 7" in texts

    alices = alice_client.get("/playground/").content.decode()
    assert "Bob's own question 42" not in alices
    assert "Sys 7" not in alices
    assert PlaygroundState.objects.filter(user__username="alice").count() == 0


def test_a_missing_user_message_is_a_form_error(
    bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [demo_tools["get_weather"]], user_message=""))

    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert not Run.objects.exists()
    assert not PlaygroundState.objects.exists()


@pytest.mark.parametrize("fields", [
    {"max_round_trips": "0"}, {"max_round_trips": "5000"}, {"max_round_trips": "many"},
    {"break_before_round": "0"}, {"break_before_tool": "t" * 201},
    {"break_if_tool": "t" * 201, "break_if_pointer": "/p" * 251, "break_if_value": "1"},
    {"tools": ["00000000-0000-0000-0000-000000000000"]}, {"policy": "nope"},
    {"tool_choice": "sometimes"}, {"input_mode": "other"}, {"system_prompt": "s" * 50_001},
    {"user_message": "u" * 50_001},
])
def test_every_field_the_server_refuses_says_why_on_the_page(
    bob_client: Client, weather_endpoint: ModelEndpoint, policy: ErrorPolicy,
    fields: dict[str, Any],
) -> None:
    data = playground_post(weather_endpoint, policy, []) | fields
    form = PlaygroundForm(data)
    assert not form.is_valid()
    assert set(form.errors) >= set(fields) - {"break_if_value"}

    response = bob_client.post("/playground/", data)

    page = Tree(response.content.decode())
    shown = " ".join(text for text, element in page.texts if element is not None
                     and "error" in (element.attrs.get("class") or "").split())
    for field, messages in form.errors.items():
        for message in messages:
            assert message in shown, (field, message, shown)
    assert "This field is required." not in shown
    breakpoints = next(e for e in page.tags("details") if "breakpoints" in e.attrs["class"])
    assert ("open" in breakpoints.attrs) == any(f.startswith("break_") for f in fields)
    assert not Run.objects.exists()


@pytest.mark.parametrize(("name", "tools", "error"), [
    ("get_weather", [], "&#x27;get_weather&#x27; is not among the selected tools."),
    ("calculator", ["get_weather"], "&#x27;calculator&#x27; is not among the selected tools."),
    ("", ["get_weather"], "Name the tool the model must call."),
])
def test_a_named_tool_choice_needs_a_selected_tool(
    bob_client: Client, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    name: str, tools: list[str], error: str,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [demo_tools[t] for t in tools],
        tool_choice="named", tool_choice_name=name))

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Run.objects.exists()


def test_a_blank_user_message_is_a_form_error(
    bob_client: Client, weather_endpoint: ModelEndpoint, policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [], user_message=" \n  "))
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert not Run.objects.exists()


# -- runs list -------------------------------------------------------------------------


@pytest.fixture
def many_runs(bob: AbstractUser, charlie: AbstractUser, weather_endpoint: ModelEndpoint,
              policy: ErrorPolicy) -> list[Run]:
    """30 runs of bob (bob-00 oldest ... bob-29 newest) and 2 of charlie, made between
    bob-10 and bob-11."""
    start = timezone.now() - timedelta(hours=1)
    runs = []
    for i in range(30):
        run = start_run(bob, weather_endpoint, [], policy, text=f"bob-{i:02d}")
        Run.objects.filter(pk=run.pk).update(created_at=start + timedelta(minutes=i))
        runs.append(run)
    for i in range(2):
        run = start_run(charlie, weather_endpoint, [], policy, text=f"charlie-{i}")
        Run.objects.filter(pk=run.pk).update(created_at=start + timedelta(minutes=10,
                                                                          seconds=20 + 20 * i))
    return runs


def titles(response: Any) -> list[str]:
    return re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>', response.content.decode())


def older_link(response: Any) -> str:
    found = re.findall(r'<a href="(\?[^"]*)" rel="next">', response.content.decode())
    assert len(found) == 1, "no link to older runs"
    return found[0].replace("&amp;", "&")


def test_the_runs_list_shows_my_runs_newest_first_in_pages(
    bob_client: Client, many_runs: list[Run],
) -> None:
    first = bob_client.get("/runs/")
    second = bob_client.get("/runs/" + older_link(first))

    assert titles(first) == [f"bob-{i:02d}" for i in range(29, 4, -1)]
    assert titles(second) == [f"bob-{i:02d}" for i in range(4, -1, -1)]
    assert 'rel="next"' not in second.content.decode()  # the last page
    assert 'href="?">← Newest</a>' in second.content.decode()


def test_another_user_sees_only_their_own_runs(
    charlie: AbstractUser, many_runs: list[Run],
) -> None:
    client = Client()
    client.force_login(charlie)
    assert titles(client.get("/runs/")) == ["charlie-1", "charlie-0"]


def test_staff_sees_every_run(alice_client: Client, many_runs: list[Run]) -> None:
    first = alice_client.get("/runs/")
    seen = titles(first) + titles(alice_client.get("/runs/" + older_link(first)))
    assert len(seen) == 32
    assert seen[:19] == [f"bob-{i:02d}" for i in range(29, 10, -1)]
    assert seen[19:22] == ["charlie-1", "charlie-0", "bob-10"]


def test_an_empty_runs_list_points_to_the_playground(bob_client: Client) -> None:
    html = bob_client.get("/runs/").content.decode()
    assert "No runs yet" in html


# -- a run's page, cancel, download ----------------------------------------------------


def test_the_run_page_is_404_for_another_users_run(
    bobs_run: Run, charlie: AbstractUser, bob_client: Client, alice_client: Client,
) -> None:
    client = Client()
    client.force_login(charlie)
    assert client.get(f"/runs/{bobs_run.pk}/").status_code == 404
    assert client.get(f"/runs/{RUN_ID}/").status_code == 404
    assert bob_client.get(f"/runs/{bobs_run.pk}/").status_code == 200
    assert alice_client.get(f"/runs/{bobs_run.pk}/").status_code == 200


def test_a_run_page_opens_the_socket_a_finished_one_too_for_its_children(
    bob_client: Client, bobs_run: Run,
) -> None:
    tree = Tree(bob_client.get(f"/runs/{bobs_run.pk}/").content.decode())
    timeline = tree.by_id("timeline")
    assert timeline.attrs.get("ws-connect") == f"/ws/runs/{bobs_run.pk}/"
    assert timeline.attrs.get("hx-ext") == "ws"
    assert timeline.attrs.get("data-initial-seq") == "1"
    assert "live-state" in tree.ids()
    # A finished run's page still listens: the runs made from it arrive live
    # (tests/live/test_lineage_live.py); it shows no connection banner.
    Run.objects.filter(pk=bobs_run.pk).update(status="succeeded")
    tree = Tree(bob_client.get(f"/runs/{bobs_run.pk}/").content.decode())
    assert tree.by_id("timeline").attrs.get("ws-connect") == f"/ws/runs/{bobs_run.pk}/"
    assert "live-state" not in tree.ids()


def test_cancelling_a_queued_run(bob_client: Client, bobs_run: Run) -> None:
    page = bob_client.get(f"/runs/{bobs_run.pk}/").content.decode()
    assert f'action="/runs/{bobs_run.pk}/cancel/"' in page

    response = bob_client.post(f"/runs/{bobs_run.pk}/cancel/")

    assert (response.status_code, response["Location"]) == (302, f"/runs/{bobs_run.pk}/")
    bobs_run.refresh_from_db()
    assert bobs_run.status == "cancelled"
    assert bobs_run.finished_at is not None
    page = bob_client.get(f"/runs/{bobs_run.pk}/").content.decode()
    assert 'data-status="cancelled"' in page
    assert "/cancel/" not in page


def test_cancel_needs_post_a_csrf_token_and_the_runs_owner(
    bobs_run: Run, bob: AbstractUser, charlie: AbstractUser,
) -> None:
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(bob)
    assert owner.get(f"/runs/{bobs_run.pk}/cancel/").status_code == 405
    assert owner.post(f"/runs/{bobs_run.pk}/cancel/").status_code == 403
    stranger = Client()
    stranger.force_login(charlie)
    assert stranger.post(f"/runs/{bobs_run.pk}/cancel/").status_code == 404
    bobs_run.refresh_from_db()
    assert bobs_run.status == "queued"
    owner.get(f"/runs/{bobs_run.pk}/")
    token = owner.cookies["csrftoken"].value
    assert owner.post(f"/runs/{bobs_run.pk}/cancel/",
                      headers={"X-CSRFToken": token}).status_code == 302
    bobs_run.refresh_from_db()
    assert bobs_run.status == "cancelled"


def test_a_large_result_is_downloaded_as_plain_text(
    bob_client: Client, bobs_run: Run,
) -> None:
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    text = "<script>alert(1)</script>\n" + "é" * (limit + 500) + "THE-END"
    call = with_large_result(bobs_run, text)
    url = f"/runs/{bobs_run.pk}/calls/{call.pk}/result.txt"

    page = bob_client.get(f"/runs/{bobs_run.pk}/").content.decode()
    assert f'href="{url}"' in page
    assert "THE-END" not in page  # the page shows only the head
    assert "<script>alert(1)" not in page

    response = bob_client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="call-{call.pk}-result.txt"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content.decode("utf-8") == text


def test_a_result_download_is_404_for_another_users_run_or_another_runs_call(
    bobs_run: Run, charlie: AbstractUser, weather_endpoint: ModelEndpoint,
    policy: ErrorPolicy, bob_client: Client,
) -> None:
    call = with_large_result(bobs_run, "secret result")
    stranger = Client()
    stranger.force_login(charlie)
    assert stranger.get(f"/runs/{bobs_run.pk}/calls/{call.pk}/result.txt").status_code == 404
    charlies = start_run(charlie, weather_endpoint, [], policy)
    response = stranger.get(f"/runs/{charlies.pk}/calls/{call.pk}/result.txt")
    assert response.status_code == 404
    assert b"secret result" not in response.content
    assert bob_client.get(f"/runs/{bobs_run.pk}/calls/{call.pk + 1000}/result.txt"
                          ).status_code == 404


# -- browser-side hardening ------------------------------------------------------------


def csp_nonce(response: Any) -> str:
    header = response["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in header.split(";") if d.strip())
    assert "'unsafe-inline'" not in header
    assert "'unsafe-eval'" not in header
    match = re.fullmatch(r"'self' 'nonce-([A-Za-z0-9+/=_-]{16,})'", directives["script-src"])
    assert match, directives["script-src"]
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    return match.group(1)


def test_the_run_page_scripts_carry_the_csp_nonce_and_come_from_static(
    bob_client: Client, bobs_run: Run,
) -> None:
    response = bob_client.get(f"/runs/{bobs_run.pk}/")
    nonce = csp_nonce(response)
    html = response.content.decode()

    scripts = Tree(html).tags("script")
    srcs = [s.attrs.get("src") or "" for s in scripts]
    assert "/static/vendor/htmx.min.js" in srcs
    assert "/static/vendor/htmx-ext-ws.min.js" in srcs
    assert "/static/js/timeline.js" in srcs
    for script in scripts:
        assert script.attrs.get("nonce") == nonce
        assert (script.attrs.get("src") or "").startswith("/static/")
    inline = re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.DOTALL)
    assert inline == [""] * len(scripts)  # no inline code at all
    assert not re.search(r"https?://[^\"']*(unpkg|jsdelivr|cdnjs|cdn)", html)
    for src in srcs:
        assert (settings.BASE_DIR / "static" / src.removeprefix("/static/")).is_file()


def test_each_response_gets_a_fresh_nonce(bob_client: Client, bobs_run: Run) -> None:
    first = csp_nonce(bob_client.get(f"/runs/{bobs_run.pk}/"))
    second = csp_nonce(bob_client.get(f"/runs/{bobs_run.pk}/"))
    assert first != second


@pytest.mark.parametrize("path", ["/playground/", "/runs/", "/endpoints/"])
def test_every_page_has_a_csp_and_no_inline_script(
    bob_client: Client, path: str, weather_endpoint: ModelEndpoint, policy: ErrorPolicy,
) -> None:
    response = bob_client.get(path)
    assert response.status_code == 200
    assert "script-src 'self'" in response["Content-Security-Policy"]
    html = response.content.decode()
    for script in Tree(html).tags("script"):
        assert (script.attrs.get("src") or "").startswith("/static/")
    assert not re.findall(r"<script\b(?![^>]*\bsrc=)", html)
    assert response["X-Frame-Options"] == "DENY"


def test_the_htmx_config_is_locked_down(bob_client: Client, bobs_run: Run) -> None:
    tree = Tree(bob_client.get(f"/runs/{bobs_run.pk}/").content.decode())
    metas = [m for m in tree.tags("meta") if m.attrs.get("name") == "htmx-config"]
    assert len(metas) == 1
    config = json.loads(metas[0].attrs["content"] or "")
    assert config["selfRequestsOnly"] is True
    assert config["allowScriptTags"] is False
    assert config["allowEval"] is False


def test_the_vendored_htmx_is_the_real_library() -> None:
    htmx = (settings.BASE_DIR / "static" / "vendor" / "htmx.min.js").read_text()
    ws = (settings.BASE_DIR / "static" / "vendor" / "htmx-ext-ws.min.js").read_text()
    assert "htmx" in htmx
    assert len(htmx) > 10_000
    assert "ws-connect" in ws


@pytest.mark.parametrize("finished", [False, True])
def test_no_template_syntax_leaks_into_a_run_page(
    bob_client: Client, bobs_run: Run, finished: bool,
) -> None:
    """Django's {# #} comments are one line only: a multi-line one is printed as text."""
    if finished:
        async_to_sync(execute_run)(str(bobs_run.pk))
    html = bob_client.get(f"/runs/{bobs_run.pk}/").content.decode()
    pages = [html] + [bob_client.get(path).content.decode()
                      for path in ("/playground/", "/runs/", "/endpoints/")]
    for page in pages:
        for syntax in ("{#", "#}", "{%", "%}", "{{", "}}"):
            assert syntax not in page


@pytest.mark.parametrize("target", ["playground", "cancel", "rerun", "probe", "logout"])
@pytest.mark.parametrize("token", ["missing", "wrong"])
def test_every_state_changing_post_needs_a_valid_csrf_token(
    bob: AbstractUser, bobs_run: Run, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy, target: str, token: str,
) -> None:
    """A page on another site cannot start, cancel, rerun or probe anything with the
    user's cookies (nor log them out)."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(bob)
    assert browser.get("/playground/").status_code == 200  # sets the CSRF cookie
    path = {"playground": "/playground/", "cancel": f"/runs/{bobs_run.pk}/cancel/",
            "rerun": f"/runs/{bobs_run.pk}/rerun/",
            "probe": f"/endpoints/{weather_endpoint.pk}/probe/",
            "logout": "/accounts/logout/"}[target]
    data: dict[str, Any] = {"endpoint": str(weather_endpoint.pk), "user_message": "hi",
                            "tools": [str(demo_tools["get_weather"].pk)],
                            "policy": str(policy.pk)}
    if token == "wrong":
        data["csrfmiddlewaretoken"] = "x" * 64
    runs_before = Run.objects.count()

    response = browser.post(path, data)

    assert response.status_code == 403
    assert Run.objects.count() == runs_before
    bobs_run.refresh_from_db()
    assert bobs_run.status == "queued"
    assert browser.get("/runs/").status_code == 200  # still logged in
