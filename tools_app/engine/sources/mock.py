"""Mock tools: canned answers for tools a user has only as definitions.

A mock answers with a result (text, or any JSON value, optionally filled from the
call's arguments), or fails with an error text, after an optional latency; or plays a
sequence of such answers, one per call. Results follow the seed's text rules (a
string as it is, null -> "Success", anything else JSON); an error is a
ToolExecutionError, so the policy's execution-error handling applies as for any tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ToolExecutionError
from ..execution import ToolExecutionResult, arguments_as_map, result_text
from ..messages import ToolExecutionRequest
from .templates import MissingArgument, fill_json, placeholders

MAX_LATENCY_SECONDS = 3600.0


class MockResponse(BaseModel):
    """One canned answer: `result` or `error`, after `latency_seconds`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    result: Any = Field(
        None, description="Text or any JSON value; null or absent: the text \"Success\".")
    error: str | None = Field(
        None, description="Fail with this text instead (an execution error).")
    latency_seconds: float = Field(0.0, ge=0.0, le=MAX_LATENCY_SECONDS,
                                   description="Wait this long before answering.")
    template: bool = Field(
        False, description="Fill {argument} placeholders in the result (or error) from "
        "the call's arguments; a string that is only a placeholder takes the "
        "argument's JSON value.")

    @model_validator(mode="after")
    def _result_or_error(self) -> Self:
        if self.error is not None and self.result is not None:
            raise ValueError("give either a result or an error, not both")
        return self


class MockConfig(MockResponse):
    """A mock tool's configuration: one answer (this object's own fields) or a
    `sequence` of answers, one per call, then `after_sequence`."""

    sequence: list[MockResponse] | None = Field(
        None, min_length=1, description="Answers given in turn, one per call.")
    after_sequence: Literal["repeat_last", "cycle", "error"] = Field(
        "repeat_last", description="When the sequence is used up: repeat its last "
        "answer, start again, or fail.")

    @model_validator(mode="after")
    def _sequence_alone(self) -> Self:
        if self.sequence is not None and self.model_fields_set & {
                "result", "error", "latency_seconds", "template"}:
            raise ValueError("with a sequence, put result, error, latency_seconds and "
                             "template in its steps")
        return self


# Schema keywords that can declare arguments outside the top level's "properties".
_COMPOSED = ("$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "if", "dependentSchemas")


def template_problems(config: MockConfig, parameters: Mapping[str, Any]) -> list[str]:
    """A templated answer's placeholders that name no argument of the tool (the first
    name of each path against its JSON schema's properties): no call could fill them.
    One message each, naming the placeholder and the tool's arguments. A schema that
    composes its arguments from other schemas is not checked."""
    if any(key in parameters for key in _COMPOSED):
        return []
    declared = parameters.get("properties")
    names = list(declared) if isinstance(declared, Mapping) else []
    has = f"its arguments are {', '.join(names)}" if names else "it has no arguments"
    steps: list[tuple[str, MockResponse]] = [("", config)] if config.sequence is None \
        else [(f"sequence.{i}.", step) for i, step in enumerate(config.sequence)]
    problems = []
    for where, answer in steps:
        if not answer.template:
            continue
        field, value = ("error", answer.error) if answer.error is not None \
            else ("result", answer.result)
        problems += [f"{where}{field}: the placeholder {{{path}}} names no argument of "
                     f"this tool ({has})"
                     for path in placeholders(value) if path.split(".")[0] not in names]
    return problems


class MockToolExecutor:
    """Answers every call from a MockConfig. The position in a sequence belongs to
    this executor (in the app: to one run)."""

    def __init__(self, config: MockConfig | dict[str, Any]) -> None:
        self.config = config if isinstance(config, MockConfig) else \
            MockConfig.model_validate(config)
        self._calls = 0

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        response = self._next_response(request)
        if response.latency_seconds:
            await asyncio.sleep(response.latency_seconds)
        arguments = arguments_as_map(request) if response.template else {}
        if response.error is not None:
            raise ToolExecutionError(self._filled(response.error, arguments, request, response),
                                     tool_name=request.name)
        value = self._filled(response.result, arguments, request, response)
        return ToolExecutionResult.success(result_text(value), result=value)

    def _next_response(self, request: ToolExecutionRequest) -> MockResponse:
        sequence = self.config.sequence
        index, self._calls = self._calls, self._calls + 1
        if sequence is None:
            return self.config
        if index < len(sequence):
            return sequence[index]
        match self.config.after_sequence:
            case "cycle":
                return sequence[index % len(sequence)]
            case "error":
                raise ToolExecutionError(
                    f"Mock tool '{request.name}' has no answer left: its sequence of "
                    f"{len(sequence)} answer(s) is used up", tool_name=request.name)
            case _:
                return sequence[-1]

    @staticmethod
    def _filled(value: Any, arguments: dict[str, Any], request: ToolExecutionRequest,
                response: MockResponse) -> Any:
        if not response.template:
            return value
        try:
            return fill_json(value, arguments)
        except MissingArgument as missing:
            raise ToolExecutionError(
                f"Mock tool '{request.name}': its template uses {{{missing.path}}}, which "
                "the call's arguments do not have", tool_name=request.name) from missing
