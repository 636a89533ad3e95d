"""Tool pages (`/tools/`, `/tools/<name>/`): outcome rates, duration percentiles,
grouped errors, the calls-over-time chart and recent calls, checked against the known
audit world (numbers worked out by hand), for staff (every call) and for a user (only
their own calls). The statistics run on both databases: PostgreSQL computes the
percentiles with percentile_cont, SQLite with ordered offset reads; both must agree."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.utils import timezone

from tests.web import audit_world
from tests.web.support import PAYLOAD, Tree, inside_hx_disable
from tools_app.audit.selectors import calls_for_user
from tools_app.audit.tool_stats import tool_stats
from tools_app.audit.tools_overview import tools_overview
from tools_app.models import ToolCall

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(alice: AbstractUser, bob: AbstractUser, charlie: AbstractUser) -> dict[str, Any]:
    return audit_world.build({"bob": bob, "charlie": charlie})


@pytest.mark.both
def test_the_statistics_of_every_call_for_staff(alice: AbstractUser,
                                                world: dict[str, Any]) -> None:
    stats = tool_stats(calls_for_user(alice).filter(tool_name="get_weather"))

    assert (stats.calls, stats.errors) == (6, 3)
    assert [(o.name, o.count, round(o.rate, 4)) for o in stats.outcomes] == [
        ("execution_error", 2, 0.3333), ("ok", 2, 0.3333), ("in_progress", 1, 0.1667),
        ("timeout", 1, 0.1667)]
    # durations 10, 30, 50, 200, 1000 (one call without): ranks 2, 3.8 and 3.96
    assert stats.percentiles == pytest.approx({"p50": 50.0, "p95": 840.0, "p99": 968.0})
    assert [(g.error_type, g.message, g.count) for g in stats.top_errors] == [
        ("ToolExecutionError", "HTTP 500 from weather", 2),
        ("ToolExecutionError", "timed out after 1 s", 1)]
    assert stats.top_errors[0].last_call_id == world["b2"].pk
    assert stats.bucket_unit == "hour"
    assert [(b.start, b.calls, b.errors) for b in stats.buckets] == [
        (audit_world.at(0), 2, 1), (audit_world.at(120), 2, 2), (audit_world.at(180), 2, 0)]


@pytest.mark.both
def test_a_users_statistics_count_only_their_own_calls(bob: AbstractUser,
                                                       world: dict[str, Any]) -> None:
    stats = tool_stats(calls_for_user(bob).filter(tool_name="get_weather"))

    assert (stats.calls, stats.errors) == (4, 3)
    # durations 10, 50, 200, 1000: ranks 1.5, 2.85, 2.97
    assert stats.percentiles == pytest.approx({"p50": 125.0, "p95": 880.0, "p99": 976.0})
    assert [(b.calls, b.errors) for b in stats.buckets] == [(2, 1), (2, 2)]


@pytest.mark.both
def test_statistics_of_no_calls_and_of_calls_without_durations(
    charlie: AbstractUser, world: dict[str, Any],
) -> None:
    assert tool_stats(calls_for_user(charlie).filter(tool_name="calculator")) == tool_stats(
        ToolCall.objects.none())
    nothing = tool_stats(ToolCall.objects.none())
    assert (nothing.calls, nothing.errors, nothing.buckets) == (0, 0, [])
    assert nothing.percentiles == {"p50": None, "p95": None, "p99": None}
    # A hallucinated call never started: it is counted at its run's creation.
    ghost = tool_stats(ToolCall.objects.filter(tool_name="ghost"))
    assert ghost.percentiles["p50"] is None
    assert [(b.start, b.calls, b.errors) for b in ghost.buckets] == [(audit_world.at(120), 1, 1)]


def test_long_spans_are_drawn_per_day(alice: AbstractUser, world: dict[str, Any]) -> None:
    ToolCall.objects.filter(pk=world["c1"].pk).update(started_at=audit_world.at(60 * 24 * 5))
    stats = tool_stats(calls_for_user(alice).filter(tool_name="get_weather"))
    assert stats.bucket_unit == "day"
    assert [(b.calls, b.errors) for b in stats.buckets] == [(5, 3), (1, 0)]


@pytest.mark.both
def test_the_statistics_are_a_fixed_number_of_queries(
    alice: AbstractUser, world: dict[str, Any], django_assert_num_queries: Any,
) -> None:
    for n in range(30):  # more calls change no query count
        audit_world._call(world["a"], world["a"].rounds.get(), 10 + n, audit_world.Call(
            f"x{n}", "get_weather", "succeeded", float(n), n))
    calls = calls_for_user(alice).filter(tool_name="get_weather")
    # totals, outcomes, the percentiles (PostgreSQL: one aggregate; SQLite: a count and
    # one read per percentile), top errors, time bounds, buckets
    percentiles = 1 if connection.vendor == "postgresql" else 4
    with django_assert_num_queries(5 + percentiles):
        tool_stats(calls)


def points(html: str) -> list[tuple[str, str, str]]:
    return re.findall(r'<g class="point" data-bucket="([^"]+)" data-calls="(\d+)" '
                      r'data-errors="(\d+)">', html)


def test_the_tool_page_for_staff(alice_client: Client, world: dict[str, Any]) -> None:
    html = alice_client.get("/tools/get_weather/").content.decode()
    tree = Tree(html)

    assert tree.by_id("stat-calls")
    assert ">6</dd>" in html
    assert '<dd id="stat-errors">3 (50 %)</dd>' in html
    assert '<dd id="stat-p50">50 ms</dd>' in html
    assert '<dd id="stat-p95">840 ms</dd>' in html
    assert '<dd id="stat-p99">968 ms</dd>' in html
    assert ('<tr data-outcome="timeout"><td><a href="/calls/?tool=get_weather&amp;'
            'state=timeout">Timed out</a></td><td>1</td><td>17 %</td></tr>') in html
    assert points(html) == [("2026-11-30 10:00", "2", "1"), ("2026-11-30 12:00", "2", "2"),
                            ("2026-11-30 13:00", "2", "0")]
    assert "<title id=\"chart-title\">Calls and errors of get_weather per hour</title>" in html
    assert 'role="img" aria-labelledby="chart-title chart-desc"' in html
    assert "HTTP 500 from weather" in html
    # Recent calls open the timeline at their lane, newest first.
    lanes = re.findall(r'href="/runs/[0-9a-f-]{36}/#call-(\d+)"', html)
    assert audit_world.labels(world, [int(i) for i in lanes]) == [
        "c2", "c1", "b2", "b1", "a2", "a1"]


def test_the_chart_bars_stand_where_their_counts_say(alice_client: Client,
                                                    world: dict[str, Any]) -> None:
    html = alice_client.get("/tools/get_weather/").content.decode()
    bar = r'<rect class="{}-bar" x="([\d.]+)" y="([\d.]+)" width="48.0" height="([\d.]+)"/>'
    # Three slots of 221.3 from x=44, a 48 wide bar centred in each; 160 high = 2 calls
    # (the busiest bucket), standing on y=172.
    assert re.findall(bar.format("calls"), html) == [
        ("130.7", "12.0", "160.0"), ("352.0", "12.0", "160.0"), ("573.3", "12.0", "160.0")]
    assert re.findall(bar.format("errors"), html) == [
        ("130.7", "92.0", "80.0"), ("352.0", "12.0", "160.0"), ("573.3", "172.0", "0.0")]
    assert "<title>2026-11-30 12:00: 2 calls, 2 errors</title>" in html


def test_a_user_sees_the_statistics_of_their_own_calls_only(
    bob_client: Client, world: dict[str, Any],
) -> None:
    html = bob_client.get("/tools/get_weather/").content.decode()
    assert '<dd id="stat-calls">4</dd>' in html
    assert '<dd id="stat-p50">125 ms</dd>' in html
    assert points(html) == [("2026-11-30 10:00", "2", "1"), ("2026-11-30 12:00", "2", "2")]
    assert str(world["c"].pk) not in html  # charlie's run is never linked
    assert "the calls of your runs" in html


def test_the_index_lists_registered_and_called_tools_with_visible_counts(
    bob_client: Client, alice_client: Client, world: dict[str, Any],
    demo_tools: dict[str, Any],
) -> None:
    html = bob_client.get("/tools/").content.decode()
    counts = {name: (int(row["calls"]), int(row["errors"]))
              for name, row in index_rows(html).items()}
    assert counts["get_weather"] == (4, 3)
    assert counts["calculator"] == (1, 1)
    assert counts["ghost"] == (1, 1)  # called, never registered
    assert counts["always_fails"] == (0, 0)
    assert "lookup" not in counts  # only charlie called it
    assert "not registered" in html
    staff = alice_client.get("/tools/").content.decode()
    assert '<a href="/tools/lookup/">' in staff


def test_a_tool_nobody_may_see_is_not_found(charlie: AbstractUser, world: dict[str, Any]) -> None:
    client = Client()
    client.force_login(charlie)
    assert client.get("/tools/ghost/").status_code == 404  # bob's hallucination
    assert client.get("/tools/no_such_tool/").status_code == 404
    assert client.get("/tools/lookup/").status_code == 200  # charlie's own calls


def test_a_hostile_tool_name_is_escaped_everywhere(bob_client: Client,
                                                   world: dict[str, Any]) -> None:
    name = PAYLOAD[:200]
    ToolCall.objects.filter(pk=world["b3"].pk).update(tool_name=name, error_message=PAYLOAD)
    index = bob_client.get("/tools/")
    assert index.status_code == 200
    assert f'href="/tools/{quote(name, safe="/:@!$&()*+,;=~")}/"' in index.content.decode()
    response = bob_client.get(f"/tools/{quote(name)}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert" not in html
    assert "<img" not in html
    tree = Tree(html)
    # The page's one script is the navigation's own static file.
    assert [e.attrs.get("src") for e in tree.tags("script")] == ["/static/js/waiting.js"]
    hits = tree.texts_containing("alert(")
    assert hits
    for text, element in hits:
        if element is not None and element.tag == "title" and element.parent is not None \
                and element.parent.tag == "head":
            continue  # RCDATA
        assert inside_hx_disable(element), text[:60]


def test_the_pages_are_a_fixed_number_of_queries(
    alice_client: Client, world: dict[str, Any], demo_tools: dict[str, Any],
    django_assert_max_num_queries: Any,
) -> None:
    for n in range(20):  # more calls and versions change no query count
        audit_world._call(world["a"], world["a"].rounds.get(), 10 + n, audit_world.Call(
            f"x{n}", "get_weather", "execution_error", float(n), n, error=f"error {n}"))
    # session, user, then the index's counts (kept per tool), registrations, the latest
    # durations, the last day's counts, the tools' costs, the navigation's waiting count
    with django_assert_max_num_queries(8):
        assert alice_client.get("/tools/").status_code == 200
    # session, user, registration, exists, 9 statistics, recent calls, versions, the
    # cost, the navigation's waiting count
    with django_assert_max_num_queries(17):
        assert alice_client.get("/tools/get_weather/").status_code == 200


# -- the index's figures, sparkline and badges ---------------------------------------------


def index_rows(html: str) -> dict[str, dict[str, Any]]:
    """The tools index by tool name: each figure's text (data-figure), its badges
    (data-badge) and its sparkline's svg element, if any."""
    tree = Tree(html)
    rows: dict[str, dict[str, Any]] = {}
    for row in (e for e in tree.tags("tr") if "data-tool" in e.attrs):
        inside = [e for e in tree.elements if row in e.ancestors_or_self()]
        found: dict[str, Any] = {
            "badges": {e.attrs["data-badge"] for e in inside if "data-badge" in e.attrs},
            "spark": next((e for e in inside if e.tag == "svg"), None),
            "bars": [e for e in inside if e.tag == "g"]}
        for cell in (e for e in inside if "data-figure" in e.attrs):
            found[str(cell.attrs["data-figure"])] = "".join(
                t for t, e in tree.texts if e is cell).strip()
            found[f"{cell.attrs['data-figure']}-title"] = cell.attrs.get("title")
        rows[str(row.attrs["data-tool"])] = found
    return rows


def test_the_index_gives_error_rates_and_the_p95_of_the_latest_calls(
    bob_client: Client, alice_client: Client, world: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = index_rows(bob_client.get("/tools/").content.decode())
    # bob's get_weather: 4 calls, 3 errors; durations 10, 50, 200, 1000: rank 2.85
    assert {k: mine["get_weather"][k] for k in ("calls", "errors", "error-rate", "p95")} == {
        "calls": "4", "errors": "3", "error-rate": "75 %", "p95": "880 ms"}
    assert mine["get_weather"]["p95-title"] == "over 4 calls"
    assert mine["ghost"]["p95"] == "-"  # no call of it ran
    every = index_rows(alice_client.get("/tools/").content.decode())  # the counters
    assert {k: every["get_weather"][k] for k in ("calls", "errors", "error-rate", "p95")} == {
        "calls": "6", "errors": "3", "error-rate": "50 %", "p95": "840 ms"}
    assert every["lookup"]["error-rate"] == "100 %"
    # the latest timed calls only: c1 (30 ms) and b2 (50 ms); c2 has no duration
    monkeypatch.setattr("tools_app.audit.tools_overview.RECENT_TIMED", 2)
    latest = index_rows(alice_client.get("/tools/").content.decode())["get_weather"]
    assert (latest["p95"], latest["p95-title"]) == ("49 ms", "over 2 calls")


def test_the_index_badges_say_how_each_tool_runs(
    alice_client: Client, world: dict[str, Any], demo_tools: dict[str, Any],
) -> None:
    demo_tools["get_weather"].requires_approval = True
    demo_tools["get_weather"].save()
    demo_tools["calculator"].enabled = False
    demo_tools["calculator"].save()
    html = alice_client.get("/tools/").content.decode()
    rows = index_rows(html)
    assert rows["get_weather"]["badges"] == {"enabled", "approval", "kind"}
    assert rows["calculator"]["badges"] == {"disabled", "kind"}
    assert rows["ghost"]["badges"] == {"unregistered"}
    assert '<span class="badge kind kind-python" data-badge="kind">Python function</span>' in html


def test_the_sparkline_counts_each_hour_of_the_last_day(
    bob_client: Client, alice_client: Client, world: dict[str, Any],
    demo_tools: dict[str, Any],
) -> None:
    now = timezone.now()
    for label, hours_ago in (("a1", 2), ("a2", 3), ("b1", 30)):  # b1: more than a day ago
        ToolCall.objects.filter(pk=world[label].pk).update(
            started_at=now - timedelta(hours=hours_ago))
    for client in (bob_client, alice_client):  # counted, and from the counters
        row = index_rows(client.get("/tools/").content.decode())["get_weather"]
        spark = row["spark"]
        assert (spark.attrs["data-calls"], spark.attrs["data-errors"]) == ("2", "1")
        assert spark.attrs["aria-label"] == (
            "Last 24 hours of get_weather: 2 calls, 1 error; at most 1 in an hour")
        bars = [(g.attrs["data-calls"], g.attrs["data-errors"]) for g in row["bars"]]
        assert len(bars) == 24
        assert sorted(bars)[-2:] == [("1", "0"), ("1", "1")]
    ghost = index_rows(bob_client.get("/tools/").content.decode())["ghost"]
    assert ghost["spark"].attrs["data-calls"] == "0"  # used, but not in the last day
    assert index_rows(bob_client.get("/tools/").content.decode())["always_fails"]["spark"] \
        is None  # never called: no sparkline


@pytest.mark.both
def test_the_last_day_falls_into_the_hours_it_happened_in(
        alice: AbstractUser, bob: AbstractUser, world: dict[str, Any]) -> None:
    now = datetime(2026, 12, 3, 12, 40, tzinfo=UTC)  # the world's other calls: days before
    moments = {"a1": now - timedelta(minutes=10), "a2": now - timedelta(hours=5, minutes=30),
               "b2": now - timedelta(hours=23, minutes=20), "b1": now - timedelta(hours=24)}
    for label, moment in moments.items():
        ToolCall.objects.filter(pk=world[label].pk).update(started_at=moment)
    for user in (alice, bob):
        rows = {row.name: row for row in tools_overview(
            calls_for_user(user), every_call=user.is_staff, now=now)}
        hours = rows["get_weather"].hours
        assert [h.start for h in hours][::23] == [now.replace(minute=0) - timedelta(hours=23),
                                                  now.replace(minute=0)]
        found = {i: (h.calls, h.errors) for i, h in enumerate(hours) if h.calls}
        # 12:30 -> the current hour (23); 07:10 -> 07:00 (18); 13:20 yesterday -> 13:00 (0);
        # 12:40 yesterday is before the first hour (13:00 yesterday)
        assert found == {0: (1, 1), 18: (1, 1), 23: (1, 0)}
        assert rows["get_weather"].last_day == (3, 2)
    # in a zone half an hour off UTC, the hours are its own (each counted quarter hour
    # still lies inside one of them): 12:30 and 07:10 UTC are 18:00 and 12:40 there, and
    # 13:20 UTC yesterday (18:50 there) is before the first hour, 19:00
    with timezone.override("Asia/Kolkata"):
        for user in (alice, bob):
            rows = {row.name: row for row in tools_overview(
                calls_for_user(user), every_call=user.is_staff, now=now)}
            hours = rows["get_weather"].hours
            assert f"{hours[0].start:%H:%M}" == "19:00"
            assert {i: (h.calls, h.errors) for i, h in enumerate(hours) if h.calls} == {
                17: (1, 1), 23: (1, 0)}
