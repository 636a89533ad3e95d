"""The registry outside the admin (`/registry/`): add and edit HTTP and mock tools, import
a tools JSON, add an MCP server, sync it and see what it offers (tools, resources,
prompts) with the JSON-RPC log of its last sync.

Every signed-in user may look (as at /tools/ and GET /api/mcp-servers); a change needs
what the admin asks for the same change: staff with the model's add or change
permission (a sync is a change of the server: it starts the server's command or
connects to its URL), else 403. The forms are the admin's and the API's
(web/registry_forms.py): one validator. Configuration is shown as `public_config`
shows it (credentials are env:NAME references; anything under a secret-looking key
that is not one is "[redacted]"); the server's words are rendered escaped.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_http_methods, require_POST

from tools_app.engine import json_nesting
from tools_app.models import McpServer, ToolKind, ToolRegistration
from tools_app.runs.snapshot.mcp import McpSyncError, annotation_words, sync_server
from tools_app.tools.registry import REDACTED, public_config, record_version
from tools_app.web.pages.access import AuthenticatedHttpRequest
from tools_app.web.registry_forms import (
    McpServerForm,
    ToolImportForm,
    WritableToolForm,
    note_person_edits,
)


def may(user: Any, action: str, model: type[models.Model]) -> bool:
    """The admin's rule for a write: staff holding the model's `action` permission."""
    return bool(user.is_staff and user.has_perm(
        f"tools_app.{action}_{model._meta.model_name}"))


def _require(request: AuthenticatedHttpRequest, action: str,
             model: type[models.Model]) -> None:
    if not may(request.user, action, model):
        raise PermissionDenied(f"Only staff with the {action} permission on "
                               f"{model._meta.verbose_name_plural} may do this")


def _can(request: AuthenticatedHttpRequest) -> dict[str, bool]:
    """What the pages offer this user."""
    user = request.user
    return {"can_add_tool": may(user, "add", ToolRegistration),
            "can_change_tool": may(user, "change", ToolRegistration),
            "can_add_server": may(user, "add", McpServer),
            "can_change_server": may(user, "change", McpServer)}


# -- the registry's home: MCP servers and what staff may do ------------------------------

@require_http_methods(["GET"])
@login_required
def registry_home(request: AuthenticatedHttpRequest) -> HttpResponse:
    servers = [(server, _server_tools(server).filter(enabled=True).count(),
                _synced_at(server.last_sync or {})) for server in McpServer.objects.all()]
    return render(request, "tools_app/registry/home.html",
                  {"servers": servers, **_can(request)})


# -- HTTP and mock tools --------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@login_required
def tool_add(request: AuthenticatedHttpRequest) -> HttpResponse:
    _require(request, "add", ToolRegistration)
    form = WritableToolForm(request.POST or None, initial={"kind": ToolKind.MOCK})
    if request.method == "POST" and form.is_valid():
        tool = _save_tool(form)
        messages.success(request, f"Registered the {tool.get_kind_display()} tool "
                                  f"{tool.name}.")
        return redirect("tool_detail", tool.name)
    return render(request, "tools_app/registry/tool_form.html",
                  {"form": form, "tool": None}, status=_status(request, form))


@require_http_methods(["GET", "POST"])
@login_required
def tool_edit(request: AuthenticatedHttpRequest, tool_id: UUID) -> HttpResponse:
    _require(request, "change", ToolRegistration)
    tool = get_object_or_404(ToolRegistration, pk=tool_id)
    if tool.kind not in (ToolKind.HTTP, ToolKind.MOCK):
        return render(request, "tools_app/registry/read_only.html", {"tool": tool},
                      status=409)
    if request.method == "POST":
        form = WritableToolForm(_kept_secrets(request.POST, tool, ("config",)),
                                instance=tool)
    else:  # the configuration as pages show it: no credential in the form
        form = WritableToolForm(instance=tool,
                                initial={"config": public_config(tool.config)})
    if request.method == "POST" and form.is_valid():
        saved = _save_tool(form)
        messages.success(request, f"Saved the tool {saved.name}.")
        return redirect("tool_detail", saved.name)
    return render(request, "tools_app/registry/tool_form.html",
                  {"form": form, "tool": tool}, status=_status(request, form))


def _save_tool(form: WritableToolForm) -> ToolRegistration:
    """As the admin and the API save one: the fields a person set noted (sync keeps
    them), a definition version recorded when the definition changed."""
    with transaction.atomic():
        tool = form.save(commit=False)
        note_person_edits(tool, form.changed_data)
        tool.save()
        record_version(tool)
    return tool


def _kept_secrets(posted: QueryDict, row: models.Model,
                  fields: tuple[str, ...]) -> QueryDict:
    """The post, with each top-level value the edit page showed as "[redacted]" and that
    came back so put back to the stored one: a value never shown is never lost."""
    data = posted.copy()
    for name in fields:
        stored = getattr(row, name)
        try:
            sent = json_nesting.loads(data.get(name, ""))
        except json.JSONDecodeError:
            continue  # the form says what is wrong with it
        if isinstance(sent, dict) and isinstance(stored, dict):
            data[name] = json.dumps({key: stored[key] if value == REDACTED and key in stored
                                     else value for key, value in sent.items()})
    return data


def _status(request: AuthenticatedHttpRequest, form: Any) -> int:
    """400 for a refused post (the page says why), 200 otherwise."""
    return 400 if request.method == "POST" and form.errors else 200


@require_http_methods(["GET", "POST"])
@login_required
def tools_import(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Import a tools JSON as new tools: all of them, or (listing every problem, each
    naming its tool) none."""
    _require(request, "add", ToolRegistration)
    form = ToolImportForm(request.POST or None, request.FILES or None)
    problems: list[tuple[str, str]] = []
    if request.method == "POST" and form.is_valid():
        created, problems = form.import_tools()
        if not problems:
            messages.success(request, f"Imported {len(created)} tool"
                             f"{'' if len(created) == 1 else 's'}: "
                             + ", ".join(t.name for t in created))
            return redirect("tool_index")
    failed = request.method == "POST" and bool(problems or form.errors)
    return render(request, "tools_app/registry/import.html",
                  {"form": form, "problems": problems}, status=400 if failed else 200)


# -- MCP servers -----------------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@login_required
def mcp_server_add(request: AuthenticatedHttpRequest) -> HttpResponse:
    _require(request, "add", McpServer)
    form = McpServerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        server = form.save()
        messages.success(request, f"Added the MCP server {server.name}: sync it to "
                                  "register its tools.")
        return redirect("mcp_server_detail", server.pk)
    return render(request, "tools_app/registry/mcp_form.html", {"form": form, "server": None},
                  status=_status(request, form))


@require_http_methods(["GET", "POST"])
@login_required
def mcp_server_edit(request: AuthenticatedHttpRequest, server_id: int) -> HttpResponse:
    _require(request, "change", McpServer)
    server = get_object_or_404(McpServer, pk=server_id)
    if request.method == "POST":
        form = McpServerForm(_kept_secrets(request.POST, server, ("env", "headers")),
                             instance=server)
    else:
        form = McpServerForm(instance=server, initial={
            "env": public_config(server.env), "headers": public_config(server.headers)})
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, f"Saved the MCP server {server.name}.")
        return redirect("mcp_server_detail", server.pk)
    return render(request, "tools_app/registry/mcp_form.html",
                  {"form": form, "server": server}, status=_status(request, form))


@require_http_methods(["GET"])
@login_required
def mcp_server_detail(request: AuthenticatedHttpRequest, server_id: int) -> HttpResponse:
    server = get_object_or_404(McpServer, pk=server_id)
    last = server.last_sync or {}
    tools = [(tool, annotation_words(tool.config)) for tool in _server_tools(server)]
    return render(request, "tools_app/registry/mcp_detail.html", {
        "server": server, "env": public_config(server.env),
        "headers": public_config(server.headers), "tools": tools, "last": last,
        "last_at": _synced_at(last),
        "log": [_log_line(number, entry)
                for number, entry in enumerate(last.get("log", []), start=1)],
        **_can(request)})


@require_POST
@login_required
def mcp_server_sync(request: AuthenticatedHttpRequest, server_id: int) -> HttpResponse:
    """The admin's "Sync tools": list the server's tools into registrations, keeping its
    resources, prompts and the session's JSON-RPC log (runs/snapshot/mcp.sync_server)."""
    _require(request, "change", McpServer)
    server = get_object_or_404(McpServer, pk=server_id)
    try:
        report = sync_server(server)
    except McpSyncError as exc:
        messages.error(request, f"{server.name}: sync failed: {exc}")
    else:
        messages.success(request, report.summary())
    return redirect("mcp_server_detail", server.pk)


def _server_tools(server: McpServer) -> models.QuerySet[ToolRegistration]:
    return ToolRegistration.objects.filter(kind=ToolKind.MCP, config__server=server.name)


def _synced_at(last: dict[str, Any]) -> datetime | None:
    at = last.get("at")
    return parse_datetime(at) if isinstance(at, str) else None


def _log_line(number: int, entry: dict[str, Any]) -> dict[str, Any]:
    """One message of a sync's log as the page lists it: its direction, what it was
    (method, answer to an id, error) and its JSON, indented (escaped by the template)."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return {"number": number, "direction": entry.get("direction", ""),
                "summary": "transport fault", "text": str(entry.get("fault", ""))}
    if "method" in message:
        summary = message["method"] + ("" if "id" in message else " (notification)")
    elif "error" in message:
        summary = f"error answer to #{message.get('id')}"
    else:
        summary = f"answer to #{message.get('id')}"
    return {"number": number, "direction": entry.get("direction", ""), "summary": summary,
            "text": json.dumps(message, indent=2, ensure_ascii=False)}
