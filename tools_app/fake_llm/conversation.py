"""The provider-neutral view of one request, and the reply the fake model gives.

Each wire module parses its own request format into a `Conversation` and renders a
`Reply` back; everything in between (scripts, faults, the auto reply) only sees these
two plain dataclasses. They are slotted dataclasses, not pydantic models, because they
are built on every request and validation would only cost time here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ToolChoiceKind = Literal["auto", "required", "none", "named"]
FinishKind = Literal["stop", "tool_calls", "length"]


@dataclass(slots=True)
class ToolDecl:
    name: str
    schema: dict[str, Any]


@dataclass(slots=True)
class Conversation:
    model: str
    stream: bool = False
    include_usage: bool = False
    tools: list[ToolDecl] = field(default_factory=list)
    tool_choice: ToolChoiceKind = "auto"
    named_tool: str | None = None
    parallel_allowed: bool = True
    assistant_turns: int = 0
    """Assistant messages in the whole conversation: the script step to play."""
    rounds_since_user: int = 0
    """Assistant messages after the last plain user message (tool-calling rounds)."""
    last_user_text: str = ""
    tool_results: list[str] = field(default_factory=list)
    """Results sent after the last assistant message, in order (empty if none)."""
    prompt_chars: int = 0
    encrypted_reasoning: bool = False
    """The Responses API's `include` asked for reasoning.encrypted_content."""
    last_was_assistant: bool = False
    """While reading Responses input items: the previous item was the assistant's."""
    stored_input: list[Any] | None = None
    """The Responses API with store on: the whole input (what a previous response held,
    then the request's items), kept with the reply for a later previous_response_id."""


@dataclass(slots=True)
class ReplyCall:
    name: str
    arguments: str
    id: str | None = None


@dataclass(slots=True)
class Reply:
    text: str | None = None
    calls: list[ReplyCall] = field(default_factory=list)
    finish: FinishKind = "stop"
    input_tokens: int = 1
    output_tokens: int = 1


def pseudo_tokens(chars: int) -> int:
    """A deterministic, rough token count (4 characters a token), like ScriptedChatModel."""
    return chars // 4 + 1


def fill_template(template: str, conversation: Conversation) -> str:
    # str.replace, not str.format: scripted text may contain JSON braces.
    results = conversation.tool_results
    return (
        template.replace("{last_results}", "\n".join(results))
        .replace("{last_result}", results[0] if results else "")
        .replace("{user}", conversation.last_user_text)
    )


def finish_reply(reply: Reply, conversation: Conversation) -> Reply:
    """Fill in the usage numbers from the sizes of the prompt and of the reply."""
    output = len(reply.text or "") + sum(len(c.name) + len(c.arguments) for c in reply.calls)
    reply.input_tokens = pseudo_tokens(conversation.prompt_chars)
    reply.output_tokens = pseudo_tokens(output)
    return reply


def text_of(content: Any) -> str:
    """Text of a message content: a string, or a list of text parts/blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)
