"""The JSON API: bearer-token auth, clear 4xx errors with a JSON body for bad input.

POST /api/runs                       start a run -> {"id": ..., "url": ...}
GET  /api/runs/<id>                  status, rounds, tool calls, final answer
GET  /api/runs/<id>/events?after=N   the run's events after seq N
GET  /api/runs/compare?a=<id>&b=<id> two runs aligned by round and call, with deltas
GET  /api/runs/<id>/export           the run as a regression fixture (docs/run-fixtures.md)
POST /api/runs/<id>/rerun            rerun it (as it was / current, replay modes)
POST /api/runs/<id>/fork             a new run from its conversation before round N, edited
POST /api/runs/<id>/decisions        decide a call awaiting approval:
     {"call_id", "decision": "approve"|"reject"|"edit", "arguments"?, "message"?}
POST /api/runs/<id>/continue         go on from a breakpoint:
     {"step": "run"|"call"|"round"|"abort", "arguments"?: {call_id: {...}}, "message"?}
Re-executing one tool call, and splicing the result into a new run: web/api_reexec.py.
GET  /api/openapi.json               all of it as OpenAPI (web/openapi.py, web/api_docs.py)
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods
from pydantic import ValidationError

from ..engine import ChatMessage, ChatRequestParameters
from ..engine.conversation import ConversationError, parse_conversation
from ..models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from ..runs import (
    approvals,
    breakpoints,
    compare,
    fixtures,
    fork,
    replay,
    rerun,
    selectors,
    services,
)
from ..runs.filters import EXPORT_FILTERS, RUN_FILTERS, FilterError, filtered_runs
from .api_docs import Operation, documented, operations_of
from .api_schemas import (
    Body,
    ContinueBody,
    Created,
    DecisionBody,
    ForkBody,
    RerunBody,
    StartRunBody,
)
from .api_tokens import user_for_token
from .export import export_response

MAX_BODY_BYTES = 1_000_000
MAX_ROW_ID = 2**63 - 1

logger = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra

    def response(self) -> JsonResponse:
        body = {"error": {"code": self.code, "message": str(self)} | self.extra}
        return JsonResponse(body, status=self.status)


View = Callable[..., HttpResponseBase]


def token_required(view: View) -> View:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return _authenticated(view, request, *args, **kwargs)
        except ApiError as error:
            return error.response()
        except Exception:
            # Never Django's debug page: it shows the stack frames' locals, the caller's
            # token among them. The error is logged with its traceback for the operator.
            logger.exception("API request %s %s failed", request.method, request.path)
            return ApiError(500, "internal_error",
                            "The server failed to answer; the error is logged").response()

    return wrapper


def _authenticated(view: View, request: HttpRequest, *args: Any,
                   **kwargs: Any) -> HttpResponseBase:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    user = user_for_token(token.strip()) if scheme.lower() == "bearer" and token else None
    if user is None or not user.is_active:
        response = ApiError(401, "unauthorized",
                            "Send a valid API token: Authorization: Bearer <token>").response()
        response["WWW-Authenticate"] = "Bearer"
        return response
    request.user = user
    return view(request, *args, **kwargs)


@documented(
    get=Operation("The runs the token's user may see, one keyset page", query=RUN_FILTERS,
                  responses={200: (None, '{"runs": [...], "next_cursor"}')}, errors=(400,)),
    post=Operation("Start a run", body=StartRunBody,
                   responses={201: (Created, "The run, started")}, errors=(400, 404, 413)))
@csrf_exempt  # token-authenticated: no cookies involved, so no CSRF exposure
@require_http_methods(["GET", "POST"])
@token_required
def runs(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        try:
            page = filtered_runs(selectors.run_list_for_user(request.user),
                                 request.GET.dict())
        except FilterError as exc:
            raise ApiError(400, "invalid_filter", str(exc), field=exc.field) from exc
        return JsonResponse({"runs": [_run_summary(r) for r in page.runs],
                             "next_cursor": page.next_cursor})
    body = parse_body(request)
    run = _start_run(request, body)
    return JsonResponse({"id": str(run.pk), "status": run.status,
                         "url": f"/runs/{run.pk}/"}, status=201)


def parse_body(request: HttpRequest) -> dict[str, Any]:
    """The JSON body, read with the model the URL's view documents for this method."""
    return _body_model(request).parse(_json_body(request))


def _body_model(request: HttpRequest) -> type[Body]:
    match = request.resolver_match
    operation = operations_of(match.func if match else None).get(str(request.method).lower())
    if operation is None or operation.body is None:
        raise LookupError(f"{request.path} documents no body for {request.method}")
    return operation.body


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        raw = request.body
    except RequestDataTooBig:  # over DATA_UPLOAD_MAX_MEMORY_SIZE: Django refuses to read it
        raw = None
    if raw is None or len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"The body is over {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"", parse_constant=_refuse_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "invalid_json", "The body is not valid JSON: nested too deeply"
                       ) from exc
    except ValueError as exc:  # NaN / Infinity, or an integer too long for int()
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "The body must be a JSON object")
    if (where := _lone_surrogate_at(body)) is not None:
        raise ApiError(400, "invalid_field", f"{where} holds a lone surrogate escape "
                       "(half of a UTF-16 pair), which is not text", field=where)
    return body


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity: Python's json accepts them, JSON does not (nor do the
    databases' JSON columns)."""
    raise ValueError(f"{name} is not a JSON value")


def _lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) that has no UTF-8 form, if any."""
    if isinstance(value, str):
        return path or "body" if not _is_text(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if not _is_text(key):
                return path or "body"
            if (found := _lone_surrogate_at(item, here)) is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _lone_surrogate_at(item, f"{path}[{index}]")) is not None:
                return found
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _start_run(request: HttpRequest, body: dict[str, Any]) -> Run:
    endpoint = _lookup(ModelEndpoint, _required(body, "endpoint"), "endpoint")
    tool_names = body.get("tools", [])
    if not isinstance(tool_names, list) or not all(isinstance(t, str) for t in tool_names):
        raise ApiError(400, "invalid_field", "tools must be a list of tool names", field="tools")
    tools = _tools(tool_names)
    policy = (_lookup(ErrorPolicy, body["policy"], "policy") if body.get("policy")
              else selectors.default_policy())
    if policy is None:
        raise ApiError(400, "missing_field", "No policy given and none exists", field="policy")
    overrides = body.get("policy_overrides") or None
    if overrides is not None and not isinstance(overrides, dict):
        raise ApiError(400, "invalid_field", "policy_overrides must be an object",
                       field="policy_overrides")
    try:
        return services.run_create(
            user=request.user, endpoint=endpoint, tools=tools, policy=policy,
            messages=_messages(_required(body, "messages")),
            parameters=_parameters(body.get("parameters") or {}),
            policy_overrides=overrides, breakpoints=body.get("breakpoints"),
        )
    except services.RunRequestError as exc:
        if exc.field is None:
            raise ApiError(400, "invalid_request", str(exc)) from exc
        raise ApiError(400, "invalid_field", str(exc), field=exc.field,
                       problems=exc.problems) from exc


def _required(body: dict[str, Any], field: str) -> Any:
    if field not in body or body[field] in (None, "", []):
        raise ApiError(400, "missing_field", f"'{field}' is required", field=field)
    return body[field]


def _lookup(model: Any, key: Any, field: str) -> Any:
    if not isinstance(key, (str, int)):
        raise ApiError(400, "invalid_field", f"{field} must be a name or an id", field=field)
    by_id = _as_id(key, model)
    found = (model.objects.filter(pk=by_id).first() if by_id is not None else None) or \
        model.objects.filter(name=str(key)).first()
    if found is None:
        raise ApiError(404 if field == "endpoint" else 400, f"unknown_{field}",
                       f"No {field} named or with id {key!r}", field=field)
    return found


def _as_id(key: Any, model: Any) -> Any:
    if model is ErrorPolicy:
        return int(key) if _is_row_id(str(key)) else None
    try:
        return uuid.UUID(str(key))
    except ValueError:
        return None


def _is_digits(text: str) -> bool:
    """0-9 only: str.isdigit() is also true for "²", which int() refuses."""
    return text.isascii() and text.isdigit()


def _is_row_id(text: str) -> bool:
    """Digits that fit a 64-bit row id (databases refuse larger numbers, and int()
    refuses strings of more than 4,300 digits)."""
    return _is_digits(text) and len(text) <= 19 and int(text) <= MAX_ROW_ID


def _tools(names: list[str]) -> list[ToolRegistration]:
    found = {t.name: t for t in ToolRegistration.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ApiError(400, "unknown_tool", f"Unknown tools: {', '.join(unknown)}",
                       field="tools", unknown=unknown)
    return [found[n] for n in names]


def _messages(raw: Any) -> list[ChatMessage]:
    """Every message kind, in the OpenAI Chat Completions format (engine.conversation)."""
    try:
        return parse_conversation(raw)
    except ConversationError as exc:
        raise ApiError(400, "invalid_field", str(exc), field=exc.field) from exc


def _parameters(raw: Any) -> ChatRequestParameters:
    if not isinstance(raw, dict):
        raise ApiError(400, "invalid_field", "parameters must be an object", field="parameters")
    try:
        return ChatRequestParameters.model_validate(raw)
    except ValidationError as exc:
        problems = [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"]}
                    for e in exc.errors(include_url=False, include_input=False)]
        raise ApiError(400, "invalid_field", "parameters are invalid", field="parameters",
                       problems=problems) from exc


def _visible(request: HttpRequest, run_id: Any) -> Run:
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None:
        raise ApiError(404, "not_found", "No such run")
    return run


@documented(get=Operation("Every run GET /api/runs would list, streamed as CSV or JSON Lines",
                          query=EXPORT_FILTERS, streams=("text/csv", "application/x-ndjson"),
                          errors=(400,)))
@csrf_exempt  # token-authenticated, like runs()
@require_GET
@token_required
def runs_export(request: HttpRequest, fmt: str) -> HttpResponseBase:
    """The runs `GET /api/runs` would list with the same filters, all of them, streamed
    as CSV or JSON Lines."""
    try:
        return export_response(selectors.run_list_for_user(request.user),
                               request.GET.dict(), fmt)
    except FilterError as exc:
        raise ApiError(400, "invalid_filter", str(exc), field=exc.field) from exc


@documented(post=Operation("Rerun the run", body=RerunBody,
                           responses={201: (None, "The new run: id, status, parent, "
                                              "differences, replay, url")},
                           errors=(400, 404, 409, 413)))
@csrf_exempt  # token-authenticated, like runs()
@require_http_methods(["POST"])
@token_required
def run_rerun(request: HttpRequest, run_id: Any) -> JsonResponse:
    """`{"snapshot": "same" | "current", "model": "recorded" | "live", "tools": "recorded" |
    "live" | "mock", "on_divergence": "stop" | "live"}`, every field optional (same, live,
    live, stop; `"mode": "as_it_was" | "current"` is the older spelling of `snapshot`): a
    new run repeating this one; 201 with its id."""
    run = _visible(request, run_id)
    body = parse_body(request) if request.body else {}
    mode = _rerun_mode(body)
    options = rerun.ReplayOptions(
        model=_choice(body, "model", replay.MODEL_MODES, "live"),
        tools=_choice(body, "tools", replay.TOOLS_MODES, "live"),
        on_divergence=_choice(body, "on_divergence", replay.DIVERGENCE_MODES, "stop"))
    try:
        new = rerun.run_rerun(run=run, user=request.user, mode=mode, replay=options)
    except rerun.RerunError as exc:
        raise ApiError(409, "cannot_rerun", str(exc)) from exc
    return JsonResponse({"id": str(new.pk), "status": new.status, "parent": str(run.pk),
                         "differences": new.snapshot["rerun"]["differences"],
                         "replay": new.snapshot["rerun"].get("replay"),
                         "url": f"/runs/{new.pk}/"}, status=201)


SNAPSHOT_CHOICES: dict[str, rerun.RerunMode] = {"same": "as_it_was", "current": "current"}


@documented(post=Operation("Decide a call awaiting approval", body=DecisionBody,
                           responses={201: (None, "The decision, stored"),
                                      200: (None, "The same decision was already stored")},
                           errors=(400, 404, 409, 413)))
@csrf_exempt  # token-authenticated, like runs()
@require_http_methods(["POST"])
@token_required
def run_decisions(request: HttpRequest, run_id: Any) -> JsonResponse:
    """A decision on a call awaiting approval: 201 when stored, 200 when the same
    decision was already stored (nothing changes), 409 when it cannot be taken now."""
    run = _visible(request, run_id)
    body = parse_body(request)
    call_id = body.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError(400, "missing_field", "'call_id' (a tool call's id) is required",
                       field="call_id")
    decision = body.get("decision")
    arguments = body.get("arguments")
    message = body.get("message", "")
    if not isinstance(decision, str):
        raise ApiError(400, "missing_field", "'decision' is required: approve, reject or edit",
                       field="decision")
    if not isinstance(message, str):
        raise ApiError(400, "invalid_field", "message must be a string", field="message")
    if decision == "edit" and arguments is None:
        raise ApiError(400, "missing_field", "an edit needs 'arguments' (a JSON object)",
                       field="arguments")
    try:
        stored, created = approvals.decide(run=run, user=request.user,
                                           request=approvals.DecisionRequest(
                                               call_id, decision,
                                               arguments=arguments, message=message))
    except approvals.DecisionError as exc:
        extra = {"problems": exc.problems} if exc.problems else {}
        raise ApiError(exc.status, exc.code, str(exc), **extra) from exc
    run.refresh_from_db()
    return JsonResponse({"call_id": stored.tool_call.call_id, "decision": stored.decision,
                         "arguments": stored.arguments, "message": stored.message,
                         "decided_by": stored.decided_by_label,
                         "decided_at": stored.decided_at.isoformat(),
                         "created": created, "run_status": run.status},
                        status=201 if created else 200)


@documented(post=Operation("A new run from this run's conversation before a round, edited",
                           body=ForkBody,
                           responses={201: (Created, "The new run (with its fork record)")},
                           errors=(400, 404, 409, 413)))
@csrf_exempt  # token-authenticated, like runs()
@require_http_methods(["POST"])
@token_required
def run_fork(request: HttpRequest, run_id: Any) -> JsonResponse:
    """`{"round": N, "messages"?: [...], "append"?: [...], "endpoint"?, "tools"?,
    "policy"?, "parameters"?, "policy_overrides"?, "snapshot"?: "same" | "current"}`: a
    new run starting from this run's conversation before round N (`messages`: that
    whole conversation as edited, OpenAI format; left out: inherited unchanged), then
    `append`; 201 with its id."""
    run = _visible(request, run_id)
    body = parse_body(request)
    mode = SNAPSHOT_CHOICES[_choice(body, "snapshot", tuple(SNAPSHOT_CHOICES), "same")]
    try:
        new = fork.run_fork(run=run, user=request.user, round_number=_required(body, "round"),
                            messages=body.get("messages"), append=body.get("append"),
                            mode=mode, config=_fork_config(body))
    except fork.ForkError as exc:
        if exc.field is None:
            raise ApiError(409, "cannot_fork", str(exc)) from exc
        raise ApiError(400, "invalid_field", str(exc), field=exc.field) from exc
    return JsonResponse({"id": str(new.pk), "status": new.status, "parent": str(run.pk),
                         "fork": new.snapshot["fork"], "url": f"/runs/{new.pk}/"},
                        status=201)


def _fork_config(body: dict[str, Any]) -> fork.ForkConfig:
    """What the fork changes: each field left out keeps the original run's."""
    tools = None
    if "tools" in body:
        names = body["tools"]
        if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
            raise ApiError(400, "invalid_field", "tools must be a list of tool names",
                           field="tools")
        tools = _tools(names)
    overrides = body.get("policy_overrides")
    if overrides is not None and not isinstance(overrides, dict):
        raise ApiError(400, "invalid_field", "policy_overrides must be an object",
                       field="policy_overrides")
    return fork.ForkConfig(
        endpoint=_lookup(ModelEndpoint, body["endpoint"], "endpoint")
        if body.get("endpoint") is not None else None,
        tools=tools,
        policy=_lookup(ErrorPolicy, body["policy"], "policy")
        if body.get("policy") is not None else None,
        parameters=_parameters(body["parameters"]) if body.get("parameters") is not None
        else None,
        policy_overrides=overrides)


def _rerun_mode(body: dict[str, Any]) -> Any:
    if "snapshot" in body:
        return SNAPSHOT_CHOICES[_choice(body, "snapshot", tuple(SNAPSHOT_CHOICES), "same")]
    return _choice(body, "mode", rerun.RERUN_MODES, "as_it_was")


def _choice(body: dict[str, Any], field: str, allowed: tuple[str, ...], default: str) -> Any:
    value = body.get(field, default)
    if value not in allowed:
        raise ApiError(400, "invalid_field", f"{field} must be one of {', '.join(allowed)}",
                       field=field)
    return value


@documented(get=Operation("Two runs aligned round by round and call by call",
                          query=("a", "b"), required_query=("a", "b"),
                          responses={200: (None, "The comparison, with deltas")},
                          errors=(400, 404)))
@csrf_exempt  # token-authenticated, like runs()
@require_GET
@token_required
def run_compare(request: HttpRequest) -> JsonResponse:
    """`?a=<run id>&b=<run id>`: the two runs aligned round by round and call by call."""
    ids = {}
    for field in ("a", "b"):
        value = request.GET.get(field, "").strip()
        if not value:
            raise ApiError(400, "missing_field", f"'{field}' is required: ?a=<run id>&b=<run id>",
                           field=field)
        ids[field] = value
    return JsonResponse(compare.compare_runs(_visible(request, ids["a"]),
                                             _visible(request, ids["b"])))


@documented(get=Operation("The run as a regression fixture (an attachment)",
                          responses={200: (None, "The fixture")}, errors=(404,)))
@csrf_exempt  # token-authenticated, like runs()
@require_GET
@token_required
def run_export(request: HttpRequest, run_id: Any) -> HttpResponseBase:
    """The run as a regression fixture (docs/run-fixtures.md)."""
    run = _visible(request, run_id)
    response = JsonResponse(fixtures.export_run(run), json_dumps_params={"ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{fixtures.export_filename(run)}"'
    return response


@documented(post=Operation("Go on from the breakpoint the run is paused at",
                           body=ContinueBody,
                           responses={200: (None, '{"pause", "run_status"}')},
                           errors=(400, 404, 409, 413)))
@csrf_exempt  # token-authenticated, like runs()
@require_http_methods(["POST"])
@token_required
def run_continue(request: HttpRequest, run_id: Any) -> JsonResponse:
    """Go on from the breakpoint the run is paused at: run on, step one call or one
    round, or abort; optionally with edited arguments for the held calls (call id ->
    object) or a message added before the model call."""
    run = _visible(request, run_id)
    body = parse_body(request)
    step = body.get("step", "run")
    message = body.get("message", "")
    if not isinstance(step, str):
        raise ApiError(400, "invalid_field", "step must be run, call, round or abort",
                       field="step")
    if not isinstance(message, str):
        raise ApiError(400, "invalid_field", "message must be a string", field="message")
    try:
        pause = breakpoints.continue_run(run=run, user=request.user, step=step,
                                         arguments=body.get("arguments"), message=message)
    except approvals.DecisionError as exc:
        extra = {"problems": exc.problems} if exc.problems else {}
        raise ApiError(exc.status, exc.code, str(exc), **extra) from exc
    run.refresh_from_db()
    return JsonResponse({"pause": _pause_json(pause), "run_status": run.status})


def _pause_json(pause: Any) -> dict[str, Any] | None:
    if pause is None:
        return None
    return {"round": pause.round_index + 1, "before": pause.before, "calls": pause.call_ids,
            "reason": pause.reason, "resolution": pause.resolution or None,
            "resolved_by": pause.resolved_by_label or None}


@documented(get=Operation("The run: status, rounds, tool calls, final answer",
                          responses={200: (None, "The run")}, errors=(404,)))
@csrf_exempt  # token-authenticated, like runs(): a POST gets 405, not a CSRF page
@require_GET
@token_required
def run_detail(request: HttpRequest, run_id: Any) -> JsonResponse:
    run = _visible(request, run_id)
    rounds = selectors.round_views(run)
    return JsonResponse(_run_summary(run) | {
        "final_answer": run.final_text,
        "error": {"type": run.error_type, "message": run.error_message} if run.error_type else None,
        "breakpoints": run.snapshot.get("breakpoints", []),
        "paused": _pause_json(run.open_pause),
        "rounds": [_round_json(r, str(run.pk)) for r in rounds],
        "splice": run.snapshot.get("splice"),
    })


@documented(get=Operation("The run's events after seq `after`", query=("after",),
                          responses={200: (None, '{"events": [...], "last_seq"}')},
                          errors=(400, 404)))
@csrf_exempt
@require_GET
@token_required
def run_events(request: HttpRequest, run_id: Any) -> JsonResponse:
    run = _visible(request, run_id)
    after_raw = request.GET.get("after", "0")
    if not _is_digits(after_raw):
        raise ApiError(400, "invalid_field", "after must be a non-negative integer", field="after")
    # Beyond any seq there is nothing (the database cannot compare a larger number).
    after = int(after_raw) if _is_row_id(after_raw) else MAX_ROW_ID
    events = selectors.events_after(run.pk, after)
    return JsonResponse({"events": [{"seq": e.seq, "kind": e.kind, "payload": e.payload,
                                     "created_at": e.created_at.isoformat()} for e in events],
                         "last_seq": events[-1].seq if events else after})


def _run_summary(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.pk), "status": run.status, "title": run.title,
        "parent": str(run.parent_id) if run.parent_id else None,
        "endpoint": run.snapshot["endpoint"]["name"],
        "tools": [t["name"] for t in run.snapshot["tools"]],
        "rounds": run.rounds_count, "tool_calls": run.tool_calls_count,
        "errors": run.errors_count, "total_tokens": run.total_tokens, "wall_ms": run.wall_ms,
        "created_at": run.created_at.isoformat(),
    }


def _round_json(view: dict[str, Any], run_id: str) -> dict[str, Any]:
    return {
        "index": view["index"], "status": view["status"], "text": view["ai_text"],
        "finish_reason": view["finish_reason"], "latency_ms": view["latency_ms"],
        "tool_calls": [{
            "id": c["call_id"], "name": c["tool_name"], "arguments": c["arguments_raw"],
            "state": c["state"], "result": c["result_text"], "is_error": c["is_error"],
            "error_type": c["error_type"] or None, "error_message": c["error_message"] or None,
            "handled_by": c["handled_by"] or None, "duration_ms": c["duration_ms"],
            "awaiting_decision": c["awaiting_decision"], "decision": _decision_json(c),
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
        "url": f"/api/runs/{run_id}/calls/{view['tool_call_id']}/executions/{view['number']}",
    }
