"""MCP servers in runs: the server configuration frozen into a run's snapshot, the
executor built from it, and "sync" (a server's tools -> registrations).

A registration of kind "mcp" names its server and the remote tool in `config`:
`{"server": "<McpServer name>", "tool": "<remote name>", "annotations": {...}}`. The
server's configuration is frozen into the snapshot at run start (`server_snapshot`),
with its env:NAME references as references: they are read from the worker's
environment when the engine is built (`server_config`), under the same rules as an
endpoint's credentials (AGENTFORGE_SECRET_ENV_ALLOW), so a secret is never stored,
shown or exported.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.utils import timezone

from tools_app.engine.sources.mcp import (
    MCP_SESSIONS,
    McpServerConfig,
    McpToolDefinition,
    McpToolExecutor,
    tool_definitions,
)
from tools_app.engine.sources.mcp_listing import McpListing, WireLog
from tools_app.models import McpServer, ToolKind, ToolRegistration, tool_name_validator
from tools_app.runs.snapshot.access import outbound_policy, secret_variable_problem
from tools_app.runs.snapshot.model import ToolSnapshot
from tools_app.runs.store.sanitize import clean_json, clean_text, max_value_bytes, redact
from tools_app.tools.registry import compute_version_hash, record_version

SERVER_FIELDS = ("name", "transport", "command", "args", "env", "url", "headers",
                 "startup_timeout", "call_timeout", "enabled")
CONFIG_KEYS = frozenset({"server", "tool", "annotations", "title"})


# -- registrations ---------------------------------------------------------------------

def mcp_config_problems(config: Any) -> list[str]:
    """What is wrong with the `config` of an "mcp" registration (empty if nothing)."""
    if not isinstance(config, dict):
        return ['Give a JSON object: {"server": "<MCP server name>", "tool": "<its tool>"}.']
    problems = []
    server, tool = config.get("server"), config.get("tool")
    if not isinstance(server, str) or not server:
        problems.append('"server" must name an MCP server.')
    elif not McpServer.objects.filter(name=server).exists():
        problems.append(f'There is no MCP server named {server!r}.')
    if not isinstance(tool, str) or not tool:
        problems.append('"tool" must name the server\'s tool.')
    if unknown := sorted(set(config) - CONFIG_KEYS):
        problems.append(f"Unknown keys: {', '.join(unknown)}.")
    annotations = config.get("annotations", {})
    if not isinstance(annotations, dict) or not all(
            isinstance(v, bool) for v in annotations.values()):
        problems.append('"annotations" must map hint names to true or false.')
    return problems


def annotation_words(config: Any) -> list[str]:
    """The annotations of an MCP tool's `config` as words for pages: read-only,
    destructive, idempotent, open-world ("not ..." for a hint the server set false;
    nothing for one it did not give)."""
    annotations = config.get("annotations") if isinstance(config, dict) else None
    if not isinstance(annotations, dict):
        return []
    words = {"read_only_hint": "read-only", "destructive_hint": "destructive",
             "idempotent_hint": "idempotent", "open_world_hint": "open-world"}
    return [word if annotations[key] else f"not {word}"
            for key, word in words.items() if isinstance(annotations.get(key), bool)]


# -- snapshot and engine ---------------------------------------------------------------

def server_snapshot(tool: ToolRegistration) -> dict[str, Any]:
    """What a run freezes of an MCP tool's server: `{"mcp_server": {...} or None}`
    (None: the server is gone, and the run fails saying so when it starts)."""
    name = (tool.config or {}).get("server")
    server = McpServer.objects.filter(name=name).first() if isinstance(name, str) else None
    if server is None:
        return {"mcp_server": None}
    return {"mcp_server": {field: getattr(server, field) for field in SERVER_FIELDS}}


def mcp_executor(tool: ToolSnapshot) -> tuple[McpToolExecutor, tuple[str, ...]]:
    """The executor of an "mcp" snapshot entry (runs/snapshot/executors.py's table), and the
    secret values its server configuration read from the environment (the run redacts
    them from what it records)."""
    server = tool.mcp_server
    remote = tool.config.get("tool")
    if not server:
        raise ImproperlyConfigured(
            f"Tool {tool.name!r}: its MCP server "
            f"{tool.config.get('server')!r} does not exist")
    if not server["enabled"]:
        raise ImproperlyConfigured(
            f"Tool {tool.name!r}: its MCP server {server['name']!r} is disabled")
    if not isinstance(remote, str) or not remote:
        raise ImproperlyConfigured(f"Tool {tool.name!r} does not name its MCP tool")
    config = server_config(server)
    executor = McpToolExecutor(config, remote, sessions=MCP_SESSIONS,
                               max_text_bytes=max_value_bytes())
    return executor, _secret_values(server, config)


def _secret_values(server: dict[str, Any], config: McpServerConfig) -> tuple[str, ...]:
    """The values that came from env:NAME references (environment and headers)."""
    referenced = {key for key, value in (server["env"] or {}).items()
                  if isinstance(value, str) and value.startswith("env:")}
    referenced_headers = {key for key, value in (server["headers"] or {}).items()
                          if isinstance(value, str) and value.startswith("env:")}
    return tuple(value for key, value in config.env if key in referenced and value) + tuple(
        value for key, value in config.headers if key in referenced_headers and value)


def server_config(server: dict[str, Any]) -> McpServerConfig:
    """The engine's config of a frozen (or current) server, env:NAME values read now."""
    name = server["name"]
    return McpServerConfig(
        name=name, transport=server["transport"], command=server["command"],
        args=tuple(server["args"] or ()),
        env=tuple((key, _value(name, value)) for key, value in (server["env"] or {}).items()),
        url=server["url"],
        headers=tuple((key, _value(name, value))
                      for key, value in (server["headers"] or {}).items()),
        startup_timeout=server["startup_timeout"], call_timeout=server["call_timeout"],
        outbound=outbound_policy(),
    )


def _value(server: str, value: str) -> str:
    if not value.startswith("env:"):
        return value
    variable = value[4:]
    if problem := secret_variable_problem(variable):
        raise ImproperlyConfigured(f"MCP server {server!r}: {problem}")
    found = os.environ.get(variable)
    if found is None:
        raise ImproperlyConfigured(
            f"MCP server {server!r} reads {variable} from the environment, which is not set "
            "in the worker's environment")
    return found


# -- sync ------------------------------------------------------------------------------

@dataclass
class McpSyncReport:
    server: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why"

    def summary(self) -> str:
        text = (f"{self.server}: created {len(self.created)}, updated {len(self.updated)}, "
                f"unchanged {len(self.unchanged)}, disabled {len(self.disabled)}")
        if self.skipped:
            text += f", skipped {len(self.skipped)} ({'; '.join(self.skipped)})"
        return text


class McpSyncError(Exception):
    """The server could not be reached or listed; nothing was changed."""


def sync_server(server: McpServer) -> McpSyncReport:
    """Register the server's tools (created, updated, re-enabled), and disable the
    registrations of tools it no longer has; keep what the server offers besides
    (resources, prompts) and the JSON-RPC log of the sync in `server.last_sync`,
    failed or not. Blocking: runs the listing on the MCP sessions' loop."""
    if not server.enabled:
        raise McpSyncError(f"MCP server {server.name!r} is disabled")
    snapshot = {field: getattr(server, field) for field in SERVER_FIELDS}
    log = WireLog()
    secrets: tuple[str, ...] = ()
    try:
        config = server_config(snapshot)
        secrets = _secret_values(snapshot, config)
        listing = MCP_SESSIONS.inspect_blocking(config, log)
        tools = tool_definitions(listing.tools)
    except Exception as exc:  # the server's failure, said in one line
        record = sync_record(None, log, error=str(exc), secrets=secrets)
        McpServer.objects.filter(pk=server.pk).update(last_sync=record)
        server.last_sync = record
        raise McpSyncError(record["error"]) from exc
    return _apply(server, tools, sync_record(listing, log, error="", secrets=secrets))


def sync_record(listing: McpListing | None, log: WireLog, *, error: str,
                secrets: tuple[str, ...]) -> dict[str, Any]:
    """What `McpServer.last_sync` keeps of one sync: the server's words and the log
    are untrusted (made storable: NULs escaped, values capped) and may repeat a
    secret the server was given (redacted)."""
    record: dict[str, Any] = {
        "at": timezone.now().isoformat(), "ok": not error, "error": error,
        "server": {}, "resources": [], "prompts": [], "log": log.as_list()}
    if listing is not None:
        record["server"] = {"name": listing.server_name, "version": listing.server_version,
                            "protocol": listing.protocol_version}
        record["resources"] = [
            {"uri": r.uri, "name": r.name, "title": r.title or "",
             "description": r.description or "", "mime_type": r.mime_type or ""}
            for r in listing.resources]
        record["prompts"] = [
            {"name": p.name, "title": p.title or "", "description": p.description or "",
             "arguments": [{"name": a.name, "description": a.description or "",
                            "required": bool(a.required)} for a in p.arguments or ()]}
            for p in listing.prompts]
    cleaned: dict[str, Any] = clean_json(redact(record, secrets))
    return cleaned


@transaction.atomic
def _apply(server: McpServer, tools: list[McpToolDefinition],
           record: dict[str, Any]) -> McpSyncReport:
    report = McpSyncReport(server.name)
    existing = {row.config.get("tool"): row for row in ToolRegistration.objects
                .select_for_update().filter(kind=ToolKind.MCP, config__server=server.name)}
    for definition in tools:
        _sync_one(server, definition, existing.pop(definition.name, None), report)
    for row in existing.values():
        if row.enabled:
            row.enabled = False
            row.save(update_fields=["enabled", "updated_at"])
            report.disabled.append(row.name)
    record["summary"] = report.summary()
    McpServer.objects.filter(pk=server.pk).update(last_synced_at=timezone.now(),
                                                  last_sync=record)
    server.last_sync = record
    return report


def _sync_one(server: McpServer, definition: McpToolDefinition,
              row: ToolRegistration | None, report: McpSyncReport) -> None:
    name = registration_name(server, definition.name)
    try:
        tool_name_validator(name)
    except ValidationError:
        report.skipped.append(f"{definition.name}: {name!r} is not a valid tool name")
        return
    if row is None:
        taken = ToolRegistration.objects.filter(name=name).first()
        if taken is not None:
            report.skipped.append(f"{definition.name}: the name {name!r} is taken by "
                                  f"another tool (set a tool prefix)")
            return
        row = ToolRegistration(name=name, kind=ToolKind.MCP)
        created = True
    else:
        created = False
    before = (row.version_hash, row.enabled)
    _fill(row, server, definition, name)
    if created:
        row.save()
        record_version(row)
        report.created.append(name)
    elif (row.version_hash, row.enabled) != before:
        row.save()
        record_version(row)  # kept only if the definition changed (a new hash)
        report.updated.append(name)
    else:
        report.unchanged.append(name)


def registration_name(server: McpServer, remote: str) -> str:
    return f"{server.tool_prefix}{remote}"


def _fill(row: ToolRegistration, server: McpServer, definition: McpToolDefinition,
          name: str) -> None:
    row.name = name
    # The server's words are untrusted: NULs escaped (PostgreSQL refuses them), the
    # description capped like any stored value.
    row.description = clean_text(definition.description)
    row.json_schema = clean_json(definition.input_schema, limit=sys.maxsize)
    row.config = {"server": server.name, "tool": definition.name,
                  "annotations": definition.annotations}
    if definition.title:
        row.config["title"] = definition.title
    # Crash-resume re-runs a call that was in flight only for idempotent tools: the
    # server's idempotentHint (or readOnlyHint) says so.
    row.idempotent = definition.idempotent
    row.enabled = True
    row.version_hash = compute_version_hash(row)
