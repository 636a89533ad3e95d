"""Provider-neutral chat messages, requests and responses.

These are the seed's `ChatMessage` family in Python form. Every provider adapter
translates between these and one wire API; the ToolService only ever sees these.
All types are pydantic models so a run's history can be persisted as JSON and
rebuilt exactly (the worker resumes runs from it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .spec import ToolSpecification


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolExecutionRequest(_Frozen):
    """One tool call proposed by the model. `arguments` is the raw JSON string."""

    id: str
    name: str
    arguments: str = ""


class SystemMessage(_Frozen):
    type: Literal["system"] = "system"
    text: str


class UserMessage(_Frozen):
    type: Literal["user"] = "user"
    text: str


class AiMessage(_Frozen):
    """What the model said: text, tool calls, or both.

    `thinking` holds reasoning text; `provider_blocks` keeps wire content that must be
    sent back verbatim (Anthropic thinking signatures, server-side tool blocks) and
    that the loop never interprets.
    """

    type: Literal["ai"] = "ai"
    text: str | None = None
    tool_execution_requests: tuple[ToolExecutionRequest, ...] = ()
    thinking: str | None = None
    provider_blocks: tuple[dict[str, Any], ...] = ()

    def has_tool_execution_requests(self) -> bool:
        return bool(self.tool_execution_requests)


class ToolExecutionResultMessage(_Frozen):
    """The result of one tool call, paired with its request by `id`."""

    type: Literal["tool_result"] = "tool_result"
    id: str
    tool_name: str
    text: str
    is_error: bool = False


ChatMessage = Annotated[
    SystemMessage | UserMessage | AiMessage | ToolExecutionResultMessage,
    Field(discriminator="type"),
]


class FinishReason(StrEnum):
    STOP = "stop"
    TOOL_EXECUTION = "tool_execution"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    OTHER = "other"


class TokenUsage(_Frozen):
    """What a provider reported. `cached_input_tokens` is the part of `input_tokens` read
    from the provider's prompt cache (priced apart: pricing.py)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None

    def __add__(self, other: TokenUsage | None) -> TokenUsage:
        if other is None:
            return self
        return TokenUsage(
            input_tokens=_add(self.input_tokens, other.input_tokens),
            output_tokens=_add(self.output_tokens, other.output_tokens),
            total_tokens=_add(self.total_tokens, other.total_tokens),
            cached_input_tokens=_add(self.cached_input_tokens, other.cached_input_tokens),
        )


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


class NamedToolChoice(_Frozen):
    """Force the model to call this one tool."""

    name: str


ToolChoice = Literal["auto", "required", "none"] | NamedToolChoice


class ChatRequestParameters(_Frozen):
    """The usual request settings. `None` means "not set" so that merging works."""

    model_name: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop_sequences: tuple[str, ...] | None = None
    tools: tuple[ToolSpecification, ...] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    custom: dict[str, Any] | None = None

    def override_with(self, other: ChatRequestParameters | None) -> ChatRequestParameters:
        """Fields set in `other` win; unset ones keep this object's values."""
        if other is None:
            return self
        # Copy the field values themselves: a model_dump() would turn a NamedToolChoice
        # (or any nested model) into a plain dict that model_copy never validates back.
        values = {name: getattr(other, name) for name in type(other).model_fields}
        return self.model_copy(
            update={name: value for name, value in values.items() if value is not None}
        )


class ChatRequest(_Frozen):
    messages: tuple[ChatMessage, ...]
    parameters: ChatRequestParameters = ChatRequestParameters()


class ChatResponse(_Frozen):
    ai_message: AiMessage
    finish_reason: FinishReason | None = None
    usage: TokenUsage | None = None
    model_name: str | None = None
    response_id: str | None = None
