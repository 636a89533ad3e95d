"""A received run whose root span never comes is ended by the workers' sweeps once no
span came for AGENTFORGE_OTLP_IDLE_SECONDS: finished as incomplete, with a note saying
why, not failed; a span arriving later still fills it in, and the note says so. The
clock is given to the sweep, never waited for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone

from tests.ingest.support import EXPECTED, post, protobuf, rows, run_of, spans_of, weather_agent
from tools_app.ingest.idle import INCOMPLETE, end_idle_runs
from tools_app.models import IngestedSpan, Run, RunEvent
from tools_app.runs.sweeps import sweep

pytestmark = [pytest.mark.django_db, pytest.mark.both]

NOTE = "No spans for 10 min and its root span never came: ended as incomplete."


def post_without_root(client: Client, token: str) -> Run:
    """The weather agent's spans but its root (the agent span), which never comes."""
    *children, _agent = spans_of(weather_agent)
    post(client, token, protobuf(children))
    return Run.objects.get()


def last_status_event(run: Run) -> dict[str, object]:
    event = RunEvent.objects.filter(run=run, kind="run_status").order_by("-seq").first()
    assert event is not None
    return event.payload


def test_a_run_without_its_root_ends_as_incomplete_once_idle_past_the_setting(
        client: Client, token: str, bob: AbstractUser) -> None:
    run = post_without_root(client, token)
    assert run.status == "running"

    assert end_idle_runs(now=timezone.now() + timedelta(minutes=9)) == []
    assert run_of(bob).status == "running"

    assert end_idle_runs(now=timezone.now() + timedelta(minutes=11)) == [str(run.pk)]

    ended = run_of(bob)
    assert (ended.status, ended.error_type, ended.error_message) == (
        "succeeded", INCOMPLETE, NOTE)
    assert ended.finished_at is not None
    assert last_status_event(ended) == {
        "status": "succeeded", "incomplete": True, "note": NOTE, "round_index": 1}
    assert rows(ended) == EXPECTED  # its rounds and calls as the spans said
    assert end_idle_runs(now=timezone.now() + timedelta(hours=1)) == []  # ended once


def test_the_idle_time_is_the_setting(client: Client, token: str, bob: AbstractUser,
                                      settings: object) -> None:
    settings.AGENTFORGE_OTLP_IDLE_SECONDS = 90  # type: ignore[attr-defined]
    run = post_without_root(client, token)

    assert end_idle_runs(now=timezone.now() + timedelta(seconds=60)) == []
    assert end_idle_runs(now=timezone.now() + timedelta(seconds=120)) == [str(run.pk)]
    assert run_of(bob).error_message == (
        "No spans for 90 s and its root span never came: ended as incomplete.")


def test_a_span_received_within_the_idle_time_keeps_the_run_going(
        client: Client, token: str, bob: AbstractUser) -> None:
    chat1, tool, chat2, _agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1]))
    IngestedSpan.objects.update(received_at=timezone.now() - timedelta(minutes=30))
    post(client, token, protobuf([tool, chat2]))  # the run's last span: just now

    assert end_idle_runs(now=timezone.now() + timedelta(minutes=5)) == []
    assert run_of(bob).status == "running"


def test_a_run_whose_root_came_or_that_the_product_runs_is_not_touched(
        client: Client, token: str, bob: AbstractUser) -> None:
    post(client, token, protobuf(spans_of(weather_agent)))
    assert run_of(bob).status == "succeeded"

    assert end_idle_runs(now=timezone.now() + timedelta(days=1)) == []
    assert run_of(bob).error_type == ""


def test_a_span_after_the_incomplete_end_fills_in_and_the_note_says_so(
        client: Client, token: str, bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    post(client, token, protobuf([chat1]))
    [run_id] = end_idle_runs(now=timezone.now() + timedelta(minutes=11))
    assert [r[0] for r in rows(run_of(bob))] == ["responded"]
    seen = RunEvent.objects.filter(run_id=run_id).count()

    post(client, token, protobuf([tool, chat2]))

    filled = run_of(bob)
    assert rows(filled) == EXPECTED
    assert (filled.status, filled.error_type) == ("succeeded", INCOMPLETE)
    assert filled.error_message == (
        f"{NOTE}\nSpans that came after it was ended are filled in.")
    late = RunEvent.objects.filter(run_id=run_id, seq__gt=seen)
    assert late.exists()
    assert all(e.kind == "spans_received" and e.payload["late"] for e in late)

    post(client, token, protobuf([agent]))  # its root, later still

    assert run_of(bob).title == "weather"
    assert run_of(bob).error_message.endswith("; its root span came with them.")


def test_the_workers_sweep_ends_idle_received_runs(
        client: Client, token: str, bob: AbstractUser) -> None:
    post_without_root(client, token)
    IngestedSpan.objects.update(received_at=timezone.now() - timedelta(minutes=11))

    sweep()  # what the embedded worker and every db_worker run periodically

    assert (run_of(bob).status, run_of(bob).error_type) == ("succeeded", INCOMPLETE)
