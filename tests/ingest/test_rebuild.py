"""A run rebuilt as its spans come writes only what changed: the rows a new span does
not touch keep their ids and are not written (their viewers not told), and a run
whose stored layout has no digests (built before them) is written again in full."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.ingest.support import EXPECTED, post, protobuf, rows, run_of, spans_of, weather_agent
from tools_app.models import Round, Run, RunEvent

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
    snapshot = run.snapshot
    layout = snapshot["imported"]["otlp"]["layout"]
    snapshot["imported"]["otlp"]["layout"] = [entry[:2] for entry in layout]
    Run.objects.filter(pk=run.pk).update(snapshot=snapshot)
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
