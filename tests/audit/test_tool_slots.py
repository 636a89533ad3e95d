"""A tool's calls and errors per quarter hour (`ToolCallSlot`) and its erring calls per
error group (`ToolErrorGroup`), kept by database triggers on the calls
(`audit.triggers`), are what a tool page's chart and most frequent errors show
staff: they must always equal a count of the calls themselves, however the calls are
written (created as the recorder proposes them, started, finished, moved, deleted, their
run re-dated), and what the page shows from them must be what it shows from the calls.
Marked `both`: the triggers are each database's own SQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.utils import timezone

from tests.audit.support import T0, groups, make_slot_run, quarter, recount, regroup, slots
from tests.migration_support import migrate
from tools_app.audit.search_index import ensure_search_index
from tools_app.audit.tool_stats import over_time, top_errors
from tools_app.models import Run, ToolCall, ToolCallSlot

pytestmark = pytest.mark.both


@pytest.mark.django_db
def test_the_slots_follow_a_call_through_the_recorders_writes() -> None:
    run, round_ = make_slot_run(T0)
    # proposed (get_or_create, as the recorder does): no start yet, counted at the run's
    call, _ = ToolCall.objects.get_or_create(round=round_, call_index=0, defaults={
        "run": run, "call_id": "a", "tool_name": "get_weather"})
    assert slots() == {("get_weather", quarter(T0)): (1, 0)} == recount()
    started = T0 + timedelta(seconds=2)  # the next quarter hour
    ToolCall.objects.filter(pk=call.pk).update(state="started", started_at=started,
                                               attempts=1)
    assert slots() == {("get_weather", quarter(started)): (1, 0)} == recount()
    assert ToolCallSlot.objects.get(tool_name="get_weather", slot=quarter(T0)).calls == 0
    ToolCall.objects.filter(pk=call.pk).update(  # finished with an error
        state="execution_error", is_error=True, error_type="ToolExecutionError",
        started_at=started, finished_at=started + timedelta(seconds=1), duration_ms=1000.0)
    assert slots() == {("get_weather", quarter(started)): (1, 1)} == recount()
    assert groups() == {("get_weather", "ToolExecutionError", ""): (1, call.pk)} == regroup()
    ToolCall.objects.filter(pk=call.pk).update(tool_name="weather")
    assert slots() == {("weather", quarter(started)): (1, 1)} == recount()
    assert groups() == {("weather", "ToolExecutionError", ""): (1, call.pk)} == regroup()
    ToolCall.objects.filter(pk=call.pk).delete()
    assert slots() == {} == recount()
    assert groups() == {} == regroup()


@pytest.mark.django_db
def test_many_calls_and_every_kind_of_write_keep_the_slots_equal_to_a_count() -> None:
    runs = [make_slot_run(T0 + timedelta(minutes=7 * i)) for i in range(4)]
    calls = []
    for i, (run, round_) in enumerate(runs):
        for j in range(5):
            started = T0 + timedelta(minutes=11 * i + 4 * j) if j % 2 else None
            calls.append(ToolCall.objects.create(
                run=run, round=round_, call_index=j, call_id=f"{i}-{j}",
                tool_name=("calculator", "get_weather")[j % 2], started_at=started,
                is_error=j == 3, state="execution_error" if j == 3 else "succeeded"))
    ToolCall.objects.bulk_create([ToolCall(run=runs[0][0], round=runs[0][1], call_index=9,
                                           call_id="bulk", tool_name="calculator")])
    assert slots() == recount()
    ToolCall.objects.filter(tool_name="calculator").update(is_error=True)
    assert slots() == recount()
    ToolCall.objects.filter(started_at__isnull=False).update(
        started_at=T0 + timedelta(hours=5))
    assert slots() == recount()
    # a run re-dated: its calls that never started move with it
    Run.objects.filter(pk=runs[1][0].pk).update(created_at=T0 - timedelta(days=3))
    assert slots() == recount()
    ToolCall.objects.filter(pk__in=[c.pk for c in calls[::3]]).delete()
    runs[2][0].delete()  # cascades to its calls
    assert slots() == recount()
    assert sum(n for n, _ in slots().values()) == ToolCall.objects.count()


@pytest.mark.django_db
def test_many_erring_calls_and_every_kind_of_write_keep_the_groups_equal_to_a_count() -> None:
    run, round_ = make_slot_run(T0)
    long = "x" * 300
    messages = ["HTTP 500", "HTTP 500", "timed out", long + "a", long + "b", ""]
    calls = [ToolCall.objects.create(run=run, round=round_, call_index=i, call_id=f"c{i}",
                                     tool_name=("calculator", "get_weather")[i % 2],
                                     is_error=i % 5 != 4, error_message=messages[i % 6],
                                     error_type=("ToolExecutionError", "ValueError")[i % 3 == 0])
             for i in range(30)]
    assert groups() == regroup()
    assert (long[:300] in {head for _, _, head in groups()})  # 300 characters: one group
    # the newest call of a group goes: the next newest is its last
    newest = max((c for c in calls if c.is_error), key=lambda c: c.pk)
    newest.delete()
    assert groups() == regroup()
    # finished as the recorder writes it: one UPDATE sets the flag, type and message
    ToolCall.objects.filter(pk=calls[4].pk).update(is_error=True, error_type="KeyError",
                                                   error_message="missing key")
    ToolCall.objects.filter(pk=calls[1].pk).update(is_error=False, error_type="",
                                                   error_message="")
    ToolCall.objects.filter(pk=calls[7].pk).update(error_message="HTTP 502")
    ToolCall.objects.filter(tool_name="calculator").update(tool_name="calc")
    assert groups() == regroup()
    ToolCall.objects.filter(pk__in=[c.pk for c in calls[::4]]).delete()
    assert groups() == regroup()
    run.delete()
    assert groups() == {} == regroup()


@pytest.mark.django_db
def test_the_most_frequent_errors_from_the_groups_are_those_from_the_calls() -> None:
    run, round_ = make_slot_run(T0)
    for i in range(40):
        ToolCall.objects.create(run=run, round=round_, call_index=i, call_id=f"c{i}",
                                tool_name="get_weather", is_error=i % 7 != 0,
                                error_type=f"E{i % 4}", error_message=f"failure {i % 13}")
    calls = ToolCall.objects.filter(tool_name="get_weather")
    assert top_errors(calls, every_call_of="get_weather") == top_errors(calls)
    assert len(top_errors(calls)) == 10


@pytest.mark.django_db
@pytest.mark.parametrize("zone", ["UTC", "Asia/Kathmandu", "America/New_York"])
@pytest.mark.parametrize("span", [timedelta(hours=30), timedelta(days=40),
                                  timedelta(days=200)])
def test_the_chart_from_the_slots_is_the_chart_from_the_calls(zone: str,
                                                              span: timedelta) -> None:
    run, round_ = make_slot_run(T0)
    steps = 37
    for i in range(steps):
        started = T0 + span * i / (steps - 1) if i % 4 else None
        ToolCall.objects.create(run=run, round=round_, call_index=i, call_id=f"c{i}",
                                tool_name="get_weather", started_at=started,
                                is_error=i % 3 == 0)
    ToolCall.objects.create(run=run, round=round_, call_index=99, call_id="other",
                            tool_name="calculator", started_at=T0)
    calls = ToolCall.objects.filter(tool_name="get_weather")
    with override_settings(TIME_ZONE=zone), timezone.override(zone):
        from_slots = over_time(calls, every_call_of="get_weather")
        from_calls = over_time(calls)
    assert from_slots == from_calls
    assert sum(b.calls for b in from_slots[1]) == steps


BEFORE = [("tools_app", "0014_auditscale2_call_run_copy")]
AFTER = [("tools_app", "0015_auditscale2_tool_slots")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_calls_already_stored() -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    run_model: Any = old_state.apps.get_model("tools_app", "Run")
    round_model: Any = old_state.apps.get_model("tools_app", "Round")
    call_model: Any = old_state.apps.get_model("tools_app", "ToolCall")
    try:
        run = run_model.objects.create(title="old", status="succeeded", snapshot={})
        run_model.objects.filter(pk=run.pk).update(created_at=T0)
        round_ = round_model.objects.create(run=run, index=0)
        for index in range(3):
            call_model.objects.create(
                run=run, round=round_, call_index=index, call_id=f"c{index}",
                tool_name="t", is_error=index == 1, error_message="boom",
                started_at=T0 + timedelta(minutes=20) if index else None)
        migrate(AFTER)
        assert slots() == recount() == {("t", quarter(T0)): (1, 0),
                                        ("t", quarter(T0 + timedelta(minutes=20))): (2, 1)}
        assert groups() == regroup() != {}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        ensure_search_index(connection)  # going back rebuilt SQLite's calls table

