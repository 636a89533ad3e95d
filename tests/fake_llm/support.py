"""Request bodies and stream parsing shared by the fake-LLM tests."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
}


def openai_body(messages: list[dict[str, Any]] | None = None, *, model: str = "gpt-fake",
                tools: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages or [{"role": "user", "content": "Weather in Paris?"}],
    }
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
            {"type": "function", "function": {"name": "get_time", "parameters": TIME_SCHEMA}},
        ]
    return body | extra


def anthropic_body(messages: list[dict[str, Any]] | None = None, *, model: str = "claude-fake",
                   tools: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 256,
        "messages": messages or [{"role": "user", "content": "Weather in Paris?"}],
    }
    if tools:
        body["tools"] = [{"name": "get_weather", "input_schema": WEATHER_SCHEMA},
                         {"name": "get_time", "input_schema": TIME_SCHEMA}]
    return body | extra


def gemini_body(contents: list[dict[str, Any]] | None = None, *, tools: bool = True,
                **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "contents": contents or [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
    }
    if tools:
        body["tools"] = [{"functionDeclarations": [
            {"name": "get_weather", "parameters": WEATHER_SCHEMA},
            {"name": "get_time", "parameters": TIME_SCHEMA},
        ]}]
    return body | extra


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) per server-sent event; accepts LF and CRLF separators."""
    events: list[tuple[str | None, str]] = []
    for block in re.split(r"\r?\n\r?\n", text.strip()):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        events.append((name, "\n".join(data)))
    return events


def sse_json(text: str) -> list[Any]:
    """The JSON data of every event, skipping OpenAI's closing [DONE]."""
    return [json.loads(data) for _, data in sse_events(text) if data != "[DONE]"]


def set_script(client: httpx.Client, script: dict[str, Any]) -> None:
    client.post("/_fake/script", json=script).raise_for_status()


def recorded(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/_fake/requests", params=params)
    response.raise_for_status()
    requests: list[dict[str, Any]] = response.json()["requests"]
    return requests
