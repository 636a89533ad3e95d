"""JSON Schema -> Gemini's schema subset, on hand-written schemas and on the schemas
@tool derives from real signatures (nested models, optionals, enums)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from tools_app.engine import tool, tool_specification_from
from tools_app.engine.providers.gemini_schema import GeminiSchemaError, to_gemini_schema


class Unit(StrEnum):
    C = "celsius"
    F = "fahrenheit"


class Place(BaseModel):
    city: str = Field(description="City name")
    country: str | None = None


class Trip(BaseModel):
    stops: list[Place]
    budget: float | None = Field(default=None, ge=0)


@tool
def plan_trip(trip: Trip, unit: Unit = Unit.C, mode: Literal["fast", "cheap"] = "fast",
              nights: Annotated[int, Field(ge=1, le=30)] = 2) -> str:
    """Plan a trip."""
    return "ok"


@tool
def ping() -> str:
    return "pong"


def test_a_schema_derived_from_a_signature_is_converted_with_refs_inlined() -> None:
    spec = tool_specification_from(plan_trip)

    converted = to_gemini_schema(spec.name, spec.parameters)

    place = {"type": "OBJECT", "properties": {
        "city": {"type": "STRING", "description": "City name"},
        "country": {"type": "STRING", "nullable": True}}, "required": ["city"]}
    assert converted == {"type": "OBJECT", "required": ["trip"], "properties": {
        "trip": {"type": "OBJECT", "required": ["stops"], "properties": {
            "stops": {"type": "ARRAY", "items": place},
            "budget": {"type": "NUMBER", "minimum": 0, "nullable": True}}},
        "unit": {"type": "STRING", "enum": ["celsius", "fahrenheit"]},
        "mode": {"type": "STRING", "enum": ["fast", "cheap"]},
        "nights": {"type": "INTEGER", "minimum": 1, "maximum": 30}}}
    assert "$defs" not in str(converted)
    assert "default" not in str(converted)


def test_a_tool_without_arguments_has_no_parameters() -> None:
    spec = tool_specification_from(ping)

    assert to_gemini_schema(spec.name, spec.parameters) is None


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": ["string", "null"]}, {"type": "STRING", "nullable": True}),
    ({"type": ["string", "integer"]}, {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]},
     {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}),
    ({"allOf": [{"type": "boolean"}], "description": "flag"},
     {"type": "BOOLEAN", "description": "flag"}),
    ({"const": "only"}, {"type": "STRING", "enum": ["only"]}),
    ({"type": "string", "format": "date-time"}, {"type": "STRING", "format": "date-time"}),
    ({"type": "string", "format": "uri", "title": "Link"}, {"type": "STRING"}),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"type": "OBJECT"}),
    ({"type": "integer", "exclusiveMinimum": 0, "multipleOf": 2, "x-order": 1},
     {"type": "INTEGER"}),
])
def test_keywords_are_mapped_or_dropped(schema: dict[str, Any],
                                        expected: dict[str, Any]) -> None:
    wrapped = {"type": "object", "properties": {"value": schema}}

    converted = to_gemini_schema("t", wrapped)

    assert converted == {"type": "OBJECT", "properties": {"value": expected}}


@pytest.mark.parametrize(("schema", "keyword", "path"), [
    ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not",
     ".properties.a"),
    ({"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2]}}}, "enum",
     ".properties.a"),
    ({"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{}]}}},
     "prefixItems", ".properties.a"),
    ({"type": "object", "properties": {"a": {"allOf": [{"type": "string"},
                                                       {"minLength": 2}]}}}, "allOf",
     ".properties.a"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/x.json"}}}, "$ref",
     ".properties.a"),
    ({"type": "object", "properties": {"a": {"type": "null"}}}, "type", ".properties.a"),
    ({"type": "object", "properties": {"a": {"frobnicate": True}}}, "frobnicate",
     ".properties.a"),
])
def test_what_cannot_be_expressed_fails_naming_tool_keyword_and_place(
    schema: dict[str, Any], keyword: str, path: str
) -> None:
    with pytest.raises(GeminiSchemaError) as caught:
        to_gemini_schema("lookup", schema)

    message = str(caught.value)
    assert "tool 'lookup'" in message
    assert f"keyword {keyword!r}" in message
    assert path in message
    assert caught.value.keyword == keyword
    assert caught.value.retryable is False


def test_a_recursive_model_cannot_be_inlined() -> None:
    schema = {"type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": {"type": "object", "properties": {
                  "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}}

    with pytest.raises(GeminiSchemaError, match="#/\\$defs/Node is recursive"):
        to_gemini_schema("tree", schema)


async def test_the_adapter_refuses_before_sending_anything() -> None:
    from tools_app.engine import ChatRequest, ChatRequestParameters, ToolSpecification, UserMessage
    from tools_app.engine.providers.gemini import GeminiChatModel

    from .support import Replay

    replay = Replay([])
    spec = ToolSpecification(name="bad", parameters={
        "type": "object", "properties": {"x": {"if": {}, "then": {}}}})
    gemini = GeminiChatModel(model="gemini-2.5-flash", transport=replay.transport)

    with pytest.raises(GeminiSchemaError, match="tool 'bad': JSON Schema keyword 'if'"):
        await gemini.chat(ChatRequest(messages=(UserMessage(text="hi"),),
                                      parameters=ChatRequestParameters(tools=(spec,))))

    assert replay.requests == []
