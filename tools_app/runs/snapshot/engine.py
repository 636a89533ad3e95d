"""The engine of a run rebuilt from its snapshot, in any worker process: the chat model
(the API key read from the environment at that moment), the ToolService with the frozen
policy's handlers, and every tool's executor. A snapshot with a replay section answers
from its recording where it says so."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from tools_app.engine import (
    ChatModel,
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
from tools_app.engine.errors import (
    ToolArgumentsErrorHandler,
    ToolExecutionErrorHandler,
    format_error_template,
)
from tools_app.engine.execution import ToolExecutor
from tools_app.engine.providers.http.endpoint import EndpointSettings, attempt_timeouts
from tools_app.engine.providers.recorded import (
    RecordedChatModel,
    RecordedRound,
    RecordedToolExecutor,
)
from tools_app.runs.loops.provider_clients import PROVIDER_CLIENTS
from tools_app.runs.snapshot.access import outbound_policy, secret_variable_problem
from tools_app.runs.snapshot.executors import BuiltExecutor, ToolContext, build_executor
from tools_app.runs.snapshot.model import (
    EndpointSnapshot,
    PolicySnapshot,
    ReplaySection,
    RunSnapshot,
    ToolSnapshot,
)


@dataclass(frozen=True)
class RunEngine:
    model: ChatModel
    service: ToolService
    secrets: tuple[str, ...]


def engine_for_snapshot(snapshot: RunSnapshot) -> RunEngine:
    """The engine a run uses. A snapshot with a replay section (a rerun replaying a
    recording, or `manage.py replay_fixture`) answers from its recording where it says
    so (see `replay_model` and `_executor`)."""
    policy = snapshot.policy
    # The recording, parsed once for the model and every tool that answers from it.
    recording = snapshot.replay.rounds if snapshot.replay else []
    model, secrets = _model_of(snapshot, recording)
    # A cap counts dollars, so it needs a price: without one it does not apply (the
    # run page says so).
    price = snapshot.billed_price()
    service = ToolService(
        max_tool_calling_round_trips=policy.max_round_trips,
        parallel=policy.parallel,
        max_concurrency=policy.max_concurrency,
        default_timeout=policy.default_tool_timeout,
        arguments_error_handler=_arguments_handler(policy),
        execution_error_handler=_execution_handler(policy),
        hallucinated_tool_strategy=(
            tell_model_available_tools if policy.hallucinated_tool == "tell_model"
            else throw_on_hallucinated_tool
        ),
        loop_health=policy.loop_health(),
        price=price,
        cost_cap_usd=policy.cost_cap_usd if price is not None else None,
    )
    tool_secrets: list[str] = []
    for tool in snapshot.tools:
        registered, used = _registered_tool(tool, snapshot.replay, recording)
        service.register(registered)
        tool_secrets += used
    return RunEngine(model=model, service=service, secrets=(*secrets, *tool_secrets))


def _model_of(snapshot: RunSnapshot,
              recording: list[RecordedRound]) -> tuple[ChatModel, tuple[str, ...]]:
    if snapshot.replay is not None and snapshot.replay.model == "recorded":
        return replay_model(snapshot, snapshot.replay, recording)
    return chat_model_for(snapshot.endpoint, max_retries=snapshot.policy.provider_max_retries,
                          prelude_ai_messages=_prelude(snapshot))


def _prelude(snapshot: RunSnapshot) -> int:
    """The starting conversation's assistant messages that are not the endpoint's own:
    a fork's inherited rounds are (a script plays on after them), unless the fork went on
    with another endpoint (that one's script starts at its beginning)."""
    own = snapshot.fork.scripted_rounds_before() if snapshot.fork is not None else 0
    return sum(1 for m in snapshot.messages if m["type"] == "ai") - own


def replay_model(snapshot: RunSnapshot, replay: ReplaySection,
                 recording: list[RecordedRound]) -> tuple[ChatModel, tuple[str, ...]]:
    """The recorded model; with on_divergence "live", the endpoint's model behind it."""
    live: ChatModel | None = None
    secrets: tuple[str, ...] = ()
    if replay.on_divergence == "live":
        live, secrets = chat_model_for(
            snapshot.endpoint, max_retries=snapshot.policy.provider_max_retries,
            prelude_ai_messages=_prelude(snapshot))
    model = RecordedChatModel(recording, prelude_messages=len(snapshot.messages), live=live)
    return model, secrets


def chat_model_for(
    endpoint: EndpointSnapshot, *, max_retries: int, prelude_ai_messages: int = 0,
) -> tuple[ChatModel, tuple[str, ...]]:
    """The ChatModel of a frozen endpoint, and the secret values it uses (to redact).
    `prelude_ai_messages`: assistant messages of the starting conversation (a script
    plays its steps after them)."""
    if endpoint.kind == "scripted":
        return ScriptedChatModel(endpoint.script, stream=endpoint.stream,
                                 model_name=endpoint.model or "scripted",
                                 prelude_ai_messages=prelude_ai_messages), ()
    from tools_app.engine.providers.registry import build_chat_model

    settings = endpoint_settings(endpoint, max_retries=max_retries)
    proxy = settings.proxy
    proxy_secrets = (proxy, urlsplit(proxy).password) if proxy else ()
    secrets = tuple(s for s in (settings.api_key, *settings.extra_headers.values(),
                                *proxy_secrets) if s)
    return build_chat_model(endpoint.kind, settings), secrets


def endpoint_settings(endpoint: EndpointSnapshot, *, max_retries: int) -> EndpointSettings:
    """The frozen endpoint as the engine calls it, built once here and handed down whole:
    credentials read from the worker's environment now, the process's shared HTTP
    clients, the outbound policy, the endpoint's per-attempt timeout."""
    connect_timeout, read_timeout = attempt_timeouts(endpoint.timeout_seconds)
    return EndpointSettings(
        model=endpoint.model,
        base_url=endpoint.base_url or None,
        api_key=_api_key(endpoint),
        stream=endpoint.stream,
        extra_headers={k: _header_value(endpoint, v)
                       for k, v in endpoint.extra_headers.items()},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_retries=max_retries,
        proxy=_proxy(endpoint),
        outbound=outbound_policy(),
        clients=PROVIDER_CLIENTS,
    )


def _secret_from_environment(endpoint: EndpointSnapshot, name: str) -> str | None:
    if problem := secret_variable_problem(name):
        raise ImproperlyConfigured(f"Endpoint {endpoint.name!r}: {problem}")
    return os.environ.get(name)


def _api_key(endpoint: EndpointSnapshot) -> str | None:
    name = endpoint.api_key_env
    if not name:
        return None
    value = _secret_from_environment(endpoint, name)
    if not value:
        raise ImproperlyConfigured(
            f"Endpoint {endpoint.name!r} reads its API key from the environment variable "
            f"{name}, which is not set in the worker's environment"
        )
    return value


def _proxy(endpoint: EndpointSnapshot) -> str | None:
    """The endpoint's own proxy, or None to let the environment's proxy variables decide.
    `env:NAME` is read now (a proxy URL with credentials is never stored)."""
    value = endpoint.proxy_url or ""
    if not value.startswith("env:"):
        return value or None
    name = value[4:]
    found = _secret_from_environment(endpoint, name)
    if not found:
        raise ImproperlyConfigured(
            f"Endpoint {endpoint.name!r} reads its proxy from the environment variable "
            f"{name}, which is not set in the worker's environment")
    return found


def _header_value(endpoint: EndpointSnapshot, value: str) -> str:
    """Header values written as env:NAME are read from the environment (not stored)."""
    if isinstance(value, str) and value.startswith("env:"):
        return _secret_from_environment(endpoint, value[4:]) or ""
    return str(value)


def _registered_tool(tool: ToolSnapshot, replay: ReplaySection | None,
                     recording: list[RecordedRound]) -> tuple[RegisteredTool, tuple[str, ...]]:
    """The tool as the engine registers it, and the secret values its executor uses."""
    spec = ToolSpecification(
        name=tool.name, description=tool.description, parameters=tool.json_schema,
        strict=tool.strict or None,
    )
    executor, secrets = _executor(tool, spec, replay, recording)
    registered = RegisteredTool(
        specification=spec,
        executor=executor,
        return_behavior=ReturnBehavior(tool.return_behavior),
        timeout=tool.timeout_seconds,
        idempotent=tool.idempotent,
        requires_approval=tool.requires_approval,
    )
    return registered, secrets


def _executor(tool: ToolSnapshot, spec: ToolSpecification, replay: ReplaySection | None,
              recording: list[RecordedRound]) -> tuple[ToolExecutor, tuple[str, ...]]:
    """The tool's own executor (any kind), or the recording, with the live executor
    behind it only if a divergence goes on live: recorded and mock tools never build
    (so never import) the tool's code."""
    mode = replay.tool_modes.get(tool.name, replay.tools) if replay is not None else "live"
    if replay is None or mode == "live":
        built = live_executor(tool, spec)
        return built.executor, built.secrets
    live: ToolExecutor | None = None
    secrets: tuple[str, ...] = ()
    if mode == "recorded" and replay.on_divergence == "live":
        built = live_executor(tool, spec)
        live, secrets = built.executor, built.secrets
    recorded = RecordedToolExecutor(recording, mode="mock" if mode == "mock" else "recorded",
                                    live=live)
    return recorded, secrets


def live_executor(tool: ToolSnapshot, spec: ToolSpecification) -> BuiltExecutor:
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


def _arguments_handler(policy: PolicySnapshot) -> ToolArgumentsErrorHandler:
    if policy.arguments_error != "to_model":
        return rethrow_arguments_error
    template = policy.arguments_error_template

    def policy_arguments_to_model(
        error: ToolArgumentsError, context: ToolErrorContext
    ) -> ToolErrorHandlerResult:
        req = context.request
        return ToolErrorHandlerResult.text(_format(template, req.name, error, req.arguments))

    return policy_arguments_to_model


def _execution_handler(policy: PolicySnapshot) -> ToolExecutionErrorHandler:
    if policy.execution_error != "to_model":

        def policy_execution_rethrow(
            error: ToolExecutionError, context: ToolErrorContext
        ) -> ToolErrorHandlerResult:
            raise error

        return policy_execution_rethrow
    template = policy.execution_error_template
    if template == "{error}":
        return execution_error_to_model

    def policy_execution_to_model(
        error: ToolExecutionError, context: ToolErrorContext
    ) -> ToolErrorHandlerResult:
        req = context.request
        return ToolErrorHandlerResult.text(_format(template, req.name, error, req.arguments))

    return policy_execution_to_model
