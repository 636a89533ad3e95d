"""The JSON API's request bodies and common answers as pydantic (django-ninja) schemas.

Each body model is the type of its view's `body` parameter: ninja validates the body with
it and shows it in `GET /api/openapi.json`, so the documented body is the validated one.
The models enforce what they say: types are strict (no "5" for 5, no 1 for true), a
required field left out (or sent as null, "" or []) is a `missing_field`, an unknown field
is refused, and every refusal is the API's own 400 (bodies.refusal: code, message and
`field` naming the JSON path, e.g. `arguments.call_1` or `tools[2]`). What needs the
database or the run (does the endpoint exist, is round N a round of the run, do the
arguments fit the tool's schema) is checked by the view and the runs layer after the model.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from ninja import Schema
from pydantic import ConfigDict, Field, PlainValidator, model_validator
from pydantic_core import PydanticCustomError

JsonObject = dict[str, Any]


def _name_or_id(value: Any) -> str | int:
    # bool is an int to Python, not a name or an id to anyone.
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise PydanticCustomError("name_or_id", "must be a name or an id")


# One error for a wrong value, not one per member of `str | int` (whose locations would
# name the union's members, which are no part of the body).
NameOrId = Annotated[str | int, PlainValidator(_name_or_id, json_schema_input_type=str | int)]


class Body(Schema):
    """A request body, validated (see the module doc)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # What a field must be, in the API's words, when a bare type would say less
    # ("tools must be a list of tool names: tools[1] must be a string").
    expect: ClassVar[Mapping[str, str]] = {}
    # The error code of a wrong value of the field, where it is not "invalid_field"
    # (kept from the views' hand checks these models replaced).
    codes: ClassVar[Mapping[str, str]] = {}


def refuse(code: str, message: str, field: str) -> PydanticCustomError:
    """An error a model's own validator raises: the API answers it as it is."""
    return PydanticCustomError(code, message, {"api_field": field})


class StartRunBody(Body):
    endpoint: str = Field(min_length=1, description="The model endpoint's name or id")
    messages: list[JsonObject] = Field(min_length=1,
                                       description="The conversation, OpenAI format")
    tools: list[str] = Field(default=[], description="Tool names the model may call")
    policy: NameOrId | None = Field(default=None, description="Error policy name or id")
    policy_overrides: JsonObject | None = None
    parameters: JsonObject | None = Field(default=None, description="temperature, ...")
    breakpoints: list[JsonObject] | None = None

    expect = {"endpoint": "a name or an id", "tools": "a list of tool names",
              "messages": "a list of message objects, each with a role (OpenAI format)"}


class RerunBody(Body):
    snapshot: Literal["same", "current"] = "same"
    mode: Literal["as_it_was", "current"] | None = Field(
        default=None, description="The older spelling of snapshot")
    model: Literal["recorded", "live"] = "live"
    tools: Literal["recorded", "live", "mock"] = "live"
    on_divergence: Literal["stop", "live"] = "stop"


class ForkBody(Body):
    round: int = Field(description="Start from the conversation before this round (1-based)")
    messages: list[JsonObject] | None = Field(
        default=None, description="That conversation as edited; left out: inherited")
    append: list[JsonObject] | None = None
    endpoint: str | None = None
    tools: list[str] | None = None
    policy: NameOrId | None = None
    parameters: JsonObject | None = None
    policy_overrides: JsonObject | None = None
    snapshot: Literal["same", "current"] = "same"

    expect = {"round": "a round of the run (an integer from 1)",
              "endpoint": "a name or an id", "tools": "a list of tool names"}


class DecisionBody(Body):
    call_id: str = Field(min_length=1, description="The tool call's id")
    decision: Literal["approve", "reject", "edit"]
    arguments: JsonObject | None = Field(default=None, description="Required for edit")
    message: str = ""

    expect = {"call_id": "a tool call's id", "arguments": "a JSON object"}
    codes = {"call_id": "missing_field", "arguments": "invalid_arguments"}

    @model_validator(mode="after")
    def _edit_has_arguments(self) -> Self:
        if self.decision == "edit" and self.arguments is None:
            raise refuse("missing_field", "an edit needs 'arguments' (a JSON object)",
                         "arguments")
        return self


class ContinueBody(Body):
    step: Literal["run", "call", "round", "abort"] = "run"
    arguments: dict[str, JsonObject] | None = Field(
        default=None, description="Edited arguments of held calls: call id -> object")
    message: str = ""

    expect = {"arguments": "an object mapping call ids to argument objects"}


class ExecuteBody(Body):
    arguments: JsonObject = Field(description="The arguments to run the tool with")
    approve: bool = False

    expect = {"arguments": "a JSON object"}
    codes = {"arguments": "invalid_arguments"}


class TryBody(Body):
    arguments: JsonObject = {}

    expect = {"arguments": "a JSON object"}
    codes = {"arguments": "invalid_arguments"}


class ErrorDetail(Schema):
    code: str
    message: str
    field: str | None = Field(default=None, description="The field or filter at fault")
    problems: Any = Field(default=None, description="Details, e.g. per JSON pointer")


class ErrorResponse(Schema):
    error: ErrorDetail


class Created(Schema):
    id: str
    status: str
    url: str
    parent: str | None = None


class Queued(Schema):
    id: int
    number: int
    state: str
    url: str


# -- the registry (api/registry.py) ------------------------------------------------------
# Typed by JSON type only: what a value must be (a kind, a URL, a schema, a configuration)
# is the admin's form's to say (web/registry_forms.py), so both say it alike. Fields left
# out keep their value (an update) or the model's default (a creation).

# The field json_schema hides ninja's Schema.json_schema() (the deprecated .schema()'s
# helper, which nothing here calls); pydantic's warning about it is silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json_schema"')

    class ToolPatchBody(Body):
        name: str | None = None
        kind: str | None = Field(default=None, description="http or mock (python tools come "
                                 "from code, mcp tools from syncing their server)")
        description: str | None = None
        json_schema: Any = Field(default=None, description="The arguments' JSON schema")
        config: Any = Field(default=None, description="The kind's configuration; credentials "
                            "in headers as env:NAME")
        return_behavior: str | None = Field(default=None,
                                            description="to_llm, immediate or immediate_if_last")
        strict: bool | None = None
        timeout_seconds: float | None = Field(default=None,
                                              description="null: the policy's default timeout")
        requires_approval: bool | None = None
        idempotent: bool | None = None
        isolated: bool | None = Field(default=None, description="Python tools only: run "
                                      "each call in a separate worker process")
        enabled: bool | None = None

    class ToolBody(ToolPatchBody):
        name: str = Field(min_length=1)
        kind: str = Field(min_length=1, description="http or mock (python tools come from "
                          "code, mcp tools from syncing their server)")
        # Declared again: inherited, its default would be the method it hides.
        json_schema: Any = Field(default=None, description="The arguments' JSON schema")


class EndpointPatchBody(Body):
    name: str | None = None
    kind: str | None = Field(default=None, description="openai, openai_responses, "
                             "anthropic, gemini, openai_compatible or scripted")
    model: str | None = None
    base_url: str | None = None
    stream: bool | None = None
    api_key_env: str | None = Field(default=None, description="The NAME of the environment "
                                    "variable holding the key, never the key")
    extra_headers: Any = Field(default=None, description="Header -> value; credentials as "
                               "env:NAME")
    default_parameters: Any = None
    proxy_url: str | None = Field(default=None, description="http(s)://host:port or env:NAME")
    timeout_seconds: float | None = None
    script: Any = Field(default=None, description="A scripted endpoint's steps")


class EndpointBody(EndpointPatchBody):
    name: str = Field(min_length=1)
    kind: str = Field(min_length=1, description="openai, openai_responses, anthropic, "
                      "gemini, openai_compatible or scripted")


class McpServerPatchBody(Body):
    name: str | None = None
    transport: str | None = Field(default=None, description="stdio or http")
    command: str | None = None
    args: Any = Field(default=None, description="stdio: the command's arguments")
    env: Any = Field(default=None, description="stdio: variables; credentials as env:NAME")
    url: str | None = None
    headers: Any = Field(default=None, description="http: headers; credentials as env:NAME")
    tool_prefix: str | None = None
    startup_timeout: float | None = None
    call_timeout: float | None = None
    enabled: bool | None = None


class McpServerBody(McpServerPatchBody):
    name: str = Field(min_length=1)
