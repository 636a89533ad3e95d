"""What each engine event changes in a run's rows (its round and call rows, the run's
counters), folded into one batch's `RowChanges` in the batch's order. The event log
itself (one RunEvent per event) is the batch writer's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from tools_app.engine.events import (
    LoopDetected,
    ModelResponseReceived,
    ProviderAttempt,
    ProviderWireRequest,
    ProviderWireResponse,
    RoundStarted,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallStarted,
)
from tools_app.engine.execution import arguments_as_map
from tools_app.models import Round, ToolCall
from tools_app.runs.store.sanitize import CleanPayload, clean_json, clean_text, fit_column
from tools_app.runs.store.sql.row_changes import RowChanges


def fold_events(changes: RowChanges, batch: Sequence[tuple[Any, dict[str, Any]]]) -> None:
    """Each event's change, in order (events without one, a model's request say, change
    no row)."""
    for event, payload in batch:
        apply = _APPLIERS.get(event.kind)
        if apply is not None:
            apply(changes, event, payload)


def on_round_started(changes: RowChanges, event: RoundStarted, payload: dict[str, Any]) -> None:
    changes.start_round(event.round_index or 0, {
        "status": "requested", "started_at": _dt(event.at), "attempts": [],
        "finished_at": None})


def on_wire_request(changes: RowChanges, event: ProviderWireRequest,
                    payload: dict[str, Any]) -> None:
    changes.update_round(event.round_index or 0, {"request_json": _column(payload, "body")})


def on_wire_response(changes: RowChanges, event: ProviderWireResponse,
                     payload: dict[str, Any]) -> None:
    changes.update_round(event.round_index or 0, {
        "response_json": _column(payload, "body"),
        "raw_stream": clean_text(payload.get("raw_stream"))})


def on_attempt(changes: RowChanges, event: ProviderAttempt, payload: dict[str, Any]) -> None:
    index = event.round_index or 0
    attempts = changes.pending_round_value(index, "attempts")
    if attempts is None:  # retries are rare: read what is stored
        attempts = Round.objects.filter(pk=changes.round_id(index)).values_list(
            "attempts", flat=True).get()
    changes.update_round(index, {"attempts": [*attempts, payload]})


def on_response(changes: RowChanges, event: ModelResponseReceived,
                payload: dict[str, Any]) -> None:
    response = event.response
    usage = response.usage
    changes.update_round(event.round_index or 0, {
        "status": "responded",
        "response": _column(payload, "response"),
        "ai_text": clean_text(response.ai_message.text),
        "thinking": clean_text(response.ai_message.thinking),
        "finish_reason": fit_column(Round, "finish_reason", response.finish_reason),
        "input_tokens": usage.input_tokens if usage else None,
        "output_tokens": usage.output_tokens if usage else None,
        "cached_input_tokens": usage.cached_input_tokens if usage else None,
        # Priced by the engine from these tokens (engine/pricing.py), with the run's
        # frozen price revision.
        "cost_usd": event.cost,
        "price_revision": event.price_revision if event.cost is not None else None,
        "latency_ms": event.latency_ms,
        "first_token_ms": event.first_token_ms,
        "finished_at": _dt(event.at),
    })
    if usage:
        changes.count(input_tokens=usage.input_tokens or 0,
                      output_tokens=usage.output_tokens or 0,
                      total_tokens=usage.total_tokens or 0)
    if event.cost:
        changes.count(cost_usd=event.cost)


def on_proposed(changes: RowChanges, event: ToolCallProposed, payload: dict[str, Any]) -> None:
    request = event.request
    changes.propose_call(event.round_index or 0, {
        "run": changes.run_id,
        "call_index": event.call_index,
        "call_id": fit_column(ToolCall, "call_id", request.id),
        "tool_name": fit_column(ToolCall, "tool_name", request.name),
        "arguments_raw": clean_text(request.arguments),
        "arguments": clean_json(_parsed_or_none(request)),
        "cost_usd": event.cost,
    })


def on_started(changes: RowChanges, event: ToolCallStarted, payload: dict[str, Any]) -> None:
    changes.update_call(event.round_index or 0, fit_column(ToolCall, "call_id", event.call_id),
                        fit_column(ToolCall, "tool_name", event.tool_name),
                        {"state": "started", "started_at": _dt(event.at), "finished_at": None},
                        started=True)


def on_finished(changes: RowChanges, event: ToolCallFinished, payload: dict[str, Any]) -> None:
    changes.update_call(event.round_index or 0, fit_column(ToolCall, "call_id", event.call_id),
                        fit_column(ToolCall, "tool_name", event.tool_name), {
        "state": event.outcome,
        "result_text": clean_text(event.text),
        "result_json": _column(payload, "result_json"),
        "is_error": event.is_error,
        "error_type": fit_column(ToolCall, "error_type", event.error_type),
        "error_message": clean_text(event.error_message) or "",
        "error_details": _column(payload, "error_details"),
        "traceback": clean_text(event.traceback) or "",
        "handled_by": fit_column(ToolCall, "handled_by", event.handled_by),
        "stopped_run": event.stopped_run,
        "started_at": _dt(event.started_at),
        "finished_at": _dt(event.finished_at),
        "duration_ms": event.duration_ms,
    })
    changes.count(tool_calls_count=1, errors_count=1 if event.is_error else 0)


def on_loop_detected(changes: RowChanges, event: LoopDetected,
                     payload: dict[str, Any]) -> None:
    # The note itself stays in the event (the timeline reads it there); the run's count
    # is what the runs list filters on.
    changes.count(loop_detections=1)


def _column(payload: dict[str, Any], key: str) -> Any:
    """A payload value for a JSON column: with its text, when the recorder made it."""
    return payload.column(key) if isinstance(payload, CleanPayload) else payload[key]


def _parsed_or_none(request: Any) -> Any:
    try:
        return arguments_as_map(request)
    except Exception:  # invalid arguments are recorded raw; the engine reports the error
        return None


def _dt(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch is not None else None


_APPLIERS: dict[str, Callable[[RowChanges, Any, dict[str, Any]], None]] = {
    "round_started": on_round_started,
    "provider_wire_request": on_wire_request,
    "provider_wire_response": on_wire_response,
    "provider_attempt": on_attempt,
    "model_response_received": on_response,
    "tool_call_proposed": on_proposed,
    "tool_call_started": on_started,
    "tool_call_finished": on_finished,
    "loop_detected": on_loop_detected,
}
