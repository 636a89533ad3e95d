"""Tool definitions written as JSON, in any of the shapes users already have.

`tools_from_json` reads:
- an OpenAI Chat Completions `tools` array: `{"type": "function", "function": {...}}`;
- OpenAI Responses function tools: `{"type": "function", "name": ..., "parameters": ...}`;
- an Anthropic `tools` array: `{"name": ..., "input_schema": ...}`;
- an MCP `tools/list` result: `{"tools": [{"name", "description", "inputSchema"}]}`;
- or one tool of any of those shapes.
Every tool is checked before anything is returned, and every bad one is reported (in
one ToolDefinitionError), so a file is fixed in one pass: its schema must be an object
schema, valid against the Draft 2020-12 meta-schema, with no `$ref` leaving the
document; its name one providers accept; no name twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .arguments import json_pointer
from .errors import ToolDefinitionError
from .spec import TOOL_NAME_PATTERN, ToolSpecification

_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# Keywords whose value is a reference; one not starting with "#" leaves the document.
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


def tool_entries(data: Any) -> list[Any]:
    """The tool objects of `data` (parsed JSON, or JSON text), one per tool, in order
    (see the module)."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ToolDefinitionError([("(document)", f"not JSON: {exc}")]) from exc
    if isinstance(data, list):
        return list(data)
    if isinstance(data, Mapping) and "tools" in data and "name" not in data:
        tools = data["tools"]
        if not isinstance(tools, list):
            raise ToolDefinitionError([("(document)", '"tools" must be a list of tools')])
        return list(tools)
    return [data]


def tools_from_json(data: Any) -> list[ToolSpecification]:
    """The specifications of every tool in `data` (parsed JSON or JSON text; see the
    module), or a
    ToolDefinitionError listing every tool that cannot be used, with its reason."""
    entries = tool_entries(data)
    if not entries:
        raise ToolDefinitionError([("(document)", "it holds no tools")])
    specifications: list[ToolSpecification] = []
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        label = tool_label(index, entry)
        try:
            spec = tool_from_json(entry)
        except ToolDefinitionError as exc:
            problems += [(label, reason) for _, reason in exc.problems]
            continue
        if spec.name in seen:
            problems.append((label, f"the name {spec.name!r} is used by an earlier tool"))
        seen.add(spec.name)
        specifications.append(spec)
    if problems:
        raise ToolDefinitionError(problems)
    return specifications


def tool_from_json(entry: Any) -> ToolSpecification:
    """One tool object of any supported shape, checked (ToolDefinitionError if bad)."""
    label = tool_label(0, entry)
    if not isinstance(entry, Mapping):
        raise ToolDefinitionError([(label, "a tool must be a JSON object")])
    fields = _fields_of(entry)
    if isinstance(fields, str):
        raise ToolDefinitionError([(label, fields)])
    name, description, schema, strict = fields
    reasons = [*_name_problems(name), *_description_problems(description),
               *schema_problems(schema)]
    if reasons:
        raise ToolDefinitionError([(label, reason) for reason in reasons])
    return ToolSpecification(name=name, description=description or "",
                             parameters=dict(schema), strict=strict)


_Fields = tuple[Any, Any, Any, bool | None]


def _fields_of(entry: Mapping[str, Any]) -> _Fields | str:
    """(name, description, schema, strict) of a tool in whichever shape it is written,
    or why it is in none of them."""
    if entry.get("type") == "function" and "function" in entry:  # Chat Completions
        function = entry["function"]
        if not isinstance(function, Mapping):
            return '"function" must be an object'
        return _openai_fields(function)
    if entry.get("type") == "function":  # Responses
        return _openai_fields(entry)
    if "type" in entry and "input_schema" not in entry:
        # Anthropic's server tools (web_search_20250305, ...) and OpenAI's built-in and
        # custom (free-form) tools have a type and no JSON schema.
        return (f"tools of type {entry['type']!r} are provider built-ins or free-form "
                "tools, not functions with a JSON schema")
    if "input_schema" in entry:  # Anthropic
        return entry.get("name"), entry.get("description"), entry["input_schema"], None
    if "inputSchema" in entry:  # MCP
        return entry.get("name"), entry.get("description"), entry["inputSchema"], None
    return ('not a tool definition: expected an OpenAI {"type": "function", ...}, an '
            'Anthropic {"name", "input_schema"} or an MCP {"name", "inputSchema"} object')


def _openai_fields(function: Mapping[str, Any]) -> _Fields:
    # OpenAI lets a function without arguments leave "parameters" out.
    schema = function.get("parameters", _EMPTY_OBJECT_SCHEMA)
    strict = function.get("strict")
    return (function.get("name"), function.get("description"), schema,
            strict if isinstance(strict, bool) else None)


def _name_problems(name: Any) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["it has no name"]
    if not TOOL_NAME_PATTERN.match(name):
        return [f"the name {name!r} is one providers reject: 1-64 characters from a-z, "
                "A-Z, 0-9, '_' and '-'"]
    return []


def _description_problems(description: Any) -> list[str]:
    if description is None or isinstance(description, str):
        return []
    return ["its description must be a string"]


def schema_problems(schema: Any) -> list[str]:
    """Why `schema` cannot be a tool's arguments schema (empty if it can)."""
    if not isinstance(schema, Mapping):
        return ["its schema is not an object schema: it must be a JSON object"]
    problems = []
    if schema.get("type") != "object":
        problems.append('its schema is not an object schema: "type" must be "object" '
                        "(tool arguments are always an object)")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = json_pointer(exc.absolute_path)
        problems.append(f"its schema is not a valid JSON Schema (Draft 2020-12) at "
                        f"{where or '(root)'}: {exc.message}")
    problems += [
        f"its schema has a remote $ref at {pointer}: {ref!r} (only references inside "
        "the schema, starting with '#', are allowed)"
        for pointer, ref in _remote_references(schema, [])
    ]
    return problems


def _remote_references(node: Any, path: list[str | int]) -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in _REFERENCE_KEYWORDS and isinstance(value, str) and \
                    not value.startswith("#"):
                yield json_pointer([*path, key]), value
            else:
                yield from _remote_references(value, [*path, key])
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _remote_references(item, [*path, index])


def tool_label(index: int, entry: Any) -> str:
    """How a problem names its tool: by name when it has one, else by position."""
    name = None
    if isinstance(entry, Mapping):
        inner = entry.get("function")
        name = inner.get("name") if isinstance(inner, Mapping) else entry.get("name")
    position = f"tool {index + 1}"
    return f"{position} ({name!r})" if isinstance(name, str) and name else position
