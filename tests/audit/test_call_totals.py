"""The calls list's totals (`audit.call_totals`): exact from the trigger-kept counts for
staff with no filter but a tool, else counted up to a cap ("more than") and within a
time budget ("not counted"), the same figures either way; and the sorts' use of a known
small count on SQLite. Marked `both`: the deadline is each database's own."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.web import audit_world
from tools_app.audit import call_filters, call_sorts
from tools_app.audit import call_totals as totals_module
from tools_app.audit.call_filters import counted_calls, filtered_calls, matching_calls
from tools_app.audit.call_totals import CallTotals, Tally, call_totals
from tools_app.models import ToolCall

pytestmark = [pytest.mark.django_db, pytest.mark.both]
EVERY = ToolCall.objects.all()


@pytest.fixture
def world(bob: AbstractUser, charlie: AbstractUser) -> dict[str, Any]:
    return audit_world.build({"bob": bob, "charlie": charlie})


def counted(params: dict[str, str], *, every_call: bool = False,
            calls: Any = EVERY) -> CallTotals:
    return call_totals(calls, params, every_call=every_call)


@pytest.mark.parametrize(("params", "calls", "errors"), [
    ({}, 10, 7), ({"tool": "get_weather"}, 6, 3), ({"tool": "nothing"}, 0, 0),
    ({"state": "timeout"}, 1, 1), ({"user": "bob"}, 6, 5),
    ({"status": "running", "sort": "tool", "cursor": "x", "limit": "1"}, 4, 2),
])
def test_the_counters_and_the_count_agree_with_the_calls(
        world: dict[str, Any], params: dict[str, str], calls: int, errors: int) -> None:
    for every_call in (True, False):  # from the counters where they serve, else counted
        found = counted(params, every_call=every_call)
        assert found == CallTotals(Tally(calls), Tally(errors))
    assert counted(params).error_rate == (errors / calls if calls else None)


def test_staff_totals_with_no_filter_or_a_tool_read_the_counters(world: dict[str, Any]) -> None:
    with CaptureQueriesContext(connection) as queries:
        counted({"tool": "lookup"}, every_call=True)
    [query] = queries.captured_queries
    assert "tools_app_toolcallslot" in query["sql"]
    assert "tools_app_toolcall\"" not in query["sql"].replace("toolcallslot", "")


def test_past_the_cap_a_count_says_more_than(world: dict[str, Any],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(totals_module, "CAP", 3)
    assert counted({"user": "bob"}) == CallTotals(Tally(3, more=True), Tally(3, more=True))
    assert counted({"tool": "get_weather"}) == CallTotals(Tally(3, more=True), Tally(3))
    assert counted({"tool": "get_weather"}).error_rate is None
    assert counted({"tool": "lookup"}) == CallTotals(Tally(2), Tally(2))  # under the cap
    assert counted({}, every_call=True) == CallTotals(Tally(10), Tally(7))  # counters: exact


def test_out_of_time_a_count_says_not_counted_and_the_page_goes_on(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(totals_module, "BUDGET", 0.0)
    monkeypatch.setattr("tools_app.audit.deadline.CHECK_EVERY", 1)
    if connection.vendor == "postgresql":  # a timeout of 1 ms: make the count take longer
        monkeypatch.setattr(totals_module, "CAP", 10**9)
        slow = ToolCall.objects.extra(where=["pg_sleep(0.01) IS NOT NULL"])
    else:
        slow = EVERY
    found = counted({"tool": "get_weather"}, calls=slow)
    assert found == CallTotals(Tally(None), Tally(None))
    assert found.error_rate is None
    # the connection is as it was: no deadline left behind for the next query
    assert ToolCall.objects.count() == 10
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "0"


def test_a_stop_is_told_even_while_queries_are_logged(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # DEBUG's cursor logs a statement's parameters with a query of its own, after the
    # stop: it must run, and the stop still be told
    monkeypatch.setattr(totals_module, "BUDGET", 0.0)
    monkeypatch.setattr("tools_app.audit.deadline.CHECK_EVERY", 1)
    monkeypatch.setattr(totals_module, "CAP", 10**9)
    slow = EVERY if connection.vendor == "sqlite" else ToolCall.objects.extra(
        where=["pg_sleep(0.01) IS NOT NULL"])
    with CaptureQueriesContext(connection):
        assert counted({"tool": "get_weather"}, calls=slow) == CallTotals(Tally(None),
                                                                         Tally(None))


def test_a_failing_database_is_not_taken_for_a_stop(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("disk I/O error")

    monkeypatch.setattr(type(EVERY), "aggregate", broken)
    with pytest.raises(OperationalError, match="disk I/O error"):
        counted({"state": "timeout"})


def test_every_way_to_a_sorted_page_gives_the_same_pages(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # with `matches` (few: SQLite sorts them itself), without (each sort's index), and
    # out of time on the sort's index (SQLite then sorts them itself)
    for sort in ("started", "-duration", "duration", "tool"):
        pages = []
        for matches, budget in ((None, 1.0), (10, 1.0), (None, 0.0)):
            monkeypatch.setattr("tools_app.audit.call_sorts.SORT_BUDGET", budget)
            monkeypatch.setattr("tools_app.audit.deadline.CHECK_EVERY", 1 if not budget
                                else 2_000)
            ids: list[int] = []
            params = {"sort": sort, "limit": "3"}
            for _ in range(5):
                page = filtered_calls(EVERY, params, matches=matches)
                ids += [call.pk for call in page.calls]
                if page.next_cursor is None:
                    break
                params = {"sort": sort, "limit": "3", "cursor": page.next_cursor}
            pages.append(audit_world.labels(world, ids))
        assert pages[0] == pages[1] == pages[2], sort
        assert len(pages[0]) == 10


def test_out_of_time_on_a_sorts_index_the_matches_are_sorted_without_it(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools_app.audit.call_sorts.SORT_BUDGET", 0.0)
    monkeypatch.setattr("tools_app.audit.deadline.CHECK_EVERY", 1)
    # a plan that reads the sort's index, whatever the planner makes of these few rows
    monkeypatch.setattr(call_sorts, "_sorts_itself", lambda read: False)
    if connection.vendor == "postgresql":  # a timeout of 1 ms: make the read take longer
        slow = ToolCall.objects.extra(where=["pg_sleep(0.01) IS NOT NULL"])
        monkeypatch.setattr(call_filters, "matching_calls",
                            lambda calls, params: call_filters.apply_filters(
                                slow, params, call_filters.CALL_FILTERS,
                                call_filters._FILTERS).order_by("-pk"))
    tries: list[bool] = []
    ids_in_order = call_sorts._ids_in_order

    def spied(*args: Any, plain: bool) -> list[int]:
        tries.append(plain)
        return ids_in_order(*args, plain=plain)

    monkeypatch.setattr(call_sorts, "_ids_in_order", spied)
    page = filtered_calls(EVERY, {"sort": "-duration", "state": "timeout,ok"})
    assert audit_world.labels(world, [c.pk for c in page.calls]) == ["b1", "c1", "a1"]
    assert tries == [False, True]  # a first try on the index, then without it


@pytest.mark.parametrize("params", [
    {}, {"status": "failed,running"}, {"endpoint": "alpha"}, {"user": "bob"},
    {"status": "succeeded", "tool": "get_weather", "state": "ok"}, {"q": "weather"},
    {"endpoint": "nothing"}, {"min_ms": "10", "max_ms": "200", "handler": "-"},
])
def test_a_count_reads_the_same_calls_as_the_list(world: dict[str, Any],
                                                  params: dict[str, str]) -> None:
    listed = set(matching_calls(EVERY, params).values_list("pk", flat=True))
    assert set(counted_calls(EVERY, params).values_list("pk", flat=True)) == listed
    assert counted(params).calls == Tally(len(listed))


def test_a_tools_many_calls_by_duration_are_read_from_the_sorts_index_first(
        world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"tool": "get_weather", "sort": "duration", "limit": "2"}

    def pages(matches: int | None) -> list[str]:
        ids: list[int] = []
        query = dict(params)
        for _ in range(5):
            page = filtered_calls(EVERY, query, matches=matches)
            ids += [call.pk for call in page.calls]
            if page.next_cursor is None:
                return audit_world.labels(world, ids)
            query = params | {"cursor": page.next_cursor}
        raise AssertionError("no last page")

    expected = pages(None)
    assert expected == ["a1", "c1", "b2", "a2", "b1", "c2"]
    monkeypatch.setattr(call_filters, "FEW_TO_SORT", 1)  # 6 counted: "many"
    reads: list[str] = []
    ids_in_order = call_sorts._ids_in_order

    def spied(calls: Any, *args: Any, plain: bool) -> list[int]:
        reads.append(str(calls.query))
        return ids_in_order(calls, *args, plain=plain)

    monkeypatch.setattr(call_sorts, "_ids_in_order", spied)
    assert pages(6) == expected
    unindexed = ('+("tools_app_toolcall"."tool_name")' if connection.vendor == "sqlite"
                 else '("tools_app_toolcall"."tool_name" || \'\')')
    assert all(unindexed in sql for sql in reads)  # the tool's filter without its index
