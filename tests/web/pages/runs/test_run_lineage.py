"""The run page leads with the run (its header, the actions beside it, what it came from
below), and lineage you can follow: badges on the page and in /runs/, and a parent's
list of the runs made from it, with their mode, status and time."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import Tree, start_run
from tools_app.models import ErrorPolicy, Run, ToolRegistration
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.runs.debugger.tryit import tryit_create

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)>"


def page_of(client: Client, run: Run) -> str:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def lineage_kinds(tree: Tree, inside: str) -> list[str | None]:
    box = tree.by_id(inside)
    return [e.attrs.get("data-lineage") for e in tree.elements
            if "data-lineage" in e.attrs and box in e.ancestors_or_self()]


def test_the_page_leads_with_the_header_and_its_actions(bob_client: Client, bob: AbstractUser,
                                                       finished: Run) -> None:
    child = run_rerun(run=finished, user=bob, mode="as_it_was")
    page = page_of(bob_client, child)
    tree = Tree(page)

    # The header first, then where the run came from, then its conversation and rounds.
    order = [page.index(f'id="{name}"') for name in (
        "run-actions", "run-header", "run-lineage", "start-conversation", "rounds")]
    assert order == sorted(order)
    header = tree.by_id("run-header")
    assert header.parent is not None
    assert header.parent is tree.by_id("run-actions").parent
    # Rerun, fork and export in the one action bar.
    bar = tree.by_id("run-actions")
    for name in ("rerun-form", "export-run"):
        assert bar in tree.by_id(name).ancestors_or_self()
    assert 'id="fork-form"' not in page  # the rerun has not run: no round to fork from
    assert bar in tree.by_id("fork-from-round").ancestors_or_self()
    assert "csrfmiddlewaretoken" not in page[page.index('id="run-header"'):
                                             page.index('id="run-lineage"')]
    assert lineage_kinds(tree, "run-header") == ["rerun"]
    assert tree.by_id("lineage-origin").attrs["data-made"] == "rerun"
    assert "Rerun of " in page
    assert "</a> · as it was · <a" in page


def test_the_fork_form_is_in_the_action_bar_once_the_run_has_rounds(
    bob_client: Client, finished: Run,
) -> None:
    tree = Tree(page_of(bob_client, finished))

    assert tree.by_id("run-actions") in tree.by_id("fork-form").ancestors_or_self()
    assert "run-lineage" not in tree.ids()  # a run from the playground: no lineage
    assert "run-badges" not in tree.ids()


def test_a_run_that_succeeded_with_errors_says_so_beside_its_status(
    bob_client: Client, bob: AbstractUser, make_endpoint: Any,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    endpoint = make_endpoint([
        {"tool_calls": [{"name": "always_fails", "arguments": {"reason": "down"}},
                        {"name": "always_fails", "arguments": {"reason": "again"}}]},
        {"text": "done anyway"}], name="failing twice")
    run = start_run(bob, endpoint, [demo_tools["always_fails"]], policy, "Try")
    assert execute(run) == "succeeded"

    tree = Tree(page_of(bob_client, run))

    note = tree.by_id("status-note")
    assert [t for t, e in tree.texts if e is note] == ["with 2 errors"]
    badge = next(e for e in tree.elements if "data-status" in e.attrs
                 and tree.by_id("run-header") in e.ancestors_or_self())
    assert badge.attrs["data-status"] == "succeeded"
    assert note.parent is badge.parent


def test_a_parent_lists_its_children_with_their_mode_status_and_time(
    bob_client: Client, bob: AbstractUser, finished: Run,
) -> None:
    plain = run_rerun(run=finished, user=bob, mode="as_it_was")
    assert execute(plain) == "succeeded"
    replay = run_rerun(run=finished, user=bob, mode="as_it_was",
                       replay=ReplayOptions(model="recorded", tools="live"))

    tree = Tree(page_of(bob_client, finished))

    items = [e for e in tree.elements
             if e.tag == "li" and e.parent is not None and e.parent.parent is not None
             and e.parent.parent.attrs.get("id") == "run-children"]
    assert [e.attrs["data-child-kind"] for e in items] == ["replay", "rerun"]
    links = {e.attrs["href"]: e for e in tree.elements if e.tag == "a" and e.parent in items}
    assert set(links) == {f"/runs/{replay.pk}/", f"/runs/{plain.pk}/"}
    texts = [t for t, e in tree.texts if e in links.values()]
    assert texts[0].startswith("Replay · as it was · replay model recorded, tools live, "
                               "stops where it diverges · queued · ")
    assert texts[1].startswith("Rerun · as it was · succeeded · ")
    assert lineage_kinds(tree, "run-children") == ["replay", "rerun"]


def test_a_child_s_own_title_is_escaped_in_its_parent_s_list(
    bob_client: Client, bob: AbstractUser, finished: Run,
) -> None:
    run_rerun(run=finished, user=bob, mode="as_it_was", title=HOSTILE)

    page = page_of(bob_client, finished)

    assert HOSTILE not in page
    assert "“&lt;img src=x onerror=alert(1)&gt;”" in page


def test_a_parent_lists_only_the_children_its_viewer_may_see(
    bob_client: Client, alice: AbstractUser, finished: Run,
) -> None:
    run_rerun(run=finished, user=alice, mode="as_it_was")  # staff reran bob's run

    assert "run-children" not in Tree(page_of(bob_client, finished)).ids()


def test_the_runs_list_shows_each_run_s_badges_in_its_title_cell(
    bob_client: Client, bob: AbstractUser, finished: Run,
    demo_tools: dict[str, ToolRegistration],
) -> None:
    rerun = run_rerun(run=finished, user=bob, mode="as_it_was")
    tryit = tryit_create(user=bob, tool=demo_tools["calculator"],
                         arguments={"expression": "1+1"})

    page = bob_client.get("/runs/").content.decode()
    tree = Tree(page)

    def badges_of(run: Run) -> list[str | None]:
        return lineage_kinds(tree, f"run-row-{run.pk}")

    assert badges_of(finished) == []
    assert badges_of(rerun) == ["rerun"]
    if f"run-row-{tryit.pk}" in tree.ids():  # try-it runs may be hidden from the list
        assert badges_of(tryit) == ["tryit"]
    # The row's own update (it polls while the run goes on) shows them too.
    row = Tree(bob_client.get(f"/runs/{rerun.pk}/row/").content.decode())
    assert lineage_kinds(row, f"run-row-{rerun.pk}") == ["rerun"]
