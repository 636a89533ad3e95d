"""How a run executes each kind of tool: one builder per kind, in one table.

`EXECUTOR_BUILDERS` maps a ToolRegistration kind to the function that turns the
tool's frozen snapshot into an engine executor; adding a kind is one entry. Every
kind but Python is wrapped in the engine's SchemaValidatingExecutor, so its arguments
are checked against the tool's JSON schema (Draft 2020-12) before it runs, and a
violation goes through the policy's arguments-error handling exactly as for a Python
tool (whose signature's pydantic model validates instead).

Builders get what the runs layer decides in a `ToolContext` (how secrets are read,
where outbound calls may go, the shared HTTP clients) and report the secret values
they use, which the run redacts from everything it records.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pydantic import BaseModel, ValidationError

from tools_app.engine import (
    FunctionToolExecutor,
    SchemaValidatingExecutor,
    ToolExecutor,
    ToolSpecification,
)
from tools_app.engine.isolation import (
    IsolatedFunctionExecutor,
    IsolationSettings,
    isolated_pool,
)
from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.providers.http.clients import SharedHttpClients
from tools_app.engine.sources import HttpConfig, HttpToolExecutor, MockConfig, MockToolExecutor
from tools_app.runs.snapshot.mcp import mcp_executor
from tools_app.runs.snapshot.model import ToolSnapshot

SecretReader = Callable[[str], str]
"""An environment variable's NAME -> its value; ValueError saying why it cannot be read."""


@dataclass(frozen=True)
class ToolContext:
    read_secret: SecretReader
    outbound: OutboundPolicy
    clients: SharedHttpClients | None = None


@dataclass(frozen=True)
class BuiltExecutor:
    executor: ToolExecutor
    secrets: tuple[str, ...] = ()
    """Secret values the executor sends somewhere: redacted from the run's records."""


ExecutorBuilder = Callable[[ToolSnapshot, ToolContext], BuiltExecutor]


def build_executor(tool: ToolSnapshot, specification: ToolSpecification,
                   context: ToolContext) -> BuiltExecutor:
    """The executor of a snapshotted tool, schema-validated unless it is Python."""
    builder = EXECUTOR_BUILDERS.get(tool.kind)
    if builder is None:
        raise ImproperlyConfigured(
            f"Tool {tool.name!r} is of kind {tool.kind!r}, which this version cannot run")
    built = builder(tool, context)
    if tool.kind == "python":
        return built
    return BuiltExecutor(SchemaValidatingExecutor(specification, built.executor),
                         built.secrets)


def import_tool_function(path: str) -> Callable[..., Any]:
    module_name, _, attr = path.rpartition(".")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImproperlyConfigured(f"Cannot import tool function {path!r}: {exc}") from exc
    if not callable(func):
        raise ImproperlyConfigured(f"{path!r} is not callable")
    return func  # type: ignore[no-any-return]


def tool_config[C: BaseModel](tool: ToolSnapshot, model: type[C]) -> C:
    """The tool's `config` as `model`; a configuration that no longer validates (saved
    before a check existed, edited in the database) stops the run saying why."""
    try:
        return model.model_validate(tool.config)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}"
                             for e in exc.errors())
        raise ImproperlyConfigured(
            f"Tool {tool.name!r} has an invalid {tool.kind} configuration: {problems}"
        ) from exc


def isolation_settings() -> IsolationSettings:
    """The isolated tools' worker pool as the AGENTFORGE_ISOLATED_TOOL_* settings say."""
    return IsolationSettings(workers=settings.AGENTFORGE_ISOLATED_TOOL_WORKERS,
                             memory_mb=settings.AGENTFORGE_ISOLATED_TOOL_MEMORY_MB,
                             env_allow=tuple(settings.AGENTFORGE_ISOLATED_TOOL_ENV))


def _python(tool: ToolSnapshot, context: ToolContext) -> BuiltExecutor:
    func = import_tool_function(tool.python_path)
    if tool.isolated:
        isolation = isolation_settings()
        isolated_pool(isolation).prestart()  # the workers start while the model thinks
        return BuiltExecutor(IsolatedFunctionExecutor(func, settings=isolation))
    return BuiltExecutor(FunctionToolExecutor(func))


def _mock(tool: ToolSnapshot, context: ToolContext) -> BuiltExecutor:
    return BuiltExecutor(MockToolExecutor(tool_config(tool, MockConfig)))


def _http(tool: ToolSnapshot, context: ToolContext) -> BuiltExecutor:
    config = tool_config(tool, HttpConfig)
    # Read now, so their values are known to the redaction before anything is recorded;
    # one that cannot be read fails each call that needs it (a tool error on the
    # timeline), not the whole run.
    values: dict[str, str] = {}
    problems: dict[str, str] = {}
    for name in config.secret_variables():
        try:
            values[name] = context.read_secret(name)
        except ValueError as exc:
            problems[name] = str(exc)

    def resolve(name: str) -> str:
        if name in values:
            return values[name]
        raise ValueError(problems.get(name, f"{name} is not a header variable of this tool"))

    executor = HttpToolExecutor(config, outbound=context.outbound, resolve_secret=resolve,
                                clients=context.clients)
    return BuiltExecutor(executor, tuple(values.values()))


def _mcp(tool: ToolSnapshot, context: ToolContext) -> BuiltExecutor:
    executor, secrets = mcp_executor(tool)
    return BuiltExecutor(executor, secrets)


EXECUTOR_BUILDERS: dict[str, ExecutorBuilder] = {
    "python": _python,
    "mock": _mock,
    "http": _http,
    "mcp": _mcp,
}
