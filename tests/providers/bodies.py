"""The request bodies the adapters write for one conversation (a system message, parallel
tool calls with a failed result, a follow-up), read back from a replayed transport: the
helpers of the request-body tests and of the custom-parameter allow-list tests."""

from __future__ import annotations

from typing import Any

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequest,
    ChatRequestParameters,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
    tool_specification_from,
)
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.openai import OpenAIChatModel, OpenAICompatibleChatModel

from .support import (
    Replay,
    json_response,
    sse_response,
    validate_anthropic_body,
    validate_openai_body,
)
from .wire import anthropic_message, anthropic_sse, openai_completion, openai_sse


@tool(strict=True)
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


WEATHER = tool_specification_from(get_weather)
CALLS = (ToolExecutionRequest(id="call_a", name="get_weather", arguments='{"city": "Paris"}'),
         ToolExecutionRequest(id="call_b", name="get_weather", arguments='{"city": "Rome"}'))
CONVERSATION: tuple[ChatMessage, ...] = (
    SystemMessage(text="You are terse."),
    UserMessage(text="Weather in Paris and Rome?"),
    AiMessage(text="Checking both.", tool_execution_requests=CALLS),
    ToolExecutionResultMessage(id="call_a", tool_name="get_weather", text="sunny"),
    ToolExecutionResultMessage(id="call_b", tool_name="get_weather", text="no such city",
                               is_error=True),
    AiMessage(text="Paris is sunny; Rome failed."),
    UserMessage(text="Thanks!"),
)


async def openai_body(request_parameters: ChatRequestParameters, *, stream: bool = False,
                      compatible: bool = False, **overrides: Any) -> dict[str, Any]:
    reply = sse_response(openai_sse(text="ok")) if stream else json_response(
        200, openai_completion(text="ok"))
    replay = Replay([reply], validate_openai_body)
    factory = OpenAICompatibleChatModel if compatible else OpenAIChatModel
    model = factory(base_url="http://127.0.0.1:8000/v1", model="gpt-4o", api_key="k",
                    stream=stream, transport=replay.transport, **overrides)
    await model.chat(ChatRequest(messages=CONVERSATION, parameters=request_parameters))
    return replay.bodies[0]


async def anthropic_body(parameters: ChatRequestParameters, messages: tuple[ChatMessage, ...]
                         = CONVERSATION, *, stream: bool = False,
                         **overrides: Any) -> dict[str, Any]:
    reply = sse_response(anthropic_sse(text="ok")) if stream else json_response(
        200, anthropic_message(text="ok"))
    replay = Replay([reply], lambda body: validate_anthropic_body(
        body, unlisted=("temperature", "top_p")))
    model = AnthropicChatModel(model="claude-sonnet-4-5", api_key="k", stream=stream,
                               transport=replay.transport, **overrides)
    await model.chat(ChatRequest(messages=messages, parameters=parameters))
    return replay.bodies[0]
