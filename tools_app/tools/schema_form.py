"""A tool's JSON schema as a form: the field tree the tool page's "Try it" form is drawn
from (`static/js/tryit.js`), or the reasons the schema cannot be one.

The browser draws the fields (with DOM calls, never HTML strings) from the tree made
here, so what the form can express is decided, and tested, in one place. A form covers
objects (fieldsets), arrays of one item schema (add and remove items), enums and consts
(a select), booleans (a checkbox), numbers, integers and strings; `type: [X, "null"]`
and `anyOf`/`oneOf` of one schema and `{"type": "null"}` (pydantic's optional
arguments) count as X; local `$ref`s (`#/$defs/...`, pydantic's nested models) are
followed. Anything else that changes which values are valid in a way a field cannot
show (oneOf, anyOf, allOf, not, if/then/else, patternProperties, additionalProperties
with a schema, prefixItems, a recursive $ref...) leaves the tool with the raw JSON
editor only, and the page says why. Validation constraints a field does not show
(minimum, pattern, ...) are still checked by the server when the form is submitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 8
MAX_FIELDS = 200  # beyond this a form is no easier than JSON

# Keywords that decide validity in ways a field cannot express.
UNSUPPORTED = ("oneOf", "anyOf", "allOf", "not", "if", "then", "else", "patternProperties",
               "dependentSchemas", "dependentRequired", "dependencies", "prefixItems",
               "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
               "$dynamicRef", "$recursiveRef")
SCALAR_KINDS = ("string", "integer", "number", "boolean")


class Unsupported(Exception):
    """The schema cannot be a form; `pointer` is where in the schema, the message why."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(f"{pointer or '(root)'}: {message}")
        self.pointer, self.message = pointer, message


@dataclass
class _Walk:
    root: Mapping[str, Any]
    fields: int = 0
    refs: list[str] = field(default_factory=list)  # the $refs being followed (recursion)


@dataclass(frozen=True)
class SchemaForm:
    """The field tree (a JSON-ready dict) or, if the schema cannot be a form, why not."""

    tree: dict[str, Any] | None
    problem: str | None


def schema_form(schema: Any) -> SchemaForm:
    """The form of a tool's argument schema (an object schema), or why there is none."""
    if not isinstance(schema, Mapping):
        return SchemaForm(None, "(root): the schema is not an object")
    try:
        tree = _field(schema, "", _Walk(root=schema), depth=0)
    except Unsupported as exc:
        return SchemaForm(None, str(exc))
    if tree["kind"] != "object":
        return SchemaForm(None, "(root): the arguments are not described as an object")
    return SchemaForm(tree, None)


def _field(schema: Any, pointer: str, walk: _Walk, *, depth: int) -> dict[str, Any]:
    """One field of the tree: kind, description, default and, by kind, its options,
    properties or item field."""
    if not isinstance(schema, Mapping):
        raise Unsupported(pointer, "a schema here is not an object (true/false schemas "
                                   "have no form)")
    if depth > MAX_DEPTH:
        raise Unsupported(pointer, f"nested deeper than {MAX_DEPTH} levels")
    walk.fields += 1
    if walk.fields > MAX_FIELDS:
        raise Unsupported(pointer, f"more than {MAX_FIELDS} fields")
    schema, nullable = _without_null(schema)
    if "$ref" in schema:
        return _followed(schema, pointer, walk, depth=depth) | (
            {"nullable": True} if nullable else {})
    found = [k for k in UNSUPPORTED if k in schema]
    if found:
        raise Unsupported(pointer, f"{found[0]} has no form")
    kind = _kind(schema, pointer)
    out: dict[str, Any] = {"kind": kind, "title": _text(schema.get("title")),
                           "description": _text(schema.get("description")),
                           "nullable": nullable}
    if "default" in schema:
        out["default"] = schema["default"]
    if kind == "enum":
        out["options"] = _options(schema, pointer)
    elif kind == "object":
        out["properties"] = _properties(schema, pointer, walk, depth=depth)
    elif kind == "array":
        if not isinstance(schema.get("items"), Mapping):
            raise Unsupported(pointer, "an array without one item schema has no form")
        out["items"] = _field(schema["items"], f"{pointer}/items", walk, depth=depth + 1)
    return out


def _followed(schema: Mapping[str, Any], pointer: str, walk: _Walk, *,
              depth: int) -> dict[str, Any]:
    """A local `$ref` (`#/...`) followed; its siblings' description and default kept."""
    ref = schema["$ref"]
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise Unsupported(pointer, f"$ref {ref!r} is not a reference inside the schema")
    if ref in walk.refs:
        raise Unsupported(pointer, f"$ref {ref} is recursive")
    target = _resolve(walk.root, ref, pointer)
    walk.refs.append(ref)
    try:
        walk.fields -= 1  # the reference and its target are one field
        out = _field(target, pointer, walk, depth=depth)
    finally:
        walk.refs.pop()
    for key in ("title", "description"):
        if schema.get(key):
            out[key] = _text(schema[key])
    if "default" in schema:
        out["default"] = schema["default"]
    return out


def _resolve(root: Mapping[str, Any], ref: str, pointer: str) -> Any:
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or key not in node:
            raise Unsupported(pointer, f"$ref {ref} points at nothing")
        node = node[key]
    return node


def _without_null(schema: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """`type: [X, "null"]` or `anyOf`/`oneOf` of X and null as X, and whether null is
    allowed too (an empty field then simply leaves the argument out)."""
    kind = schema.get("type")
    if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
        other = next(k for k in kind if k != "null")
        return {**schema, "type": other}, True
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if (isinstance(options, list) and len(options) == 2
                and {"type": "null"} in options):
            other = next(o for o in options if o != {"type": "null"})
            if isinstance(other, Mapping):
                rest = {k: v for k, v in schema.items() if k != key}
                return {**other, **rest}, True
    return schema, False


def _kind(schema: Mapping[str, Any], pointer: str) -> str:
    if "enum" in schema or "const" in schema:
        return "enum"
    kind = schema.get("type")
    if kind is None and "properties" in schema:
        return "object"
    if isinstance(kind, list):
        raise Unsupported(pointer, f"a value of several types ({', '.join(map(str, kind))}) "
                                   "has no form")
    if kind in ("object", "array", *SCALAR_KINDS):
        return str(kind)
    if kind is None:
        raise Unsupported(pointer, "a value of any type has no form")
    raise Unsupported(pointer, f"type {kind!r} has no form")


def _options(schema: Mapping[str, Any], pointer: str) -> list[Any]:
    options = schema["enum"] if "enum" in schema else [schema["const"]]
    if not isinstance(options, list) or not options:
        raise Unsupported(pointer, "enum is not a list of values")
    for value in options:
        if isinstance(value, (dict, list)):
            raise Unsupported(pointer, "an enum of objects or arrays has no form")
        if isinstance(value, float) and not math.isfinite(value):
            raise Unsupported(pointer, "an enum value is not a JSON number")
    return list(options)


def _properties(schema: Mapping[str, Any], pointer: str, walk: _Walk, *,
                depth: int) -> list[dict[str, Any]]:
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping) and extra:
        raise Unsupported(pointer, "additionalProperties with a schema (a map of any "
                                   "keys) has no form")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise Unsupported(pointer, "properties or required is malformed")
    return [{"name": name, "required": name in required,
             **_field(sub, f"{pointer}/properties/{_escape(name)}", walk, depth=depth + 1)}
            for name, sub in properties.items()]


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def initial_arguments(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a fresh form holds: every default, and required nested objects
    (and required arrays, empty) so their fields have a place."""
    value = _initial(tree, required=True)
    return value if isinstance(value, dict) else {}


_ABSENT = object()


def _initial(node: Mapping[str, Any], *, required: bool) -> Any:
    if "default" in node and not (node["default"] is None and not required):
        # An optional argument whose default is null is as good as left out.
        return node["default"]
    if node["kind"] == "object" and required:
        out: dict[str, Any] = {}
        for prop in node["properties"]:
            value = _initial(prop, required=prop["required"])
            if value is not _ABSENT:
                out[prop["name"]] = value
        return out
    if node["kind"] == "array" and required:
        return []
    return _ABSENT
