"""A run's frozen snapshot: built once at start, the only input a worker uses.

`build_snapshot` freezes endpoint (without secrets: only the NAME of the key's
environment variable), tools (with version hashes), policy values, input messages and
request parameters. `engine_for_snapshot` rebuilds the engine objects from it in any
worker process, reading the API key from the environment at that moment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured
from pydantic import TypeAdapter

from tools_app.engine import (
    ChatMessage,
    ChatModel,
    ChatRequestParameters,
    RegisteredTool,
    ReturnBehavior,
    ScriptedChatModel,
    ToolArgumentsError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionError,
    ToolService,
    ToolSpecification,
    execution_error_to_model,
    rethrow_arguments_error,
    tell_model_available_tools,
    throw_on_hallucinated_tool,
)
from tools_app.engine.errors import format_error_template
from tools_app.engine.execution import ToolExecutor
from tools_app.engine.providers.recorded import (
    RecordedChatModel,
    RecordedRound,
    RecordedToolExecutor,
)
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolKind, ToolRegistration
from tools_app.runs.loops.provider_clients import PROVIDER_CLIENTS

# Re-exported: they lived here before access.py, and other modules import them from here.
from tools_app.runs.snapshot.access import outbound_policy as outbound_policy
from tools_app.runs.snapshot.access import secret_variable_problem as secret_variable_problem
from tools_app.runs.snapshot.executors import BuiltExecutor, ToolContext, build_executor
from tools_app.runs.snapshot.executors import import_tool_function as import_tool_function
from tools_app.runs.snapshot.mcp import server_snapshot
from tools_app.runs.store.sanitize import clean_json

SNAPSHOT_VERSION = 1
_messages_adapter: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])

ENDPOINT_FIELDS = ("name", "kind", "base_url", "model", "default_parameters", "api_key_env",
                   "stream", "extra_headers", "proxy_url", "script")
TOOL_FIELDS = ("name", "description", "json_schema", "kind", "python_path", "config",
               "return_behavior", "strict", "timeout_seconds", "requires_approval",
               "idempotent", "version_hash")
POLICY_FIELDS = ("name", "arguments_error", "arguments_error_template", "execution_error",
                 "execution_error_template", "hallucinated_tool", "max_round_trips",
                 "default_tool_timeout", "parallel", "max_concurrency", "provider_max_retries")


def build_snapshot(
    *,
    endpoint: ModelEndpoint,
    tools: Sequence[ToolRegistration],
    policy: ErrorPolicy,
    messages: Sequence[ChatMessage],
    parameters: ChatRequestParameters,
) -> dict[str, Any]:
    # PostgreSQL jsonb cannot hold NUL, and a pasted message may contain one: escape it
    # (only that: the run's input is never truncated).
    return clean_json({  # type: ignore[no-any-return]
        "version": SNAPSHOT_VERSION,
        "endpoint": endpoint_section(endpoint),
        "tools": [_tool_snapshot(t) for t in tools],
        "policy": policy_section(policy),
        "messages": _messages_adapter.dump_python(list(messages), mode="json"),
        "parameters": parameters_section(parameters),
    }, limit=sys.maxsize)


# One section each: a fork with another endpoint, tools, policy or parameters replaces
# just those sections of its parent's snapshot (runs/debugger/fork.py).
def endpoint_section(endpoint: ModelEndpoint) -> dict[str, Any]:
    return {"id": str(endpoint.pk)} | _fields(endpoint, ENDPOINT_FIELDS)


def tools_section(tools: Sequence[ToolRegistration]) -> list[dict[str, Any]]:
    return clean_json([_tool_snapshot(t) for t in tools],  # type: ignore[no-any-return]
                      limit=sys.maxsize)


def policy_section(policy: ErrorPolicy) -> dict[str, Any]:
    return {"id": policy.pk} | _fields(policy, POLICY_FIELDS)


def parameters_section(parameters: ChatRequestParameters) -> dict[str, Any]:
    return parameters.model_dump(mode="json", exclude_none=True, exclude={"tools"})


def _tool_snapshot(tool: ToolRegistration) -> dict[str, Any]:
    entry = {"id": str(tool.pk)} | _fields(tool, TOOL_FIELDS)
    if tool.kind == ToolKind.MCP:
        entry |= server_snapshot(tool)  # the server's configuration, frozen too
    return entry


def _fields(obj: object, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def dump_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as a snapshot stores them (NUL-escaped, never truncated)."""
    return clean_json(  # type: ignore[no-any-return]
        _messages_adapter.dump_python(list(messages), mode="json"), limit=sys.maxsize)


def snapshot_messages(snapshot: dict[str, Any]) -> list[ChatMessage]:
    return _messages_adapter.validate_python(snapshot["messages"])


def snapshot_parameters(snapshot: dict[str, Any]) -> ChatRequestParameters:
    defaults = ChatRequestParameters.model_validate(snapshot["endpoint"]["default_parameters"])
    given = ChatRequestParameters.model_validate(snapshot["parameters"])
    return defaults.override_with(given)


@dataclass(frozen=True)
class RunEngine:
    model: ChatModel
    service: ToolService
    secrets: tuple[str, ...]


def engine_for_snapshot(snapshot: dict[str, Any]) -> RunEngine:
    """The engine a run uses. A snapshot with a "replay" section (a rerun replaying a
    recording, or `manage.py replay_fixture`) answers from its recording where it says
    so (see `replay_model` and `_executor`)."""
    policy = snapshot["policy"]
    model, secrets = _model_of(snapshot)
    service = ToolService(
        max_tool_calling_round_trips=policy["max_round_trips"],
        parallel=policy["parallel"],
        max_concurrency=policy["max_concurrency"],
        default_timeout=policy["default_tool_timeout"],
        arguments_error_handler=_arguments_handler(policy),
        execution_error_handler=_execution_handler(policy),
        hallucinated_tool_strategy=(
            tell_model_available_tools if policy["hallucinated_tool"] == "tell_model"
            else throw_on_hallucinated_tool
        ),
    )
    replay = snapshot.get("replay")
    tool_secrets: list[str] = []
    for tool in snapshot["tools"]:
        registered, used = _registered_tool(tool, replay)
        service.register(registered)
        tool_secrets += used
    return RunEngine(model=model, service=service, secrets=(*secrets, *tool_secrets))


def _model_of(snapshot: dict[str, Any]) -> tuple[ChatModel, tuple[str, ...]]:
    replay = snapshot.get("replay")
    if replay is not None and replay["model"] == "recorded":
        return replay_model(snapshot, replay)
    return chat_model_for(snapshot["endpoint"],
                          max_retries=snapshot["policy"]["provider_max_retries"],
                          prelude_ai_messages=_prelude(snapshot))


def _prelude(snapshot: dict[str, Any]) -> int:
    """The starting conversation's assistant messages that are not the endpoint's own:
    a fork's inherited rounds are (a script plays on after them), unless the fork went on
    with another endpoint ("own_rounds": 0; that one's script starts at its beginning)."""
    fork = snapshot.get("fork") or {}
    own = int(fork.get("own_rounds", fork.get("inherited_rounds", 0)))
    return sum(1 for m in snapshot["messages"] if m["type"] == "ai") - own


def replay_model(snapshot: dict[str, Any],
                 replay: dict[str, Any]) -> tuple[ChatModel, tuple[str, ...]]:
    """The recorded model; with on_divergence "live", the endpoint's model behind it."""
    live: ChatModel | None = None
    secrets: tuple[str, ...] = ()
    if replay["on_divergence"] == "live":
        live, secrets = chat_model_for(
            snapshot["endpoint"], max_retries=snapshot["policy"]["provider_max_retries"],
            prelude_ai_messages=_prelude(snapshot))
    model = RecordedChatModel(recorded_rounds(replay["rounds"]),
                              prelude_messages=len(snapshot["messages"]), live=live)
    return model, secrets


_rounds_adapter: TypeAdapter[list[RecordedRound]] = TypeAdapter(list[RecordedRound])


def recorded_rounds(rounds: list[dict[str, Any]]) -> list[RecordedRound]:
    """The recording's rounds as the engine's replay reads them (the export format's
    rounds: extra fields are ignored)."""
    return _rounds_adapter.validate_python(rounds)


def chat_model_for(
    endpoint: dict[str, Any], *, max_retries: int, prelude_ai_messages: int = 0,
) -> tuple[ChatModel, tuple[str, ...]]:
    """The ChatModel of an endpoint config, and the secret values it uses (to redact).
    `prelude_ai_messages`: assistant messages of the starting conversation (a script
    plays its steps after them)."""
    if endpoint["kind"] == "scripted":
        return ScriptedChatModel(endpoint["script"], stream=endpoint["stream"],
                                 model_name=endpoint["model"] or "scripted",
                                 prelude_ai_messages=prelude_ai_messages), ()
    from tools_app.engine.providers.registry import build_chat_model

    api_key = _api_key(endpoint)
    headers = {k: _header_value(endpoint, v)
               for k, v in (endpoint["extra_headers"] or {}).items()}
    proxy = _proxy(endpoint)
    model = build_chat_model(
        endpoint["kind"],
        base_url=endpoint["base_url"] or None,
        model=endpoint["model"],
        api_key=api_key,
        stream=endpoint["stream"],
        extra_headers=headers,
        proxy=proxy,
        outbound=outbound_policy(),
        clients=PROVIDER_CLIENTS,
        max_retries=max_retries,
    )
    proxy_secrets = (proxy, urlsplit(proxy).password) if proxy else ()
    secrets = tuple(s for s in (api_key, *headers.values(), *proxy_secrets) if s)
    return model, secrets


def _secret_from_environment(endpoint: dict[str, Any], name: str) -> str | None:
    if problem := secret_variable_problem(name):
        raise ImproperlyConfigured(f"Endpoint {endpoint['name']!r}: {problem}")
    return os.environ.get(name)


def _api_key(endpoint: dict[str, Any]) -> str | None:
    name = endpoint["api_key_env"]
    if not name:
        return None
    value = _secret_from_environment(endpoint, name)
    if not value:
        raise ImproperlyConfigured(
            f"Endpoint {endpoint['name']!r} reads its API key from the environment variable "
            f"{name}, which is not set in the worker's environment"
        )
    return value


def _proxy(endpoint: dict[str, Any]) -> str | None:
    """The endpoint's own proxy, or None to let the environment's proxy variables decide.
    `env:NAME` is read now (a proxy URL with credentials is never stored)."""
    value = endpoint.get("proxy_url") or ""  # snapshots from before proxies had none
    if not value.startswith("env:"):
        return value or None
    name = value[4:]
    found = _secret_from_environment(endpoint, name)
    if not found:
        raise ImproperlyConfigured(
            f"Endpoint {endpoint['name']!r} reads its proxy from the environment variable "
            f"{name}, which is not set in the worker's environment")
    return found


def _header_value(endpoint: dict[str, Any], value: str) -> str:
    """Header values written as env:NAME are read from the environment (not stored)."""
    if isinstance(value, str) and value.startswith("env:"):
        return _secret_from_environment(endpoint, value[4:]) or ""
    return str(value)


def _registered_tool(tool: dict[str, Any],
                     replay: dict[str, Any] | None) -> tuple[RegisteredTool, tuple[str, ...]]:
    """The tool as the engine registers it, and the secret values its executor uses."""
    spec = ToolSpecification(
        name=tool["name"], description=tool["description"], parameters=tool["json_schema"],
        strict=tool["strict"] or None,
    )
    executor, secrets = _executor(tool, spec, replay)
    registered = RegisteredTool(
        specification=spec,
        executor=executor,
        return_behavior=ReturnBehavior(tool["return_behavior"]),
        timeout=tool["timeout_seconds"],
        idempotent=tool["idempotent"],
        requires_approval=tool["requires_approval"],
    )
    return registered, secrets


def _executor(tool: dict[str, Any], spec: ToolSpecification,
              replay: dict[str, Any] | None) -> tuple[ToolExecutor, tuple[str, ...]]:
    """The tool's own executor (any kind), or the recording, with the live executor
    behind it only if a divergence goes on live: recorded and mock tools never build
    (so never import) the tool's code."""
    mode = "live" if replay is None else replay["tools"]
    if mode == "live":
        built = live_executor(tool, spec)
        return built.executor, built.secrets
    assert replay is not None
    live: ToolExecutor | None = None
    secrets: tuple[str, ...] = ()
    if mode == "recorded" and replay["on_divergence"] == "live":
        built = live_executor(tool, spec)
        live, secrets = built.executor, built.secrets
    recorded = RecordedToolExecutor(recorded_rounds(replay["rounds"]),
                                    mode="mock" if mode == "mock" else "recorded", live=live)
    return recorded, secrets


def live_executor(tool: dict[str, Any], spec: ToolSpecification) -> BuiltExecutor:
    context = ToolContext(read_secret=_tool_secret, outbound=outbound_policy(),
                          clients=PROVIDER_CLIENTS)
    return build_executor(tool, spec, context)


def _tool_secret(name: str) -> str:
    """A credential a tool's configuration names, read now from the environment, under
    the same rule as endpoints' (AGENTFORGE_SECRET_ENV_ALLOW)."""
    if problem := secret_variable_problem(name):
        raise ValueError(problem)
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"the environment variable {name} is not set in the worker's "
                         "environment")
    return value


def _format(template: str, request_name: str, error: Exception, arguments: str) -> str:
    # Capped (engine.errors): a stored template cannot multiply the text it is given.
    return format_error_template(template, {"tool": request_name, "error": str(error),
                                            "arguments": arguments})


def _arguments_handler(policy: dict[str, Any]) -> Any:
    if policy["arguments_error"] != "to_model":
        return rethrow_arguments_error
    template = policy["arguments_error_template"]

    def policy_arguments_to_model(
        error: ToolArgumentsError, context: ToolErrorContext
    ) -> ToolErrorHandlerResult:
        req = context.request
        return ToolErrorHandlerResult.text(_format(template, req.name, error, req.arguments))

    return policy_arguments_to_model


def _execution_handler(policy: dict[str, Any]) -> Any:
    if policy["execution_error"] != "to_model":

        def policy_execution_rethrow(
            error: ToolExecutionError, context: ToolErrorContext
        ) -> ToolErrorHandlerResult:
            raise error

        return policy_execution_rethrow
    template = policy["execution_error_template"]
    if template == "{error}":
        return execution_error_to_model

    def policy_execution_to_model(
        error: ToolExecutionError, context: ToolErrorContext
    ) -> ToolErrorHandlerResult:
        req = context.request
        return ToolErrorHandlerResult.text(_format(template, req.name, error, req.arguments))

    return policy_execution_to_model
