"""The write path's ORM variant (store/sql/rowsql_orm.py, issue 39's measurement) does what
rowsql's docstrings say, as rowsql does: each case runs through both (`rowsql` as this
process configured it, and `rowsql_orm`) and checks the same results and rows."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from types import ModuleType
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from tests.runs.support import start
from tools_app.models import ErrorPolicy, ModelEndpoint, Round, Run, RunEvent, ToolRegistration
from tools_app.runs.store.eventlog import run_key
from tools_app.runs.store.sanitize import Encoded
from tools_app.runs.store.sql import rowsql, rowsql_orm
from tools_app.runs.store.sql.write_path import Add, In

pytestmark = pytest.mark.both


@pytest.fixture(params=["rowsql", "rowsql_orm"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return rowsql if request.param == "rowsql" else rowsql_orm


@pytest.fixture
def new_run(make_endpoint: Any, tools: dict[str, ToolRegistration],
            policy: ErrorPolicy) -> Callable[[], Run]:
    endpoint: ModelEndpoint = make_endpoint([{"text": "done"}])
    return lambda: start(endpoint, [tools["lookup"]], policy)


@pytest.fixture
def run(new_run: Callable[[], Run]) -> Run:
    return new_run()


def _event(run: Run, seq: int, kind: str = "note") -> dict[str, Any]:
    return {"run": run.pk, "seq": seq, "kind": kind, "created_at": timezone.now(),
            "payload": {"n": seq}}


def _kinds(run: Run) -> dict[int, str]:
    return dict(RunEvent.objects.filter(run=run, seq__gte=100).values_list("seq", "kind"))


def test_insert_returns_what_rowsql_documents(impl: ModuleType, run: Run) -> None:
    assert impl.insert(RunEvent, [_event(run, s) for s in (100, 101)], returning="seq") == [
        100, 101]
    ids = impl.insert(RunEvent, [_event(run, s) for s in (102, 103)], returning="id")
    assert ids == [RunEvent.objects.get(run=run, seq=s).pk for s in (102, 103)]
    assert impl.insert(RunEvent, [_event(run, 104)], returning=("seq", "kind")) == [
        (104, "note")]
    assert impl.insert(RunEvent, [_event(run, 105)]) == []
    assert impl.insert(RunEvent, []) == []


def test_a_row_left_as_it_is_on_conflict_returns_nothing(impl: ModuleType, run: Run) -> None:
    impl.insert(RunEvent, [_event(run, 100)])
    # 100 is stored, 101 is new, then 101 again in the same statement.
    returned = impl.insert(RunEvent, [_event(run, 100, "clash"), _event(run, 101),
                                      _event(run, 101, "again")],
                           conflict=("run", "seq"), returning=("seq", "kind"))
    assert returned == [(101, "note")]
    assert _kinds(run) == {100: "note", 101: "note"}
    # The primary key of the rows inserted (the ORM does not return it on a conflict
    # ignored: it is read back).
    ids = impl.insert(RunEvent, [_event(run, 101), _event(run, 102)],
                      conflict=("run", "seq"), returning="id")
    assert ids == [RunEvent.objects.get(run=run, seq=102).pk]
    assert impl.insert(RunEvent, [_event(run, 102)], conflict=("run", "seq"),
                       returning="seq") == []


def test_an_upsert_returns_each_row_inserted_or_updated(impl: ModuleType, run: Run) -> None:
    kept = Round.objects.create(run=run, index=0, status="responded", ai_text="kept")
    rows = [{"run": run.pk, "index": 0, "status": "requested"},
            {"run": run.pk, "index": 1, "status": "requested"}]
    ids = impl.insert(Round, rows, conflict=("run", "index"),
                      on_conflict_update=("status",), returning="id")
    assert ids == [kept.pk, Round.objects.get(run=run, index=1).pk]
    kept.refresh_from_db()
    assert (kept.status, kept.ai_text) == ("requested", "kept")
    # A column the upsert does not set is returned as stored, not as given.
    returned = impl.insert(Round, [{"run": run.pk, "index": 0, "status": "failed",
                                    "ai_text": "new"}],
                           conflict=("run", "index"), on_conflict_update=("status",),
                           returning=("index", "status", "ai_text"))
    assert returned == [(0, "failed", "kept")]


def test_update_counts_or_returns_the_first_row_changed(impl: ModuleType, run: Run) -> None:
    impl.insert(RunEvent, [_event(run, s) for s in range(100, 105)])
    assert impl.update(RunEvent, {"run": run.pk, "seq": 100}, {"kind": "renamed"}) == 1
    assert impl.update(RunEvent, {"run": In((run.pk,)), "seq": In((101, 102))},
                       {"kind": "odd"}) == 2
    assert impl.update(RunEvent, {"run": run.pk, "seq": 999}, {"kind": "x"},
                       returning=("seq",)) is None
    assert impl.update(RunEvent, {"run": run.pk, "seq": 103}, {"kind": "k"},
                       returning=("seq", "kind")) == (103, "k")
    assert _kinds(run) == {100: "renamed", 101: "odd", 102: "odd", 103: "k", 104: "note"}


def test_an_update_returns_the_row_it_moved_away_from_its_where(impl: ModuleType,
                                                                run: Run) -> None:
    stored = Run.objects.get(pk=run.pk)
    # Picked by the primary key and a column it changes (the lease's fence).
    row = impl.update(Run, {"id": run.pk, "lease_token": stored.lease_token,
                            "finished_at": None},
                      {"lease_token": Add(1), "last_seq": Add(2), "title": "moved"},
                      returning=("lease_token", "last_seq"))
    assert tuple(int(x) for x in row) == (stored.lease_token + 1, stored.last_seq + 2)
    assert impl.update(Run, {"id": run.pk, "lease_token": stored.lease_token},
                       {"title": "late"}, returning=("id",)) is None
    # Picked without its primary key, by a column it changes.
    Round.objects.create(run=run, index=0, status="requested")
    assert impl.update(Round, {"run": run.pk, "status": "requested"},
                       {"status": "failed", "ai_text": Encoded("half", '"half"')},
                       returning=("index", "status")) == (0, "failed")
    assert Round.objects.filter(run=run, status="requested").count() == 0
    assert Run.objects.get(pk=run.pk).title == "moved"


def test_update_many_updates_only_the_rows_meeting_their_keys_and_the_where(
    impl: ModuleType, new_run: Callable[[], Run],
) -> None:
    first, second, third = (new_run() for _ in range(3))
    Run.objects.filter(pk=third.pk).update(status="running")  # fails the where
    before = {r.pk: r for r in Run.objects.filter(pk__in=[first.pk, second.pk, third.pk])}
    rows = [{"id": run.pk, "lease_token": before[run.pk].lease_token + (run is second),
             "last_seq": Add(3), "lease_owner": f"w-{index}"}
            for index, run in enumerate((first, second, third))]
    returned = impl.update_many(Run, ("id", "lease_token"), rows,
                                where={"status": "queued", "finished_at": None},
                                returning=("id", "last_seq", "cancel_requested"))
    assert [(run_key(i), int(s), bool(c)) for i, s, c in returned] == [
        (run_key(first.pk), before[first.pk].last_seq + 3, False)]
    after = {r.pk: r for r in Run.objects.filter(pk__in=before)}
    assert (after[first.pk].lease_owner, after[second.pk].lease_owner,
            after[third.pk].lease_owner) == ("w-0", "", "")
    assert after[second.pk].last_seq == before[second.pk].last_seq
    assert impl.update_many(Run, ("id",), []) == []


def test_update_many_sets_plain_values_by_primary_key(impl: ModuleType, run: Run) -> None:
    rounds = [Round.objects.create(run=run, index=i, ai_text="before") for i in range(3)]
    now = timezone.now()
    # Plain values by primary key (the ORM variant's bulk_update), a row no entry picks
    # left as it is, an entry picking no row ignored.
    assert impl.update_many(Round, ("id",), [
        {"id": rounds[0].pk, "ai_text": "a", "attempts": Encoded([1], "[1]"),
         "response_json": {"r": 0}, "finished_at": now},
        {"id": rounds[1].pk, "ai_text": None, "attempts": [2], "response_json": None,
         "finished_at": None},
        {"id": 999_999, "ai_text": "nobody", "attempts": [], "response_json": None,
         "finished_at": None},
    ]) == []
    found = {r.index: r for r in Round.objects.filter(run=run)}
    assert [(found[i].ai_text, found[i].attempts, found[i].response_json)
            for i in range(3)] == [("a", [1], {"r": 0}), (None, [2], None),
                                   ("before", [], None)]
    assert found[0].finished_at == now


def test_json_null_is_stored_as_json_null_and_none_as_sql_null(impl: ModuleType,
                                                               run: Run) -> None:
    rounds = [Round.objects.create(run=run, index=i, response_json={"r": i})
              for i in range(4)]
    impl.update_many(Round, ("id",), [
        {"id": rounds[0].pk, "response_json": Encoded(None, "null")},
        {"id": rounds[1].pk, "response_json": None}])
    impl.update(Round, {"id": rounds[2].pk}, {"response_json": Encoded(None, "null")})
    impl.update(Round, {"id": rounds[3].pk}, {"response_json": None})
    impl.insert(Round, [{"run": run.pk, "index": 4, "response_json": Encoded(None, "null")},
                        {"run": run.pk, "index": 5, "response_json": None}])
    assert list(Round.objects.filter(run=run, response_json__isnull=True).order_by(
        "index").values_list("index", flat=True)) == [1, 3, 5]
    assert [r.response_json for r in Round.objects.filter(run=run)] == [None] * 6


def test_select_reads_the_rows_matching_the_where(impl: ModuleType, run: Run) -> None:
    for index, status in enumerate(("responded", "requested", "requested")):
        Round.objects.create(run=run, index=index, status=status,
                             finished_at=timezone.now() if index == 2 else None)
    picked = impl.select(Round, ("index",), {"run": In((run.pk,)), "status": "requested",
                                             "finished_at": None})
    assert picked == [(1,)]
    runs = impl.select(Round, ("run", "index"), {"run": run.pk})
    assert sorted((run_key(r), i) for r, i in runs) == [(run_key(run.pk), i) for i in range(3)]
    with pytest.raises(ValueError, match="at least one"):
        impl.select(Round, ("index",), {"index": In(())})


def test_insert_as_saved_is_a_save(impl: ModuleType, run: Run) -> None:
    seen: list[tuple[str, bool]] = []

    def pre(sender: Any, instance: Run, **kwargs: Any) -> None:
        seen.append(("pre", instance._state.adding))

    def post(sender: Any, instance: Run, created: bool, **kwargs: Any) -> None:
        seen.append(("post", created))

    pre_save.connect(pre, sender=Run)
    post_save.connect(post, sender=Run)
    try:
        copy = Run(title="copy", snapshot=run.snapshot, last_seq=1)
        impl.insert_as_saved(copy)
    finally:
        pre_save.disconnect(pre, sender=Run)
        post_save.disconnect(post, sender=Run)
    assert seen == [("pre", True), ("post", True)]
    assert not copy._state.adding
    assert copy.created_at is not None
    stored = Run.objects.get(pk=copy.pk)
    assert (stored.title, stored.snapshot, stored.last_seq, stored.created_at) == (
        "copy", run.snapshot, 1, copy.created_at)
    assert connection.vendor in ("sqlite", "postgresql")


def test_dollars_are_set_and_added_exactly(impl: ModuleType, new_run: Callable[[], Run]) -> None:
    # The recorder's cost columns: a round's cost and price revision set, a run's cost
    # added to (Decimal, as the engine prices it), by update and by update_many.
    first, second = new_run(), new_run()
    Run.objects.filter(pk__in=[first.pk, second.pk]).update(cost_usd=Decimal("0.1"))
    impl.update(Run, {"id": first.pk}, {"cost_usd": Add(Decimal("0.00000003"))})
    impl.update_many(Run, ("id",), [{"id": run.pk, "cost_usd": Add(Decimal("0.2"))}
                                    for run in (first, second)])
    assert Run.objects.get(pk=first.pk).cost_usd == Decimal("0.30000003")
    assert Run.objects.get(pk=second.pk).cost_usd == Decimal("0.3")
    [round_id] = impl.insert(Round, [{"run": first.pk, "index": 0,
                                      "cost_usd": Decimal("0.12345678")}], returning="id")
    impl.update_many(Round, ("id",), [{"id": round_id, "cost_usd": Decimal("0.5"),
                                       "cached_input_tokens": 7}])
    stored = Round.objects.get(pk=round_id)
    assert (stored.cost_usd, stored.cached_input_tokens) == (Decimal("0.5"), 7)
