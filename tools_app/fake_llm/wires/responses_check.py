"""Strict mode for POST /v1/responses: what the real Responses API refuses, with its
messages (as reported by its users' recorded errors): unknown body fields, fewer than 16
max_output_tokens, a strict tool (the default) whose schema strict mode cannot take,
input items of
an unknown type or missing a required field, a function_call_output whose call was never
made, a function_call left without its output, and the reasoning rules that apply when
items are not stored (`store: false`): a reasoning item is sent back with its
`encrypted_content` (else it is looked up, and not found: HTTP 404), is followed by the
item it preceded, and a function_call item that names its id comes with its reasoning
item."""

from __future__ import annotations

from typing import Any

from .base import WireError

# The body fields of POST /v1/responses (the openai SDK's ResponseCreateParams, 2026).
REQUEST_FIELDS = frozenset({
    "access_programs", "background", "background_options", "context_management",
    "conversation", "image", "include", "input", "instructions", "max_output_tokens",
    "max_tool_calls", "metadata", "model", "moderation", "parallel_tool_calls",
    "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
    "stream", "stream_options", "temperature", "text", "tool_choice", "tools",
    "top_logprobs", "top_p", "truncation", "user",
})
INPUT_TYPES = (
    "message", "reasoning", "function_call", "function_call_output", "item_reference",
    "file_search_call", "web_search_call", "computer_call", "computer_call_output",
    "image_generation_call", "code_interpreter_call", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "custom_tool_call", "custom_tool_call_output",
    "compaction", "tool_search_call", "tool_search_output", "additional_tools", "program",
    "program_output",
)
_HEX = frozenset("0123456789abcdef")
_ROLES = ("user", "assistant", "system", "developer")
_REQUIRED = {"message": ("content",), "function_call": ("call_id", "name", "arguments"),
             "function_call_output": ("call_id", "output"), "reasoning": ("id", "summary")}


def check_request(body: dict[str, Any]) -> None:
    for key in body:
        if key not in REQUEST_FIELDS:
            raise WireError(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise WireError("Missing required parameter: 'model'.", param="model",
                        code="missing_required_parameter")
    tokens = body.get("max_output_tokens")
    if isinstance(tokens, int) and tokens < 16:
        raise WireError("Invalid 'max_output_tokens': integer below minimum value. Expected a "
                        f"value >= 16, but got {tokens} instead.", param="max_output_tokens",
                        code="integer_below_min_value")
    _check_tools(body.get("tools"))
    items = body.get("input")
    if isinstance(items, list):
        _check_items(items, stored=body.get("store") is not False)


def _check_tools(tools: Any) -> None:
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        if not tool.get("name"):
            raise WireError(f"Missing required parameter: 'tools[{index}].name'.",
                            param=f"tools[{index}].name", code="missing_required_parameter")
        if tool.get("strict") is not False:  # strict unless said otherwise
            _check_strict_schema(index, tool)


def _check_strict_schema(index: int, tool: dict[str, Any]) -> None:
    """What strict mode requires of the schema's top level (nested objects alike)."""
    schema = tool.get("parameters")
    if not isinstance(schema, dict):
        return
    where = f"Invalid schema for function '{tool['name']}': In context=()"
    param = f"tools[{index}].parameters"
    if schema.get("additionalProperties") is not False:
        raise WireError(f"{where}, 'additionalProperties' is required to be supplied and to "
                        "be false.", param=param, code="invalid_function_parameters")
    properties = schema.get("properties")
    missing = [k for k in properties if k not in (schema.get("required") or ())] \
        if isinstance(properties, dict) else []
    if missing:
        raise WireError(f"{where}, 'required' is required to be supplied and to be an array "
                        f"including every key in properties. Missing '{missing[0]}'.",
                        param=param, code="invalid_function_parameters")


def _check_items(items: list[Any], *, stored: bool) -> None:
    calls: dict[str, int] = {}  # call_id -> index of its function_call item
    answered: set[str] = set()
    reasoning_ids: set[str] = set()
    for index, item in enumerate(items):
        kind = _kind(index, item)
        _check_required(index, kind, item)
        if kind == "reasoning":
            _check_reasoning(index, item, items, stored=stored)
            reasoning_ids.add(str(item["id"]))
        elif kind == "function_call":
            _check_call_reasoning(item, reasoning_ids)
            calls[str(item["call_id"])] = index
        elif kind == "function_call_output":
            call_id = str(item["call_id"])
            if call_id not in calls:
                raise WireError("No tool call found for function call output with call_id "
                                f"{call_id}.", param="input")
            answered.add(call_id)
    for call_id in calls:
        if call_id not in answered:
            raise WireError(f"No tool output found for function call {call_id}.", param="input")


def _kind(index: int, item: Any) -> str:
    if not isinstance(item, dict):
        raise WireError(f"Invalid type for 'input[{index}]': expected an object, but got "
                        f"{type(item).__name__} instead.", param=f"input[{index}]",
                        code="invalid_type")
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in INPUT_TYPES:
        supported = ", ".join(f"'{t}'" for t in INPUT_TYPES)
        raise WireError(f"Invalid value: '{kind}'. Supported values are: {supported}.",
                        param=f"input[{index}]", code="invalid_value")
    if kind == "message" and item.get("role") not in _ROLES:
        supported = ", ".join(f"'{r}'" for r in _ROLES)
        raise WireError(f"Invalid value: '{item.get('role')}'. Supported values are: "
                        f"{supported}.", param=f"input[{index}].role", code="invalid_value")
    return str(kind)


def _check_required(index: int, kind: str, item: dict[str, Any]) -> None:
    for name in _REQUIRED.get(kind, ()):
        if item.get(name) is None:
            raise WireError(f"Missing required parameter: 'input[{index}].{name}'.",
                            param=f"input[{index}].{name}", code="missing_required_parameter")


def _check_reasoning(index: int, item: dict[str, Any], items: list[Any], *,
                     stored: bool) -> None:
    item_id = item["id"]
    if not stored and not item.get("encrypted_content"):
        raise WireError(f"Item with id '{item_id}' not found. Items are not persisted when "
                        "`store` is set to false. Try again with `store` set to true, or "
                        "remove this item from your input.", status=404, param="input")
    following = items[index + 1] if index + 1 < len(items) else None
    if not isinstance(following, dict) or following.get("type") == "reasoning" \
            or following.get("type") == "function_call_output" \
            or following.get("role") in ("user", "system", "developer"):
        raise WireError(f"Item '{item_id}' of type 'reasoning' was provided without its "
                        "required following item.", param="input")


def required_reasoning(call_item_id: str) -> str | None:
    """The reasoning item a function_call item this server issued must come back with:
    both share the response's id stem (see openai_responses.item_id)."""
    body = call_item_id.removeprefix("fc_")
    if len(body) != 52 or body == call_item_id or any(c not in _HEX for c in body):
        return None
    return f"rs_{body[:48]}0000"


def _check_call_reasoning(item: dict[str, Any], reasoning_ids: set[str]) -> None:
    call_item_id = item.get("id")
    needed = required_reasoning(call_item_id) if isinstance(call_item_id, str) else None
    if needed is not None and needed not in reasoning_ids:
        raise WireError(f"Item '{call_item_id}' of type 'function_call' was provided without "
                        f"its required 'reasoning' item: '{needed}'.", param="input")
