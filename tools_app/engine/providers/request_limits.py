"""What a chat request may ask of each provider: the `custom` keys its adapter sends, and
the ranges of the request settings.

`custom` goes into the wire body as it is, on the endpoint's key. So it is an allow-list
per provider kind of the request's tuning fields (sampling, seeds, stops, output format,
reasoning effort, metadata): never the model, the conversation, the tools, how many
answers are generated, streaming or the output-token limit, each of which has its own
checked setting (or is the endpoint's). The adapters drop anything else even from a
stored snapshot (`allowed_custom`); starting a run refuses it (`request_problems`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..messages import ChatRequestParameters

MAX_OUTPUT_TOKENS = 1_000_000
"""The most output tokens a request may ask for (1 at least)."""


@dataclass(frozen=True)
class CustomKeys:
    """The `custom` keys an adapter sends; `nested`: keys whose value is an object that
    is merged into the body's object of that name, with the sub-keys it may hold."""

    keys: frozenset[str]
    nested: Mapping[str, frozenset[str]] = field(default_factory=dict)
    temperature_max: float = 2.0
    stop_sequences: bool = True
    """Whether the provider's API has stop sequences (the Responses API has none)."""
    min_output_tokens: int = 1
    """The fewest output tokens the API lets a request ask for (the Responses API: 16)."""

    def names(self) -> list[str]:
        return sorted(self.keys | self.nested.keys())


_OPENAI_KEYS = frozenset({
    "temperature", "top_p", "seed", "stop", "frequency_penalty", "presence_penalty",
    "logit_bias", "logprobs", "top_logprobs", "response_format", "reasoning_effort",
    "verbosity", "metadata", "user", "safety_identifier",
})
OPENAI = CustomKeys(_OPENAI_KEYS)
# vLLM, Ollama and llama.cpp servers take their samplers' settings too.
OPENAI_COMPATIBLE = CustomKeys(_OPENAI_KEYS | {"top_k", "min_p", "repetition_penalty"})
# The Responses API: `store` (false unless set), `include`, `previous_response_id` and
# `truncation` are the endpoint's options; `reasoning` and `text` are merged objects.
OPENAI_RESPONSES = CustomKeys(
    frozenset({"temperature", "top_p", "metadata", "user", "safety_identifier", "store",
               "include", "previous_response_id", "truncation", "service_tier",
               "prompt_cache_key", "max_tool_calls", "top_logprobs"}),
    nested={"reasoning": frozenset({"effort", "summary"}),
            "text": frozenset({"format", "verbosity"})},
    stop_sequences=False, min_output_tokens=16)
ANTHROPIC = CustomKeys(frozenset({"temperature", "top_p", "top_k", "stop_sequences",
                                  "metadata", "thinking", "output_config"}),
                       temperature_max=1.0)
GEMINI = CustomKeys(frozenset({"safetySettings"}), nested={"generationConfig": frozenset({
    "temperature", "topP", "topK", "seed", "stopSequences", "presencePenalty",
    "frequencyPenalty", "responseMimeType", "responseSchema", "responseJsonSchema",
    "responseLogprobs", "logprobs", "thinkingConfig",
})})
# The scripted model sends nothing: it takes what any provider would (a script may stand
# in for one), and a fork that moves to a real endpoint is checked against that one.
SCRIPTED = CustomKeys(OPENAI_COMPATIBLE.keys | OPENAI_RESPONSES.keys | ANTHROPIC.keys
                      | GEMINI.keys, nested={**GEMINI.nested, **OPENAI_RESPONSES.nested})

CUSTOM_KEYS: dict[str, CustomKeys] = {
    "openai": OPENAI, "openai_compatible": OPENAI_COMPATIBLE,
    "openai_responses": OPENAI_RESPONSES, "anthropic": ANTHROPIC,
    "gemini": GEMINI, "scripted": SCRIPTED,
}
NOTHING = CustomKeys(frozenset())
"""For a kind this module does not know: no custom key at all."""

# Why the keys people try most are refused, in the refusal's words.
_REASONS = {
    "model": "the model is the endpoint's (staff may set parameters.model_name)",
    "messages": "the conversation is the run's", "input": "the conversation is the run's",
    "contents": "the conversation is the run's", "system": "the conversation is the run's",
    "systemInstruction": "the conversation is the run's",
    "prompt": "the conversation is the run's",
    "instructions": "the conversation's system messages are the instructions",
    "tools": "the tools are the run's", "tool_choice": "use parameters.tool_choice",
    "toolConfig": "use parameters.tool_choice", "functions": "the tools are the run's",
    "function_call": "use parameters.tool_choice",
    "parallel_tool_calls": "use parameters.parallel_tool_calls",
    "n": "one answer per call", "best_of": "one answer per call",
    "candidateCount": "one answer per call",
    "stream": "streaming is the endpoint's setting",
    "stream_options": "streaming is the endpoint's setting",
    "max_tokens": "use parameters.max_output_tokens",
    "max_completion_tokens": "use parameters.max_output_tokens",
    "maxOutputTokens": "use parameters.max_output_tokens",
}
_RANGED = {"temperature": "temperature", "top_p": "top_p", "topP": "top_p"}


def custom_keys_for(kind: str) -> CustomKeys:
    return CUSTOM_KEYS.get(kind, NOTHING)


def allowed_custom(custom: Mapping[str, Any] | None, keys: CustomKeys) -> dict[str, Any]:
    """`custom` without the keys the adapter must not send (a snapshot stored before the
    allow-list, or built by hand, may hold any)."""
    kept: dict[str, Any] = {}
    for name, value in (custom or {}).items():
        if name in keys.keys:
            kept[name] = value
        elif name in keys.nested and isinstance(value, dict):
            kept[name] = {k: v for k, v in value.items() if k in keys.nested[name]}
    return kept


def request_problems(kind: str, parameters: ChatRequestParameters) -> dict[str, str]:
    """What is wrong with the request settings for an endpoint of `kind`: path under
    `parameters` -> the problem (empty when nothing is)."""
    keys = custom_keys_for(kind)
    problems: dict[str, str] = {}
    tokens = parameters.max_output_tokens
    if tokens is not None and not keys.min_output_tokens <= tokens <= MAX_OUTPUT_TOKENS:
        problems["max_output_tokens"] = (f"must be from {keys.min_output_tokens} to "
                                         f"{MAX_OUTPUT_TOKENS:,}")
    if parameters.stop_sequences and not keys.stop_sequences:
        problems["stop_sequences"] = f"{kind} endpoints have no stop sequences"
    for name, value in (("temperature", parameters.temperature), ("top_p", parameters.top_p)):
        if value is not None and (problem := _range_problem(name, value, keys)):
            problems[name] = problem
    return problems | _custom_problems(kind, parameters.custom or {}, keys) | _chain_problems(
        kind, parameters.custom or {})


def _chain_problems(kind: str, custom: Mapping[str, Any]) -> dict[str, str]:
    """The Responses API continues only a stored response."""
    chained = custom.get("previous_response_id") == "auto"
    if kind != "openai_responses" or not chained or custom.get("store") is True:
        return {}
    return {"custom.previous_response_id": '"auto" needs custom.store true (only a stored '
                                           "response can be continued)"}


def _custom_problems(kind: str, custom: Mapping[str, Any],
                     keys: CustomKeys) -> dict[str, str]:
    problems: dict[str, str] = {}
    for name, value in custom.items():
        path = f"custom.{name}"
        if name in keys.nested:
            problems |= _nested_problems(kind, path, value, keys.nested[name], keys)
        elif name not in keys.keys:
            problems[path] = _refusal(kind, name, keys.names())
        elif name in _RANGED and (problem := _range_problem(name, value, keys)):
            problems[path] = problem
    return problems


def _nested_problems(kind: str, path: str, value: Any, allowed: frozenset[str],
                     keys: CustomKeys) -> dict[str, str]:
    if not isinstance(value, dict):
        return {path: "must be an object"}
    problems: dict[str, str] = {}
    for name, item in value.items():
        if name not in allowed:
            problems[f"{path}.{name}"] = _refusal(kind, name, sorted(allowed))
        elif name in _RANGED and (problem := _range_problem(name, item, keys)):
            problems[f"{path}.{name}"] = problem
    return problems


def _refusal(kind: str, name: str, allowed: list[str]) -> str:
    why = f": {_REASONS[name]}" if name in _REASONS else ""
    return (f"not allowed for {kind} endpoints{why} (allowed: "
            f"{', '.join(allowed) or 'none'})")


def _range_problem(name: str, value: Any, keys: CustomKeys) -> str | None:
    """temperature from 0 to the provider's maximum, top_p from 0 to 1."""
    top = keys.temperature_max if _RANGED[name] == "temperature" else 1.0
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 <= value <= top:
        return f"must be a number from 0 to {top:g}"
    return None
