"""Reads. Views, the consumer and the API get their data here."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.utils import timezone

from .models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolCallState,
    ToolRegistration,
)

User = AbstractBaseUser | AnonymousUser


def run_list_for_user(user: User) -> QuerySet[Run]:
    runs = Run.objects.select_related("endpoint", "created_by").order_by("-created_at")
    if getattr(user, "is_staff", False):
        return runs
    return runs.filter(created_by_id=user.pk)


def run_get_for_user(run_id: str | uuid.UUID, user: User) -> Run | None:
    """The run if this user may see it (their own, or any for staff), else None."""
    if not user.is_authenticated:
        return None
    try:
        return run_list_for_user(user).filter(pk=run_id).first()
    except (ValueError, TypeError):  # not a UUID
        return None


def events_after(run_id: str | uuid.UUID, seq: int, limit: int = 500) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id, seq__gt=seq).order_by("seq")[:limit])


def endpoints_for_playground() -> QuerySet[ModelEndpoint]:
    return ModelEndpoint.objects.order_by("kind", "name")


def tools_for_playground() -> QuerySet[ToolRegistration]:
    return ToolRegistration.objects.filter(enabled=True).order_by("name")


def policies() -> QuerySet[ErrorPolicy]:
    return ErrorPolicy.objects.order_by("-is_default", "name")


def default_policy() -> ErrorPolicy | None:
    return policies().first()


def round_views(run: Run, indexes: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """Rounds with their calls, as plain dicts with display values computed here.

    Plain dicts and precomputed strings keep the template cheap: a finished run with
    1,000 tool calls must render fast (see docs/benchmarks.md).
    """
    rounds = Round.objects.filter(run=run).order_by("index").prefetch_related("tool_calls")
    if indexes is not None:
        rounds = rounds.filter(index__in=list(indexes))
    return [_round_view(r) for r in rounds]


ROUND_FIELDS = ("index", "status", "finish_reason", "latency_ms", "first_token_ms",
                "input_tokens", "output_tokens", "attempts", "thinking", "ai_text",
                "request_json", "response_json")


def _round_view(round_: Round) -> dict[str, Any]:
    view = {name: getattr(round_, name) for name in ROUND_FIELDS}
    view["calls"] = _call_views(round_)
    view["has_wire"] = round_.request_json is not None or round_.response_json is not None
    view["wire"] = [_wire_view("request", round_.request_json),
                    _wire_view("response", round_.response_json)]
    return view


def _wire_view(which: str, body: Any) -> dict[str, Any]:
    """Pretty and raw JSON of a wire body; past the display limit only a head is shown
    (a long conversation's request repeats the whole history every round)."""
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    pretty = json.dumps(body, indent=2, ensure_ascii=False) if body is not None else ""
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body is not None else ""
    return {"which": which, "large": len(pretty) > limit, "size": len(raw),
            "pretty": pretty[:limit], "raw": raw[:limit]}


def _call_views(round_: Round) -> list[dict[str, Any]]:
    calls = sorted(round_.tool_calls.all(), key=lambda c: c.call_index)
    starts = [c.started_at for c in calls if c.started_at]
    ends = [_end_of(c) for c in calls if c.started_at]
    origin = min(starts) if starts else None
    span = (max(ends) - origin).total_seconds() if origin and ends else 0.0
    labels = dict(ToolCallState.choices)
    return [_call_view(c, origin, span, labels) for c in calls]


def _call_view(call: ToolCall, origin: Any, span: float, labels: dict[str, str]) -> dict[str, Any]:
    x, width = _bar(call, origin, span)
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    result = call.result_text
    raw_result = None
    if call.result_json is not None and call.result_json != result:
        raw_result = json.dumps(call.result_json, indent=2, ensure_ascii=False)
    return {
        "pk": call.pk, "call_id": call.call_id, "tool_name": call.tool_name,
        "state": call.state, "state_label": labels.get(call.state, call.state),
        "duration_ms": call.duration_ms, "attempts": call.attempts,
        "bar_x": x, "bar_width": width,
        "args_text": (json.dumps(call.arguments, indent=2, ensure_ascii=False)
                      if call.arguments is not None else call.arguments_raw),
        "arguments": call.arguments, "arguments_raw": call.arguments_raw,
        "failing_paths": _failing_paths(call.error_details),
        "result_text": result, "is_error": call.is_error,
        "result_large": result is not None and len(result) > limit,
        "result_head": result[:limit] if result is not None else None,
        "result_length": len(result) if result is not None else 0,
        "raw_result": raw_result,
        "error_type": call.error_type, "error_message": call.error_message,
        "handled_by": call.handled_by, "stopped_run": call.stopped_run,
        "traceback": call.traceback,
    }


def _bar(call: ToolCall, origin: Any, span: float) -> tuple[int, int]:
    """Waterfall bar in a 0..1000 viewBox (SVG attributes, so the CSP needs no inline style)."""
    if origin is None or call.started_at is None:
        return 0, 0
    total = span or 1.0
    x = min(int((call.started_at - origin).total_seconds() / total * 1000), 994)
    width = max(int((_end_of(call) - call.started_at).total_seconds() / total * 1000), 6)
    return x, min(width, 1000 - x)


def _end_of(call: ToolCall) -> Any:
    """A call still running extends to now, so its bar grows while it runs."""
    if call.finished_at is not None:
        return call.finished_at
    return timezone.now() if call.state == "started" else call.started_at


def _failing_paths(details: Any) -> list[str]:
    if not isinstance(details, list):
        return []
    paths = []
    for item in details:
        if isinstance(item, dict):
            loc = ".".join(str(p) for p in item.get("loc", [])) or "(arguments)"
            paths.append(f"{loc}: {item.get('msg', '')}")
    return paths
