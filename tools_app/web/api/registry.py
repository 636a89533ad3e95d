"""The registry in the JSON API (bearer token, like every router: app.py):

GET   /api/tools, /api/endpoints, /api/mcp-servers, /api/policies   the lists
GET   /api/tools/<name or id>, /api/endpoints/<..>, /api/mcp-servers/<..>  one of them
POST  /api/tools, /api/endpoints, /api/mcp-servers                  create one
PATCH /api/tools/<..>, /api/endpoints/<..>, /api/mcp-servers/<..>  change the fields sent
POST  /api/mcp-servers/<name or id>/sync                           register its tools

Reads are for any token's user; writes for staff holding the admin's permission for the
same change (add, change; a sync is a change of the server, as in the admin), else a 403.
A write is validated by the admin's own form (web/registry_forms.py): the JSON fields are
fed to it, on top of the row's current values for an update, and its errors come back as
one 400 `invalid_field` naming the first field, with every field's messages in `problems`.
Python tools come from code and MCP tools from their server's sync: the API neither
creates nor changes them (400 on a create, 409 on an update).

No answer holds a secret: stored configuration names environment variables (`env:NAME`,
an endpoint's `api_key_env`), and values under secret-looking keys that are not
references are shown as "[redacted]" (tools.registry.public_config).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

from django import forms
from django.db import models, transaction
from django.forms.models import model_to_dict
from django.http import HttpRequest, JsonResponse
from ninja import Router

from tools_app.models import (
    ErrorPolicy,
    McpServer,
    ModelEndpoint,
    ToolKind,
    ToolRegistration,
)
from tools_app.runs.snapshot.mcp import McpSyncError, sync_server
from tools_app.tools.registry import public_config, record_version
from tools_app.web.api.base import ApiError, answers, is_row_id
from tools_app.web.api.schemas import (
    Body,
    EndpointBody,
    EndpointPatchBody,
    McpServerBody,
    McpServerPatchBody,
    ToolBody,
    ToolPatchBody,
)
from tools_app.web.registry_forms import (
    McpServerForm,
    ModelEndpointForm,
    ToolRegistrationForm,
    note_person_edits,
)

tools_router = Router(tags=["registry"])
endpoints_router = Router(tags=["registry"])
mcp_router = Router(tags=["registry"])
policies_router = Router(tags=["registry"])

# Where a tool of these kinds comes from, said when the API is asked to write one.
READ_ONLY_KINDS: dict[str, str] = {
    ToolKind.PYTHON: "Python tools come from code (@tool functions, registered by "
                     "manage.py sync_tools)",
    ToolKind.MCP: "MCP tools come from their server: POST /api/mcp-servers/<id>/sync "
                  "registers them",
}


# -- the shared steps --------------------------------------------------------------------


def _require(request: HttpRequest, action: str, model: type[models.Model]) -> None:
    """The admin's rule for the same write: staff, with the model's add/change permission."""
    user = request.user
    codename = f"tools_app.{action}_{model._meta.model_name}"
    if not (user.is_staff and user.has_perm(codename)):
        raise ApiError(403, "forbidden", f"Only staff with the {action} permission on "
                       f"{model._meta.verbose_name_plural} may do this (as in the admin)")


def _find(model: type[Any], key: str) -> Any:
    """The row whose id, else whose name, is `key`; 404 if none."""
    found = None
    if model is McpServer:
        if is_row_id(key):
            found = model.objects.filter(pk=int(key)).first()
    else:
        with contextlib.suppress(ValueError):
            found = model.objects.filter(pk=uuid.UUID(key)).first()
    found = found or model.objects.filter(name=key).first()
    if found is None:
        raise ApiError(404, "not_found",
                       f"No {model._meta.verbose_name} named or with id {key!r}")
    return found


def _validated(form_class: type[forms.ModelForm[Any]], instance: models.Model,
               body: Body) -> forms.ModelForm[Any]:
    """The admin's form bound to the fields the body sent, over the instance's current
    values (a new instance's are the model's defaults), as the admin's page would post
    them; a 400 with the form's own messages if it refuses them."""
    sent = body.model_dump(include=body.model_fields_set)
    current = form_class(instance=instance)
    data = {name: _posted(field, sent[name] if name in sent
                          else current.get_initial_for_field(field, name))
            for name, field in current.fields.items()}
    form = form_class(data=data, instance=instance)
    if not form.is_valid():
        problems = {name: [str(message) for message in messages]
                    for name, messages in form.errors.items()}
        field, [first, *_] = next(iter(problems.items()))
        raise ApiError(400, "invalid_field", f"{field}: {first}", field=field,
                       problems=problems)
    return form


def _posted(field: forms.Field, value: Any) -> Any:
    """A JSON value as a form post carries it: JSON fields as JSON text, null as empty."""
    if isinstance(field, forms.JSONField):
        return json.dumps(value)
    if isinstance(field, forms.BooleanField):
        return bool(value)
    return "" if value is None else value


def _when(value: Any) -> str | None:
    return value.isoformat() if value else None


# -- tools -------------------------------------------------------------------------------


@tools_router.get("", url_name="api_tools", response=answers({200: None}),
                  summary="Every registered tool")
def list_tools(request: HttpRequest) -> JsonResponse:
    """`{"tools": [...]}`, by name."""
    return JsonResponse({"tools": [tool_json(t) for t in ToolRegistration.objects.all()]})


@tools_router.post("", url_name="api_tools", response=answers({201: None}, 400, 403, 413),
                   summary="Register an HTTP or mock tool (staff)")
def create_tool(request: HttpRequest, body: ToolBody) -> JsonResponse:
    _require(request, "add", ToolRegistration)
    _writable_kind(body.kind)
    return JsonResponse(tool_json(_save_tool(ToolRegistration(), body)), status=201)


@tools_router.get("/{tool}", url_name="api_tool", response=answers({200: None}, 404),
                  summary="One tool, by name or id")
def get_tool(request: HttpRequest, tool: str) -> JsonResponse:
    return JsonResponse(tool_json(_find(ToolRegistration, tool)))


@tools_router.patch("/{tool}", url_name="api_tool",
                    response=answers({200: None}, 400, 403, 404, 409, 413),
                    summary="Change an HTTP or mock tool's fields sent (staff)")
def update_tool(request: HttpRequest, tool: str, body: ToolPatchBody) -> JsonResponse:
    _require(request, "change", ToolRegistration)
    row = _find(ToolRegistration, tool)
    if why := READ_ONLY_KINDS.get(row.kind):
        raise ApiError(409, "read_only", f"{why}: the API does not change them")
    if "kind" in body.model_fields_set:
        _writable_kind(body.kind)
    return JsonResponse(tool_json(_save_tool(row, body)))


def _writable_kind(kind: str | None) -> None:
    if kind is not None and (why := READ_ONLY_KINDS.get(kind)):
        raise ApiError(400, "invalid_field",
                       f"kind: {why}; the API registers http and mock tools", field="kind")


def _save_tool(row: ToolRegistration, body: Body) -> ToolRegistration:
    form = _validated(ToolRegistrationForm, row, body)
    with transaction.atomic():  # as the admin saves it
        saved: ToolRegistration = form.save(commit=False)
        note_person_edits(saved, form.changed_data)
        saved.save()
        record_version(saved)
    return saved


def tool_json(tool: ToolRegistration) -> dict[str, Any]:
    return {
        "id": str(tool.pk), "name": tool.name, "kind": tool.kind,
        "read_only": tool.kind in READ_ONLY_KINDS, "description": tool.description,
        "json_schema": tool.json_schema, "config": public_config(tool.config),
        "python_path": tool.python_path or None, "return_behavior": tool.return_behavior,
        "strict": tool.strict, "timeout_seconds": tool.timeout_seconds,
        "requires_approval": tool.requires_approval, "idempotent": tool.idempotent,
        "isolated": tool.isolated,
        "enabled": tool.enabled, "version_hash": tool.version_hash,
        "url": f"/tools/{tool.name}/", "created_at": _when(tool.created_at),
        "updated_at": _when(tool.updated_at),
    }


# -- model endpoints ---------------------------------------------------------------------


@endpoints_router.get("", url_name="api_endpoints", response=answers({200: None}),
                      summary="Every model endpoint")
def list_endpoints(request: HttpRequest) -> JsonResponse:
    """`{"endpoints": [...]}`, by name."""
    return JsonResponse({"endpoints": [endpoint_json(e)
                                       for e in ModelEndpoint.objects.all()]})


@endpoints_router.post("", url_name="api_endpoints",
                       response=answers({201: None}, 400, 403, 413),
                       summary="Add a model endpoint (staff)")
def create_endpoint(request: HttpRequest, body: EndpointBody) -> JsonResponse:
    _require(request, "add", ModelEndpoint)
    return JsonResponse(endpoint_json(_save(ModelEndpointForm, ModelEndpoint(), body)),
                        status=201)


@endpoints_router.get("/{endpoint}", url_name="api_endpoint",
                      response=answers({200: None}, 404),
                      summary="One model endpoint, by name or id")
def get_endpoint(request: HttpRequest, endpoint: str) -> JsonResponse:
    return JsonResponse(endpoint_json(_find(ModelEndpoint, endpoint)))


@endpoints_router.patch("/{endpoint}", url_name="api_endpoint",
                        response=answers({200: None}, 400, 403, 404, 413),
                        summary="Change a model endpoint's fields sent (staff)")
def update_endpoint(request: HttpRequest, endpoint: str,
                    body: EndpointPatchBody) -> JsonResponse:
    _require(request, "change", ModelEndpoint)
    row = _find(ModelEndpoint, endpoint)
    return JsonResponse(endpoint_json(_save(ModelEndpointForm, row, body)))


def _save(form_class: type[forms.ModelForm[Any]], row: models.Model, body: Body) -> Any:
    form = _validated(form_class, row, body)
    return form.save()


def endpoint_json(endpoint: ModelEndpoint) -> dict[str, Any]:
    """The key only by its variable's name (`api_key_env`), never its value."""
    return {
        "id": str(endpoint.pk), "name": endpoint.name, "kind": endpoint.kind,
        "model": endpoint.model, "base_url": endpoint.base_url, "stream": endpoint.stream,
        "api_key_env": endpoint.api_key_env or None,
        "extra_headers": public_config(endpoint.extra_headers),
        "default_parameters": public_config(endpoint.default_parameters),
        "proxy_url": endpoint.proxy_url or None, "timeout_seconds": endpoint.timeout_seconds,
        "script": endpoint.script,
        "capability_checked_at": _when(endpoint.capability_checked_at),
        "created_at": _when(endpoint.created_at), "updated_at": _when(endpoint.updated_at),
    }


# -- MCP servers -------------------------------------------------------------------------


@mcp_router.get("", url_name="api_mcp_servers", response=answers({200: None}),
                summary="Every MCP server")
def list_mcp_servers(request: HttpRequest) -> JsonResponse:
    """`{"mcp_servers": [...]}`, by name."""
    return JsonResponse({"mcp_servers": [mcp_server_json(s)
                                         for s in McpServer.objects.all()]})


@mcp_router.post("", url_name="api_mcp_servers", response=answers({201: None}, 400, 403, 413),
                 summary="Add an MCP server (staff)")
def create_mcp_server(request: HttpRequest, body: McpServerBody) -> JsonResponse:
    _require(request, "add", McpServer)
    return JsonResponse(mcp_server_json(_save(McpServerForm, McpServer(), body)),
                        status=201)


@mcp_router.get("/{server}", url_name="api_mcp_server", response=answers({200: None}, 404),
                summary="One MCP server, by name or id")
def get_mcp_server(request: HttpRequest, server: str) -> JsonResponse:
    return JsonResponse(mcp_server_json(_find(McpServer, server)))


@mcp_router.patch("/{server}", url_name="api_mcp_server",
                  response=answers({200: None}, 400, 403, 404, 413),
                  summary="Change an MCP server's fields sent (staff)")
def update_mcp_server(request: HttpRequest, server: str,
                      body: McpServerPatchBody) -> JsonResponse:
    _require(request, "change", McpServer)
    row = _find(McpServer, server)
    return JsonResponse(mcp_server_json(_save(McpServerForm, row, body)))


@mcp_router.post("/{server}/sync", url_name="api_mcp_server_sync",
                 response=answers({200: None}, 403, 404, 409, 502),
                 summary="List the server's tools into registrations (staff)")
def sync_mcp_server(request: HttpRequest, server: str) -> JsonResponse:
    """The admin's "Sync tools" (runs/snapshot/mcp.sync_server): starts the server's
    command or connects to its URL, so it needs the change permission, as there.
    `{"server", "created", "updated", "unchanged", "disabled", "skipped", "summary"}`;
    a server that cannot be reached or listed is a 502 saying why, nothing changed."""
    _require(request, "change", McpServer)
    row = _find(McpServer, server)
    if not row.enabled:
        raise ApiError(409, "disabled", f"MCP server {row.name!r} is disabled")
    try:
        report = sync_server(row)
    except McpSyncError as exc:
        raise ApiError(502, "sync_failed", f"{row.name}: sync failed: {exc}") from exc
    return JsonResponse({"server": report.server, "created": report.created,
                         "updated": report.updated, "unchanged": report.unchanged,
                         "disabled": report.disabled, "skipped": report.skipped,
                         "summary": report.summary()})


def mcp_server_json(server: McpServer) -> dict[str, Any]:
    tools = ToolRegistration.objects.filter(kind=ToolKind.MCP, config__server=server.name)
    return {
        "id": server.pk, "name": server.name, "transport": server.transport,
        "command": server.command, "args": server.args, "env": public_config(server.env),
        "url": server.url, "headers": public_config(server.headers),
        "tool_prefix": server.tool_prefix, "startup_timeout": server.startup_timeout,
        "call_timeout": server.call_timeout, "enabled": server.enabled,
        "tools": list(tools.values_list("name", flat=True)),
        "last_synced_at": _when(server.last_synced_at),
        "created_at": _when(server.created_at), "updated_at": _when(server.updated_at),
    }


# -- error policies ----------------------------------------------------------------------


@policies_router.get("", url_name="api_policies", response=answers({200: None}),
                     summary="Every error policy (edited in the admin)")
def list_policies(request: HttpRequest) -> JsonResponse:
    """`{"policies": [...]}`, by name: each with every field the admin edits."""
    return JsonResponse({"policies": [
        {"id": policy.pk, **model_to_dict(policy),
         "updated_at": _when(policy.updated_at)}
        for policy in ErrorPolicy.objects.order_by("name")]})
