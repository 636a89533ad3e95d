"""Offline models for demos and tests: a fixed script, or a Python function.

ScriptedChatModel is stateless: which step it plays is derived from the request (the
number of assistant messages already in the conversation). So the same script gives
the same run every time, and a run resumed on another worker continues exactly where
it stopped.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ProviderError
from ..events import PartialText, PartialToolCall, emit, observed
from ..messages import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)


class ScriptedCall(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object, or a raw string (to rehearse invalid JSON from a model)."""

    def raw_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ScriptStep(BaseModel):
    """One model turn: tool calls (several = parallel calls), text, or both.

    In `text`, `{last_result}` is replaced by the first result of the previous round
    and `{last_results}` by all of them, one per line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    finish_reason: Literal["stop", "length", "content_filter"] | None = None


class ScriptedChatModel:
    """Plays `steps` in order, one per model call; fails clearly past the end."""

    provider = "scripted"

    def __init__(
        self,
        steps: Sequence[ScriptStep | dict[str, Any]],
        *,
        latency: float = 0.0,
        stream: bool = False,
        model_name: str = "scripted",
        prelude_ai_messages: int = 0,
    ) -> None:
        # A run may start from a whole conversation that already holds assistant
        # messages: those are not the script's, so the step count starts after them.
        self.prelude_ai_messages = prelude_ai_messages
        self.steps = [s if isinstance(s, ScriptStep) else ScriptStep.model_validate(s)
                      for s in steps]
        self.latency = latency
        self.stream = stream
        self.model_name = model_name

    async def chat(self, request: ChatRequest) -> ChatResponse:
        index = sum(1 for m in request.messages if isinstance(m, AiMessage))
        index -= self.prelude_ai_messages
        if index >= len(self.steps):
            raise ProviderError(
                f"The scripted model has {len(self.steps)} steps and was asked for step "
                f"{index + 1}: add a final text step to end the run",
                provider=self.provider,
            )
        if self.latency:
            await asyncio.sleep(self.latency)
        step = self.steps[index]
        ai_message = AiMessage(
            text=_fill(step.text, request.messages) if step.text is not None else None,
            tool_execution_requests=tuple(
                ToolExecutionRequest(id=f"call_{index}_{i}", name=c.name,
                                     arguments=c.raw_arguments())
                for i, c in enumerate(step.tool_calls)
            ),
        )
        if self.stream:
            await _stream_fragments(ai_message)
        return ChatResponse(
            ai_message=ai_message,
            finish_reason=_finish_reason(step, ai_message),
            usage=_pseudo_usage(request, ai_message),
            model_name=self.model_name,
            response_id=f"scripted-{index}",
        )


def _finish_reason(step: ScriptStep, ai_message: AiMessage) -> FinishReason:
    if step.finish_reason is not None:
        return FinishReason(step.finish_reason)
    if ai_message.tool_execution_requests:
        return FinishReason.TOOL_EXECUTION
    return FinishReason.STOP


def _last_results(messages: Sequence[ChatMessage]) -> list[str]:
    results: list[str] = []
    for message in reversed(messages):
        if isinstance(message, ToolExecutionResultMessage):
            results.append(message.text)
        elif results or isinstance(message, AiMessage):
            break
    return list(reversed(results))


def _fill(template: str, messages: Sequence[ChatMessage]) -> str:
    results = _last_results(messages)
    return template.replace("{last_results}", "\n".join(results)).replace(
        "{last_result}", results[0] if results else ""
    )


def _pseudo_usage(request: ChatRequest, ai_message: AiMessage) -> TokenUsage:
    """A deterministic, rough token count (4 characters a token) so totals are visible."""
    prompt = sum(len(getattr(m, "text", None) or "") for m in request.messages)
    output = len(ai_message.text or "") + sum(
        len(r.name) + len(r.arguments) for r in ai_message.tool_execution_requests
    )
    input_tokens, output_tokens = prompt // 4 + 1, output // 4 + 1
    return TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens,
                      total_tokens=input_tokens + output_tokens)


async def _stream_fragments(ai_message: AiMessage, chunk: int = 8) -> None:
    text = ai_message.text or ""
    for start in range(0, len(text), chunk):
        if observed():
            await emit(PartialText(delta=text[start:start + chunk]))
    for index, request in enumerate(ai_message.tool_execution_requests):
        if observed():
            await emit(PartialToolCall(index=index, id=request.id, name=request.name))
        for start in range(0, len(request.arguments), chunk):
            if observed():
                await emit(PartialToolCall(index=index,
                                           arguments_delta=request.arguments[start:start + chunk]))


ChatFunction = Callable[
    [Sequence[ChatMessage], ChatRequest], "AiMessage | str | ChatResponse | Awaitable[Any]"
]


class FunctionChatModel:
    """A model driven by a Python function of the conversation (sync or async).

    The function returns an AiMessage, a plain string (final text) or a ChatResponse.
    """

    provider = "function"

    def __init__(self, function: ChatFunction, *, model_name: str = "function") -> None:
        self.function = function
        self.model_name = model_name

    async def chat(self, request: ChatRequest) -> ChatResponse:
        value = self.function(request.messages, request)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, ChatResponse):
            return value
        ai_message = AiMessage(text=value) if isinstance(value, str) else value
        if not isinstance(ai_message, AiMessage):
            raise TypeError(f"the chat function returned {value!r}")
        finish = (FinishReason.TOOL_EXECUTION if ai_message.tool_execution_requests
                  else FinishReason.STOP)
        return ChatResponse(ai_message=ai_message, finish_reason=finish,
                            model_name=self.model_name)
