"""The runs list's try-it filter (hidden on the page unless asked; GET /api/runs lists
them unless asked), its sorts by start, duration and errors (keyset pages in each order,
runs without a duration last both ways, a cursor kept to its sort, the same order from
the index or sorted in memory) and the count of its selection (exact, "more than", or
not counted when the deadline stops it)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone

from tests.web.support import Api, Tree, error_of, start_run
from tools_app.audit import run_filters
from tools_app.audit.run_filters import filtered_runs
from tools_app.audit.run_totals import Tally, run_total
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunStatus, ToolRegistration
from tools_app.runs.debugger.rerun import run_rerun
from tools_app.runs.debugger.tryit import tryit_create
from tools_app.runs.store import selectors
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

# name: (hours ago, wall ms, errors); None: still running (no duration)
SHAPES = {"a": (6, 300.0, 0), "b": (5, 1200.0, 2), "c": (4, None, 0), "d": (3, 300.0, 1),
          "e": (2, 50.0, 2)}


@pytest.fixture
def world(bob: AbstractUser, weather_endpoint: ModelEndpoint,
          demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> dict[str, Run]:
    """bob's five runs of known start, duration and errors, and his try-it run (the
    newest)."""
    runs = {name: start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy,
                            f"Run {name}") for name in SHAPES}
    now = timezone.now()
    for name, (hours, wall_ms, errors) in SHAPES.items():
        Run.objects.filter(pk=runs[name].pk).update(
            created_at=now - timedelta(hours=hours), wall_ms=wall_ms, errors_count=errors,
            status=RunStatus.RUNNING if wall_ms is None else RunStatus.SUCCEEDED)
    runs["tryit"] = tryit_create(user=bob, tool=demo_tools["calculator"],
                                 arguments={"expression": "6*7"})
    return {name: Run.objects.get(pk=run.pk) for name, run in runs.items()}


def names(world: dict[str, Run], found: list[Any]) -> list[str]:
    by_id = {str(run.pk): name for name, run in world.items()}
    return [by_id[str(i)] for i in found]


def api_pages(api: Api, query: str, limit: int = 2) -> list[list[str]]:
    """Every page of GET /api/runs?<query>, `limit` runs each, following next_cursor."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        suffix = f"&cursor={cursor}" if cursor else ""
        body = api.get(f"/api/runs?{query}&limit={limit}{suffix}").json()
        pages.append([r["id"] for r in body["runs"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


# -- try-it runs --------------------------------------------------------------------------


def test_a_try_it_run_and_its_reruns_are_marked_when_stored(
    bob: AbstractUser, world: dict[str, Run],
) -> None:
    assert world["tryit"].is_tryit is True
    assert not any(run.is_tryit for name, run in world.items() if name != "tryit")
    assert run_rerun(run=world["tryit"], user=bob, mode="as_it_was").is_tryit is True
    assert run_rerun(run=world["a"], user=bob, mode="as_it_was").is_tryit is False


def test_the_api_lists_try_it_runs_unless_asked_not_to(bob: AbstractUser,
                                                       world: dict[str, Run]) -> None:
    api = Api(create_token(bob, "ci")[1])
    every = [r["id"] for r in api.get("/api/runs").json()["runs"]]
    assert names(world, every) == ["tryit", "e", "d", "c", "b", "a"]
    assert names(world, [r["id"] for r in api.get("/api/runs?tryit=false").json()["runs"]]) \
        == ["e", "d", "c", "b", "a"]
    assert names(world, [r["id"] for r in api.get("/api/runs?tryit=true").json()["runs"]]) \
        == ["tryit"]
    assert len(api.get("/api/runs?tryit=any").json()["runs"]) == 6
    error = error_of(api.get("/api/runs?tryit=maybe"), 400)
    assert (error["field"], error["message"]) == (
        "tryit", "tryit must be one of any, true, false, not 'maybe'")


def test_the_page_hides_try_it_runs_unless_asked(bob_client: Client,
                                                 world: dict[str, Run]) -> None:
    page = bob_client.get("/runs/").content.decode()
    assert f"run-row-{world['tryit'].pk}" not in page
    assert _total(page) == "5 runs"
    tree = Tree(page)
    hidden = tree.by_id("tryit-hidden")
    link = next(e for e in tree.elements if e.tag == "a" and e.parent is hidden)
    assert link.attrs["href"] == "?tryit=any"
    # the exports list what the page lists
    assert 'href="/runs/export.csv?tryit=false"' in page

    shown = bob_client.get("/runs/?tryit=any").content.decode()
    assert f"run-row-{world['tryit'].pk}" in shown
    assert _total(shown) == "6 runs"
    assert 'id="tryit-hidden"' not in shown
    assert '<option value="any" selected>shown</option>' in shown
    only = bob_client.get("/runs/?tryit=true").content.decode()
    assert re.findall(r'id="run-row-([0-9a-f-]{36})"', only) == [str(world["tryit"].pk)]


def test_runs_waiting_for_the_user_include_try_it_runs(bob_client: Client,
                                                       world: dict[str, Run]) -> None:
    Run.objects.filter(pk=world["tryit"].pk).update(status=RunStatus.WAITING)
    page = bob_client.get("/runs/?waiting_for_me=true").content.decode()
    assert re.findall(r'id="run-row-([0-9a-f-]{36})"', page) == [str(world["tryit"].pk)]


# -- sorts --------------------------------------------------------------------------------


def in_order(world: dict[str, Run], sort: str, tryit: bool = False) -> list[str]:
    """The names of the runs (`tryit`: the try-it run too) in `sort`'s order, ties by id
    the same way; runs without a duration (keyed -1) last both ways."""
    field, descending = sort.lstrip("-"), sort.startswith("-")

    def key(run: Run) -> Any:
        return {"started": run.created_at.timestamp(), "errors": run.errors_count,
                "duration": -1.0 if run.wall_ms is None else run.wall_ms}[field]

    runs = sorted((run for name, run in world.items() if tryit or name != "tryit"),
                  key=lambda run: (key(run), str(run.pk)), reverse=descending)
    if field == "duration":
        runs = [r for r in runs if r.wall_ms is not None] + [r for r in runs if r.wall_ms is None]
    return names(world, [run.pk for run in runs])


@pytest.mark.parametrize("sort", ["-started", "started", "-duration", "duration", "-errors",
                                  "errors"])
def test_every_sort_pages_through_every_run_once_in_order(
    bob: AbstractUser, world: dict[str, Run], sort: str,
) -> None:
    expected = in_order(world, sort)
    if sort in ("-duration", "duration"):  # no duration: last both ways
        assert expected[-1] == "c"
    first = {"-started": "e", "started": "a", "-duration": "b", "duration": "e"}
    assert expected[0] == first.get(sort, expected[0])
    if sort in ("-errors", "errors"):  # b and e have 2, d 1, a and c none
        assert {expected[0], expected[1]} == ({"b", "e"} if sort == "-errors" else {"a", "c"})
    api = Api(create_token(bob, "ci")[1])
    for limit in (1, 2, 5):
        pages = api_pages(api, f"tryit=false&sort={sort}", limit)
        assert [name for page in pages for name in names(world, page)] == expected, limit
    # both kinds (the API's default), the try-it run among them
    both = [name for page in api_pages(api, f"sort={sort}", 2) for name in names(world, page)]
    assert both == in_order(world, sort, tryit=True)
    # the same order sorted in memory (few matches) as read from the sort's index
    visible = selectors.run_list_for_user(bob)
    for matches in (None, 5):
        cursor: str | None = None
        seen: list[Any] = []
        while True:
            params = {"tryit": "false", "sort": sort, "limit": "2"} | (
                {"cursor": cursor} if cursor else {})
            page = filtered_runs(visible, params, matches=matches)
            seen += [run.pk for run in page.runs]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert names(world, seen) == expected, matches


def test_a_cursor_serves_only_its_own_sort(bob: AbstractUser, world: dict[str, Run]) -> None:
    api = Api(create_token(bob, "ci")[1])
    cursor = api.get("/api/runs?sort=-errors&limit=1").json()["next_cursor"]
    error = error_of(api.get(f"/api/runs?sort=duration&limit=1&cursor={cursor}"), 400)
    assert error["field"] == "cursor"
    too_deep = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode()
    error = error_of(api.get(f"/api/runs?sort=duration&limit=1&cursor={too_deep}"), 400)
    assert error["field"] == "cursor"
    error = error_of(api.get("/api/runs?sort=title"), 400)
    assert (error["field"], error["message"]) == (
        "sort", "sort must be one of -started, started, -duration, duration, -errors, "
        "errors, not 'title'")


def test_the_column_heads_sort_and_keep_the_filters(bob_client: Client,
                                                    world: dict[str, Run]) -> None:
    page = Tree(bob_client.get("/runs/?status=succeeded").content.decode())
    heads = {e.attrs["data-sort"]: e for e in page.elements if "data-sort" in e.attrs}
    assert {k: v.attrs["href"] for k, v in heads.items()} == {
        "errors": "?status=succeeded&sort=-errors",
        "duration": "?status=succeeded&sort=-duration",
        "started": "?status=succeeded&sort=started"}  # newest first now: the other way
    assert heads["started"].parent is not None
    assert heads["started"].parent.attrs.get("aria-sort") == "descending"

    sorted_page = bob_client.get("/runs/?status=succeeded&sort=-errors").content.decode()
    tree = Tree(sorted_page)
    assert names(world, re.findall(r'id="run-row-([0-9a-f-]{36})"', sorted_page)) == [
        name for name in in_order(world, "-errors") if name != "c"]  # c runs still
    errors_head = next(e for e in tree.elements if e.attrs.get("data-sort") == "errors")
    assert errors_head.attrs["href"] == "?status=succeeded&sort=errors"
    assert errors_head.parent is not None
    assert errors_head.parent.attrs["aria-sort"] == "descending"
    # the filter form keeps the sort; the page says it
    assert '<input type="hidden" name="sort" value="-errors" form="run-filters">' in sorted_page
    total = tree.by_id("run-total")
    assert " ".join(t.strip() for t, e in tree.texts
                    if e is not None and total in e.ancestors_or_self()).startswith(
        "4 runs · errors, most first")


# -- the count ----------------------------------------------------------------------------


def test_the_count_is_capped_and_stops_in_time(bob: AbstractUser, bob_client: Client,
                                              world: dict[str, Run],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    visible = selectors.run_list_for_user(bob)
    def counted(kind: str, **params: str) -> int | None:
        return run_total(run_filters.matching_runs(visible, params), kind).value

    assert counted("false") == 5
    assert counted("false", status="queued") == 0  # the try-it run is queued
    assert counted("any", status="queued") == 1
    assert counted("true") == 1
    assert counted("any") == 6
    monkeypatch.setattr("tools_app.audit.run_totals.CAP", 5)
    assert run_total(run_filters.matching_runs(visible, {}), "false") == Tally(5)
    assert run_total(run_filters.matching_runs(visible, {}), "any") == Tally(5, more=True)
    monkeypatch.setattr("tools_app.audit.run_totals.CAP", 3)
    assert _total(bob_client.get("/runs/").content.decode()) == "More than 3 runs"
    monkeypatch.setattr("tools_app.audit.run_totals.deadline", _out_of_time)
    page = bob_client.get("/runs/").content.decode()
    assert _total(page).startswith("Not counted")
    # the list itself is still there, newest first
    assert len(re.findall(r'id="run-row-', page)) == 5


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plans")
def test_the_default_count_and_the_sorts_read_their_indexes(alice: AbstractUser,
                                                            world: dict[str, Run]) -> None:
    visible = selectors.run_list_for_user(alice)
    counted = run_filters.matching_runs(visible, {"tryit": "false"}).order_by().values("pk")
    plan = counted.explain()
    # an index alone, and the few try-it runs' ids from theirs
    assert "USING COVERING INDEX" in plan, plan
    assert "USING INDEX run_tryit_keyset" in plan, plan
    for sort, index in (("-duration", "run_duration"), ("errors", "run_errors")):
        runs = run_filters.matching_runs(visible, {"tryit": "false"})
        key = run_filters.SORTS[sort]
        ids = runs.alias(sort_key=key.key()).order_by(
            "-sort_key" if key.descending else "sort_key", "-pk" if key.descending else "pk")
        assert index in ids.values("pk").explain(), sort


@contextmanager
def _out_of_time(using: str, seconds: float) -> Iterator[None]:
    """audit.deadline, its time up at once: the database stops the count."""
    yield
    raise OperationalError("interrupted")


def _total(page: str) -> str:
    tree = Tree(page)
    total = tree.by_id("run-total")
    strong = next(e for e in tree.elements if e.tag == "strong" and e.parent is total)
    return " ".join(t for t, e in tree.texts if e is strong)
