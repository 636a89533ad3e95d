"""Freezing a run: its snapshot built once at start from the endpoint, tools (with version
hashes), policy, input messages and request parameters. The endpoint is frozen without
secrets: only the NAME of the key's environment variable. What it builds is the
`RunSnapshot` model (snapshot/model.py); the engine is rebuilt from it by
snapshot/engine.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from tools_app.engine import ChatMessage, ChatRequestParameters, UserMessage
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    PriceRevision,
    ToolKind,
    ToolRegistration,
)
from tools_app.runs.snapshot.mcp import server_snapshot
from tools_app.runs.snapshot.model import (
    EndpointSnapshot,
    PolicySnapshot,
    PriceSnapshot,
    RunSnapshot,
    ToolSnapshot,
    dump_messages_json,
)
from tools_app.runs.store.sanitize import NUL_REPLACEMENT, clean_json

ENDPOINT_FIELDS = ("name", "kind", "base_url", "model", "default_parameters", "api_key_env",
                   "stream", "extra_headers", "proxy_url", "script", "timeout_seconds")
TOOL_FIELDS = ("name", "description", "json_schema", "kind", "python_path", "config",
               "return_behavior", "strict", "timeout_seconds", "requires_approval",
               "idempotent", "isolated", "version_hash")
POLICY_FIELDS = ("name", "arguments_error", "arguments_error_template", "execution_error",
                 "execution_error_template", "hallucinated_tool", "max_round_trips",
                 "default_tool_timeout", "parallel", "max_concurrency", "provider_max_retries",
                 "run_timeout_seconds", "loop_repeat_at", "loop_repeat_action",
                 "loop_repeat_stop_at", "loop_ping_pong_at", "loop_ping_pong_action",
                 "loop_ping_pong_stop_at", "loop_no_progress_at", "loop_no_progress_action",
                 "loop_no_progress_stop_at")


def build_snapshot(
    *,
    endpoint: ModelEndpoint,
    tools: Sequence[ToolRegistration],
    policy: ErrorPolicy,
    messages: Sequence[ChatMessage],
    parameters: ChatRequestParameters,
) -> RunSnapshot:
    return RunSnapshot(
        endpoint=endpoint_section(endpoint),
        tools=tools_section(tools),
        policy=policy_section(policy),
        messages=dump_messages(messages),
        parameters=parameters_section(parameters),
        price=price_section(endpoint, parameters.model_name),
    )


# One section each: a fork with another endpoint, tools, policy or parameters replaces
# just those sections of its parent's snapshot (runs/debugger/fork.py). PostgreSQL jsonb
# cannot hold NUL, and a pasted message or a definition may contain one: each section is
# NUL-escaped (only that: nothing a run is given is truncated).
def endpoint_section(endpoint: ModelEndpoint) -> EndpointSnapshot:
    return EndpointSnapshot.model_validate(
        _escaped({"id": str(endpoint.pk)} | _fields(endpoint, ENDPOINT_FIELDS)))


def tools_section(tools: Sequence[ToolRegistration]) -> list[ToolSnapshot]:
    return [ToolSnapshot.model_validate(_escaped(_tool_snapshot(t))) for t in tools]


def policy_section(policy: ErrorPolicy) -> PolicySnapshot:
    # (The cost cap is not among POLICY_FIELDS, which run files must hold: a file
    # written before it existed imports. JSON holds the decimal as its exact text.)
    cap = policy.cost_cap_usd
    values = _fields(policy, POLICY_FIELDS) | {"cost_cap_usd": None if cap is None else str(cap)}
    return PolicySnapshot.model_validate(_escaped({"id": policy.pk} | values))


def price_section(endpoint: ModelEndpoint, model_name: str | None = None
                  ) -> PriceSnapshot | None:
    """The price revision in force now for the model the run calls (its `model_name`
    parameter, else the endpoint's model): the endpoint's price for that model, else
    its price for "its model" (blank). None: no price (an unsaved endpoint, a try-it's,
    has none)."""
    if endpoint.pk is None or endpoint._state.adding:
        return None
    model = model_name or endpoint.model
    revision = (PriceRevision.objects.filter(price__endpoint_id=endpoint.pk,
                                             price__model__in={model, ""})
                .order_by("-price__model", "-id").select_related("price").first())
    if revision is None:
        return None
    return PriceSnapshot(revision=revision.pk, model=revision.price.model or model,
                         input_per_million=revision.input_per_million,
                         cached_input_per_million=revision.cached_input_per_million,
                         output_per_million=revision.output_per_million)


def parameters_section(parameters: ChatRequestParameters) -> dict[str, Any]:
    return _escaped(parameters.model_dump(mode="json", exclude_none=True, exclude={"tools"}))


def _tool_snapshot(tool: ToolRegistration) -> dict[str, Any]:
    entry = {"id": str(tool.pk)} | _fields(tool, TOOL_FIELDS)
    if tool.kind == ToolKind.MCP:
        entry |= server_snapshot(tool)  # the server's configuration, frozen too
    return entry


def _fields(obj: object, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def _escaped[T](value: T) -> T:
    return clean_json(value, limit=sys.maxsize)  # type: ignore[no-any-return]


def dump_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as a snapshot stores them (NUL-escaped, never truncated)."""
    return _escaped(dump_messages_json(list(messages)))


TITLE_LENGTH = 200


def run_title(messages: Sequence[ChatMessage]) -> str:
    """A run's title: its last user message, on one line, cut to fit. The last, not the
    first: a conversation pasted or forked goes on from its latest request."""
    last = next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)
    text = " ".join((last.text if last else "").split()).replace("\x00", NUL_REPLACEMENT)
    return text[:TITLE_LENGTH - 3] + "..." if len(text) > TITLE_LENGTH else text
