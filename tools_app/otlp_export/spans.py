"""A run's stored rows as spans in the OpenTelemetry GenAI semantic conventions (the
SDK's `ReadableSpan`, which its OTLP exporter encodes):

- `invoke_agent <title>`, the run (the trace's root): its title and id, its error;
- `chat <model>`, one per round (child of the run): the model asked and answering, the
  tokens, the finish reason, the system prompt (`gen_ai.system_instructions`, as the
  conventions carry instructions given apart from the chat history), the other messages
  sent and the answer as JSON;
- `execute_tool <name>`, one per call (child of its round): the tool, the call id, the
  arguments, the result, `error.type` and an error status when it failed.

A run is read as it goes, from where its export got to (`Progress`): a round over for
good (answered, its calls ended, the loop past it) has all its spans out and is not read
again, so what a change of the run costs does not grow with the rounds before it. The
conversation through those rounds (`Conversation`, where the next chat span's input
messages start) is kept as JSON text; when the exporter lets it go to bound its memory,
the run's next read rebuilds it from the whole run, the spans the same.

Times are the rows' own (a round's and a call's start and end, the run's). Ids are
derived from the run (its UUID is the trace id; a span id is a hash of the run and the
row's place), so a span exported twice (a run resumed in another process) is the same
span to the receiver. Only stored values are exported: they were redacted of the run's
secrets when recorded, as the run's pages and exports show them; the snapshot's
endpoint and tool configurations are not exported at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatResponse,
    FinishReason,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from tools_app.models import (
    FINISHED_CALL_STATES,
    IN_PROGRESS_CALL_STATES,
    Round,
    Run,
    ToolCall,
)
from tools_app.models.runs import TERMINAL_STATUSES
from tools_app.runs.snapshot.model import snapshot_of

SCOPE = InstrumentationScope("agentforge.otlp_export")
RESOURCE = Resource.create({"service.name": "agentforge"})
RAW_FINISH = {FinishReason.STOP: "stop", FinishReason.TOOL_EXECUTION: "tool_calls",
              FinishReason.LENGTH: "length", FinishReason.CONTENT_FILTER: "content_filter",
              FinishReason.OTHER: "other"}
# Large columns no span carries (the wire bodies, a stream, parsed results, tracebacks).
UNUSED_ROUND_FIELDS = ("request_json", "response_json", "raw_stream")
UNUSED_CALL_FIELDS = ("result_json", "error_details", "traceback")
ROUND_ERRORS = {"failed": "model_call_failed", "cancelled": "cancelled"}
FAILED_CALL_STATES = frozenset(FINISHED_CALL_STATES) - {"succeeded"}


@dataclass
class Conversation:
    """What every chat span of a run starts with: the model asked, the system prompt as
    system instructions and the messages through the rounds over for good, as JSON text
    ("" for no instructions; one text a message); `size` counts their characters."""

    model: str
    instructions: str
    history: list[str]
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.model) + len(self.instructions) + sum(map(len, self.history))

    def extend(self, messages: list[str]) -> None:
        self.history.extend(messages)
        self.size += sum(map(len, messages))


@dataclass(frozen=True)
class RunRows:
    """What the exporter read of one run: the run, its conversation through the rounds
    over for good and its open rounds with their calls."""

    run: Run
    conversation: Conversation
    rounds: list[tuple[Round, list[ToolCall]]]


@dataclass
class Progress:
    """How far one run's export got. The rounds before `open_from` are over for good and
    all their spans are out: they are not read again. `conversation` runs through them
    (None once let go: the next read rebuilds it), `sent` holds the keys of the open
    rounds' spans already out (sent or dropped), `ended` is set once the run's own span
    is out (a run ends with everything in it ended, in one commit: nothing of it is due
    after that)."""

    conversation: Conversation | None = None
    open_from: int = 0
    sent: set[str] = field(default_factory=set)
    ended: bool = False

    @property
    def kept_size(self) -> int:
        return self.conversation.size if self.conversation is not None else 0

    def close(self, round_: Round, calls: Iterable[ToolCall]) -> None:
        self.open_from = round_.index + 1
        self.sent.discard(f"round:{round_.index}")
        self.sent.difference_update(f"call:{round_.index}:{c.call_index}" for c in calls)


def read(run_id: str, progress: Progress | None) -> tuple[RunRows, Progress] | None:
    """The run's rows still open at `progress`, or None for a run that is gone or was
    received over OTLP (sending it back out would echo another platform's trace). With
    no conversation kept (the first time, or once let go) the whole run is read: its
    frozen conversation and the rounds over for good make the conversation again."""
    runs = Run.objects.filter(pk=run_id)
    kept = progress is not None and progress.conversation is not None
    run = runs.defer("snapshot").first() if kept else runs.first()
    if run is None:
        return None
    if progress is None:
        if isinstance(run.snapshot, dict) and run.snapshot.get("imported"):
            return None
        progress = Progress()
    if progress.conversation is not None:
        rows = RunRows(run, progress.conversation, _rounds_from(run, progress.open_from))
        return rows, progress
    conversation = _conversation_of(run)
    rounds = _rounds_from(run, 0)
    closed = [(r, calls) for r, calls in rounds if r.index < progress.open_from]
    for round_, calls in closed:
        conversation.extend(_round_messages(round_, calls))
    progress.conversation = conversation
    return RunRows(run, conversation, rounds[len(closed):]), progress


def _rounds_from(run: Run, index: int) -> list[tuple[Round, list[ToolCall]]]:
    rounds = list(Round.objects.filter(run_id=run.pk, index__gte=index)
                  .defer(*UNUSED_ROUND_FIELDS).order_by("index"))
    calls: dict[int, list[ToolCall]] = {}
    if rounds:
        for call in ToolCall.objects.filter(round_id__in=[r.pk for r in rounds]) \
                .defer(*UNUSED_CALL_FIELDS).order_by("round_id", "call_index"):
            calls.setdefault(call.round_id, []).append(call)
    return [(r, calls.get(r.pk, [])) for r in rounds]


def due(rows: RunRows, progress: Progress) -> list[ReadableSpan]:
    """The spans of what has ended and is not out yet: finished calls, answered (or
    failed) rounds, and the run itself once it has ended. Each counts as out from here
    (a span the queue drops is not made again), and `progress` moves past the rounds
    now over for good."""
    out: list[ReadableSpan] = []
    conversation = rows.conversation
    ended = rows.run.status in TERMINAL_STATUSES
    pending: list[str] = []  # the open rounds' messages, after the history
    closing = True
    for position, (round_, calls) in enumerate(rows.rounds):
        key = f"round:{round_.index}"
        if round_.finished_at is not None and key not in progress.sent:
            progress.sent.add(key)
            out.append(chat_span(rows.run, round_, conversation,
                                 conversation.history + pending))
        for call in calls:
            call_key = f"call:{round_.index}:{call.call_index}"
            if call.finished_at is not None and call.state in FINISHED_CALL_STATES \
                    and call_key not in progress.sent:
                progress.sent.add(call_key)
                out.append(tool_span(rows.run, round_, call))
        messages = _round_messages(round_, calls)
        moved_on = ended or position + 1 < len(rows.rounds)
        if closing and moved_on and _over(round_, calls):
            conversation.extend(messages)
            progress.close(round_, calls)
        else:
            closing = False
            pending += messages
    if ended and "run" not in progress.sent:
        progress.sent.add("run")
        out.append(agent_span(rows.run))
    progress.ended = ended
    return out


def _over(round_: Round, calls: Iterable[ToolCall]) -> bool:
    """Nothing of the round changes any more: answered (or failed) and no call of it
    waiting or running (the caller knows the loop has moved past it)."""
    return round_.finished_at is not None and \
        not any(c.state in IN_PROGRESS_CALL_STATES for c in calls)


# -- the three kinds of span ------------------------------------------------------------


def agent_span(run: Run) -> ReadableSpan:
    title = run.title or "run"
    attributes = {gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent",
                  gen_ai.GEN_AI_AGENT_NAME: title, gen_ai.GEN_AI_AGENT_ID: str(run.pk),
                  gen_ai.GEN_AI_CONVERSATION_ID: str(run.pk)}
    failed = run.status != "succeeded"
    if failed:
        attributes[ERROR_TYPE] = run.error_type or run.status
    return _span(run, "run", None, f"invoke_agent {title}", run.started_at or run.created_at,
                 run.finished_at, attributes,
                 (run.error_message or run.status) if failed else None, SpanKind.INTERNAL)


def chat_span(run: Run, round_: Round, conversation: Conversation,
              inputs: Sequence[str]) -> ReadableSpan:
    """`inputs`: the messages sent, each as JSON text, joined as `json.dumps` would."""
    model = conversation.model
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_REQUEST_MODEL: model,
        gen_ai.GEN_AI_INPUT_MESSAGES: "[" + ", ".join(inputs) + "]"}
    if conversation.instructions:
        attributes[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS] = conversation.instructions
    response = _response(round_)
    if response is not None:
        attributes |= _answer_attributes(round_, response)
    for name, value in ((gen_ai.GEN_AI_USAGE_INPUT_TOKENS, round_.input_tokens),
                        (gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, round_.output_tokens)):
        if value is not None:
            attributes[name] = value
    failed = round_.status in ROUND_ERRORS
    if failed:
        attributes[ERROR_TYPE] = ROUND_ERRORS[round_.status]
    return _span(run, f"round:{round_.index}", "run", f"chat {model}".strip(),
                 round_.started_at, round_.finished_at, attributes,
                 _round_error(round_) if failed else None, SpanKind.CLIENT)


def tool_span(run: Run, round_: Round, call: ToolCall) -> ReadableSpan:
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: "execute_tool", gen_ai.GEN_AI_TOOL_NAME: call.tool_name,
        gen_ai.GEN_AI_TOOL_CALL_ID: call.call_id, gen_ai.GEN_AI_TOOL_TYPE: "function",
        gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: call.arguments_raw}
    if call.result_text is not None:
        attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = call.result_text
    failed = call.is_error or call.state in FAILED_CALL_STATES
    if failed:
        attributes[ERROR_TYPE] = call.error_type or call.state
    return _span(run, f"call:{round_.index}:{call.call_index}", f"round:{round_.index}",
                 f"execute_tool {call.tool_name}", call.started_at or call.finished_at,
                 call.finished_at, attributes,
                 (call.error_message or call.state) if failed else None, SpanKind.INTERNAL)


def _answer_attributes(round_: Round, response: ChatResponse) -> dict[str, Any]:
    finish = RAW_FINISH.get(response.finish_reason) if response.finish_reason else None
    answer = _parts(response.ai_message) | ({"finish_reason": finish} if finish else {})
    out: dict[str, Any] = {gen_ai.GEN_AI_OUTPUT_MESSAGES: json.dumps([answer],
                                                                     ensure_ascii=False)}
    if finish:
        out[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = [finish]
    if response.model_name:
        out[gen_ai.GEN_AI_RESPONSE_MODEL] = response.model_name
    if response.response_id:
        out[gen_ai.GEN_AI_RESPONSE_ID] = response.response_id
    return out


def _round_error(round_: Round) -> str:
    attempts = round_.attempts if isinstance(round_.attempts, list) else []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    message = last.get("message") or last.get("error")
    return message if isinstance(message, str) and message else "the model call failed"


# -- messages in the conventions' parts form --------------------------------------------


def _conversation_of(run: Run) -> Conversation:
    """A run's conversation before any round: the model it asks, its system prompt as
    system instructions (a first system message; any later one is part of the chat
    history) and the other messages of its frozen conversation."""
    snapshot = snapshot_of(run)
    messages = snapshot.chat_messages()
    instructions = ""
    if messages and isinstance(messages[0], SystemMessage):
        instructions = _json([{"type": "text", "content": messages[0].text}])
        messages = messages[1:]
    return Conversation(model=snapshot.endpoint.model, instructions=instructions,
                        history=[_json(_parts(message)) for message in messages])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _round_messages(round_: Round, calls: Iterable[ToolCall]) -> list[str]:
    """What a round adds to the conversation: the answer and the results sent back."""
    response = _response(round_)
    if response is None:
        return []
    results = [ToolExecutionResultMessage(id=c.call_id, tool_name=c.tool_name,
                                          text=c.result_text or "", is_error=c.is_error)
               for c in calls if c.state in FINISHED_CALL_STATES]
    return [_json(_parts(response.ai_message)), *(_json(_parts(r)) for r in results)]


def _parts(message: ChatMessage) -> dict[str, Any]:
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.type, "parts": [{"type": "text", "content": message.text}]}
    if isinstance(message, ToolExecutionResultMessage):
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.id,
                                           "response": message.text}]}
    return {"role": "assistant", "parts": _ai_parts(message)}


def _ai_parts(message: AiMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.thinking:
        parts.append({"type": "reasoning", "content": message.thinking})
    if message.text:
        parts.append({"type": "text", "content": message.text})
    parts += [{"type": "tool_call", "id": r.id, "name": r.name, "arguments": r.arguments}
              for r in message.tool_execution_requests]
    return parts


def _response(round_: Round) -> ChatResponse | None:
    if not isinstance(round_.response, dict):
        return None
    try:
        return ChatResponse.model_validate(round_.response)
    except ValueError:
        return None


# -- the span itself --------------------------------------------------------------------


def span_id(run: Run, key: str) -> int:
    digest = hashlib.sha256(f"{run.pk}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _context(run: Run, key: str) -> SpanContext:
    return SpanContext(trace_id=run.pk.int, span_id=span_id(run, key), is_remote=False,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _span(run: Run, key: str, parent: str | None, name: str, start: datetime | None,
          end: datetime | None, attributes: dict[str, Any], error: str | None,
          kind: SpanKind) -> ReadableSpan:
    start_ns = _ns(start) or _ns(end)
    return ReadableSpan(
        name=name, context=_context(run, key),
        parent=_context(run, parent) if parent else None, resource=RESOURCE,
        attributes={k: v for k, v in attributes.items() if v is not None}, kind=kind,
        instrumentation_scope=SCOPE,
        status=Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.OK),
        start_time=start_ns, end_time=max(_ns(end), start_ns))


def _ns(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1_000_000_000) if moment is not None else 0
