"""A run rebuilt as its spans come writes only what changed: the rows a new span does
not touch keep their ids and are not written (their viewers not told), a snapshot that
would come out the same is not built or written again, a run whose stored layout has
no digests (built before them) is written again in full, and a run received before
layouts had a row of their own is rebuilt from the layout its snapshot kept."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.ingest.support import EXPECTED, post, protobuf, rows, run_of, spans_of, weather_agent
from tools_app.models import IngestedLayout, Round, Run, RunEvent, ToolRegistration
from tools_app.tools.registry import sync_tools

pytestmark = [pytest.mark.django_db, pytest.mark.both]


def events_after(run: Run, seq: int) -> list[tuple[str, dict[str, object]]]:
    return [(e.kind, e.payload) for e in RunEvent.objects.filter(
        run=run, seq__gt=seq).order_by("seq")]


def test_a_late_span_touches_only_its_round(client: Client, token: str,
                                            bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))
    first = run_of(bob)
    first_round = Round.objects.get(run=first, index=0)

    post(client, token, protobuf([chat2]))

    assert events_after(first, first.last_seq) == [("spans_received", {"round_index": 1})]
    assert Round.objects.get(run=first, index=0) == first_round  # the same row, kept
    post(client, token, protobuf([agent]))
    assert rows(run_of(bob)) == EXPECTED


def test_a_layout_without_digests_is_written_again(client: Client, token: str,
                                                   bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))
    run = run_of(bob)
    layout = IngestedLayout.objects.get(run=run)
    layout.rows = [entry[:2] for entry in layout.rows]
    layout.save()
    Round.objects.filter(run=run).update(ai_text="stale")

    post(client, token, protobuf([chat2, agent]))

    assert rows(run_of(bob)) == EXPECTED
    assert {p.get("round_index") for k, p in events_after(run, run.last_seq)
            if k == "spans_received"} == {0, 1}


def test_the_runs_are_locked_before_their_spans_and_rows_are_read(
        client: Client, token: str, bob: AbstractUser) -> None:
    """Another process's request rebuilding the same run commits before this one reads
    the run's spans and rows (read after the lock, they hold what it wrote), so the two
    never both insert the run's next round."""
    chat1, tool, chat2, _agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))

    with CaptureQueriesContext(connection) as queries:
        post(client, token, protobuf([chat2]))

    sql = [q["sql"] for q in queries.captured_queries]
    lock = next(i for i, q in enumerate(sql)
                if 'FROM "tools_app_run"' in q and '"lease_token"' in q)
    if connection.vendor == "postgresql":
        assert "FOR UPDATE" in sql[lock]
    spans_read = next(i for i, q in enumerate(sql)
                      if 'FROM "tools_app_ingestedspan"' in q and '"received_at"' in q)
    rounds_read = next(i for i, q in enumerate(sql) if 'FROM "tools_app_round"' in q)
    assert lock < spans_read
    assert lock < rounds_read


def test_a_snapshot_that_would_come_out_the_same_is_not_written_again(
        client: Client, token: str, bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([tool]))
    run = run_of(bob)
    assert run.snapshot["endpoint"]["model"] == ""  # no model call yet

    with CaptureQueriesContext(connection) as first_model_call:
        post(client, token, protobuf([chat1]))  # its model and messages: a new snapshot

    assert _snapshot_writes(first_model_call)
    assert run_of(bob).snapshot["messages"] != run.snapshot["messages"]
    with CaptureQueriesContext(connection) as later_spans:
        post(client, token, protobuf([chat2]))  # a round, nothing the snapshot holds
        post(client, token, protobuf([agent]))  # the title and the end

    assert not _snapshot_writes(later_spans)
    assert rows(run_of(bob)) == EXPECTED


def test_a_tool_registered_between_batches_is_frozen_as_registered(
        client: Client, token: str, bob: AbstractUser) -> None:
    """What the trace names as a registered tool is frozen as registered at each
    rebuild (it may have changed meanwhile), whatever else the spans change."""
    chat1, tool, chat2, _agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))
    assert _frozen(run_of(bob))["get_weather"]["kind"] == "mock"  # from the trace

    sync_tools(["tools_app.tools.example_tools"])  # get_weather registered now
    post(client, token, protobuf([chat2]))  # nothing the snapshot is built from

    frozen = _frozen(run_of(bob))["get_weather"]
    assert (frozen["kind"], frozen["id"]) == (
        "python", str(ToolRegistration.objects.get(name="get_weather").pk))


def _frozen(run: Run) -> dict[str, dict[str, object]]:
    return {tool["name"]: tool for tool in run.snapshot["tools"]}


def _snapshot_writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries
            if q["sql"].startswith("UPDATE") and '"tools_app_run"' in q["sql"]
            and '"snapshot"' in q["sql"]]


def test_a_run_received_before_layouts_had_a_row_is_rebuilt_from_its_snapshots(
        client: Client, token: str, bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))
    run = run_of(bob)
    kept = IngestedLayout.objects.get(run=run)
    snapshot = run.snapshot
    snapshot["imported"]["otlp"]["layout"] = kept.rows  # as runs received then kept it
    Run.objects.filter(pk=run.pk).update(snapshot=snapshot)
    kept.delete()
    first_round = Round.objects.get(run=run, index=0)

    post(client, token, protobuf([chat2]))

    assert Round.objects.get(run=run, index=0) == first_round  # found again, kept
    assert "layout" not in run_of(bob).snapshot["imported"]["otlp"]
    assert IngestedLayout.objects.filter(run=run).exists()
    post(client, token, protobuf([agent]))
    assert rows(run_of(bob)) == EXPECTED


def test_a_calls_digest_tells_every_change_of_its_fields_and_place() -> None:
    from tools_app.ingest.assemble import CallPlan
    from tools_app.ingest.rows import _call_digest

    call = CallPlan(key="call_1", call_id="call_1", tool_name="clock", arguments="{}",
                    state="succeeded", result_text="None")
    changed = [
        CallPlan(**{**call.__dict__, "result_text": None}),  # None, not the text "None"
        CallPlan(**{**call.__dict__, "result_text": "None "}),
        CallPlan(**{**call.__dict__, "tool_name": "clock2", "arguments": "{}"}),
        CallPlan(**{**call.__dict__, "tool_name": "clock", "arguments": "2{}"}),
        CallPlan(**{**call.__dict__, "is_error": True}),
        CallPlan(**{**call.__dict__, "duration_ms": 1.0}),
    ]
    digests = {_call_digest(call, 0), _call_digest(call, 1),
               *(_call_digest(other, 0) for other in changed)}
    assert len(digests) == 2 + len(changed)
    assert _call_digest(CallPlan(**call.__dict__), 0) == _call_digest(call, 0)
