"""Engine events -> database rows + one RunEvent each, then a live notification.

Each event's state change (Round / ToolCall / Run totals) and its RunEvent are written
in ONE transaction, with the seq allocated under the worker's lease token. Only after
the commit are viewers notified (`eventlog.notify`), with just the seq: the WebSocket
consumer reads rows by seq, so a dropped notification never loses anything.
Streaming fragments (partial text / tool-call pieces) are not stored: they are only
broadcast, and the stored model response supersedes them.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import F

from ..engine.events import (
    ModelResponseReceived,
    PartialText,
    PartialToolCall,
    ProviderAttempt,
    ProviderWireRequest,
    ProviderWireResponse,
    RoundStarted,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallStarted,
)
from ..engine.execution import arguments_as_map
from ..models import Round, Run, ToolCall
from .eventlog import append_event, notify
from .storage import StreamRedactor, clean_json, clean_text, fit_column, redact

logger = logging.getLogger(__name__)

EPHEMERAL_KINDS = frozenset({"partial_text", "partial_tool_call"})


class RunRecorder:
    """An engine observer bound to one run and one lease token."""

    def __init__(self, run_id: str, token: int, secrets: tuple[str, ...] = ()) -> None:
        self.run_id = run_id
        self.token = token
        self.secrets = secrets
        self.before_round: Any = None  # an async hook the runner uses as a checkpoint
        self._round_ids: dict[int, int] = {}  # round index -> Round pk, once committed
        self._streams = StreamRedactor(secrets)
        # Round index -> the text it streamed so far, as shown (redacted): what a round
        # the run ends before its response keeps (runner -> lifecycle.finish).
        self.streamed: dict[int, str] = {}

    async def __call__(self, event: Any) -> None:
        if isinstance(event, RoundStarted) and self.before_round is not None:
            await self.before_round()
        if event.kind in EPHEMERAL_KINDS:
            fragment = self._fragment(event)
            if fragment is not None:
                await notify(self.run_id, {"fragment": fragment})
            return
        payload = self._payload(event)
        if self.secrets:
            # The one boundary every stored value crosses: the rows are written from the
            # redacted event, whichever path (streamed or not) the values came by.
            event = type(event).model_validate(payload)
        seq = await sync_to_async(self.record)(event, payload)
        await notify(self.run_id, {"seq": seq})

    def _payload(self, event: Any) -> dict[str, Any]:
        data = event.model_dump(mode="json")
        if data.get("raw_stream") and _mentions_secret(data.get("body"), self.secrets):
            # The stream carried a secret in pieces (one per event, each harmless alone,
            # whole when read together), which redacting line by line cannot catch.
            data["raw_stream"] = RAW_STREAM_WITHHELD
        return clean_json(redact(data, self.secrets))  # type: ignore[no-any-return]

    def _fragment(self, event: PartialText | PartialToolCall) -> dict[str, Any] | None:
        """The fragment viewers may see: its text piece redacted as a stream (a secret
        split across pieces included), None while there is nothing new to show."""
        data = event.model_dump(mode="json")
        if isinstance(event, PartialText):
            data["delta"] = self._streams.feed(("text", event.round_index), event.delta)
            shown = bool(data["delta"])
            self._keep_streamed(event.round_index, data["delta"])
        else:
            data["arguments_delta"] = self._streams.feed(
                ("call", event.round_index, event.index), event.arguments_delta)
            shown = bool(data["arguments_delta"] or event.id or event.name)
        return clean_json(redact(data, self.secrets)) if shown else None

    def _keep_streamed(self, round_index: int | None, delta: str) -> None:
        index = round_index or 0
        if index not in self.streamed:
            self.streamed.clear()  # an earlier round has its response stored by now
        self.streamed[index] = self.streamed.get(index, "") + delta

    def record(self, event: Any, payload: dict[str, Any]) -> int:
        with transaction.atomic():
            seq = append_event(self.run_id, self.token, event.kind, payload)
            apply = _APPLIERS.get(event.kind)
            if apply is not None:
                apply(self, event, payload)
        return seq

    # -- state changes, one per event kind ---------------------------------------------

    def _round(self, index: int | None) -> Round:
        round_, _ = Round.objects.get_or_create(run_id=self.run_id, index=index or 0)
        return round_

    def _round_id(self, index: int | None) -> int:
        """The round's pk without a query per tool call: known once its row committed."""
        known = self._round_ids.get(index or 0)
        return known if known is not None else self._round(index).pk

    def _remember_round(self, round_: Round) -> None:
        # After the commit only: a rolled-back round must not be remembered.
        transaction.on_commit(lambda: self._round_ids.__setitem__(round_.index, round_.pk))

    def on_round_started(self, event: RoundStarted, payload: dict[str, Any]) -> None:
        round_, _ = Round.objects.update_or_create(
            run_id=self.run_id, index=event.round_index or 0,
            defaults={"status": "requested", "started_at": _dt(event.at), "attempts": [],
                      "finished_at": None},
        )
        self._remember_round(round_)
        Run.objects.filter(pk=self.run_id).update(rounds_count=(event.round_index or 0) + 1)

    def on_wire_request(self, event: ProviderWireRequest, payload: dict[str, Any]) -> None:
        Round.objects.filter(run_id=self.run_id, index=event.round_index or 0).update(
            request_json=payload["body"])

    def on_wire_response(self, event: ProviderWireResponse, payload: dict[str, Any]) -> None:
        Round.objects.filter(run_id=self.run_id, index=event.round_index or 0).update(
            response_json=payload["body"], raw_stream=clean_text(payload.get("raw_stream")))

    def on_attempt(self, event: ProviderAttempt, payload: dict[str, Any]) -> None:
        round_ = self._round(event.round_index)
        round_.attempts = [*round_.attempts, payload]
        round_.save(update_fields=["attempts"])

    def on_response(self, event: ModelResponseReceived, payload: dict[str, Any]) -> None:
        response = event.response
        usage = response.usage
        Round.objects.filter(run_id=self.run_id, index=event.round_index or 0).update(
            status="responded",
            response=payload["response"],
            ai_text=clean_text(response.ai_message.text),
            thinking=clean_text(response.ai_message.thinking),
            finish_reason=fit_column(Round, "finish_reason", response.finish_reason),
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            latency_ms=event.latency_ms,
            first_token_ms=event.first_token_ms,
            finished_at=_dt(event.at),
        )
        if usage:
            Run.objects.filter(pk=self.run_id).update(
                input_tokens=F("input_tokens") + (usage.input_tokens or 0),
                output_tokens=F("output_tokens") + (usage.output_tokens or 0),
                total_tokens=F("total_tokens") + (usage.total_tokens or 0),
            )

    def on_proposed(self, event: ToolCallProposed, payload: dict[str, Any]) -> None:
        request = event.request
        ToolCall.objects.get_or_create(
            round_id=self._round_id(event.round_index), call_index=event.call_index,
            defaults={
                "run_id": self.run_id,
                "call_id": fit_column(ToolCall, "call_id", request.id),
                "tool_name": fit_column(ToolCall, "tool_name", request.name),
                "arguments_raw": clean_text(request.arguments),
                "arguments": clean_json(_parsed_or_none(request)),
            },
        )

    def on_started(self, event: ToolCallStarted, payload: dict[str, Any]) -> None:
        self._calls(event).update(state="started", started_at=_dt(event.at), finished_at=None,
                                  attempts=F("attempts") + 1)

    def on_finished(self, event: ToolCallFinished, payload: dict[str, Any]) -> None:
        self._calls(event).update(
            state=event.outcome,
            result_text=clean_text(event.text),
            result_json=payload["result_json"],
            is_error=event.is_error,
            error_type=fit_column(ToolCall, "error_type", event.error_type),
            error_message=clean_text(event.error_message) or "",
            error_details=payload["error_details"],
            traceback=clean_text(event.traceback) or "",
            handled_by=fit_column(ToolCall, "handled_by", event.handled_by),
            stopped_run=event.stopped_run,
            started_at=_dt(event.started_at),
            finished_at=_dt(event.finished_at),
            duration_ms=event.duration_ms,
        )
        Run.objects.filter(pk=self.run_id).update(
            tool_calls_count=F("tool_calls_count") + 1,
            errors_count=F("errors_count") + (1 if event.is_error else 0),
        )

    def _calls(self, event: ToolCallStarted | ToolCallFinished) -> Any:
        # By the round's pk (known once its row committed), not through a join on the
        # round's index: the join made each call's update the costliest statement of a
        # round (docs/benchmarks/product-path.md).
        return ToolCall.objects.filter(round_id=self._round_id(event.round_index),
                                       call_id=fit_column(ToolCall, "call_id", event.call_id))


RAW_STREAM_WITHHELD = ("(The raw stream is not shown: the response carried a credential, "
                       "which its events split into pieces. The assembled response above "
                       "is shown redacted.)")


def _mentions_secret(body: Any, secrets: tuple[str, ...]) -> bool:
    if not secrets:
        return False
    text = json.dumps(body, ensure_ascii=False)
    return any(secret in text for secret in secrets)


def _parsed_or_none(request: Any) -> Any:
    try:
        return arguments_as_map(request)
    except Exception:  # invalid arguments are recorded raw; the engine reports the error
        return None


def _dt(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch is not None else None


_APPLIERS: dict[str, Any] = {
    "round_started": RunRecorder.on_round_started,
    "provider_wire_request": RunRecorder.on_wire_request,
    "provider_wire_response": RunRecorder.on_wire_response,
    "provider_attempt": RunRecorder.on_attempt,
    "model_response_received": RunRecorder.on_response,
    "tool_call_proposed": RunRecorder.on_proposed,
    "tool_call_started": RunRecorder.on_started,
    "tool_call_finished": RunRecorder.on_finished,
}
