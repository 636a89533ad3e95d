"""A rebuild takes the earlier spans of its run from this process's cache (parsed once)
and reads from the database only the rows the cache does not hold: spans another
process stored, or those past its bound. Entries are added when the request commits,
for the runs still receiving spans, and found only by the row they came from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.ingest.support import EXPECTED, post, protobuf, rows, run_of, spans_of, weather_agent
from tools_app.ingest import span_cache
from tools_app.ingest.span_cache import SpanCache
from tools_app.ingest.spans import SpanRecord
from tools_app.models import IngestedSpan
from tools_app.runs.store.sql import rowsql

Commits = Callable[..., AbstractContextManager[list[Callable[[], Any]]]]


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    span_cache.spans.clear()
    yield
    span_cache.spans.clear()


def cached_rows() -> list[str]:
    """The span ids of the stored rows the cache holds."""
    ids = tuple(IngestedSpan.objects.values_list("id", flat=True))
    # As the receiver reads a row's key: the stored time as the database returns it.
    return sorted(span for pk, trace, span, at in rowsql.select(
        IngestedSpan, ("id", "trace_id", "span_id", "received_at"), {"id": rowsql.In(ids)})
        if span_cache.spans.get((pk, trace, span, at)) is not None) if ids else []


def span_data_reads(queries: CaptureQueriesContext) -> list[str]:
    """The SELECTs that read stored spans' JSON."""
    return [sql for sql in (q["sql"] for q in queries.captured_queries)
            if sql.startswith("SELECT") and '"tools_app_ingestedspan"."data"' in sql]


@pytest.mark.django_db
@pytest.mark.both
def test_a_rebuild_takes_the_earlier_spans_from_the_cache(
        client: Client, token: str, bob: AbstractUser,
        django_capture_on_commit_callbacks: Commits) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    with django_capture_on_commit_callbacks(execute=True):
        post(client, token, protobuf([chat1, tool]))
    assert len(cached_rows()) == 2

    with CaptureQueriesContext(connection) as queries:
        for span in (chat2, agent):  # each request committed before the next
            with django_capture_on_commit_callbacks(execute=True):
                post(client, token, protobuf([span]))

    assert span_data_reads(queries) == []  # no span's JSON read back
    assert rows(run_of(bob)) == EXPECTED
    assert cached_rows() == []  # the root span ended the run: its spans are dropped


@pytest.mark.django_db
@pytest.mark.both
def test_spans_the_cache_lacks_are_read_from_their_rows(
        client: Client, token: str, bob: AbstractUser,
        django_capture_on_commit_callbacks: Commits) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))  # as another process: not kept here
    assert cached_rows() == []

    with django_capture_on_commit_callbacks(execute=True), \
            CaptureQueriesContext(connection) as queries:
        post(client, token, protobuf([chat2]))
    assert len(span_data_reads(queries)) == 1  # the two earlier spans, in one query
    assert len(cached_rows()) == 3  # those read, and this request's

    with django_capture_on_commit_callbacks(execute=True), \
            CaptureQueriesContext(connection) as queries:
        post(client, token, protobuf([agent]))
    assert span_data_reads(queries) == []
    assert rows(run_of(bob)) == EXPECTED


@pytest.mark.django_db
@pytest.mark.both
def test_the_spans_of_an_ended_run_are_not_kept(
        client: Client, token: str, bob: AbstractUser,
        django_capture_on_commit_callbacks: Commits) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        post(client, token, protobuf(spans_of(weather_agent)))  # the whole trace
    assert rows(run_of(bob)) == EXPECTED
    assert cached_rows() == []


@pytest.mark.django_db
@pytest.mark.both
def test_nothing_is_kept_from_a_request_that_did_not_commit(
        client: Client, token: str) -> None:
    chat1, tool, chat2, _ = spans_of(weather_agent)
    post(client, token, protobuf([chat1, tool]))
    post(client, token, protobuf([chat2]))  # the test's transaction never commits
    assert len(span_cache.spans) == 0


AT = datetime(2026, 1, 1, tzinfo=UTC)


def record(span_id: str, text: str = "") -> SpanRecord:
    return SpanRecord(trace_id="a" * 32, span_id=span_id, attributes={"text": text})


def test_an_entry_is_found_only_by_its_row() -> None:
    cache = SpanCache()
    cache.put_many([((1, "a" * 32, "b" * 16, AT), "run", record("b" * 16))])
    assert cache.get((1, "a" * 32, "b" * 16, AT)) is not None
    # The same id given to a span stored again later (same span ids, or another span).
    assert cache.get((1, "a" * 32, "b" * 16, AT.replace(microsecond=1))) is None
    assert cache.get((1, "a" * 32, "c" * 16, AT)) is None


def test_the_least_recently_used_go_past_the_bound_of_spans() -> None:
    cache = SpanCache(max_spans=2)
    keys = [(n, "a" * 32, f"{n:016x}", AT) for n in range(3)]
    cache.put_many([(keys[0], "run", record(keys[0][2])), (keys[1], "run", record(keys[1][2]))])
    assert cache.get(keys[0]) is not None  # now used after keys[1]
    cache.put_many([(keys[2], "run", record(keys[2][2]))])
    assert [cache.get(k) is not None for k in keys] == [True, False, True]


def test_the_spans_of_a_run_are_dropped_together() -> None:
    cache = SpanCache()
    keys = [(n, "a" * 32, f"{n:016x}", AT) for n in range(3)]
    cache.put_many([(keys[0], "ended", record(keys[0][2])),
                    (keys[1], "ended", record(keys[1][2])),
                    (keys[2], "going on", record(keys[2][2]))])
    cache.drop_runs(["ended"])
    assert [cache.get(k) is not None for k in keys] == [False, False, True]


def test_the_cache_holds_at_most_its_bound_of_text() -> None:
    cache = SpanCache(max_chars=100)
    small = [((n, "a" * 32, f"{n:016x}", AT), "run", record(f"{n:016x}", "x" * 30))
             for n in range(4)]
    cache.put_many(small)
    assert len(cache) == 2  # each entry: 34 characters (key "text" and its value)
    cache.put_many([((9, "a" * 32, "9" * 16, AT), "run", record("9" * 16, "x" * 200))])
    assert cache.get((9, "a" * 32, "9" * 16, AT)) is None  # larger than the whole bound
    assert len(cache) == 2
