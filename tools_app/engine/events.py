"""The typed events the tool loop and the providers emit.

Every event is plain, JSON-serialisable data (a pydantic model with a `kind` tag), so
the recorder can persist it and the UI can stream it without knowing engine types.

Providers do not receive observers as arguments: the loop binds an emitter to a
context variable around each model call, and `emit()` reaches it from any depth
(including the retry loop and stream parsers). Outside a loop, or in one without
observers, `emit()` does nothing, and `observed()` says so before an event is built.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .messages import ChatResponse, TokenUsage, ToolExecutionRequest

_current_round: ContextVar[int | None] = ContextVar("agentforge_round", default=None)


def _bound_round() -> int | None:
    return _current_round.get()


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: float = Field(default_factory=time.time)
    round_index: int | None = None


class _ProviderEvent(_Event):
    """An event a provider emits from deep inside a model call: it takes the round of
    the loop that made the call (see `bind_round`), so the loop need not copy it to
    stamp the round in."""

    round_index: int | None = Field(default_factory=_bound_round)


class ChatStarted(_Event):
    kind: Literal["chat_started"] = "chat_started"
    tool_names: list[str]
    message_count: int


class RoundStarted(_Event):
    kind: Literal["round_started"] = "round_started"


class ModelRequestSent(_Event):
    kind: Literal["model_request_sent"] = "model_request_sent"
    message_count: int
    tool_names: list[str]


class ProviderWireRequest(_ProviderEvent):
    """The exact body sent on the wire (credentials are in headers, never here)."""

    kind: Literal["provider_wire_request"] = "provider_wire_request"
    provider: str
    url: str
    body: dict[str, Any]
    stream: bool = False
    # The body as sent (compact UTF-8 JSON), for an observer that stores it as text:
    # it need not encode the whole conversation again. Not in the event's dump (the
    # body is); None when the body could not be encoded (the request then fails).
    content: bytes | None = Field(default=None, exclude=True, repr=False)


class ProviderWireResponse(_ProviderEvent):
    """The exact body received (for streams: the aggregated body, and in `raw_stream`
    the event-stream lines as they arrived, credentials redacted, capped)."""

    kind: Literal["provider_wire_response"] = "provider_wire_response"
    provider: str
    status: int
    body: Any
    request_id: str | None = None
    raw_stream: str | None = None


class ProviderAttempt(_ProviderEvent):
    """One attempt of the retry loop that failed; `wait_s` is the pause before the next;
    `timed_out`: the provider stayed silent past the endpoint's timeout."""

    kind: Literal["provider_attempt"] = "provider_attempt"
    provider: str
    attempt: int
    status: int | None = None
    error: str
    retryable: bool
    wait_s: float | None = None
    timed_out: bool = False


class PartialText(_ProviderEvent):
    kind: Literal["partial_text"] = "partial_text"
    delta: str


class PartialToolCall(_ProviderEvent):
    """A streamed fragment of a tool call; id and name arrive once, arguments in pieces."""

    kind: Literal["partial_tool_call"] = "partial_tool_call"
    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


class ModelResponseReceived(_Event):
    kind: Literal["model_response_received"] = "model_response_received"
    response: ChatResponse
    latency_ms: float
    first_token_ms: float | None = None
    usage: TokenUsage | None = None
    # Dollars the call cost at the run's price (pricing.py), and that price's
    # revision; None: no price.
    cost: Decimal | None = None
    price_revision: int | None = None


class ToolCallProposed(_Event):
    kind: Literal["tool_call_proposed"] = "tool_call_proposed"
    call_index: int
    request: ToolExecutionRequest
    known_tool: bool
    # The call's share of its round's cost (pricing.call_shares); None: no price.
    cost: Decimal | None = None


class ToolCallStarted(_Event):
    kind: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    tool_name: str


ToolCallOutcome = Literal[
    "succeeded",
    "arguments_error",
    "execution_error",
    "timed_out",
    "hallucinated",
    "unknown_outcome",
    "rejected",
    "cancelled",
]


class ToolCallFinished(_Event):
    kind: Literal["tool_call_finished"] = "tool_call_finished"
    call_id: str
    tool_name: str
    outcome: ToolCallOutcome
    text: str | None = None
    """What went back to the model (None when the error stopped the run)."""
    is_error: bool = False
    result_json: Any = None
    error_type: str | None = None
    error_message: str | None = None
    error_details: list[dict[str, Any]] | None = None
    traceback: str | None = None
    handled_by: str | None = None
    """The handler that decided: its name, and whether it answered or stopped the run."""
    stopped_run: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    duration_ms: float | None = None


class ReplayDiverged(_ProviderEvent):
    """A replay left its recording at this round (and call, for a tool) and went on
    live, as it was told to: `detail` says what differed."""

    kind: Literal["replay_diverged"] = "replay_diverged"
    call_index: int | None = None
    tool_name: str | None = None
    detail: str


class LoopDetected(_Event):
    """A loop-health detector flagged this round before its calls ran (loop/health.py):
    `count` identical calls, alternating rounds or rounds with the same results reached
    `threshold`; `action` is what the policy did: "note" (recorded only), "tell_model"
    (`told` appended to the result of `told_call_id`) or "stop" (the run stops)."""

    kind: Literal["loop_detected"] = "loop_detected"
    detector: Literal["repeated_call", "ping_pong", "no_progress"]
    action: Literal["note", "tell_model", "stop"]
    count: int
    threshold: int
    call_ids: list[str]
    tool_names: list[str]
    detail: str
    told: str | None = None
    told_call_id: str | None = None


class ChatFinished(_Event):
    kind: Literal["chat_finished"] = "chat_finished"
    final_text: str | None
    reason: Literal["model_stopped", "immediate_return"]
    rounds: int
    tool_calls: int
    usage: TokenUsage | None = None


class ChatFailed(_Event):
    kind: Literal["chat_failed"] = "chat_failed"
    error_type: str
    message: str
    cancelled: bool = False


class ChatPaused(_Event):
    """The loop paused in round `round_index` (RunPaused): before its model call
    (`call_ids` empty) or before `call_ids` ran; `reason`: "approval" or "breakpoint"."""

    kind: Literal["chat_paused"] = "chat_paused"
    call_ids: list[str]
    reason: str = "approval"


EngineEvent = Annotated[
    ChatStarted
    | RoundStarted
    | ModelRequestSent
    | ProviderWireRequest
    | ProviderWireResponse
    | ProviderAttempt
    | PartialText
    | PartialToolCall
    | ModelResponseReceived
    | ToolCallProposed
    | ToolCallStarted
    | ToolCallFinished
    | ReplayDiverged
    | LoopDetected
    | ChatFinished
    | ChatFailed
    | ChatPaused,
    Field(discriminator="kind"),
]

Observer = Callable[[Any], Awaitable[None] | None]
"""Receives every event. May be sync or async; an exception it raises stops the loop."""

Emitter = Callable[[Any], Awaitable[None]]

_current_emitter: ContextVar[Emitter | None] = ContextVar("agentforge_emitter", default=None)


def observed() -> bool:
    """Whether a loop with observers runs in this context: build an event only then
    (on a hot path, `if observed(): await emit(Event(...))`)."""
    return _current_emitter.get() is not None


async def emit(event: _Event) -> None:
    """Send an event to the observers of the loop that is running in this context."""
    emitter = _current_emitter.get()
    if emitter is not None:
        await emitter(event)


def bind_emitter(emitter: Emitter | None) -> Any:
    """Bind `emitter` for the current context; returns the token for `reset_emitter`."""
    return _current_emitter.set(emitter)


def reset_emitter(token: Any) -> None:
    _current_emitter.reset(token)


def bind_round(round_index: int | None) -> Any:
    """Set the round that provider events emitted in this context belong to; returns
    the token for `reset_round`."""
    return _current_round.set(round_index)


def current_round() -> int | None:
    """The round the loop running in this context is in (None outside a loop)."""
    return _current_round.get()


def reset_round(token: Any) -> None:
    _current_round.reset(token)
