"""The Try it form's field tree (tools/schema_form.py): what a schema's form holds
(nested objects, arrays, enums, required marks, defaults, descriptions), what it
starts with, and the schemas that fall back to raw JSON, each saying where and why."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from tools_app.tools.schema_form import MAX_DEPTH, initial_arguments, schema_form

ORDER = {
    "type": "object",
    "required": ["customer", "items"],
    "properties": {
        "customer": {"type": "object", "description": "Who orders",
                     "required": ["name"],
                     "properties": {"name": {"type": "string"},
                                    "vip": {"type": "boolean", "default": False}}},
        "items": {"type": "array", "items": {
            "type": "object", "required": ["sku"],
            "properties": {"sku": {"type": "string"},
                           "quantity": {"type": "integer", "default": 1}}}},
        "shipping": {"enum": ["standard", "express", None], "default": "standard"},
        "note": {"type": ["string", "null"]},
        "weight": {"type": "number", "minimum": 0},
    },
}


def test_a_nested_schema_becomes_fieldsets_lists_selects_and_inputs() -> None:
    form = schema_form(ORDER)
    assert form.problem is None
    tree = form.tree
    assert tree is not None
    props = {p["name"]: p for p in tree["properties"]}
    assert list(props) == ["customer", "items", "shipping", "note", "weight"]
    customer = props["customer"]
    assert (customer["kind"], customer["required"], customer["description"]) == (
        "object", True, "Who orders")
    assert [(p["name"], p["kind"], p["required"]) for p in customer["properties"]] == [
        ("name", "string", True), ("vip", "boolean", False)]
    assert customer["properties"][1]["default"] is False
    items = props["items"]
    assert (items["kind"], items["required"], items["items"]["kind"]) == ("array", True, "object")
    assert [(p["name"], p["required"], p.get("default")) for p in items["items"]["properties"]] == [
        ("sku", True, None), ("quantity", False, 1)]
    assert (props["shipping"]["kind"], props["shipping"]["options"]) == (
        "enum", ["standard", "express", None])
    assert (props["note"]["kind"], props["note"]["nullable"]) == ("string", True)
    assert (props["weight"]["kind"], props["weight"]["required"]) == ("number", False)


def test_a_fresh_form_holds_the_defaults_and_required_containers() -> None:
    tree = schema_form(ORDER).tree
    assert tree is not None
    assert initial_arguments(tree) == {"customer": {"vip": False}, "items": [],
                                       "shipping": "standard"}


class Place(BaseModel):
    lat: float
    lon: float | None = None


class Forecast(BaseModel):
    place: Place = Field(description="Where")
    days: int = 3
    unit: Literal["C", "F"] = "C"
    note: str | None = None


def test_pydantic_schemas_with_defs_and_optional_values_have_a_form() -> None:
    form = schema_form(Forecast.model_json_schema())
    assert form.problem is None
    assert form.tree is not None
    place, days, unit, note = form.tree["properties"]
    assert (place["kind"], place["description"], place["required"]) == ("object", "Where", True)
    assert [p["name"] for p in place["properties"]] == ["lat", "lon"]
    assert place["properties"][1]["nullable"] is True
    assert (days["kind"], days["default"]) == ("integer", 3)
    assert (unit["kind"], unit["options"], unit["default"]) == ("enum", ["C", "F"], "C")
    assert (note["kind"], note["nullable"]) == ("string", True)
    # An optional argument whose default is null is left out rather than sent as null.
    assert initial_arguments(form.tree) == {"place": {}, "days": 3, "unit": "C"}


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "object", "properties": {"x": {"oneOf": [{"type": "string"},
                                                       {"type": "integer"}]}}},
     "/properties/x: oneOf has no form"),
    ({"type": "object", "patternProperties": {"^a": {"type": "string"}}},
     "(root): patternProperties has no form"),
    ({"type": "object", "properties": {"m": {"type": "object",
                                             "additionalProperties": {"type": "string"}}}},
     "/properties/m: additionalProperties with a schema (a map of any keys) has no form"),
    ({"type": "object", "properties": {"node": {"$ref": "#/$defs/Node"}},
      "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}},
     "/properties/node/properties/next: $ref #/$defs/Node is recursive"),
    ({"type": "object", "properties": {"r": {"$ref": "https://example.com/s.json"}}},
     "/properties/r: $ref 'https://example.com/s.json' is not a reference inside the schema"),
    ({"type": "object", "properties": {"v": {"type": ["string", "integer"]}}},
     "/properties/v: a value of several types (string, integer) has no form"),
    ({"type": "object", "properties": {"any": {}}},
     "/properties/any: a value of any type has no form"),
    ({"type": "object", "properties": {"t": {"type": "array", "prefixItems": [{}]}}},
     "/properties/t: prefixItems has no form"),
    ({"type": "object", "properties": {"e": {"enum": [{"a": 1}]}}},
     "/properties/e: an enum of objects or arrays has no form"),
    ({"type": "string"}, "(root): the arguments are not described as an object"),
])
def test_schemas_a_form_cannot_express_fall_back_to_json_saying_where(
        schema: dict[str, Any], problem: str) -> None:
    form = schema_form(schema)
    assert (form.tree, form.problem) == (None, problem)


def test_a_schema_nested_too_deeply_has_no_form() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 1):
        schema = {"type": "object", "properties": {"a": schema}}
    form = schema_form(schema)
    assert form.tree is None
    assert form.problem is not None
    assert f"nested deeper than {MAX_DEPTH} levels" in form.problem
