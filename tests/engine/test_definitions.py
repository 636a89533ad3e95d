"""Tool definitions from JSON (#12): every supported shape, every problem reported, and
argument validation against the schema with JSON pointers."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    ToolArgumentsError,
    ToolDefinitionError,
    ToolSpecification,
    tools_from_json,
)

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_openai_chat_completions_array() -> None:
    [spec] = tools_from_json([{"type": "function", "function": {
        "name": "weather", "description": "Forecast", "parameters": WEATHER_SCHEMA,
        "strict": True}}])
    assert spec == ToolSpecification(name="weather", description="Forecast",
                                     parameters=WEATHER_SCHEMA, strict=True)


def test_openai_responses_tool_and_one_without_parameters() -> None:
    specs = tools_from_json([
        {"type": "function", "name": "weather", "parameters": WEATHER_SCHEMA},
        {"type": "function", "function": {"name": "now"}},
    ])
    assert [s.name for s in specs] == ["weather", "now"]
    assert specs[1].parameters == {"type": "object", "properties": {}}


def test_anthropic_array_and_mcp_list_result_and_a_single_tool() -> None:
    anthropic = tools_from_json([{"name": "weather", "description": "d",
                                  "input_schema": WEATHER_SCHEMA}])
    mcp = tools_from_json({"tools": [{"name": "weather", "description": "d",
                                      "inputSchema": WEATHER_SCHEMA}]})
    single = tools_from_json({"name": "weather", "description": "d",
                              "inputSchema": WEATHER_SCHEMA})
    assert anthropic == mcp == single
    assert anthropic[0].parameters == WEATHER_SCHEMA


def test_every_bad_tool_is_listed_with_its_reason() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        tools_from_json([
            {"name": "fine", "input_schema": {"type": "object"}},
            {"name": "not_object", "input_schema": {"type": "string"}},
            {"name": "bad_schema", "input_schema": {"type": "object",
                                                    "properties": {"x": {"type": 7}}}},
            {"name": "remote", "input_schema": {"type": "object", "properties": {
                "x": {"$ref": "https://example.com/schema.json"}}}},
            {"name": "has space", "input_schema": {"type": "object"}},
            {"name": "fine", "input_schema": {"type": "object"}},
            {"name": "web_search", "type": "web_search_20250305"},
            "just a string",
        ])
    problems = dict(caught.value.problems)
    assert "not an object schema" in problems["tool 2 ('not_object')"]
    assert "not a valid JSON Schema (Draft 2020-12) at /properties/x/type" in \
        problems["tool 3 ('bad_schema')"]
    assert "remote $ref at /properties/x/$ref" in problems["tool 4 ('remote')"]
    assert "one providers reject" in problems["tool 5 ('has space')"]
    assert "used by an earlier tool" in problems["tool 6 ('fine')"]
    assert "provider built-ins" in problems["tool 7 ('web_search')"]
    assert "must be a JSON object" in problems["tool 8"]
    assert "tool 1 ('fine')" not in problems
    assert "7 problems" in str(caught.value)


def test_local_references_are_fine() -> None:
    schema = {"type": "object", "$defs": {"c": {"type": "string"}},
              "properties": {"city": {"$ref": "#/$defs/c"}}}
    [spec] = tools_from_json({"name": "t", "inputSchema": schema})
    assert spec.validate_arguments('{"city": "Paris"}') == {"city": "Paris"}
    with pytest.raises(ToolArgumentsError, match="/city: 3 is not of type 'string'"):
        spec.validate_arguments({"city": 3})


def test_an_empty_document_is_an_error() -> None:
    with pytest.raises(ToolDefinitionError, match="holds no tools"):
        tools_from_json([])


def test_json_text_is_read_too() -> None:
    [spec] = tools_from_json('[{"name": "t", "inputSchema": {"type": "object"}}]')
    assert spec.name == "t"
    with pytest.raises(ToolDefinitionError, match=r"\(document\): not JSON"):
        tools_from_json("[{")


SPEC = ToolSpecification(name="weather", parameters={
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1},
        "stops": {"type": "array", "items": {"type": "object", "properties": {
            "at": {"type": "string", "format": "date"}}, "required": ["at"]}},
    },
    "required": ["city"],
    "additionalProperties": False,
})


def test_valid_arguments_come_back_parsed() -> None:
    assert SPEC.validate_arguments('{"city": "Oslo", "days": 2}') == {"city": "Oslo", "days": 2}
    assert SPEC.validate_arguments({"city": "Oslo"}) == {"city": "Oslo"}


def test_every_violation_is_listed_with_its_json_pointer() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        SPEC.validate_arguments('{"days": 0, "stops": [{"at": "x"}, {}], "extra": 1}')
    message = str(caught.value)
    assert message.startswith("Invalid arguments for tool 'weather': ")
    for expected in ["(root): Additional properties are not allowed ('extra' was unexpected)",
                     "/city: 'city' is a required property",
                     "/days: 0 is less than the minimum of 1",
                     "/stops/0/at: 'x' is not a 'date'",  # formats are checked too
                     "/stops/1/at: 'at' is a required property"]:
        assert expected in message
    pointers = [error["pointer"] for error in caught.value.errors]
    assert pointers == ["", "/city", "/days", "/stops/0/at", "/stops/1/at"]


@pytest.mark.parametrize(("raw", "expected"), [
    ("not json", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"city": NaN}', "NaN is not allowed"),
])
def test_unparsable_arguments_are_argument_errors(raw: str, expected: str) -> None:
    with pytest.raises(ToolArgumentsError, match=expected):
        SPEC.validate_arguments(raw)


def test_a_validator_is_compiled_once_per_schema() -> None:
    from tools_app.engine.arguments import schema_validator

    copy: dict[str, Any] = dict(SPEC.parameters)
    assert schema_validator(SPEC.parameters) is schema_validator(copy)
