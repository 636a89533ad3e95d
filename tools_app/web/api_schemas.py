"""The JSON API's request bodies and common answers as pydantic (django-ninja) schemas.

Each body model is the one its view parses the body with (`api.parse_body` finds it on
the URL's view, `api_docs.documented`), and the one `GET /api/openapi.json` shows. The
fields' types are the contract; the views still check each field themselves, so a
wrong value gets the API's own error (code, message naming the field) rather than
pydantic's. Unknown fields are ignored, as they always were (except by try: its view
names them).
"""

from __future__ import annotations

from typing import Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field

JsonObject = dict[str, Any]


class Body(Schema):
    """A request body: its fields are documented, not enforced here (see the module doc)."""

    # Parsing must never refuse what the view answers with its own error (constructed,
    # not validated). "allow": the document says unknown fields are ignored, as they are.
    model_config = ConfigDict(extra="allow")

    @classmethod
    def parse(cls, body: JsonObject) -> JsonObject:
        """Read the body with this model; the view gets it as sent (its checks need the
        raw values, and a dump of wrong-typed values would change them)."""
        # Only the model's own fields: a sent key such as "_fields_set" would otherwise
        # reach model_construct's parameters.
        cls.model_construct(**{name: body[name] for name in cls.model_fields if name in body})
        return body


class StartRunBody(Body):
    endpoint: str = Field(description="The model endpoint's name or id")
    messages: list[JsonObject] = Field(description="The conversation, OpenAI format")
    tools: list[str] = Field(default=[], description="Tool names the model may call")
    policy: str | int | None = Field(default=None, description="Error policy name or id")
    policy_overrides: JsonObject | None = None
    parameters: JsonObject | None = Field(default=None, description="temperature, ...")
    breakpoints: list[JsonObject] | None = None


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
    policy: str | int | None = None
    parameters: JsonObject | None = None
    policy_overrides: JsonObject | None = None
    snapshot: Literal["same", "current"] = "same"


class DecisionBody(Body):
    call_id: str = Field(description="The tool call's id")
    decision: Literal["approve", "reject", "edit"]
    arguments: JsonObject | None = Field(default=None, description="Required for edit")
    message: str = ""


class ContinueBody(Body):
    step: Literal["run", "call", "round", "abort"] = "run"
    arguments: dict[str, JsonObject] | None = Field(
        default=None, description="Edited arguments of held calls: call id -> object")
    message: str = ""


class ExecuteBody(Body):
    arguments: JsonObject = Field(description="The arguments to run the tool with")
    approve: bool = False


class TryBody(Body):
    model_config = ConfigDict(extra="forbid")  # its view names an unknown field (a 400)

    arguments: JsonObject = {}


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
