"""Importing tool definitions (a JSON tools array in any shape engine.tools_from_json
reads) as mock or HTTP tools: all of them or none.

Every problem is collected before anything is written (a bad definition, a bad
configuration, a name already registered), each naming its tool, and the rows are
created in one transaction. A tool object may carry its own configuration under
`x-agentforge-config` (an HTTP tool needs its URL); the others get the default given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ..engine import ToolDefinitionError, ToolSpecification, tool_entries, tools_from_json
from ..engine.definitions import tool_from_json, tool_label
from ..models import ToolKind, ToolRegistration
from .kinds import SecretProblem, config_problems
from .registry import compute_version_hash, record_version

IMPORTABLE_KINDS = (ToolKind.MOCK, ToolKind.HTTP)
CONFIG_KEY = "x-agentforge-config"


class ToolImportError(Exception):
    """Nothing was imported; `problems` holds (tool, reason) for every problem found."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("\n".join(f"{tool}: {reason}" for tool, reason in problems))
        self.problems = problems


@dataclass(frozen=True)
class _Planned:
    spec: ToolSpecification
    config: dict[str, Any]


def import_tools(data: Any, *, kind: str, default_config: dict[str, Any] | None = None,
                 secret_problem: SecretProblem | None = None) -> list[ToolRegistration]:
    """Create a `kind` registration for every tool in `data` (parsed JSON), or raise
    ToolImportError listing every problem, having created none."""
    if kind not in IMPORTABLE_KINDS:
        raise ToolImportError([("(import)", f"tools are imported as mock or http, not {kind!r}")])
    planned, problems = _plan(data, kind, default_config or {}, secret_problem)
    if problems:
        raise ToolImportError(problems)
    with transaction.atomic():
        taken = set(ToolRegistration.objects.select_for_update()
                    .filter(name__in=[p.spec.name for p in planned])
                    .values_list("name", flat=True))
        if taken:
            raise ToolImportError([(name, "a tool of this name is already registered")
                                   for name in sorted(taken)])
        return [_create(item, kind) for item in planned]


def _plan(data: Any, kind: str, default_config: dict[str, Any],
          secret_problem: SecretProblem | None,
          ) -> tuple[list[_Planned], list[tuple[str, str]]]:
    """The tools to create, or every problem: of the definitions and of each tool's
    configuration (checked even when some definition is bad, so one pass shows all)."""
    problems: list[tuple[str, str]] = []
    entries: list[Any] = []
    specs: list[ToolSpecification] = []
    try:
        entries = tool_entries(data)
        specs = tools_from_json(data)
    except ToolDefinitionError as exc:
        problems += exc.problems
    configs = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue  # already a definition problem
        config = entry.get(CONFIG_KEY, default_config)
        configs.append(config)
        problems += [(tool_label(index, entry), f"configuration: {problem}")
                     for problem in config_problems(kind, config, secret_problem,
                                                    _parameters_of(entry))]
    if problems:
        return [], problems
    return [_Planned(spec, config) for spec, config in zip(specs, configs, strict=True)], []


def _parameters_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The tool's JSON schema (what a mock template may name), None if its definition
    is bad (reported as such)."""
    try:
        return tool_from_json(entry).parameters
    except ToolDefinitionError:
        return None


def _create(item: _Planned, kind: str) -> ToolRegistration:
    tool = ToolRegistration(
        name=item.spec.name, description=item.spec.description,
        json_schema=item.spec.parameters, kind=kind, config=item.config,
        strict=bool(item.spec.strict), enabled=True)
    tool.version_hash = compute_version_hash(tool)
    tool.save()
    record_version(tool)  # an imported tool's first definition version, as sync keeps
    return tool
