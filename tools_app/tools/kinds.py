"""The configuration of each kind of tool: which pydantic model checks a registration's
`config`, the problems shown field by field in the admin, and the help text, made from
the models' own field descriptions so it cannot drift from what is checked.

`CONFIG_MODELS` maps a kind to its model (adding a kind is one entry); the runs layer
builds executors from the same models (runs/snapshot/executors.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from ..engine.sources import HttpConfig, MockConfig
from ..engine.sources.mock import template_problems
from ..models import ToolKind

CONFIG_MODELS: dict[str, type[BaseModel]] = {
    ToolKind.MOCK: MockConfig,
    ToolKind.HTTP: HttpConfig,
}

# Header names that carry credentials: their values must come from the environment.
CREDENTIAL_HEADER_WORDS = ("authorization", "api-key", "apikey", "token", "secret", "cookie",
                           "password")

SecretProblem = Callable[[str], str | None]
"""Why a configuration may not read the environment variable NAME (None if it may)."""

_EXAMPLES: dict[str, dict[str, Any]] = {
    ToolKind.MOCK: {"template": True, "result": {"forecast": "Sunny in {city}"}},
    ToolKind.HTTP: {"method": "GET", "url": "https://api.example.com/weather/{city}",
                    "query": {"units": "units"},
                    "headers": {"Authorization": "env:WEATHER_API_TOKEN"},
                    "response": "/current"},
}


def config_problems(kind: str, config: Any, secret_problem: SecretProblem | None = None,
                    parameters: Mapping[str, Any] | None = None) -> list[str]:
    """Why `config` is not a valid configuration of a `kind` tool, one message a
    problem, each naming its field (empty if it is valid); with the tool's
    `parameters` (its JSON schema), also a mock template's placeholders that name no
    argument of it."""
    if kind == ToolKind.PYTHON:
        return [] if not config else ["Python tools have no configuration: leave it {}."]
    model = CONFIG_MODELS.get(kind)
    if model is None:
        return []  # a kind whose configuration another part of the app checks
    if not isinstance(config, dict):
        return ["The configuration must be a JSON object."]
    try:
        validated = model.model_validate(config)
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()]
    if isinstance(validated, HttpConfig):
        return _header_problems(validated, secret_problem)
    if isinstance(validated, MockConfig) and parameters is not None:
        return template_problems(validated, parameters)
    return []


def _header_problems(config: HttpConfig, secret_problem: SecretProblem | None) -> list[str]:
    problems = []
    for name, value in config.headers.items():
        secret = value.startswith("env:")
        if not secret and any(word in name.lower() for word in CREDENTIAL_HEADER_WORDS):
            problems.append(f"headers.{name}: it carries a credential: write env:VARIABLE_NAME "
                            "so the value is read from the environment and never stored.")
        elif secret and secret_problem and (problem := secret_problem(value[4:])):
            problems.append(f"headers.{name}: {problem}.")
    return problems


def config_help() -> str:
    """What each kind's configuration holds, for the admin's help text."""
    parts = ["Python tools: {} (none)."]
    for kind, model in CONFIG_MODELS.items():
        fields = "; ".join(
            f"{name}: {(field.description or '').rstrip('.')}"
            + (" (required)" if field.is_required() else
               f" (default {_default(field.default)})")
            for name, field in model.model_fields.items())
        example = json.dumps(_EXAMPLES.get(kind, {}))
        parts.append(f"{ToolKind(kind).label} tools: {fields}. Example: {example}")
    return "\n".join(parts)


def _default(value: Any) -> str:
    try:
        return json.dumps(value)
    except TypeError:  # a default factory's marker
        return "empty"
