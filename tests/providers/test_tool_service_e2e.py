"""ToolService end to end over each wire adapter: several rounds, parallel calls, real
@tool functions, with a fake provider behind httpx.MockTransport that answers from
what the request contains (so results must have been sent back correctly)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tools_app.engine import ToolService, UserMessage, tool
from tools_app.engine.providers.adapter import WireChatModel
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.gemini import GeminiChatModel
from tools_app.engine.providers.openai import OpenAIChatModel
from tools_app.engine.providers.openai_responses import OpenAIResponsesModel
from tools_app.fake_llm.conversation import Conversation, Reply, ReplyCall
from tools_app.fake_llm.wires import OPENAI_RESPONSES, WireError
from tools_app.fake_llm.wires.base import dumps
from tools_app.fake_llm.wires.responses_check import check_request

from .support import (
    json_response,
    sse_response,
    validate_anthropic_body,
    validate_gemini_body,
    validate_openai_body,
    validate_responses_body,
)
from .wire import (
    anthropic_message,
    anthropic_sse,
    gemini_response,
    gemini_sse,
    openai_completion,
    openai_sse,
)

WEATHER = {"Paris": "sunny, 22 C", "Rome": "rainy, 18 C"}


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return WEATHER[city]


@tool
def to_fahrenheit(celsius: float) -> float:
    """Convert Celsius to Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


FINAL = "Paris is sunny (71.6 F); Rome is rainy."
# The scripted conversation: round 1 two parallel calls, round 2 one call, then text.
SCRIPT: list[dict[str, Any]] = [
    {"text": "Checking both cities.", "calls": [("get_weather", {"city": "Paris"}),
                                                ("get_weather", {"city": "Rome"})]},
    {"text": None, "calls": [("to_fahrenheit", {"celsius": 22})]},
    {"text": FINAL, "calls": []},
]


@dataclass(frozen=True)
class FakeProvider:
    """Reads a wire request, checks it, and answers with the next scripted turn."""

    name: str
    factory: type[WireChatModel]
    validate: Callable[[dict[str, Any]], None]
    rounds_done: Callable[[dict[str, Any]], int]
    results: Callable[[dict[str, Any]], list[str]]
    reply: Callable[[int, bool], httpx.Response]
    paired: Callable[[dict[str, Any]], bool]

    def __str__(self) -> str:
        return self.name


def _ids(prefix: str, turn: int) -> list[str]:
    return [f"{prefix}_{turn}_{i}" for i in range(len(SCRIPT[turn]["calls"]))]


def _openai_reply(turn: int, stream: bool) -> httpx.Response:
    step = SCRIPT[turn]
    calls = [(i, n, a) for i, (n, a) in zip(_ids("call", turn), step["calls"], strict=True)]
    kwargs = {"text": step["text"], "calls": calls, "response_id": f"chatcmpl-{turn}"}
    return sse_response(openai_sse(**kwargs)) if stream else json_response(
        200, openai_completion(**kwargs))


def _anthropic_reply(turn: int, stream: bool) -> httpx.Response:
    step = SCRIPT[turn]
    calls = [(i, n, a) for i, (n, a) in zip(_ids("toolu", turn), step["calls"], strict=True)]
    kwargs = {"text": step["text"], "calls": calls, "message_id": f"msg_{turn}"}
    return sse_response(anthropic_sse(**kwargs)) if stream else json_response(
        200, anthropic_message(**kwargs))


def _gemini_reply(turn: int, stream: bool) -> httpx.Response:
    step = SCRIPT[turn]
    kwargs = {"text": step["text"], "calls": step["calls"], "response_id": f"resp-{turn}"}
    return sse_response(gemini_sse(**kwargs)) if stream else json_response(
        200, gemini_response(**kwargs))


def _responses_reply(turn: int, stream: bool) -> httpx.Response:
    """The fake provider's Responses wire: a reasoning item, the text, the calls."""
    step = SCRIPT[turn]
    calls = [ReplyCall(n, json.dumps(a), i)
             for i, (n, a) in zip(_ids("call", turn), step["calls"], strict=True)]
    reply = Reply(text=step["text"], calls=calls, input_tokens=10, output_tokens=5,
                  finish="tool_calls" if calls else "stop")
    conversation = Conversation(model="test-model")
    if not stream:
        return json_response(200, OPENAI_RESPONSES.json_body(reply, conversation))
    items = OPENAI_RESPONSES.stream_items(reply, conversation, 7)
    return sse_response("".join(f"event: {n}\ndata: {dumps(d)}\n\n" for n, d in items))


def _responses_rounds(body: dict[str, Any]) -> int:
    """Assistant turns: runs of function_call items and assistant messages."""
    kinds = ["ai" if i.get("type") == "function_call" or i.get("role") == "assistant"
             else "other" for i in body["input"]]
    return sum(1 for a, b in itertools.pairwise(["other", *kinds]) if (a, b) == ("other", "ai"))


def _responses_paired(body: dict[str, Any]) -> bool:
    """What the real API checks: every output has its call, every call its output."""
    try:
        check_request(body)
    except WireError:
        return False
    return True


def _openai_paired(body: dict[str, Any]) -> bool:
    """Like the real API: each tool message answers a call of the assistant before it."""
    messages = body["messages"]
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            owner = next(m for m in reversed(messages[:index]) if m["role"] == "assistant")
            if message["tool_call_id"] not in [c["id"] for c in owner["tool_calls"]]:
                return False
    return True


def _anthropic_paired(body: dict[str, Any]) -> bool:
    """Each round's results are the whole next user message, in the calls' order."""
    messages = body["messages"]
    for before, after in itertools.pairwise(messages):
        calls = [b["id"] for b in before["content"] if b["type"] == "tool_use"]
        answered = [b.get("tool_use_id") for b in after["content"]]
        if before["role"] == "assistant" and calls and answered != calls:
            return False
    return True


def _gemini_paired(body: dict[str, Any]) -> bool:
    """As many functionResponse parts, same names, in the turn after the calls."""
    contents = body["contents"]
    for before, after in itertools.pairwise(contents):
        calls = [p["functionCall"]["name"] for p in before["parts"] if "functionCall" in p]
        if before["role"] == "model" and calls:
            answered = [p["functionResponse"]["name"] for p in after["parts"]]
            if after["role"] != "user" or answered != calls:
                return False
    return True


def _anthropic_results(body: dict[str, Any]) -> list[str]:
    return [b["content"] for m in body["messages"] if m["role"] == "user"
            for b in m["content"] if b["type"] == "tool_result"]


def _gemini_results(body: dict[str, Any]) -> list[str]:
    return [p["functionResponse"]["response"]["output"] for c in body["contents"]
            for p in c["parts"] if "functionResponse" in p]


PROVIDERS = [
    FakeProvider("openai", OpenAIChatModel, validate_openai_body,
                 lambda b: sum(m["role"] == "assistant" for m in b["messages"]),
                 lambda b: [m["content"] for m in b["messages"] if m["role"] == "tool"],
                 _openai_reply, _openai_paired),
    FakeProvider("openai_responses", OpenAIResponsesModel, validate_responses_body,
                 _responses_rounds,
                 lambda b: [i["output"] for i in b["input"]
                            if i.get("type") == "function_call_output"],
                 _responses_reply, _responses_paired),
    FakeProvider("anthropic", AnthropicChatModel, validate_anthropic_body,
                 lambda b: sum(m["role"] == "assistant" for m in b["messages"]),
                 _anthropic_results, _anthropic_reply, _anthropic_paired),
    FakeProvider("gemini", GeminiChatModel, validate_gemini_body,
                 lambda b: sum(c["role"] == "model" for c in b["contents"]),
                 _gemini_results, _gemini_reply, _gemini_paired),
]

EXPECTED_RESULTS = [[], ["sunny, 22 C", "rainy, 18 C"], ["sunny, 22 C", "rainy, 18 C", "71.6"]]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_a_multi_round_run_with_parallel_calls(provider: FakeProvider,
                                                     stream: bool) -> None:
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        provider.validate(body)
        bodies.append(body)
        if not provider.paired(body):
            return json_response(400, {"error": {"message": "results not paired",
                                                 "type": "invalid_request_error"}})
        return provider.reply(provider.rounds_done(body), stream)

    model = provider.factory(model="test-model", api_key="key", stream=stream,
                             transport=httpx.MockTransport(handle))
    events: list[Any] = []
    service = ToolService().tools([get_weather, to_fahrenheit])

    result = await service.chat(model, [UserMessage(text="Weather in Paris and Rome, in F?")],
                                observers=[events.append])

    assert result.final_response.ai_message.text == FINAL
    assert [provider.results(b) for b in bodies] == EXPECTED_RESULTS
    assert [(e.request.name, e.result_text) for e in result.tool_executions] == [
        ("get_weather", "sunny, 22 C"), ("get_weather", "rainy, 18 C"), ("to_fahrenheit", "71.6")]
    assert len(result.intermediate_responses) == 2
    first_round = [r.id for r in result.intermediate_responses[0].ai_message
                   .tool_execution_requests]
    assert len(set(first_round)) == 2  # parallel calls, each with its own id
    finished = [e for e in events if e.kind == "tool_call_finished"]
    assert [e.outcome for e in finished].count("succeeded") == 3
    assert {e.call_id for e in finished} >= set(first_round)
    assert [e.kind for e in events].count("provider_wire_request") == 3
    assert result.usage is not None
    assert result.usage.input_tokens == 30
