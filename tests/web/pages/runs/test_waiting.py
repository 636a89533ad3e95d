""""Waiting for you": the navigation's count of runs waiting for a decision the user may
take (an approval or a breakpoint; staff: any run, others their own), the poll that
keeps it live (one query), and the runs filter it links to."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.web.support import Tree, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import services
from tools_app.runs.store.selectors import waiting_for
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.django_db


def paused_run(user: AbstractUser, endpoint: ModelEndpoint, tool: ToolRegistration,
               policy: ErrorPolicy) -> Run:
    run = services.run_create(user=user, endpoint=endpoint, tools=[tool], policy=policy,
                              messages=services.conversation(user_message="<b>Pause</b>"),
                              breakpoints=[{"kind": "before_round", "round": 2}])
    assert async_to_sync(execute_run)(str(run.pk)) == "waiting"
    return Run.objects.get(pk=run.pk)


@pytest.fixture
def runs(waiting: Run, alice: AbstractUser, charlie: AbstractUser, make_endpoint: Any,
         demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> dict[str, Run]:
    """bob's run waiting for approvals (the oldest wait), charlie's paused at a
    breakpoint (the newest), and charlie's run that finished."""
    calculator = demo_tools["calculator"]
    adds = make_endpoint([{"tool_calls": [{"name": "calculator",
                                           "arguments": {"expression": "1 + 1"}}]},
                          {"text": "2"}], name="adds")
    paused = paused_run(charlie, adds, calculator, policy)
    done = start_run(charlie, adds, [calculator], policy, "done")
    async_to_sync(execute_run)(str(done.pk))
    Run.objects.filter(pk=waiting.pk).update(
        waiting_since=timezone.now() - timedelta(minutes=5))
    return {"approval": Run.objects.get(pk=waiting.pk), "paused": paused,
            "done": Run.objects.get(pk=done.pk)}


def test_each_user_counts_the_runs_they_may_decide_on(
    runs: dict[str, Run], alice: AbstractUser, bob: AbstractUser, charlie: AbstractUser,
) -> None:
    assert runs["done"].status == "succeeded"
    mine = waiting_for(bob)
    assert mine.total == 1
    assert mine.newest is not None
    assert (mine.newest["id"], mine.newest["waits_for"], mine.newest["owner"]) == (
        str(runs["approval"].pk), "an approval", "bob")

    theirs = waiting_for(charlie)
    assert theirs.total == 1
    assert theirs.newest is not None
    assert (theirs.newest["id"], theirs.newest["title"], theirs.newest["waits_for"]) == (
        str(runs["paused"].pk), "<b>Pause</b>", "a breakpoint")

    staff = waiting_for(alice)  # staff may decide on any run: both, the newest first
    assert staff.total == 2
    assert staff.newest is not None
    assert staff.newest["id"] == str(runs["paused"].pk)


def test_nothing_waits_is_zero_and_no_run(alice: AbstractUser) -> None:
    assert tuple(waiting_for(alice)) == (0, None)


def test_the_count_is_one_query_on_the_status_index(
    runs: dict[str, Run], alice: AbstractUser, bob: AbstractUser,
) -> None:
    for user in (alice, bob):
        with CaptureQueriesContext(connection) as queries:
            waiting_for(user)
        [query] = queries.captured_queries
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN QUERY PLAN {query['sql']}")
                plan = " ".join(str(row[-1]) for row in cursor.fetchall())
            # the few waiting runs, never every run of the owner
            assert "tools_app_run USING INDEX run_status_keyset (status=?)" in plan, plan


def test_the_poll_answers_json_and_never_redirects(
    runs: dict[str, Run], bob_client: Client, client: Client,
) -> None:
    response = bob_client.get("/runs/waiting.json")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    state: dict[str, Any] = response.json()
    run = runs["approval"]
    assert state["count"] == 1
    assert state["newest"] == {
        "id": str(run.pk), "title": run.title, "owner": "bob", "waits_for": "an approval",
        "url": f"/runs/{run.pk}/",
        "since": int(run.waiting_since.timestamp() * 1000)}  # type: ignore[union-attr]

    signed_out = client.get("/runs/waiting.json")
    assert signed_out.status_code == 401  # the poll stops, no login page to parse
    assert bob_client.post("/runs/waiting.json").status_code == 405


def test_every_page_shows_the_count_in_the_navigation_with_its_link(
    runs: dict[str, Run], alice_client: Client, bob_client: Client, charlie: AbstractUser,
) -> None:
    charlie_client = Client()
    charlie_client.force_login(charlie)
    for who, page in (("alice", "/runs/"), ("bob", "/playground/"), ("charlie", "/calls/")):
        client = {"alice": alice_client, "bob": bob_client, "charlie": charlie_client}[who]
        tree = Tree(client.get(page).content.decode())
        link = tree.by_id("waiting-for-you")
        assert link.attrs["href"] == "/runs/?waiting_for_me=true"
        assert link.attrs["data-poll"] == "/runs/waiting.json"
        assert link.attrs["data-count"] == ("2" if who == "alice" else "1")
        assert "hidden" not in link.attrs
        assert "notify-me" in tree.ids()
        assert [e.attrs.get("src") for e in tree.tags("script")
                if "waiting" in (e.attrs.get("src") or "")] == ["/static/js/waiting.js"]


def test_the_link_is_hidden_while_nothing_waits(bob_client: Client, client: Client) -> None:
    link = Tree(bob_client.get("/runs/").content.decode()).by_id("waiting-for-you")
    assert (link.attrs["data-count"], link.attrs["data-newest-since"]) == ("0", "0")
    assert "hidden" in link.attrs
    login = client.get("/accounts/login/").content.decode()
    assert "waiting-for-you" not in login
    assert "waiting.js" not in login


def test_the_filter_lists_the_runs_waiting_for_you(
    runs: dict[str, Run], alice_client: Client, bob_client: Client,
) -> None:
    shown = alice_client.get("/runs/?waiting_for_me=true").content.decode()
    assert f"run-row-{runs['approval'].pk}" in shown
    assert f"run-row-{runs['paused'].pk}" in shown
    assert f"run-row-{runs['done'].pk}" not in shown
    form = Tree(shown)
    [chosen] = [e for e in form.tags("option") if "selected" in e.attrs
                and e.parent is not None and e.parent.attrs.get("name") == "waiting_for_me"]
    assert chosen.attrs["value"] == "true"

    others = alice_client.get("/runs/?waiting_for_me=false").content.decode()
    assert f"run-row-{runs['done'].pk}" in others
    assert f"run-row-{runs['paused'].pk}" not in others
    mine = bob_client.get("/runs/?waiting_for_me=true").content.decode()
    assert f"run-row-{runs['approval'].pk}" in mine
    assert f"run-row-{runs['paused'].pk}" not in mine
    bad = alice_client.get("/runs/?waiting_for_me=yes")
    assert bad.status_code == 400
    assert "waiting_for_me must be true or false" in bad.content.decode()


def test_the_api_and_the_exports_take_the_filter(
    runs: dict[str, Run], alice_client: Client, bob_api: Any,
) -> None:
    listed = bob_api.get("/api/runs?waiting_for_me=true").json()
    assert [r["id"] for r in listed["runs"]] == [str(runs["approval"].pk)]
    export = alice_client.get("/runs/export.jsonl?waiting_for_me=true")
    lines = b"".join(export.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 2
