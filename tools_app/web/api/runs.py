"""The runs router of the JSON API (bearer token, like every router: app.py):

POST /api/runs                       start a run -> {"id": ..., "url": ...}
GET  /api/runs?<filters>             one keyset page of the runs the user may see
GET  /api/runs/export.csv|jsonl      every run the filters select, streamed
GET  /api/runs/<id>                  status, rounds, tool calls, final answer
GET  /api/runs/<id>/events?after=N   the run's events after seq N (&wait=S: long poll)
GET  /api/runs/<id>/events/stream     the run's events as they are stored (SSE) to its end
GET  /api/runs/compare?a=<id>&b=<id> two runs aligned by round and call, with deltas
GET  /api/runs/<id>/export           the run as a regression fixture (docs/run-run_files.md)
POST /api/runs/<id>/rerun            rerun it (as it was / current, replay modes)
POST /api/runs/<id>/fork             a new run from its conversation before round N, edited
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from ninja import Router
from pydantic import ValidationError

from tools_app.audit.run_filters import EXPORT_FILTERS, RUN_FILTERS, filtered_runs
from tools_app.engine import ChatMessage, ChatRequestParameters
from tools_app.engine.conversation import ConversationError, parse_conversation
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.models.prices import export_usd
from tools_app.runs import services
from tools_app.runs.debugger import (
    compare,
    fork,
    rerun,
    run_files,
    timeline,
)
from tools_app.runs.snapshot.model import (
    RerunSection,
    Section,
    listed,
    price_revision,
    snapshot_of,
)
from tools_app.runs.store import selectors
from tools_app.runs.store.sql import prepared
from tools_app.web.api import event_stream
from tools_app.web.api.approvals import pause_json
from tools_app.web.api.base import (
    MAX_ROW_ID,
    ApiError,
    answers,
    is_digits,
    is_row_id,
    query,
    streamed,
    visible,
)
from tools_app.web.api.schemas import Created, ForkBody, RerunBody, StartRunBody
from tools_app.web.export import export_response

router = Router(tags=["runs"])


@router.get("", url_name="api_runs",
            response=answers({200: None}, 400), openapi_extra=query(*RUN_FILTERS),
            summary="The runs the token's user may see, one keyset page")
def list_runs(request: HttpRequest) -> JsonResponse:
    """`{"runs": [...], "next_cursor"}`, newest first; an unknown filter or a bad value
    is a 400 naming it."""
    page = filtered_runs(selectors.run_list_for_user(request.user), request.GET.dict())
    return JsonResponse({"runs": [_run_summary(r) for r in page.runs],
                         "next_cursor": page.next_cursor})


@router.post("", url_name="api_runs",
             response=answers({201: Created}, 400, 404, 413), summary="Start a run")
def start_run(request: HttpRequest, body: StartRunBody) -> JsonResponse:
    run = _create_run(request, body)
    return JsonResponse({"id": str(run.pk), "status": run.status,
                         "url": f"/runs/{run.pk}/"}, status=201)


def _create_run(request: HttpRequest, body: StartRunBody) -> Run:
    endpoint = _lookup(ModelEndpoint, body.endpoint, "endpoint")
    tools = _tools(body.tools)
    policy = (_lookup(ErrorPolicy, body.policy, "policy") if body.policy
              else selectors.default_policy())
    if policy is None:
        raise ApiError(400, "missing_field", "No policy given and none exists", field="policy")
    try:
        return services.run_create(
            user=request.user, endpoint=endpoint, tools=tools, policy=policy,
            messages=_messages(body.messages),
            parameters=_parameters(body.parameters or {}),
            policy_overrides=body.policy_overrides or None, breakpoints=body.breakpoints,
        )
    except services.RunRequestError as exc:
        if exc.field is None:
            raise ApiError(400, "invalid_request", str(exc)) from exc
        raise ApiError(400, "invalid_field", str(exc), field=exc.field,
                       problems=exc.problems) from exc


def _lookup(model: Any, key: str | int, field: str) -> Any:
    """By id, else by name: prepared reads (runs/store/sql/prepared.py), as every POST /api/runs
    looks its endpoint up."""
    by_id = _as_id(key, model)
    found = (_first(model, "pk", by_id) if by_id is not None else None) or \
        _first(model, "name", str(key))
    if found is None:
        raise ApiError(404 if field == "endpoint" else 400, f"unknown_{field}",
                       f"No {field} named or with id {key!r}", field=field)
    return found


def _first(model: Any, field: str, value: Any) -> Any:
    found = prepared.instances(("api_lookup", model, field), model,
                               lambda marked: model.objects.filter(**{field: marked})
                               .order_by()[:1], value)
    return found[0] if found else None


def _as_id(key: str | int, model: Any) -> Any:
    if model is ErrorPolicy:
        return int(key) if is_row_id(str(key)) else None
    try:
        return uuid.UUID(str(key))
    except ValueError:
        return None


def _tools(names: list[str]) -> list[ToolRegistration]:
    # A prepared read, as every POST /api/runs makes it (an empty list is no IN).
    found = {t.name: t for t in prepared.instances(
        ("api_tools",), ToolRegistration,
        lambda marked: ToolRegistration.objects.filter(name__in=marked).order_by(),
        names)} if names else {}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ApiError(400, "unknown_tool", f"Unknown tools: {', '.join(unknown)}",
                       field="tools", unknown=unknown)
    return [found[n] for n in names]


def _messages(raw: list[dict[str, Any]]) -> list[ChatMessage]:
    """Every message kind, in the OpenAI Chat Completions format (engine.conversation)."""
    try:
        return parse_conversation(raw)
    except ConversationError as exc:
        raise ApiError(400, "invalid_field", str(exc), field=exc.field) from exc


def _parameters(raw: dict[str, Any]) -> ChatRequestParameters:
    try:
        return ChatRequestParameters.model_validate(raw)
    except ValidationError as exc:
        problems = [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"]}
                    for e in exc.errors(include_url=False, include_input=False)]
        raise ApiError(400, "invalid_field", "parameters are invalid", field="parameters",
                       problems=problems) from exc


@router.get("/export.{export_format:fmt}", url_name="api_runs_export",
            # 404: a format other than csv or jsonl is no route.
            response=answers({}, 400, 404),
            openapi_extra=query(*EXPORT_FILTERS) | streamed("text/csv", "application/x-ndjson"),
            summary="Every run GET /api/runs would list, streamed as CSV or JSON Lines")
def export_runs(request: HttpRequest, fmt: Literal["csv", "jsonl"]) -> HttpResponseBase:
    """The runs `GET /api/runs` would list with the same filters, all of them, streamed
    as CSV or JSON Lines."""
    return export_response(selectors.run_list_for_user(request.user), request.GET.dict(), fmt)


@router.get("/compare", url_name="api_run_compare",
            response=answers({200: None}, 400, 404),
            openapi_extra=query("a", "b", required=("a", "b")),
            summary="Two runs aligned round by round and call by call")
def compare_runs(request: HttpRequest) -> JsonResponse:
    """`?a=<run id>&b=<run id>`: the two runs aligned round by round and call by call."""
    ids = {}
    for field in ("a", "b"):
        value = request.GET.get(field, "").strip()
        if not value:
            raise ApiError(400, "missing_field", f"'{field}' is required: ?a=<run id>&b=<run id>",
                           field=field)
        ids[field] = value
    return JsonResponse(compare.compare_runs(visible(request, ids["a"]),
                                             visible(request, ids["b"])))


@router.get("/{uuid:run_id}", url_name="api_run_detail",
            response=answers({200: None}, 404),
            summary="The run: status, rounds, tool calls, final answer")
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> JsonResponse:
    run = visible(request, run_id)
    rounds = timeline.round_views(run, display=False)
    return JsonResponse(_run_summary(run) | {
        "final_answer": run.final_text,
        "error": {"type": run.error_type, "message": run.error_message} if run.error_type else None,
        "breakpoints": snapshot_of(run).breakpoints,
        "paused": pause_json(run.open_pause),
        "rounds": [_round_json(r, str(run.pk)) for r in rounds],
        "splice": _section(snapshot_of(run).splice),
    })


@router.get("/{uuid:run_id}/events", url_name="api_run_events",
            response=answers({200: None}, 400, 404),
            openapi_extra=query("after", "wait"),
            summary="The run's events after seq `after`; with `wait`, a long poll")
def run_events(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    """`{"events": [...], "last_seq"}`: the events after seq `after` (default 0). With
    `wait=S` (seconds, at most 30) and none yet, the answer waits until one is stored,
    the run ends or S seconds pass (then `events` is empty)."""
    run = visible(request, run_id)
    after = _seq_param(request.GET.get("after", "0"), "after")
    wait = request.GET.get("wait")
    seconds = event_stream.wait_seconds(wait) if wait is not None else 0.0
    events = selectors.events_after(run.pk, after)
    if events or seconds <= 0 or run.is_terminal:
        return JsonResponse({"events": [event_stream.event_json(e) for e in events],
                             "last_seq": events[-1].seq if events else after})
    # Nothing yet: the answer is written when something is, off the request thread.
    response = StreamingHttpResponse(event_stream.long_poll(str(run.pk), after, seconds),
                                     content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


@router.get("/{uuid:run_id}/events/stream", url_name="api_run_events_stream",
            response=answers({200: None}, 400, 404, 429),
            openapi_extra=query("after") | streamed("text/event-stream") | {
                "description": (
                    "Server-Sent Events: one message per stored event (`id:` its seq, "
                    "`event:` its kind, `data:` the event as `/events` lists it), a "
                    "comment line as a heartbeat, closed once the run has ended and all "
                    "its events are sent. Resume with the `Last-Event-ID` header (or "
                    "`after`).")},
            summary="The run's events as they are stored, until it ends (SSE)")
def run_events_stream(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    """The run's events after `Last-Event-ID` (else `after`, else 0) as Server-Sent
    Events, written off the request thread (event_stream.sse_events)."""
    run = visible(request, run_id)
    last_event_id = request.headers.get("Last-Event-ID")
    after = (_seq_param(last_event_id.strip(), "Last-Event-ID") if last_event_id is not None
             else _seq_param(request.GET.get("after", "0"), "after"))
    # The token, to check it again at each heartbeat (BearerToken accepted it).
    token = request.headers["Authorization"].partition(" ")[2].strip()
    response = event_stream.EventStreamResponse(
        event_stream.sse_events(str(run.pk), after, token),
        on_close=event_stream.STREAMS.take(request.user.pk))  # a 429 past the user's bound
    return response


def _seq_param(raw: str, name: str) -> int:
    """A seq the client names (`after`, `Last-Event-ID`): digits, else a 400."""
    if not is_digits(raw):
        raise ApiError(400, "invalid_field", f"{name} must be a non-negative integer",
                       field=name)
    # Beyond any seq there is nothing (the database cannot compare a larger number).
    return int(raw) if is_row_id(raw) else MAX_ROW_ID


@router.get("/{uuid:run_id}/export", url_name="api_run_export",
            response=answers({200: None}, 404),
            summary="The run as a regression fixture (an attachment)")
def export_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    """The run as a regression fixture (docs/run-run_files.md)."""
    run = visible(request, run_id)
    response = JsonResponse(run_files.export_run(run), json_dumps_params={"ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{run_files.export_filename(run)}"'
    return response


@router.post("/{uuid:run_id}/rerun", url_name="api_run_rerun",
             response=answers({201: None}, 400, 404, 409, 413),
             summary="Rerun the run")
def rerun_run(request: HttpRequest, run_id: uuid.UUID,
              body: RerunBody = RerunBody()) -> JsonResponse:  # noqa: B008 - never mutated
    """`{"snapshot": "same" | "current", "model": "recorded" | "live", "tools": "recorded" |
    "live" | "mock", "on_divergence": "stop" | "live"}`, every field optional, the body
    too (same, live, live, stop; `"mode": "as_it_was" | "current"` is the older spelling
    of `snapshot`): a new run repeating this one; 201 with its id, parent, differences,
    replay and url."""
    run = visible(request, run_id)
    options = rerun.ReplayOptions(model=body.model, tools=body.tools,
                                  on_divergence=body.on_divergence)
    try:
        new = rerun.run_rerun(run=run, user=request.user, mode=_rerun_mode(body),
                              replay=options)
    except rerun.RerunError as exc:
        raise ApiError(409, "cannot_rerun", str(exc)) from exc
    return JsonResponse({"id": str(new.pk), "status": new.status, "parent": str(run.pk),
                         "differences": rerun_of(new).differences,
                         "replay": rerun_of(new).replay,
                         "url": f"/runs/{new.pk}/"}, status=201)


SNAPSHOT_CHOICES: dict[str, rerun.RerunMode] = {"same": "as_it_was", "current": "current"}


@router.post("/{uuid:run_id}/fork", url_name="api_run_fork",
             response=answers({201: Created}, 400, 404, 409, 413),
             summary="A new run from this run's conversation before a round, edited")
def fork_run(request: HttpRequest, run_id: uuid.UUID, body: ForkBody) -> JsonResponse:
    """`{"round": N, "messages"?: [...], "append"?: [...], "endpoint"?, "tools"?,
    "policy"?, "parameters"?, "policy_overrides"?, "snapshot"?: "same" | "current"}`: a
    new run starting from this run's conversation before round N (`messages`: that
    whole conversation as edited, OpenAI format; left out: inherited unchanged), then
    `append`; 201 with its id and fork record."""
    run = visible(request, run_id)
    try:
        new = fork.run_fork(run=run, user=request.user, round_number=body.round,
                            messages=body.messages, append=body.append,
                            mode=SNAPSHOT_CHOICES[body.snapshot], config=_fork_config(body))
    except fork.ForkError as exc:
        if exc.field is None:
            raise ApiError(409, "cannot_fork", str(exc)) from exc
        raise ApiError(400, "invalid_field", str(exc), field=exc.field) from exc
    return JsonResponse({"id": str(new.pk), "status": new.status, "parent": str(run.pk),
                         "fork": _section(snapshot_of(new).fork), "url": f"/runs/{new.pk}/"},
                        status=201)


def _fork_config(body: ForkBody) -> fork.ForkConfig:
    """What the fork changes: each field left out keeps the original run's."""
    return fork.ForkConfig(
        endpoint=_lookup(ModelEndpoint, body.endpoint, "endpoint")
        if body.endpoint is not None else None,
        tools=_tools(body.tools) if body.tools is not None else None,
        policy=_lookup(ErrorPolicy, body.policy, "policy") if body.policy is not None else None,
        parameters=_parameters(body.parameters) if body.parameters is not None else None,
        policy_overrides=body.policy_overrides)


def _rerun_mode(body: RerunBody) -> rerun.RerunMode:
    if "snapshot" in body.model_fields_set:
        return SNAPSHOT_CHOICES[body.snapshot]
    return body.mode or "as_it_was"


def _section(section: Section | None) -> dict[str, Any] | None:
    return section.stored() if section is not None else None


def rerun_of(run: Run) -> RerunSection:
    section = snapshot_of(run).rerun
    assert section is not None  # run_rerun always writes it
    return section


def _run_summary(run: Run) -> dict[str, Any]:
    frozen = listed(run.snapshot)
    return {
        "id": str(run.pk), "status": run.status, "title": run.title,
        "parent": str(run.parent_id) if run.parent_id else None,
        "endpoint": frozen.endpoint,
        "tools": frozen.tools,
        "rounds": run.rounds_count, "tool_calls": run.tool_calls_count,
        "errors": run.errors_count, "total_tokens": run.total_tokens, "wall_ms": run.wall_ms,
        # Dollars as exact decimal text; null: no price (never "0").
        "cost_usd": export_usd(run.cost_usd), "price_revision": price_revision(run.snapshot),
        "created_at": run.created_at.isoformat(),
        # Queued -> started is the wait for a worker; started -> finished is wall_ms.
        # An imported run was created by its import and ran when the original did.
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "imported": run_files.import_record(run),
    }


def _round_json(view: dict[str, Any], run_id: str) -> dict[str, Any]:
    return {
        "index": view["index"], "status": view["status"], "text": view["ai_text"],
        "finish_reason": view["finish_reason"], "latency_ms": view["latency_ms"],
        "input_tokens": view["input_tokens"], "output_tokens": view["output_tokens"],
        "cached_input_tokens": view["cached_input_tokens"],
        "cost_usd": export_usd(view["cost_usd"]), "price_revision": view["price_revision_id"],
        "tool_calls": [{
            "id": c["call_id"], "name": c["tool_name"], "arguments": c["arguments_raw"],
            "state": c["state"], "result": c["result_text"], "is_error": c["is_error"],
            "error_type": c["error_type"] or None, "error_message": c["error_message"] or None,
            "handled_by": c["handled_by"] or None, "duration_ms": c["duration_ms"],
            "cost_usd": export_usd(c.get("cost_usd")),
            "awaiting_decision": c["awaiting_decision"], "decision": _decision_json(c),
            "breakpoint_edit": _breakpoint_edit_json(c),
            "row_id": c["pk"], "reexecutions": [reexecution_json(e, run_id)
                                                for e in c["reexecutions"]],
        } for c in view["calls"]],
    }


def _decision_json(call: dict[str, Any]) -> dict[str, Any] | None:
    decision = call["decision"]
    if decision is None:
        return None
    return {"decision": decision["decision"], "arguments": decision["arguments"],
            "message": decision["message"], "decided_by": decision["decided_by_label"],
            "decided_at": decision["decided_at"].isoformat()}


def _breakpoint_edit_json(call: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments the call ran with after a person edited them at a breakpoint
    (`arguments` stays the model's); they replace an approval's edited ones."""
    edit = call["breakpoint_edit"]
    if edit is None:
        return None
    return {"arguments": edit["arguments"], "edited_by": edit["edited_by_label"] or None,
            "edited_at": edit["edited_at"].isoformat()}


def reexecution_json(view: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A re-execution (its lane view) as the API shows it."""
    def iso(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": view["pk"], "number": view["number"], "call": view["tool_call_id"],
        "state": view["state"], "arguments": view["arguments"],
        "result": view["result_text"], "is_error": view["is_error"],
        "error_type": view["error_type"] or None, "error_message": view["error_message"] or None,
        "requested_by": view["requested_by_label"], "requested_at": iso(view["requested_at"]),
        "started_at": iso(view["started_at"]), "finished_at": iso(view["finished_at"]),
        "duration_ms": view["duration_ms"], "approved": view["approved"],
        "tool": {"name": view["tool_name"], "kind": view["tool_kind"],
                 "version_hash": view["tool_version_hash"] or None},
        "same_result": view["same_result"], "result_diff": view["result_diff"],
        "url": execution_url(run_id, view["tool_call_id"], view["number"]),
    }


def execution_url(run_id: Any, call_id: int, number: int) -> str:
    """Where the API answers for one re-execution of a call."""
    return f"/api/runs/{run_id}/calls/{call_id}/executions/{number}"
