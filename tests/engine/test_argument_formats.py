"""String formats in a tool's schema are checked with the arguments ("format": "date",
"date-time", "email", "uri", ...), for every schema-only tool and for try-it: a value
that does not have its format is an arguments error at its JSON pointer."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.engine import (
    SchemaValidatingExecutor,
    ScriptedCall,
    ScriptedChatModel,
    ScriptStep,
    ToolArgumentsError,
    ToolService,
    ToolSpecification,
    UserMessage,
)
from tools_app.engine.arguments import schema_validator, validate_against_schema
from tools_app.engine.sources import MockToolExecutor


def schema(fmt: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"value": {"type": "string", "format": fmt}}}


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("date", "2026-03-01", "2026-02-30"),
    ("date", "2026-03-01", "next tuesday"),
    ("date-time", "2026-03-01T12:00:00Z", "2026-03-01 12:00"),  # needs rfc3339-validator
    ("time", "12:00:00+01:00", "noon"),  # needs rfc3339-validator
    ("email", "ada@example.com", "ada.example.com"),
    ("uri", "https://example.com/a?b=1", "example.com/a"),  # needs rfc3986-validator
    ("uuid", "00000000-0000-4000-8000-000000000001", "not-a-uuid"),
    ("ipv4", "192.0.2.1", "192.0.2.300"),
])
def test_a_value_must_have_its_format(fmt: str, good: str, bad: str) -> None:
    validator = schema_validator(schema(fmt))
    assert validate_against_schema(validator, {"value": good}, "t") == {"value": good}
    with pytest.raises(ToolArgumentsError) as raised:
        validate_against_schema(validator, {"value": bad}, "t")
    assert raised.value.errors == [{"loc": ["value"], "pointer": "/value",
                                    "msg": f"{bad!r} is not a {fmt!r}", "type": "format"}]


def test_a_format_the_checker_does_not_know_passes_and_formats_apply_to_strings_only() -> None:
    assert validate_against_schema(schema_validator(schema("made-up")), {"value": "x"}, "t")
    number = {"type": "object", "properties": {"n": {"type": "number", "format": "date"}}}
    assert validate_against_schema(schema_validator(number), {"n": 3}, "t") == {"n": 3}


async def test_a_model_call_with_a_malformed_date_is_an_arguments_error() -> None:
    spec = ToolSpecification(name="book", parameters={
        "type": "object", "required": ["day"],
        "properties": {"day": {"type": "string", "format": "date"}}})
    service = ToolService()  # the default arguments policy: stop the run
    service.tool(spec, SchemaValidatingExecutor(spec, MockToolExecutor({"result": "booked"})))
    model = ScriptedChatModel([
        ScriptStep(tool_calls=[ScriptedCall(name="book", arguments={"day": "2026-02-30"})])])
    with pytest.raises(ToolArgumentsError, match="/day: '2026-02-30' is not a 'date'"):
        await service.chat(model, [UserMessage(text="book")])
