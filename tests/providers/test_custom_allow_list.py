"""`custom` request parameters: each adapter sends only its provider's allowed keys, so a
stored snapshot holding `model`, `messages`, `tools`, `n`... (written before the
allow-list, or by hand) cannot rewrite the request sent on the endpoint's key."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import ChatRequest, ChatRequestParameters, UserMessage
from tools_app.engine.providers.gemini import GeminiChatModel
from tools_app.engine.providers.request_limits import CUSTOM_KEYS, request_problems

from .bodies import WEATHER, anthropic_body, openai_body
from .support import Replay, json_response, validate_gemini_body
from .wire import gemini_response

HOSTILE = {"model": "expensive-model-xl", "messages": [{"role": "user", "content": "x"}],
           "input": "x", "tools": [], "tool_choice": "none", "n": 64, "stream": True,
           "max_tokens": 1_000_000, "max_completion_tokens": 1_000_000, "system": "x",
           "contents": [], "functions": [], "best_of": 8}
TUNING = {"seed": 7, "temperature": 0.0}


async def test_openai_sends_the_allowed_keys_and_drops_the_rest() -> None:
    body = await openai_body(ChatRequestParameters(tools=(WEATHER,),
                                                   custom=HOSTILE | TUNING))

    assert (body["model"], body["stream"], body["seed"], body["temperature"]) == (
        "gpt-4o", False, 7, 0.0)
    assert body["messages"][-1] == {"role": "user", "content": "Thanks!"}
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert not {"n", "input", "max_tokens", "max_completion_tokens", "system", "contents",
                "functions", "best_of"} & set(body)


async def test_openai_compatible_drops_the_forbidden_keys() -> None:
    body = await openai_body(ChatRequestParameters(custom=HOSTILE | TUNING), compatible=True)

    assert (body["model"], body["seed"]) == ("gpt-4o", 7)
    assert not {"n", "input", "max_tokens", "tools", "tool_choice"} & set(body)


async def test_anthropic_drops_the_forbidden_keys() -> None:
    thinking = {"type": "enabled", "budget_tokens": 32}
    body = await anthropic_body(ChatRequestParameters(
        max_output_tokens=64, custom=HOSTILE | {"thinking": thinking}))

    assert (body["model"], body["max_tokens"], body["stream"], body["thinking"]) == (
        "claude-sonnet-4-5", 64, False, thinking)
    assert body["system"] == "You are terse."
    assert not {"tools", "n"} & set(body)


async def test_gemini_drops_the_forbidden_keys_and_generation_config_entries() -> None:
    replay = Replay([json_response(200, gemini_response(text="ok"))], validate_gemini_body)
    model = GeminiChatModel(model="gemini-2.5-pro", api_key="k", transport=replay.transport)
    custom = HOSTILE | {"generationConfig": {"candidateCount": 8, "maxOutputTokens": 999999,
                                             "temperature": 0.2}}

    await model.chat(ChatRequest(messages=(UserMessage(text="hi"),),
                                 parameters=ChatRequestParameters(custom=custom)))

    body = replay.bodies[0]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["generationConfig"] == {"temperature": 0.2}
    assert set(body) == {"contents", "generationConfig"}
    assert str(replay.requests[0].url).endswith("models/gemini-2.5-pro:generateContent")


@pytest.mark.parametrize("kind", sorted(CUSTOM_KEYS))
@pytest.mark.parametrize("key", sorted(HOSTILE))
def test_a_forbidden_key_is_a_problem_for_every_kind(kind: str, key: str) -> None:
    problems = request_problems(kind, ChatRequestParameters(custom={key: HOSTILE[key]}))

    assert list(problems) == [f"custom.{key}"]
    assert problems[f"custom.{key}"].startswith(f"not allowed for {kind} endpoints")


@pytest.mark.parametrize(("kind", "custom"), [
    ("openai", {"seed": 1, "reasoning_effort": "low", "logit_bias": {"50256": -100}}),
    ("openai_compatible", {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1}),
    ("anthropic", {"thinking": {"type": "enabled", "budget_tokens": 1024}, "top_k": 5}),
    ("gemini", {"generationConfig": {"seed": 3, "topK": 4}, "safetySettings": []}),
    ("scripted", {"seed": 1, "thinking": {}, "generationConfig": {"topK": 4}}),
])
def test_the_allowed_keys_are_no_problem(kind: str, custom: dict[str, Any]) -> None:
    assert request_problems(kind, ChatRequestParameters(custom=custom)) == {}


@pytest.mark.parametrize(("kind", "parameters", "path"), [
    ("openai", {"max_output_tokens": -1}, "max_output_tokens"),
    ("openai", {"max_output_tokens": 0}, "max_output_tokens"),
    ("gemini", {"max_output_tokens": 1_000_001}, "max_output_tokens"),
    ("openai", {"temperature": 2.5}, "temperature"),
    ("anthropic", {"temperature": 1.5}, "temperature"),
    ("openai", {"temperature": -0.1}, "temperature"),
    ("openai", {"top_p": 1.5}, "top_p"),
    ("openai", {"custom": {"temperature": 9}}, "custom.temperature"),
    ("openai", {"custom": {"top_p": "high"}}, "custom.top_p"),
    ("gemini", {"custom": {"generationConfig": {"topP": 3}}}, "custom.generationConfig.topP"),
    ("gemini", {"custom": {"generationConfig": {"candidateCount": 8}}},
     "custom.generationConfig.candidateCount"),
    ("gemini", {"custom": {"generationConfig": "hot"}}, "custom.generationConfig"),
    ("unknown_kind", {"custom": {"seed": 1}}, "custom.seed"),
])
def test_out_of_range_settings_are_named(kind: str, parameters: dict[str, Any],
                                         path: str) -> None:
    problems = request_problems(kind, ChatRequestParameters.model_validate(parameters))

    assert list(problems) == [path]


@pytest.mark.parametrize("parameters", [
    {"max_output_tokens": 1}, {"max_output_tokens": 1_000_000}, {"temperature": 2.0},
    {"temperature": 0}, {"top_p": 1.0},
])
def test_settings_at_their_bounds_are_no_problem(parameters: dict[str, Any]) -> None:
    assert request_problems("openai", ChatRequestParameters.model_validate(parameters)) == {}
