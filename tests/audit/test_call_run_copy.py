"""Each tool call keeps its run's creation time and creator (`ToolCall.run_created_at`,
`run_owner_id`), copied by database triggers (`audit.triggers`) however the rows are
written: the calls list's since / until, what an ordinary user sees and a tool page's
chart read them instead of joining the run. Marked `both`: the triggers are each
database's own SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.audit.support import make_copy_run, stored
from tests.migration_support import migrate
from tools_app.audit.search_index import ensure_search_index
from tools_app.models import Run, ToolCall

pytestmark = pytest.mark.both

MOMENT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def owner(call: ToolCall) -> int | None:
    return ToolCall.objects.values_list("run_owner_id", flat=True).get(pk=call.pk)


@pytest.mark.django_db
def test_a_new_call_gets_its_runs_creation_time_and_creator(bob: AbstractUser) -> None:
    run, round_ = make_copy_run(owner=bob)
    created = ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a",
                                      tool_name="t")
    # as the recorder writes one: get_or_create with defaults
    proposed, _ = ToolCall.objects.get_or_create(
        round=round_, call_index=1, defaults={"run": run, "call_id": "b", "tool_name": "t"})
    [bulk] = ToolCall.objects.bulk_create([ToolCall(run=run, round=round_, call_index=2,
                                                    call_id="c", tool_name="t")])
    for call in (created, proposed):
        assert (stored(call), owner(call)) == (run.created_at, bob.pk)
    assert ToolCall.objects.filter(call_id="c").values_list(
        "run_created_at", "run_owner_id").get() == (run.created_at, bob.pk)
    api_run, api_round = make_copy_run("by a token with no user")
    anonymous = ToolCall.objects.create(run=api_run, round=api_round, call_index=0,
                                        call_id="d", tool_name="t")
    assert (stored(anonymous), owner(anonymous)) == (api_run.created_at, None)
    assert bulk.run_id == run.pk


@pytest.mark.django_db
def test_a_value_written_by_hand_is_put_right(bob: AbstractUser,
                                              charlie: AbstractUser) -> None:
    run, round_ = make_copy_run(owner=bob)
    call = ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a",
                                   tool_name="t", run_created_at=MOMENT,
                                   run_owner_id=charlie.pk)
    assert (stored(call), owner(call)) == (run.created_at, bob.pk)
    ToolCall.objects.filter(pk=call.pk).update(run_created_at=MOMENT)
    ToolCall.objects.filter(pk=call.pk).update(run_owner_id=charlie.pk)
    assert (stored(call), owner(call)) == (run.created_at, bob.pk)


@pytest.mark.django_db
def test_it_follows_the_runs_creation_time_and_a_move_to_another_run() -> None:
    run, round_ = make_copy_run()
    other, other_round = make_copy_run("other")
    calls = [ToolCall.objects.create(run=run, round=round_, call_index=i, call_id=f"c{i}",
                                     tool_name="t") for i in range(3)]
    untouched = ToolCall.objects.create(run=other, round=other_round, call_index=0,
                                        call_id="o", tool_name="t")
    Run.objects.filter(pk=run.pk).update(created_at=MOMENT)  # as the audit tests date runs
    assert [stored(c) for c in calls] == [MOMENT] * 3
    assert stored(untouched) == other.created_at
    Run.objects.filter(pk=other.pk).update(created_at=MOMENT - timedelta(days=3))
    ToolCall.objects.filter(pk=calls[0].pk).update(run=other, round=other_round,
                                                   call_index=5)
    assert stored(calls[0]) == MOMENT - timedelta(days=3)
    assert [stored(c) for c in calls[1:]] == [MOMENT] * 2


@pytest.mark.django_db
def test_it_follows_the_runs_creator_and_the_deletion_of_the_user(
        bob: AbstractUser, charlie: AbstractUser) -> None:
    from tools_app.audit.selectors import calls_for_user

    run, round_ = make_copy_run(owner=bob)
    calls = [ToolCall.objects.create(run=run, round=round_, call_index=i, call_id=f"c{i}",
                                     tool_name="t") for i in range(2)]
    assert {c.pk for c in calls_for_user(bob)} == {c.pk for c in calls}
    Run.objects.filter(pk=run.pk).update(created_by=charlie)
    assert [owner(c) for c in calls] == [charlie.pk] * 2
    assert list(calls_for_user(bob)) == []
    assert {c.pk for c in calls_for_user(charlie)} == {c.pk for c in calls}
    charlie.delete()  # the runs' creator is SET_NULL: their calls are nobody's too
    assert [owner(c) for c in calls] == [None, None]
    assert ToolCall.objects.count() == 2


@pytest.mark.django_db
def test_the_calls_time_filters_read_it() -> None:
    run, round_ = make_copy_run()
    call = ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="a",
                                   tool_name="t")
    Run.objects.filter(pk=run.pk).update(created_at=MOMENT)
    from tools_app.audit.call_filters import matching_calls

    def ids(**params: str) -> list[int]:
        return list(matching_calls(ToolCall.objects.all(), params).values_list("pk", flat=True))

    assert ids(since="2026-03-01T12:00:00Z") == [call.pk]
    assert ids(since="2026-03-01T12:00:01Z") == []
    assert ids(until="2026-03-01T12:00:01Z") == [call.pk]
    assert ids(until="2026-03-01T12:00:00Z") == []


BEFORE = [("tools_app", "0013_auditscale_more_indexes")]
AFTER = [("tools_app", "0014_auditscale2_call_run_copy")]


@pytest.mark.django_db(transaction=True)
def test_calls_stored_before_the_migration_get_them_from_the_migration(
        bob: AbstractUser) -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    run_model = old_state.apps.get_model("tools_app", "Run")
    round_model = old_state.apps.get_model("tools_app", "Round")
    call_model = old_state.apps.get_model("tools_app", "ToolCall")
    try:
        runs = []
        for days in (1, 40):
            run = run_model.objects.create(title="old", status="succeeded", snapshot={},
                                           created_by_id=bob.pk if days == 1 else None)
            run_model.objects.filter(pk=run.pk).update(created_at=MOMENT - timedelta(days=days))
            round_ = round_model.objects.create(run=run, index=0)
            for index in range(2):
                call_model.objects.create(run=run, round=round_, call_index=index,
                                          call_id=f"c{index}", tool_name="t")
            runs.append(run.pk)
        migrate(AFTER)
        found = set(ToolCall.objects.values_list("run_id", "run_created_at", "run_owner_id"))
        assert found == {(runs[0], MOMENT - timedelta(days=1), bob.pk),
                         (runs[1], MOMENT - timedelta(days=40), None)}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        ensure_search_index(connection)  # going back rebuilt SQLite's calls table

