"""The no-script reply: arguments built from any tool's JSON schema."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel

from tools_app.engine import (
    FunctionToolExecutor,
    P,
    ToolExecutionRequest,
    tool,
    tool_specification_from,
)
from tools_app.fake_llm import sample_arguments
from tools_app.fake_llm.auto import options_from_model


class Unit(StrEnum):
    C = "celsius"
    F = "fahrenheit"


class Address(BaseModel):
    street: str
    number: int


@tool
def everything(
    city: Annotated[str, P("city", "City name")],
    unit: Unit,
    days: int,
    ratio: float,
    verbose: bool,
    tags: list[str],
    address: Address,
    note: str | None = None,
) -> str:
    """A tool whose schema uses enums, nested models ($ref), arrays and optionals."""
    return city


def test_arguments_from_a_pydantic_generated_schema_validate() -> None:
    schema = tool_specification_from(everything).parameters

    arguments = sample_arguments(schema)

    assert arguments == {
        "city": "city 1", "unit": "celsius", "days": 1, "ratio": 1.0, "verbose": True,
        "tags": ["tags 1"], "address": {"street": "street 1", "number": 1}, "note": None,
    }
    request = ToolExecutionRequest(id="c1", name="everything", arguments=json.dumps(arguments))
    FunctionToolExecutor(everything).validate(request)


def test_variants_differ_for_parallel_calls() -> None:
    schema = {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "n": {"type": "integer"}}}

    first, second = sample_arguments(schema, variant=0), sample_arguments(schema, variant=1)

    assert first == {"city": "city 1", "unit": "c", "n": 1}
    assert second == {"city": "city 2", "unit": "f", "n": 2}


def test_constraints_formats_and_openapi_types() -> None:
    schema = {"type": "OBJECT", "properties": {
        "when": {"type": "STRING", "format": "date"},
        "code": {"type": "string", "minLength": 12},
        "level": {"type": "integer", "minimum": 5, "maximum": 5},
        "fixed": {"const": "x"},
        "defaulted": {"type": "integer", "default": 42},
        "either": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
        "pair": {"type": "array", "items": {"type": "number"}, "minItems": 2},
    }}

    arguments = sample_arguments(schema)

    assert arguments == {"when": "2024-01-01", "code": "code 1xxxxxx", "level": 5,
                         "fixed": "x", "defaulted": 42, "either": True, "pair": [1.0, 1.0]}


def test_empty_or_odd_schemas_give_an_empty_object() -> None:
    assert sample_arguments({}) == {}
    assert sample_arguments({"type": "object"}) == {}
    assert sample_arguments({"$ref": "#/$defs/Missing"}) == {}


def test_model_name_options() -> None:
    parsed = options_from_model("fake-k3-p2-l50")
    plain = options_from_model("gpt-4o")

    assert parsed is not None
    options, latency = parsed
    assert (options.rounds, options.parallel, latency) == (3, 2, 50.0)
    assert plain is None
