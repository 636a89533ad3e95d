"""Builders shared by the engine tests: the seed's weather tool, messages, recorders."""

from collections.abc import Sequence
from typing import Annotated, Any

from tools_app.engine import (
    AiMessage,
    ChatModel,
    ChatRequest,
    ChatResponse,
    P,
    ScriptedCall,
    ScriptedChatModel,
    ScriptStep,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    tool,
)

QUESTION = "杭州今天天气怎么样？"  # noqa: RUF001
WEATHER = "杭州今天 22℃，天气晴。"  # noqa: RUF001
ANSWER = "杭州今天 22℃，天气晴，适合出行。"  # noqa: RUF001
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "城市名"}},
    "required": ["city"],
}


class WeatherTools:
    """The seed's tool object (section 5.1)."""

    def __init__(self) -> None:
        self.cities: list[str] = []

    @tool(name="get_weather", description="查询指定城市的当前天气")
    def get_weather(self, city: Annotated[str, P("city", "城市名")]) -> str:
        self.cities.append(city)
        return WEATHER


def user(text: str = QUESTION) -> UserMessage:
    return UserMessage(text=text)


def call(name: str, arguments: dict[str, Any] | str | None = None) -> ScriptedCall:
    return ScriptedCall(name=name, arguments={} if arguments is None else arguments)


def calls(*scripted: ScriptedCall) -> ScriptStep:
    """One model turn that proposes these tool calls (several = parallel calls)."""
    return ScriptStep(tool_calls=scripted)


def final(text: str = "done") -> ScriptStep:
    return ScriptStep(text=text)


def scripted(*steps: ScriptStep) -> "RecordingModel":
    return RecordingModel(ScriptedChatModel(list(steps)))


class RecordingModel:
    """Wraps a ChatModel and keeps every ChatRequest it was sent."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.requests: list[ChatRequest] = []

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return await self.model.chat(request)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def tool_results(self, request_index: int) -> list[ToolExecutionResultMessage]:
        """The tool results the model saw in its `request_index`-th request."""
        messages = self.requests[request_index].messages
        return [m for m in messages if isinstance(m, ToolExecutionResultMessage)]


def tool_call_message(*requests: ToolExecutionRequest) -> AiMessage:
    return AiMessage(tool_execution_requests=tuple(requests))


class EventLog:
    """A sync observer that keeps every event it receives."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def of_kind(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.kind == kind]


def texts(messages: Sequence[ToolExecutionResultMessage]) -> list[str]:
    return [m.text for m in messages]
