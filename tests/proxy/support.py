"""Tools that really run, and a client's tool loop over the openai or anthropic SDK."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


def get_weather(city: str) -> str:
    """The test's tool: it runs for real, and its result carries its argument."""
    return json.dumps({"city": city, "forecast": f"sunny in {city}"})


def run_tool(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    if name != "get_weather":
        return f"unknown tool {name}", True
    return get_weather(**arguments), False


def openai_loop(client: openai.OpenAI, prompt: str, *, stream: bool,
                headers: dict[str, str] | None = None, max_rounds: int = 4,
                model: str = "fake-model") -> list[str]:
    """A hand-written tool loop; returns the tool results it sent back."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    sent: list[str] = []
    for _ in range(max_rounds):
        message, calls = _openai_turn(client, messages, stream=stream, headers=headers,
                                      model=model)
        messages.append(message)
        if not calls:
            return sent
        for call in calls:
            result, _ = run_tool(call["function"]["name"],
                                 json.loads(call["function"]["arguments"]))
            sent.append(result)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise AssertionError("the model kept calling tools")


def _openai_turn(client: openai.OpenAI, messages: list[Any], *, stream: bool,
                 headers: dict[str, str] | None, model: str,
                 ) -> tuple[dict[str, Any], list[Any]]:
    tools: Any = [{"type": "function", "function": WEATHER_TOOL}]
    if not stream:
        completion = client.chat.completions.create(
            model=model, messages=messages, tools=tools, extra_headers=headers)
        message = completion.choices[0].message.model_dump(exclude_none=True)
        return message, list(message.get("tool_calls") or [])
    with client.chat.completions.stream(model=model, messages=messages,
                                        tools=tools, extra_headers=headers) as events:
        final = events.get_final_completion()
    message = final.choices[0].message
    dumped: dict[str, Any] = {"role": "assistant", "content": message.content}
    tool_calls = [c.model_dump(include={"id", "type", "function"})
                  for c in message.tool_calls or []]
    if tool_calls:
        dumped["tool_calls"] = tool_calls
    return dumped, tool_calls


def anthropic_loop(client: anthropic.Anthropic, prompt: str, *, stream: bool,
                   fail_tools: bool = False, max_rounds: int = 4) -> list[str]:
    """The same loop over the Messages API; `fail_tools` marks results as errors."""
    messages: list[Any] = [{"role": "user", "content": prompt}]
    tools: Any = [{"name": WEATHER_TOOL["name"], "description": WEATHER_TOOL["description"],
                   "input_schema": WEATHER_TOOL["parameters"]}]
    sent: list[str] = []
    for _ in range(max_rounds):
        if stream:
            with client.messages.stream(model="fake-model", max_tokens=256,
                                        messages=messages, tools=tools) as events:
                response = events.get_final_message()
        else:
            response = client.messages.create(model="fake-model", max_tokens=256,
                                              messages=messages, tools=tools)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in response.content]})
        uses = [b for b in response.content if b.type == "tool_use"]
        if not uses:
            return sent
        results = []
        for use in uses:
            result, _ = run_tool(use.name, dict(use.input))  # type: ignore[arg-type]
            sent.append(result)
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": result,
                            "is_error": fail_tools})
        messages.append({"role": "user", "content": results})
    raise AssertionError("the model kept calling tools")
