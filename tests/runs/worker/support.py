"""Helpers of the worker's write-path tests (tests/runs/worker): a script of two parallel
rounds, the events a run recorded rebuilt from their payloads, a claimed run to record
into, and every row a run stored, for comparison."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from tests.runs.support import start
from tools_app.engine.events import (
    EngineEvent,
    ModelResponseReceived,
    ProviderWireRequest,
    ProviderWireResponse,
    RoundStarted,
)
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunEvent, ToolCall, ToolRegistration
from tools_app.runs.store.leases import claim

PARALLEL_TWICE = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}},
                    {"name": "lookup", "arguments": {"key": "b"}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "c"}},
                    {"name": "nul_echo", "arguments": {"text": "d"}}]},
    {"text": "done: {last_results}"},
]
EVENTS: TypeAdapter[Any] = TypeAdapter(EngineEvent)
ROUND_FIELDS = ("index", "status", "request_json", "response_json", "response", "ai_text",
                "finish_reason", "input_tokens", "output_tokens", "latency_ms", "attempts",
                "started_at", "finished_at")
CALL_FIELDS = ("call_index", "call_id", "tool_name", "arguments_raw", "arguments", "state",
               "result_text", "result_json", "is_error", "error_type", "error_message",
               "handled_by", "attempts", "started_at", "finished_at", "duration_ms")
RUN_FIELDS = ("rounds_count", "tool_calls_count", "errors_count", "input_tokens",
              "output_tokens", "total_tokens", "last_seq")


def stored_events(run: Run) -> list[tuple[Any, dict[str, Any]]]:
    """The engine events a run recorded, rebuilt from their stored payloads, with the
    wire request and response an HTTP provider adds around each model call (the
    scripted model has no wire)."""
    recorded = RunEvent.objects.filter(run=run).exclude(kind="run_status").order_by("seq")
    events: list[Any] = []
    for stored in recorded:
        event = EVENTS.validate_python(stored.payload)
        if isinstance(event, ModelResponseReceived):
            events.append(ProviderWireResponse(round_index=event.round_index, provider="x",
                                               status=200, body={"n": event.round_index},
                                               raw_stream="data: {}"))
        events.append(event)
        if isinstance(event, RoundStarted):
            events.append(ProviderWireRequest(round_index=event.round_index, provider="x",
                                              url="http://127.0.0.1/v1", body={"messages": []}))
    return [(event, event.model_dump(mode="json")) for event in events]


def rows(run: Run) -> tuple[Any, ...]:
    run.refresh_from_db()
    return (
        [tuple(getattr(r, f) for f in ROUND_FIELDS) for r in run.rounds.order_by("index")],
        [(c.round.index, *(getattr(c, f) for f in CALL_FIELDS))
         for c in ToolCall.objects.filter(run=run).order_by("round__index", "call_index")],
        tuple(getattr(run, f) for f in RUN_FIELDS),
        [(e.seq, e.kind, e.payload) for e in RunEvent.objects.filter(run=run).order_by("seq")],
    )


def recording_run(endpoint: ModelEndpoint, tools: dict[str, ToolRegistration],
                  policy: ErrorPolicy) -> tuple[Run, int]:
    run = start(endpoint, [tools["lookup"], tools["nul_echo"]], policy)
    token = claim(str(run.pk), "worker-1")
    assert token is not None
    RunEvent.objects.filter(run=run).delete()  # its status events: not compared
    Run.objects.filter(pk=run.pk).update(last_seq=0)
    return run, token
