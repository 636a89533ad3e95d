"""Prepared reads (runs/store/sql/prepared.py): the rows the ORM's own queryset returns, for each
set of arguments, with the SQL compiled once; on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.db import connection, connections
from django.db.models import Count, JSONNull, Q, QuerySet
from django.test.utils import CaptureQueriesContext

from tests.web.support import start_run
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.debugger.run_header import header_view, live_run
from tools_app.runs.debugger.timeline import (
    CALL_FIELDS,
    RECORD_ROUND_FIELDS,
    WIRE_FLAGS,
    wire_flags,
)
from tools_app.runs.store.selectors import run_row, run_rows
from tools_app.runs.store.sql import prepared
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.both


@pytest.fixture
def two_runs(bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
             policy: ErrorPolicy) -> list[Run]:
    """Two executed runs with different rounds, calls and events."""
    tools = [demo_tools["get_weather"], demo_tools["always_fails"]]
    runs = []
    for name, cities in (("first", ["Paris", "Oslo"]), ("second", ["Rome"])):
        endpoint: ModelEndpoint = make_endpoint([
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": c}} for c in cities]},
            {"tool_calls": [{"name": "always_fails", "arguments": {"reason": name}}]},
            {"text": f"{name} done"}], name=name)
        run = start_run(bob, endpoint, tools, policy)
        async_to_sync(execute_run)(str(run.pk))
        run.refresh_from_db()
        assert run.status == "succeeded"
        runs.append(run)
    return runs


def calls(run_pk: Any, indexes: list[int]) -> QuerySet[ToolCall, Any]:
    return (ToolCall.objects.filter(run=run_pk, round__index__in=indexes)
            .order_by("call_index").values("pk", "round_id", "round__index", *CALL_FIELDS))


def rounds(run_pk: Any) -> QuerySet[Round, Any]:
    """The rounds' own columns, their JSON wire bodies, and the page's flags of which
    bodies a round has (boolean expressions), as the timeline reads them."""
    return Round.objects.filter(run=run_pk).order_by("index").values(
        "id", *RECORD_ROUND_FIELDS, *WIRE_FLAGS.values(), **wire_flags())


def marks(run_pk: Any, after: int) -> QuerySet[RunEvent, Any]:
    return (RunEvent.objects.filter(run_id=run_pk, seq__gt=after).order_by("seq")
            .values_list("seq", "payload__round_index", "kind", "payload__call_id")[:500])


def counts(run_pk: Any) -> QuerySet[ToolCall, Any]:
    return ToolCall.objects.filter(run=run_pk).order_by().values("run").annotate(
        rows=Count("pk"), errors=Count("pk", filter=Q(is_error=True)))


@pytest.mark.parametrize(("build", "extra"), [
    (calls, ([0, 1],)), (calls, ([1],)), (rounds, ()), (marks, (3,)), (counts, ())],
    ids=["calls-2-rounds", "calls-1-round", "rounds", "event-marks", "counts"])
def test_the_rows_are_the_querysets_for_every_run(
    two_runs: list[Run], build: Any, extra: tuple[Any, ...],
) -> None:
    key = ("test", build.__name__)
    for run in two_runs:
        expected = list(build(run.pk, *extra))
        assert expected, "an empty result would prove nothing"
        assert prepared.rows(key, build, run.pk, *extra) == expected


def test_the_values_are_converted_as_the_orm_converts_them(two_runs: list[Run]) -> None:
    [call, *_] = prepared.rows(("test", "calls"), calls, two_runs[0].pk, [0])
    assert call["arguments"] == {"city": "Paris"}  # JSON, decoded
    assert call["started_at"].tzinfo is not None  # an aware datetime
    assert isinstance(call["is_error"], bool)
    # A response stored as JSON null (a provider's `null`) is no body, as SQL NULL.
    Round.objects.filter(run=two_runs[0], index=0).update(
        response_json=JSONNull())
    found = prepared.rows(("test", "rounds"), rounds, two_runs[0].pk)
    assert found[0]["has_response"] is False
    for round_ in found:
        for flag, column in WIRE_FLAGS.items():  # a boolean expression, as a bool
            assert round_[flag] is (round_[column] is not None)


def test_a_second_call_takes_its_own_arguments(two_runs: list[Run]) -> None:
    first, second = two_runs
    key = ("test", "marks-args")
    everything = prepared.rows(key, marks, first.pk, 0)
    later = prepared.rows(key, marks, first.pk, 5)
    other = prepared.rows(key, marks, second.pk, 0)
    assert [row[0] for row in later] == [row[0] for row in everything if row[0] > 5]
    assert other == list(marks(second.pk, 0)) != everything
    assert prepared.rows(key, marks, uuid.uuid4(), 0) == []


def test_each_read_is_one_query_that_the_test_tools_see(two_runs: list[Run]) -> None:
    prepared.rows(("test", "counted"), rounds, two_runs[0].pk)
    with CaptureQueriesContext(connection) as queries:
        prepared.rows(("test", "counted"), rounds, two_runs[1].pk)
    assert len(queries) == 1


def test_an_argument_that_shapes_the_query_is_refused(two_runs: list[Run]) -> None:
    def sliced(run_pk: Any, limit: int) -> QuerySet[RunEvent, Any]:
        return RunEvent.objects.filter(run_id=run_pk).order_by("seq").values("seq")[:limit]

    with pytest.raises(ValueError, match="every argument"):
        prepared.rows(("test", "sliced"), sliced, two_runs[0].pk, 3)


@pytest.mark.parametrize("argument", [True, [], ["a", 1], [1.5], 1.5, None])
def test_arguments_it_cannot_place_are_refused(two_runs: list[Run], argument: Any) -> None:
    with pytest.raises(TypeError):
        prepared.rows(("test", "bad"), lambda run_pk, _: rounds(run_pk), two_runs[0].pk,
                      argument)


def test_only_values_querysets_are_prepared(two_runs: list[Run]) -> None:
    with pytest.raises(TypeError, match="values"):
        prepared.rows(("test", "models"), lambda run_pk: Round.objects.filter(run=run_pk),
                      two_runs[0].pk)


def test_the_live_header_reads_the_run_and_its_owner_as_the_orm_does(
    two_runs: list[Run],
) -> None:
    run = two_runs[0]
    live, owner = live_run(run.pk)
    orm = Run.objects.select_related("created_by").get(pk=run.pk)
    for field in Run._meta.concrete_fields:
        assert getattr(live, field.attname) == getattr(orm, field.attname), field.name
    assert owner == orm.created_by.get_username() == "bob"
    assert header_view(live, owner) == header_view(orm)
    Run.objects.filter(pk=run.pk).update(created_by=None)
    assert live_run(str(run.pk))[1] == ""
    with pytest.raises(Run.DoesNotExist):
        live_run(uuid.uuid4())


def test_a_uuid_column_takes_a_uuid_not_its_text(two_runs: list[Run]) -> None:
    """A string is a string parameter: given for a UUID column it fails at once, never
    matches the wrong rows."""
    with pytest.raises(ValidationError):
        prepared.rows(("test", "text-id"), rounds, str(two_runs[0].pk))


def test_lists_of_lengths_up_to_a_power_of_two_share_one_shape(two_runs: list[Run]) -> None:
    run = two_runs[0]
    key = ("test", "padded")
    prepared.rows(key, calls, run.pk, [0, 1, 2, 3])
    shapes = len(prepared._compiled)
    for indexes in ([1, 0, 1], [0, 1, 0, 0], [1, 1, 1]):  # lengths 3 and 4: one shape
        assert prepared.rows(key, calls, run.pk, indexes) == list(calls(run.pk, indexes))
    assert len(prepared._compiled) == shapes
    assert prepared.rows(key, calls, run.pk, [0, 1, 0, 1, 0]) == list(calls(run.pk, [0, 1]))
    assert len(prepared._compiled) == shapes + 1  # 5 -> 8


def test_a_list_of_strings_is_an_in_of_strings(two_runs: list[Run]) -> None:
    """As POST /api/runs looks its tools up by name: each list its own rows, lengths up
    to a power of two sharing one shape, and a string never matching by its prefix."""
    def named(names: list[str]) -> QuerySet[ToolRegistration, Any]:
        return ToolRegistration.objects.filter(name__in=names).order_by("name")

    key = ("test", "names")
    for names in (["get_weather"], ["always_fails", "get_weather"],
                  ["get_weather", "no_such_tool", "always_fails"], ["get_"]):
        found = prepared.instances(key, ToolRegistration, named, names)
        assert [fields_of(t) for t in found] == [fields_of(t) for t in named(names)]
    assert [t.name for t in prepared.instances(key, ToolRegistration, named,
                                                ["always_fails", "get_weather"])] == \
        ["always_fails", "get_weather"]
    shapes = len(prepared._compiled)
    prepared.instances(key, ToolRegistration, named, ["a", "b", "c", "d"])  # 3 and 4: one
    assert len(prepared._compiled) == shapes


@pytest.mark.django_db(transaction=True)  # the other thread's connection sees the rows
def test_each_threads_connection_converts_its_own_rows(two_runs: list[Run]) -> None:
    """A backend's converters belong to its connection: another thread's connection
    reads the same rows with its own."""
    run = two_runs[0]
    key = ("test", "threads")
    here = prepared.rows(key, calls, run.pk, [0, 1])
    there: list[Any] = []

    def read() -> None:
        try:
            there.append(prepared.rows(key, calls, run.pk, [0, 1]))
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert there == [here]
    assert here[0]["started_at"].tzinfo is not None


def fields_of(instance: Any) -> dict[str, Any]:
    return {name: getattr(instance, name) for name in prepared.concrete_names(type(instance))}


def test_instances_are_the_orms_own(two_runs: list[Run], bob: AbstractUser) -> None:
    """Model instances built from a prepared read hold what the ORM's queryset gives
    (JSON, datetimes, UUIDs, foreign keys), are saved as existing rows, and are read
    again with new arguments from the same compiled SQL."""
    def own(run_id: Any, user_id: Any) -> QuerySet[Run]:
        return Run.objects.filter(pk=run_id, created_by_id=user_id).order_by()

    for run in two_runs:
        [found] = prepared.instances("test_own_run", Run, own, run.pk, bob.pk)
        expected = Run.objects.get(pk=run.pk)
        assert fields_of(found) == fields_of(expected)
        assert isinstance(found.snapshot, dict)
        assert found.snapshot == expected.snapshot
        assert not found._state.adding
        assert found._state.db == "default"
    assert prepared.instances("test_own_run", Run, own, two_runs[0].pk, bob.pk + 1) == []

    found.title = "renamed through a prepared instance"
    found.save(update_fields=["title"])
    assert Run.objects.get(pk=found.pk).title == "renamed through a prepared instance"

    with CaptureQueriesContext(connection) as queries:
        prepared.instances("test_own_run", Run, own, two_runs[1].pk, bob.pk)
    assert len(queries.captured_queries) == 1


def test_a_claim_reads_the_run_as_the_orm_does(two_runs: list[Run]) -> None:
    for run in two_runs:
        assert fields_of(run_row(str(run.pk))) == fields_of(Run.objects.get(pk=run.pk))
        assert fields_of(run_row(run.pk)) == fields_of(Run.objects.get(pk=run.pk))
    with pytest.raises(Run.DoesNotExist):
        run_row(uuid.uuid4())


def test_a_group_of_claims_reads_its_runs_as_the_orm_does(two_runs: list[Run]) -> None:
    """A list of UUIDs is an IN of UUIDs (SQLite's hex text, PostgreSQL's uuid): each
    list its own rows, an unknown id matching none."""
    first, second = two_runs
    expected = {run.pk: fields_of(Run.objects.get(pk=run.pk)) for run in two_runs}
    for ids in ([first.pk], [second.pk, first.pk], [str(first.pk), uuid.uuid4()],
                [uuid.uuid4()]):
        found = {run.pk: fields_of(run) for run in run_rows(ids)}
        assert found == {pk: fields for pk, fields in expected.items()
                         if pk in {uuid.UUID(str(one)) for one in ids}}
