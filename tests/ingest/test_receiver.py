"""POST /v1/traces as the OTLP/HTTP specification has it: protobuf and JSON bodies,
gzip, the answer in the request's encoding with partial success for refused spans, and
the refusals (401, 400, 413, 415, 429 with Retry-After). Spans sent in any order, in
pieces or twice make the same run, each span stored once."""

from __future__ import annotations

import gzip
from typing import Any
from unittest.mock import patch

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from opentelemetry.trace import Tracer
from opentelemetry.trace.span import format_trace_id

from tests.ingest.support import (
    EXPECTED,
    JSON,
    PROTOBUF,
    answer,
    assistant,
    call_part,
    chat_span,
    otlp_json,
    post,
    protobuf,
    rows,
    run_of,
    spans_of,
    text,
    weather_agent,
)
from tools_app.ingest import known
from tools_app.models import IngestedSpan, Run, RunEvent
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.mark.both
def test_protobuf_and_json_gzip_bodies_make_the_same_run(
        client: Client, token: str, bob: AbstractUser, charlie: AbstractUser) -> None:
    by_protobuf = post(client, token, protobuf(spans_of(weather_agent)))
    by_json = post(client, create_token(charlie, "json")[1], otlp_json(spans_of(weather_agent)),
                   JSON, gzipped=True)

    assert (by_protobuf.status_code, by_protobuf["Content-Type"]) == (200, PROTOBUF)
    assert (by_json.status_code, by_json["Content-Type"]) == (200, JSON)
    assert not answer(by_protobuf).HasField("partial_success")
    assert rows(run_of(bob)) == rows(run_of(charlie)) == EXPECTED
    assert (run_of(bob).title, run_of(bob).status) == ("weather", "succeeded")


@pytest.mark.both
def test_a_span_sent_twice_is_stored_once(client: Client, token: str,
                                          bob: AbstractUser) -> None:
    body = protobuf(spans_of(weather_agent))
    post(client, token, body)
    again = post(client, token, body)

    assert again.status_code == 200
    assert not answer(again).HasField("partial_success")
    assert IngestedSpan.objects.count() == 4
    assert rows(run_of(bob)) == EXPECTED


@pytest.mark.both
def test_spans_in_reverse_order_and_one_by_one_fill_their_places(
        client: Client, token: str, bob: AbstractUser) -> None:
    chat1, tool, chat2, agent = spans_of(weather_agent)
    for span in (agent, chat2, tool):
        post(client, token, protobuf([span]))
    # The call's proposing round has not come yet: it waits in a round standing for it.
    assert [r[0] for r in rows(run_of(bob))] == ["missing", "responded"]

    post(client, token, protobuf([chat1]))

    assert rows(run_of(bob)) == EXPECTED
    kinds = RunEvent.objects.filter(run=run_of(bob)).values_list("kind", flat=True)
    assert list(kinds).count("spans_received") >= 4


def test_a_failed_tool_span_is_an_execution_error(client: Client, token: str,
                                                  bob: AbstractUser) -> None:
    post(client, token, protobuf(spans_of(lambda t: weather_agent(t, tool_error="no city"))))

    [call] = run_of(bob).tool_calls.all()
    assert (call.state, call.is_error, call.error_type, call.error_message, call.result_text) \
        == ("execution_error", True, "ValueError", "no city", None)


def test_spans_without_valid_ids_are_refused_as_a_partial_success(
        client: Client, token: str, bob: AbstractUser) -> None:
    spans = spans_of(weather_agent)
    body = encode_with_a_zero_span_id(spans)

    response = post(client, token, body)

    assert response.status_code == 200
    partial = answer(response).partial_success
    assert (partial.rejected_spans, partial.error_message) == (
        1, "a span has no valid span_id (8 bytes, not all zero)")
    assert IngestedSpan.objects.count() == 3


def encode_with_a_zero_span_id(spans: Any) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(spans)
    request.resource_spans[0].scope_spans[0].spans[0].span_id = bytes(8)
    return request.SerializeToString()


def test_without_a_valid_token_nothing_is_stored(client: Client, bob: AbstractUser) -> None:
    body = protobuf(spans_of(weather_agent))
    assert post(client, None, body).status_code == 401
    assert post(client, "afw_not-a-token", body).status_code == 401
    assert IngestedSpan.objects.count() == 0


@pytest.mark.parametrize(("content_type", "headers", "status"), [
    ("text/plain", {}, 415),
    (PROTOBUF, {"Content-Encoding": "br"}, 415),
])
def test_what_the_receiver_does_not_speak_is_415(client: Client, token: str,
                                                 content_type: str, headers: dict[str, str],
                                                 status: int) -> None:
    response = post(client, token, protobuf(spans_of(weather_agent)), content_type, **headers)
    assert response.status_code == status


@pytest.mark.parametrize(("body", "content_type", "gzipped"), [
    (b"\xff\xff\xff not protobuf", PROTOBUF, False),
    (b'{"resourceSpans": [', JSON, False),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', JSON, False),
    (gzip.compress(b"x" * 1000)[:20], PROTOBUF, None),
])
def test_a_body_that_does_not_decode_is_400(client: Client, token: str, body: bytes,
                                            content_type: str, gzipped: bool | None) -> None:
    headers = {"Content-Encoding": "gzip"} if gzipped is None else {}
    response = post(client, token, body, content_type, gzipped=bool(gzipped), **headers)
    assert response.status_code == 400
    assert IngestedSpan.objects.count() == 0


def test_a_body_past_the_limit_is_413_compressed_or_not(client: Client, token: str,
                                                        settings: Any) -> None:
    settings.AGENTFORGE_OTLP_MAX_BYTES = 2048
    assert post(client, token, b"\0" * 4096).status_code == 413
    # Small on the wire, past the limit once inflated.
    assert post(client, token, b"\0" * 100_000, gzipped=True).status_code == 413


def test_past_the_rate_the_answer_is_429_with_retry_after(client: Client, token: str,
                                                          settings: Any) -> None:
    settings.AGENTFORGE_OTLP_RATE = "1/m"
    body = protobuf(spans_of(weather_agent))
    assert post(client, token, body).status_code == 200

    refused = post(client, token, body, JSON)

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert refused["Content-Type"] == JSON


@pytest.mark.both
def test_a_conversation_id_joins_traces_into_one_run(client: Client, token: str,
                                                     bob: AbstractUser) -> None:
    def turn(tracer: Tracer, words: str) -> None:
        chat_span(tracer, output=assistant(text(words), finish="stop"),
                  **{"gen_ai.conversation.id": "conversation-7"})

    first, second = spans_of(lambda t: turn(t, "one")), spans_of(lambda t: turn(t, "two"))
    assert format_trace_id(first[0].context.trace_id) != format_trace_id(
        second[0].context.trace_id)
    post(client, token, protobuf(first))
    post(client, token, protobuf(second))

    assert [r[2] for r in rows(run_of(bob))] == ["one", "two"]


def test_spans_another_user_sent_are_refused_not_taken_over(
        client: Client, token: str, bob: AbstractUser, charlie: AbstractUser) -> None:
    body = protobuf(spans_of(weather_agent))
    post(client, token, body)

    response = post(client, create_token(charlie, "other")[1], body)

    partial = answer(response).partial_success
    assert (partial.rejected_spans, partial.error_message) == (
        4, "a span with this trace and span id was sent by another user")
    assert not Run.objects.filter(created_by=charlie).exists()
    assert rows(run_of(bob)) == EXPECTED


@pytest.mark.both
def test_spans_sent_again_are_found_by_index_lookups_not_a_join_with_the_runs(
        client: Client, token: str, bob: AbstractUser) -> None:
    """Every batch looks up which of its spans are stored already, with their owners.
    As one join of the spans with the runs, PostgreSQL without statistics on the spans
    (a new table, autovacuum not yet round) hashed the whole run table for each batch:
    50 ms a batch at 36,000 runs. Two lookups by index keep it independent of them."""
    body = protobuf(spans_of(weather_agent))
    post(client, token, body)

    with CaptureQueriesContext(connection) as queries:
        response = post(client, token, body)

    assert answer(response).partial_success.rejected_spans == 0  # duplicates, stored once
    assert IngestedSpan.objects.count() == 4
    span_reads = [q["sql"] for q in queries.captured_queries
                  if q["sql"].lstrip().startswith("SELECT") and '"tools_app_ingestedspan"'
                  in q["sql"].split(" FROM ", 1)[-1][:40]]
    assert span_reads
    assert not [sql for sql in span_reads if " JOIN " in sql]


@pytest.mark.both
def test_a_batch_of_many_traces_finds_each_ones_spans_sent_before(
        client: Client, token: str, bob: AbstractUser, charlie: AbstractUser) -> None:
    """The stored spans are looked up per trace, in groups of bounded size: whatever
    traces a batch mixes, each span sent before is found (here: refused, as another
    user sent it) and the others are stored."""
    agents = [spans_of(weather_agent) for _ in range(3)]
    post(client, token, protobuf([*agents[0], *agents[1][:2]]))
    mixed = [span for spans in agents for span in spans]

    with patch.object(known, "MAX_IDS", 3):  # a group per trace or part of one
        response = post(client, create_token(charlie, "other")[1], protobuf(mixed))

    assert answer(response).partial_success.rejected_spans == 6
    assert IngestedSpan.objects.count() == 12
    assert sorted(run.rounds_count for run in Run.objects.filter(created_by=charlie)) == [1, 2]


def test_a_failed_agent_span_fails_the_run(client: Client, token: str,
                                           bob: AbstractUser) -> None:
    def failing(tracer: Tracer) -> None:
        from opentelemetry.trace import Status, StatusCode

        with tracer.start_as_current_span("invoke_agent") as agent:
            agent.set_attributes({"gen_ai.operation.name": "invoke_agent",
                                  "error.type": "TimeoutError"})
            chat_span(tracer, output=assistant(text("thinking"), finish="stop"))
            agent.set_status(Status(StatusCode.ERROR, "the agent gave up after 30 s"))

    post(client, token, protobuf(spans_of(failing)))

    run = run_of(bob)
    assert (run.status, run.error_type, run.error_message) == (
        "failed", "TimeoutError", "the agent gave up after 30 s")


def test_a_span_whose_parent_is_in_another_service_ends_the_run(
        client: Client, token: str, bob: AbstractUser) -> None:
    """An agent serving a request traced by another service: its top span's parent is
    remote (never sent here), and that span's arrival ends the run."""
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    caller = SpanContext(trace_id=0x5A5A, span_id=0x77, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def served(tracer: Tracer) -> None:
        token_ = context.attach(trace.set_span_in_context(NonRecordingSpan(caller)))
        try:
            weather_agent(tracer)
        finally:
            context.detach(token_)

    *children, agent = spans_of(served)
    post(client, token, protobuf(children))
    assert run_of(bob).status == "running"

    post(client, token, protobuf([agent]))

    assert run_of(bob).status == "succeeded"
    assert rows(run_of(bob)) == EXPECTED


def test_a_call_without_a_tool_span_takes_its_result_only_from_a_later_request(
        client: Client, token: str, bob: AbstractUser) -> None:
    """A result carried before the call was proposed (a call id used again) is not its
    result: only a request after the call's round can answer it."""
    def reused_id(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent") as agent:
            agent.set_attributes({"gen_ai.operation.name": "invoke_agent"})
            chat_span(tracer, output=assistant(call_part("call_1", "clock", {})),
                      inputs=[{"role": "user", "parts": [text("Time?")]}])
            chat_span(tracer, output=assistant(call_part("call_1", "clock", {})), inputs=[
                {"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "call_1", "response": "09:00"}]}])

    post(client, token, protobuf(spans_of(reused_id)))

    calls = [(c.call_id, c.state, c.result_text) for r in run_of(bob).rounds.order_by("index")
             for c in r.tool_calls.all()]
    assert calls == [("call_1", "succeeded", "09:00"), ("call_1", "unknown_outcome", None)]
