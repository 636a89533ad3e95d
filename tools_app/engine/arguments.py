"""A tool call's arguments: parsing the raw JSON, and validating it against a JSON Schema.

Parsing is the seed's ToolExecutionRequestUtil ("" / "{}" -> {}, invalid JSON or a
non-object -> ToolArgumentsError). Validation against a schema is for tools that have
only a schema (mock, HTTP, MCP, imported definitions): Python tools are validated by
the pydantic model of their signature instead (execution.FunctionToolExecutor).
Schemas are checked with jsonschema's Draft 2020-12 validator, compiled once per
schema and kept (`schema_validator`), and every violation is reported with the JSON
pointer (RFC 6901) of the value it concerns. String formats are checked too ("date",
"date-time", "time", "email", "uri", "uuid", "ipv4", ...: jsonschema's format checker;
"date-time" and "time" need rfc3339-validator, "uri" rfc3986-validator, both pinned
dependencies); a format it does not know passes, as the specification allows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaViolation
from referencing import Registry
from referencing.exceptions import Unresolvable

from .base_errors import ToolArgumentsError, ToolExecutionError


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    # Python's json module accepts NaN and Infinity; JSON does not, and neither can a
    # database's JSON column hold them.
    raise _NotJson(f"{name} is not allowed")


# Made once: json.loads() with any option builds a new decoder on every call.
_ARGUMENTS_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


class JsonTextError(ValueError):
    """Text a person typed that is not JSON; the message says where it broke."""


def _not_a_json_value(name: str) -> Any:
    raise JsonTextError(f"{name} is not a JSON value")


_TEXT_DECODER = json.JSONDecoder(parse_constant=_not_a_json_value)


def parse_json_text(text: str) -> Any:
    """Any JSON value typed by a person (edited arguments at an approval, a breakpoint,
    a re-execution, a try-it), NaN and Infinity refused as a database's JSON column
    would; a JsonTextError says what is wrong."""
    try:
        return _TEXT_DECODER.decode(text)
    except RecursionError as exc:
        raise JsonTextError("nested too deeply") from exc
    except JsonTextError:
        raise
    except ValueError as exc:  # json.JSONDecodeError
        raise JsonTextError(str(exc)) from exc


def _where(exc: json.JSONDecodeError) -> str:
    """The decoder's message with its position. Some messages already end in "at"
    ("Unterminated string starting at"): the position follows them directly."""
    at = " " if exc.msg.endswith(" at") else " at "
    return f"{exc.msg}{at}line {exc.lineno} column {exc.colno}"


def parse_arguments(arguments: str | None, tool_name: str) -> dict[str, Any]:
    """The raw arguments JSON of a call to `tool_name` as an object."""
    raw = (arguments or "").strip()
    if raw in ("", "{}", "null"):
        # "null" is what some OpenAI-compatible servers send for a no-argument call.
        return {}
    try:
        parsed = _ARGUMENTS_DECODER.decode(raw)
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(
            f"Arguments of tool '{tool_name}' are not valid JSON: {_where(exc)}",
            tool_name=tool_name,
        ) from exc
    except _NotJson as exc:
        raise ToolArgumentsError(
            f"Arguments of tool '{tool_name}' are not valid JSON: {exc}", tool_name=tool_name,
        ) from exc
    except RecursionError as exc:
        raise ToolArgumentsError(
            f"Arguments of tool '{tool_name}' are nested too deeply to parse",
            tool_name=tool_name,
        ) from exc
    if not isinstance(parsed, dict):
        raise ToolArgumentsError(
            f"Arguments of tool '{tool_name}' must be a JSON object, "
            f"got {type(parsed).__name__}",
            tool_name=tool_name,
        )
    return parsed


# An empty registry that retrieves nothing: a `$ref` to anything outside the schema is
# unresolvable, never fetched (tools_from_json refuses such schemas up front).
_NO_REMOTE_REFERENCES: Registry[Any] = Registry()


@functools.lru_cache(maxsize=1024)
def _compiled(canonical_schema: str) -> Draft202012Validator:
    schema = json.loads(canonical_schema)
    return Draft202012Validator(schema, registry=_NO_REMOTE_REFERENCES,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """The compiled Draft 2020-12 validator of `schema`, made once per distinct schema
    (specifications hold on to theirs as well, so this is paid once per tool)."""
    return _compiled(json.dumps(schema, sort_keys=True, separators=(",", ":")))


def json_pointer(path: Any) -> str:
    """RFC 6901 pointer of a path of keys and indexes ("" is the whole document)."""
    return "".join(
        "/" + str(part).replace("~", "~0").replace("/", "~1") for part in path
    )


_MESSAGE_LIMIT = 300


def _violation(error: SchemaViolation) -> dict[str, str]:
    pointer = json_pointer(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        # A missing property is best named by where it should have been.
        missing = [name for name in error.validator_value if name not in error.instance]
        if len(missing) == 1:
            pointer = json_pointer([*error.absolute_path, missing[0]])
    message = error.message
    if len(message) > _MESSAGE_LIMIT:  # messages quote the offending value, which may be huge
        message = message[:_MESSAGE_LIMIT] + "..."
    return {"pointer": pointer, "message": message, "keyword": str(error.validator)}


def validate_against_schema(
    validator: Draft202012Validator, arguments: dict[str, Any], tool_name: str
) -> dict[str, Any]:
    """`arguments` if they satisfy the schema, else a ToolArgumentsError that lists
    every violation with its JSON pointer."""
    try:
        violations = sorted(
            (_violation(error) for error in validator.iter_errors(arguments)),
            key=lambda v: (v["pointer"], v["keyword"]),
        )
    except Unresolvable as exc:
        # Not the model's fault: the tool's own schema points at something missing.
        raise ToolExecutionError(
            f"The schema of tool '{tool_name}' cannot be used: unresolvable reference "
            f"{getattr(exc, 'ref', '')!s}", tool_name=tool_name) from exc
    if not violations:
        return arguments
    problems = "; ".join(
        f"{v['pointer'] or '(root)'}: {v['message']}" for v in violations
    )
    raise ToolArgumentsError(
        f"Invalid arguments for tool '{tool_name}': {problems}",
        tool_name=tool_name,
        errors=[
            {"loc": v["pointer"].split("/")[1:], "pointer": v["pointer"], "msg": v["message"],
             "type": v["keyword"]}
            for v in violations
        ],
    )
