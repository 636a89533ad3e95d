"""Keep ToolRegistration rows in step with the @tool functions in the code.

For a Python tool the code is the source of truth: sync_tools() (run on every start by
`seed_demo`) writes what the decorator and the signature say, so an edit to a Python
tool's definition in the admin lasts until the next sync. The version hash identifies
a definition; a Run freezes it in its snapshot, so "which tool version did this run
use" has an answer even after the tool changed.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from ..engine import tool_specification_from, validate_specifications
from ..engine.spec import ToolOptions, is_tool, tool_functions_of, tool_options
from ..models import ToolKind, ToolRegistration, ToolVersion

# The fields a version hash covers, in ToolRegistration terms. `enabled` is not part
# of a definition: disabling a tool does not make it another version.
DEFINITION_FIELDS = (
    "name", "description", "json_schema", "kind", "python_path", "config",
    "return_behavior", "strict", "timeout_seconds", "requires_approval", "idempotent",
    "isolated",
)


# What a person may set on a Python tool in the admin and sync then keeps: the code
# gives their first values, and follows its own changes only where no one set them.
PERSON_FIELDS = ("timeout_seconds", "requires_approval", "idempotent", "isolated", "enabled")


# Config keys whose values are never kept in a version's definition (a version is shown
# to every user on the tool's page). The same words the admin refuses in plain headers.
SECRET_KEY_WORDS = ("authorization", "api-key", "api_key", "apikey", "token", "secret",
                    "cookie", "password", "credential")
REDACTED = "[redacted]"


class ToolSyncError(Exception):
    """The code and the registry disagree in a way sync must not resolve on its own."""


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # includes re-enabled tools
    # Tool name -> the fields a person set that sync kept although the code differs.
    kept: dict[str, list[str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kept = "".join(f"; kept as set in the admin: {name} ({', '.join(fields)})"
                       for name, fields in sorted(self.kept.items()))
        return (
            f"created {len(self.created)}, updated {len(self.updated)}, "
            f"unchanged {len(self.unchanged)}, disabled {len(self.disabled)}{kept}"
        )


def tool_definition(tool: ToolRegistration) -> dict[str, Any]:
    definition = {
        "name": tool.name,
        "description": tool.description,
        "schema": tool.json_schema,
        "kind": tool.kind,
        "python_path": tool.python_path,
        "config": tool.config,
        "return_behavior": tool.return_behavior,
        "strict": tool.strict,
        "timeout": tool.timeout_seconds,
        "requires_approval": tool.requires_approval,
        "idempotent": tool.idempotent,
    }
    # Only when set: the hashes of the definitions from before the option stay theirs.
    if tool.isolated:
        definition["isolated"] = True
    return definition


def compute_version_hash(tool: ToolRegistration) -> str:
    """sha256 of the definition as canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(
        tool_definition(tool), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def public_config(value: Any) -> Any:
    """`value` with the values under secret-looking keys replaced, at any depth. An
    `env:NAME` reference is kept: it names a variable, it is not the secret."""
    if isinstance(value, dict):
        return {key: _public_item(str(key), item) for key, item in value.items()}
    if isinstance(value, list):
        return [public_config(item) for item in value]
    return value


def _public_item(key: str, item: Any) -> Any:
    secret = any(word in key.lower() for word in SECRET_KEY_WORDS)
    if secret and not (isinstance(item, str) and item.startswith("env:")):
        return REDACTED  # all of it: a secret may be an object ({"value": ...}) too
    return public_config(item)


def version_definition(tool: ToolRegistration) -> dict[str, Any]:
    """What a ToolVersion keeps: the definition fields (the ones the hash covers, named
    as in run snapshots), config without secrets."""
    definition = {name: getattr(tool, name) for name in DEFINITION_FIELDS}
    definition["config"] = public_config(tool.config)
    return definition


def record_version(tool: ToolRegistration) -> ToolVersion:
    """Keep the saved registration's current definition as a version, unless that hash
    is already kept (a tool edited back to an earlier definition is that version
    again). Call it after every save of a registration: sync and the admin do."""
    version, _ = ToolVersion.objects.get_or_create(
        registration=tool, version_hash=tool.version_hash,
        defaults={"definition": version_definition(tool)})
    return version


def resolve_tool_function(python_path: str) -> Callable[..., Any]:
    """The @tool function at "module.function", or ValueError saying why not.

    Only @tool functions qualify: a bare importable callable such as `os.system`
    must never become something a model can call.
    """
    module_name, _, attribute = python_path.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"{python_path!r} is not of the form module.function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure means the tool cannot run
        raise ValueError(f"cannot import {module_name!r}: {exc}") from exc
    function = getattr(module, attribute, None)
    if function is None:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}")
    if not is_tool(function):
        raise ValueError(f"{python_path!r} is not decorated with @tool")
    return function  # type: ignore[no-any-return]


def registration_for(module_name: str, function: Callable[..., Any]) -> ToolRegistration:
    """An unsaved ToolRegistration describing one @tool function, hash included."""
    spec = tool_specification_from(function)
    validate_specifications([spec])
    options = tool_options(function) or ToolOptions()
    registration = ToolRegistration(
        name=spec.name,
        description=spec.description,
        json_schema=spec.parameters,
        kind=ToolKind.PYTHON,
        python_path=f"{module_name}.{function.__name__}",
        config={},
        return_behavior=options.return_behavior.value,
        strict=bool(spec.strict),
        timeout_seconds=options.timeout,
        requires_approval=options.requires_approval,
        idempotent=options.idempotent,
        isolated=options.isolated,
        enabled=True,
    )
    registration.version_hash = compute_version_hash(registration)
    return registration


def discover_tools(module_names: Iterable[str]) -> dict[str, ToolRegistration]:
    found: dict[str, ToolRegistration] = {}
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for function in tool_functions_of(module):
            registration = registration_for(module_name, function)
            other = found.get(registration.name)
            if other is not None:
                raise ToolSyncError(
                    f"tool {registration.name!r} is declared twice: by {other.python_path} "
                    f"and by {registration.python_path}"
                )
            found[registration.name] = registration
    return found


def sync_tools(modules: list[str] | None = None) -> SyncReport:
    """Register the @tool functions of `modules` (default: AGENTFORGE_TOOL_MODULES)."""
    module_names = list(settings.AGENTFORGE_TOOL_MODULES if modules is None else modules)
    wanted = discover_tools(module_names)
    report = SyncReport()
    with transaction.atomic():
        existing = {tool.name: tool for tool in ToolRegistration.objects.all()}
        _check_conflicts(wanted, existing)
        for name, target in wanted.items():
            row = existing.get(name)
            if row is None:
                target.save()
                record_version(target)
                report.created.append(name)
            elif _update(row, target, report):
                report.updated.append(name)
            else:
                report.unchanged.append(name)
        for row in existing.values():
            if row.name not in wanted and row.enabled and _is_gone(row, module_names):
                # Gone from the code: disabled whatever a person set (the tool cannot run).
                row.enabled = False
                row.save(update_fields=["enabled", "updated_at"])
                report.disabled.append(row.name)
    return report


def _check_conflicts(
    wanted: dict[str, ToolRegistration], existing: dict[str, ToolRegistration]
) -> None:
    # Checked before any write, so a conflict leaves the registry as it was.
    for name, target in wanted.items():
        row = existing.get(name)
        if row is None:
            continue
        if row.kind != ToolKind.PYTHON or row.python_path != target.python_path:
            where = row.python_path if row.kind == ToolKind.PYTHON else f"a {row.kind} tool"
            raise ToolSyncError(
                f"tool name {name!r} is already registered by {where}, so "
                f"{target.python_path} cannot use it: rename one of them, or delete the old "
                "registration in the admin"
            )


def _update(row: ToolRegistration, target: ToolRegistration, report: SyncReport) -> bool:
    """Bring `row` to `target`'s definition, but for the fields a person set in the
    admin (`edited_fields`), which keep their value; False (and no write) when already
    there."""
    edited = set(row.edited_fields or ()) & set(PERSON_FIELDS)
    kept = sorted(f for f in edited if getattr(row, f) != getattr(target, f))
    if kept:
        report.kept[row.name] = kept
    for name in edited:
        setattr(target, name, getattr(row, name))
    target.version_hash = compute_version_hash(target)
    current = compute_version_hash(row)
    if row.enabled == target.enabled and current == target.version_hash == row.version_hash:
        return False
    for name in (*DEFINITION_FIELDS, "enabled"):
        setattr(row, name, getattr(target, name))
    row.version_hash = target.version_hash
    row.save()
    record_version(row)
    return True


def _is_gone(row: ToolRegistration, scanned_modules: list[str]) -> bool:
    """Whether a Python tool missing from the scan no longer exists in the code."""
    if row.kind != ToolKind.PYTHON:
        return False
    if row.python_path.rpartition(".")[0] in scanned_modules:
        return True  # its module was scanned and the tool is not (or no longer) there
    try:
        resolve_tool_function(row.python_path)
    except ValueError:
        return True
    return False
