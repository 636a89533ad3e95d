"""What a span says, in the conventions instrumentations write: the OpenTelemetry GenAI
semantic conventions (`gen_ai.input.messages` / `gen_ai.output.messages` and the
`gen_ai.tool.call.*` attributes; the older `gen_ai.prompt.N.*` / `gen_ai.completion.N.*`
attributes and `gen_ai.*.message` / `gen_ai.choice` span events) and OpenInference's
(`openinference.span.kind`, `llm.input_messages.N.message.*`, `tool.name`,
`input.value` / `output.value`, `llm.token_count.*`).

A span is a model call (a round), a tool execution, an agent (or chain), or something
else. Only what the span carries is read: anything it lacks stays None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tools_app.ingest import messages as msgs
from tools_app.ingest.messages import Message
from tools_app.ingest.spans import SpanRecord

ROUND, TOOL, AGENT, OTHER = "round", "tool", "agent", "other"
GENAI = "OpenTelemetry GenAI"
GENAI_LEGACY = "OpenTelemetry GenAI (prompt/completion attributes)"
GENAI_EVENTS = "OpenTelemetry GenAI (span events)"
OPENINFERENCE = "OpenInference"

ROUND_OPERATIONS = {"chat", "text_completion", "generate_content"}
AGENT_OPERATIONS = {"invoke_agent", "create_agent", "invoke_workflow"}
OPENINFERENCE_ROLES = {"LLM": ROUND, "TOOL": TOOL, "AGENT": AGENT, "CHAIN": AGENT}
MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def role_of(span: SpanRecord) -> str:
    return _kept(span, "role", _role_of)


def _kept[T](span: SpanRecord, name: str, read: Callable[[SpanRecord], T]) -> T:
    """What `read` says of the span, read once and kept on a record that keeps what was
    read from it (`parsed`): the facts are shared by every plan of the span, none of
    which changes them."""
    if span.parsed is None:
        return read(span)
    if name not in span.parsed:
        span.parsed[name] = read(span)
    found: T = span.parsed[name]
    return found


def _role_of(span: SpanRecord) -> str:
    attrs = span.attributes
    kind = attrs.get("openinference.span.kind")
    if isinstance(kind, str):
        return OPENINFERENCE_ROLES.get(kind.upper(), OTHER)
    operation = attrs.get("gen_ai.operation.name")
    if operation in ROUND_OPERATIONS:
        return ROUND
    if operation == "execute_tool":
        return TOOL
    if operation in AGENT_OPERATIONS:
        return AGENT
    if any(key.startswith("gen_ai.completion.") for key in attrs):
        return ROUND  # the older attribute form, written without an operation name
    return OTHER


def conventions_of(span: SpanRecord) -> list[str]:
    """The conventions the span's content is written in."""
    return _kept(span, "conventions", _conventions_of)


def _conventions_of(span: SpanRecord) -> list[str]:
    attrs = span.attributes
    found = []
    if "openinference.span.kind" in attrs:
        found.append(OPENINFERENCE)
    if "gen_ai.operation.name" in attrs or "gen_ai.input.messages" in attrs:
        found.append(GENAI)
    if any(key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in attrs):
        found.append(GENAI_LEGACY)
    if any(event.get("name") in MESSAGE_EVENTS or event.get("name") == "gen_ai.choice"
           for event in span.events):
        found.append(GENAI_EVENTS)
    return found


def conversation_id(span: SpanRecord) -> str:
    value = span.attributes.get("gen_ai.conversation.id") or span.attributes.get("session.id")
    return value if isinstance(value, str) else ""


def agent_title(span: SpanRecord) -> str:
    """An agent or chain span's name for the run: the agent's name if given."""
    name = span.attributes.get("gen_ai.agent.name") or span.attributes.get("agent.name")
    return name if isinstance(name, str) and name else span.name


@dataclass
class RoundFacts:
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    output: Message | None = None
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)
    # The messages sent (`inputs`), read from the span's attributes and events when
    # first asked for: a plan needs every round's answer but the requests of only a few
    # (the first round's, those of rounds a row is written for), and a request carries
    # the whole conversation so far. Holds the attributes and events, not the span, so
    # a kept span and its facts make no reference cycle.
    read_inputs: Callable[[], list[Message] | None] | None = field(
        default=None, repr=False, compare=False)
    _inputs: list[Message] | None = field(default=None, repr=False, compare=False)

    @property
    def inputs(self) -> list[Message] | None:
        read = self.read_inputs
        if read is not None:  # read once; another thread reading it too reads the same
            self._inputs = read()
            self.read_inputs = None
        return self._inputs


@dataclass
class ToolFacts:
    name: str | None = None
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error_type: str | None = None
    error_message: str | None = None


def round_facts(span: SpanRecord) -> RoundFacts:
    return _kept(span, "round", _round_facts)


def _round_facts(span: SpanRecord) -> RoundFacts:
    attrs = span.attributes
    facts = RoundFacts(
        model=_text(attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
                    or attrs.get("llm.model_name")),
        input_tokens=_int(attrs.get("gen_ai.usage.input_tokens",
                                    attrs.get("llm.token_count.prompt"))),
        output_tokens=_int(attrs.get("gen_ai.usage.output_tokens",
                                     attrs.get("llm.token_count.completion"))),
        response_id=_text(attrs.get("gen_ai.response.id")),
        tool_definitions=msgs.tool_definitions(attrs),
        read_inputs=partial(_inputs, attrs, span.events))
    facts.output = _output(attrs, span.events)
    reasons = attrs.get("gen_ai.response.finish_reasons")
    facts.finish_reason = (_text(reasons[0]) if isinstance(reasons, list) and reasons
                           else _text(attrs.get("llm.finish_reason"))
                           or (facts.output.finish_reason if facts.output else None))
    return facts


def _inputs(attrs: dict[str, Any], events: list[dict[str, Any]]) -> list[Message] | None:
    """The messages sent, from the first form the span carries (`_form`)."""
    form = _form(attrs)
    if form == GENAI:
        if "gen_ai.input.messages" not in attrs:
            return None
        system = msgs.system_instructions(msgs.parse_json(attrs.get("gen_ai.system_instructions")))
        return system + msgs.from_parts(msgs.parse_json(attrs.get("gen_ai.input.messages")))
    if form == OPENINFERENCE:
        return [msgs.openinference(m) for m in msgs.grouped(attrs, "llm.input_messages.")] \
            or None
    if form == GENAI_LEGACY:
        return [msgs.legacy(m) for m in msgs.grouped(attrs, "gen_ai.prompt.")] or None
    return _from_events(events)[0]


def _output(attrs: dict[str, Any], events: list[dict[str, Any]]) -> Message | None:
    """The answer, from the same form as `_inputs`."""
    form = _form(attrs)
    if form == GENAI:
        outputs = msgs.from_parts(msgs.parse_json(attrs.get("gen_ai.output.messages")))
    elif form == OPENINFERENCE:
        outputs = [msgs.openinference(m) for m in msgs.grouped(attrs, "llm.output_messages.")]
    elif form == GENAI_LEGACY:
        outputs = [msgs.legacy(m) for m in msgs.grouped(attrs, "gen_ai.completion.")]
    else:
        return _from_events(events)[1]
    return outputs[0] if outputs else None


def _form(attrs: dict[str, Any]) -> str:
    """The form a round's messages are read from: the first the span carries."""
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:
        return GENAI
    if any(key.startswith(("llm.input_messages.", "llm.output_messages.")) for key in attrs):
        return OPENINFERENCE
    if any(key.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for key in attrs):
        return GENAI_LEGACY
    return GENAI_EVENTS


def _from_events(events: list[dict[str, Any]]) -> tuple[list[Message] | None, Message | None]:
    inputs: list[Message] = []
    output: Message | None = None
    for event in events:
        name = event.get("name")
        body = msgs.event_body(event.get("attributes") or {})
        if name in MESSAGE_EVENTS:
            inputs.append(msgs.from_event(MESSAGE_EVENTS[str(name)], body))
        elif name == "gen_ai.choice" and output is None:
            output = msgs.from_choice(body)
        elif name == "gen_ai.content.prompt":
            inputs.extend(map(msgs.plain, _list(msgs.parse_json(body.get("gen_ai.prompt")))))
        elif name == "gen_ai.content.completion":
            answers = list(map(msgs.plain,
                               _list(msgs.parse_json(body.get("gen_ai.completion")))))
            output = output or (answers[0] if answers else None)
    return inputs or None, output


def tool_facts(span: SpanRecord) -> ToolFacts:
    return _kept(span, "tool", _tool_facts)


def _tool_facts(span: SpanRecord) -> ToolFacts:
    attrs = span.attributes
    error_type, error_message = error_of(span)
    result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value"))
    message = _tool_message(result)
    return ToolFacts(
        name=_text(attrs.get("gen_ai.tool.name") or attrs.get("tool.name")),
        call_id=_text(attrs.get("gen_ai.tool.call.id") or attrs.get("tool_call.id")
                      or message.get("tool_call_id")),
        arguments=msgs.as_text(attrs.get("gen_ai.tool.call.arguments",
                                         attrs.get("input.value"))),
        result=msgs.as_text(message.get("content", result)),
        error_type=error_type, error_message=error_message)


def _tool_message(value: Any) -> dict[str, Any]:
    """A LangChain ToolMessage as OpenInference's LangChain instrumentation writes a
    tool's `output.value` (`{"type": "tool", "data": {"content", "tool_call_id", ...}}`):
    its data, else {}."""
    data = msgs.parse_json(value) if isinstance(value, str) and value.startswith("{") else None
    if isinstance(data, dict) and data.get("type") == "tool" and isinstance(data.get("data"), dict):
        return dict(data["data"])
    return {}


def error_of(span: SpanRecord) -> tuple[str | None, str | None]:
    """A failed span's error type and message (its `error.type`, its exception event,
    its status message); (None, None) for a span that did not fail."""
    if not span.failed:
        return None, None
    exception = next((e.get("attributes") or {} for e in span.events
                      if e.get("name") == "exception"), {})
    error_type = (_text(span.attributes.get("error.type"))
                  or _text(exception.get("exception.type")) or "error")
    message = span.status_message or _text(exception.get("exception.message")) or ""
    return error_type, message


# -- attribute helpers ------------------------------------------------------------------

def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None
