"""A whole starting conversation in the OpenAI Chat Completions message format.

The playground and `POST /api/runs` accept every message kind in that format (the one
most people already have at hand):

    {"role": "system" | "developer", "content": "..."}
    {"role": "user", "content": "..."}
    {"role": "assistant", "content": "..." | null,
     "tool_calls": [{"id": "...", "type": "function",
                     "function": {"name": "...", "arguments": "<JSON text>"}}]}
    {"role": "tool", "tool_call_id": "...", "content": "...", "is_error"?: true}

`is_error` is this project's extension (OpenAI has no such flag): a tool result the
tool reported as an error, so a fork's edited conversation keeps that flag.
`parse_conversation` validates it (pydantic models for the shapes, then the rules a
provider enforces: every tool result answers an earlier, unanswered call, every call is
answered before the conversation goes on, the conversation does not end on the
assistant) and turns it into engine messages. Every problem names its message:
"messages[3]: tool_call_id 'x' answers no earlier tool call".
`to_openai_messages` is the reverse, for display and export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)


class ConversationError(ValueError):
    """The conversation is not usable; `field` is where ("messages[3]")."""

    def __init__(self, message: str, *, field: str = "messages") -> None:
        super().__init__(message)
        self.field = field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _TextPart(_Strict):
    type: Literal["text"]
    text: str


Content = str | list[_TextPart]


class _System(_Strict):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class _User(_Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None


class _Function(_Strict):
    name: str = Field(min_length=1)
    arguments: str


class _ToolCall(_Strict):
    id: str = Field(min_length=1)
    type: Literal["function"]
    function: _Function


class _Assistant(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[_ToolCall] | None = None
    name: str | None = None
    refusal: str | None = None


class _Tool(_Strict):
    role: Literal["tool"]
    tool_call_id: str = Field(min_length=1)
    content: Content
    is_error: bool = False


_Message = Annotated[_System | _User | _Assistant | _Tool, Field(discriminator="role")]
_message_adapter: TypeAdapter[_Message] = TypeAdapter(_Message)
ROLES = ("system", "developer", "user", "assistant", "tool")


def parse_conversation(raw: Any) -> list[ChatMessage]:
    """Engine messages of an OpenAI-format conversation, or a ConversationError."""
    if not isinstance(raw, list):
        raise ConversationError("messages must be a list of message objects")
    if not raw:
        raise ConversationError("messages is empty: a run needs at least one message")
    return _Builder().build([_shape(i, item) for i, item in enumerate(raw)])


def _shape(index: int, item: Any) -> _Message:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise ConversationError(f"{where} must be an object with a 'role'", field=where)
    role = item.get("role")
    if role not in ROLES:
        raise ConversationError(
            f"{where}: role must be one of {', '.join(ROLES)}, not {role!r}", field=where)
    try:
        return _message_adapter.validate_python(item)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        # The first location is the union's tag ("assistant"); the rest is the field path.
        path = ".".join(str(p) for p in first["loc"][1:])
        raise ConversationError(f"{where}{'.' + path if path else ''}: {first['msg']}",
                                field=where) from exc


def _text(content: Content | None) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "".join(part.text for part in content)


class _Builder:
    """Walks the messages in order, keeping the calls still waiting for their result."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.open_calls: dict[str, str] = {}  # call id -> tool name, not answered yet
        self.seen_calls: set[str] = set()
        self.open_since = -1  # index of the assistant message whose calls are open

    def build(self, shapes: list[_Message]) -> list[ChatMessage]:
        for index, shape in enumerate(shapes):
            where = f"messages[{index}]"
            if isinstance(shape, _Tool):
                self._tool(where, shape)
                continue
            self._close_round(where)
            if isinstance(shape, _Assistant):
                self._assistant(where, index, shape)
            elif isinstance(shape, _System):
                self.messages.append(SystemMessage(text=_text(shape.content) or ""))
            else:
                self.messages.append(UserMessage(text=_text(shape.content) or ""))
        self._close_round(f"messages[{len(shapes)}]", at_end=True)
        self._check_ending(shapes)
        return self.messages

    def _assistant(self, where: str, index: int, shape: _Assistant) -> None:
        calls = shape.tool_calls or []
        text = _text(shape.content)
        if not calls and not text:
            raise ConversationError(f"{where}: an assistant message needs content or "
                                    "tool_calls", field=where)
        requests = []
        for position, call in enumerate(calls):
            if call.id in self.seen_calls:
                raise ConversationError(f"{where}.tool_calls[{position}]: the id "
                                        f"{call.id!r} is used twice", field=where)
            self.seen_calls.add(call.id)
            self.open_calls[call.id] = call.function.name
            requests.append(ToolExecutionRequest(id=call.id, name=call.function.name,
                                                 arguments=call.function.arguments))
        self.open_since = index
        self.messages.append(AiMessage(text=text, tool_execution_requests=tuple(requests)))

    def _tool(self, where: str, shape: _Tool) -> None:
        name = self.open_calls.pop(shape.tool_call_id, None)
        if name is None:
            answered = shape.tool_call_id in self.seen_calls
            raise ConversationError(
                f"{where}: tool_call_id {shape.tool_call_id!r} "
                + ("is answered twice" if answered else "answers no earlier tool call"),
                field=where)
        self.messages.append(ToolExecutionResultMessage(
            id=shape.tool_call_id, tool_name=name, text=_text(shape.content) or "",
            is_error=shape.is_error))

    def _close_round(self, where: str, *, at_end: bool = False) -> None:
        """Providers refuse a conversation that moves on with calls unanswered."""
        if not self.open_calls:
            return
        missing = ", ".join(repr(i) for i in self.open_calls)
        place = "the conversation ends" if at_end else f"{where} comes"
        raise ConversationError(
            f"messages[{self.open_since}]: tool calls {missing} have no tool result before "
            f"{place}", field=f"messages[{self.open_since}]")

    def _check_ending(self, shapes: list[_Message]) -> None:
        # "at least one user message" is the run's rule (services.run_create), not the
        # format's.
        last = len(shapes) - 1
        if isinstance(shapes[last], _Assistant):
            raise ConversationError(
                f"messages[{last}]: the conversation ends with an assistant message, so "
                "the model would have nothing to answer", field=f"messages[{last}]")


def to_openai_messages(messages: Sequence[ChatMessage], *,
                       error_flags: bool = False) -> list[dict[str, Any]]:
    """The OpenAI-format form of engine messages (what `parse_conversation` reads);
    with `error_flags`, an errored tool result says `"is_error": true` (off by default:
    exports and displays keep the plain OpenAI shape)."""
    return [_to_openai(message, error_flags) for message in messages]


def _to_openai(message: ChatMessage, error_flags: bool = False) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, ToolExecutionResultMessage):
        out_tool: dict[str, Any] = {"role": "tool", "tool_call_id": message.id,
                                    "content": message.text}
        if error_flags and message.is_error:
            out_tool["is_error"] = True
        return out_tool
    out: dict[str, Any] = {"role": "assistant", "content": message.text}
    if message.tool_execution_requests:
        out["tool_calls"] = [
            {"id": r.id, "type": "function",
             "function": {"name": r.name, "arguments": r.arguments}}
            for r in message.tool_execution_requests]
    return out
