"""Reads. Views, the consumer and the API get their data here."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

import pydantic_core
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.utils import timezone

from ..models import (
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


def endpoint_names() -> list[str]:
    return list(ModelEndpoint.objects.order_by("name").values_list("name", flat=True))


def policy_names() -> list[str]:
    return list(ErrorPolicy.objects.order_by("name").values_list("name", flat=True))


def tool_names() -> list[str]:
    return list(ToolRegistration.objects.order_by("name").values_list("name", flat=True))


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


class EventMark(NamedTuple):
    """What the live timeline needs of an event: its seq and the round it touched."""

    seq: int
    round_index: Any  # an int for events of a round; None (or anything else) otherwise


def event_marks_after(run_id: str | uuid.UUID, seq: int, limit: int = 500) -> list[EventMark]:
    """Like events_after, without the payloads: a wire event's payload holds a whole
    request body (the conversation so far), which a live update never needs."""
    rows = (RunEvent.objects.filter(run_id=run_id, seq__gt=seq).order_by("seq")
            .values_list("seq", "payload__round_index")[:limit])
    return [EventMark(*row) for row in rows]


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

    Rows are read with values() (no model instances) and the template gets plain dicts
    and precomputed strings: a finished run with 1,000 tool calls must render fast
    (see docs/benchmarks.md).
    """
    rounds = Round.objects.filter(run=run).order_by("index")
    calls = ToolCall.objects.filter(run=run).order_by("call_index")
    if indexes is not None:
        wanted = list(indexes)
        rounds = rounds.filter(index__in=wanted)
        calls = calls.filter(round__index__in=wanted)
    by_round: dict[int, list[dict[str, Any]]] = {}
    for call in calls.values("pk", "round_id", *CALL_FIELDS):
        by_round.setdefault(call["round_id"], []).append(call)
    return [_round_view(r, by_round.get(r["id"], []))
            for r in rounds.values("id", *ROUND_FIELDS)]


ROUND_FIELDS = ("index", "status", "finish_reason", "latency_ms", "first_token_ms",
                "input_tokens", "output_tokens", "attempts", "thinking", "ai_text",
                "request_json", "response_json")
CALL_FIELDS = ("call_id", "tool_name", "state", "duration_ms", "attempts", "arguments",
               "arguments_raw", "error_details", "result_text", "result_json", "is_error",
               "error_type", "error_message", "handled_by", "stopped_run", "traceback",
               "started_at", "finished_at")


def _round_view(round_: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    view = {name: round_[name] for name in ROUND_FIELDS}
    view["calls"] = _call_views(calls)
    view["has_wire"] = round_["request_json"] is not None or round_["response_json"] is not None
    view["wire"] = [_wire_view("request", round_["request_json"]),
                    _wire_view("response", round_["response_json"])]
    return view


def _pretty(value: Any) -> str:
    """Indented JSON. pydantic-core's encoder: the standard library's falls back to pure
    Python as soon as `indent` is set, which made this the slowest part of a page."""
    return pydantic_core.to_json(value, indent=2).decode()


def _wire_view(which: str, body: Any) -> dict[str, Any]:
    """Pretty and raw JSON of a wire body; past the display limit only a head is shown
    (a long conversation's request repeats the whole history every round)."""
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    pretty = _pretty(body) if body is not None else ""
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body is not None else ""
    return {"which": which, "large": len(pretty) > limit, "size": len(raw),
            "pretty": pretty[:limit], "raw": raw[:limit]}


def _call_views(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    starts = [c["started_at"] for c in calls if c["started_at"]]
    ends = [_end_of(c) for c in calls if c["started_at"]]
    origin = min(starts) if starts else None
    span = (max(ends) - origin).total_seconds() if origin and ends else 0.0
    labels = dict(ToolCallState.choices)
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    return [_call_view(c, origin, span, labels, limit) for c in calls]


def _call_view(call: dict[str, Any], origin: Any, span: float, labels: dict[str, str],
               limit: int) -> dict[str, Any]:
    x, width = _bar(call, origin, span)
    result = call["result_text"]
    raw_result = None
    if call["result_json"] is not None and call["result_json"] != result:
        raw_result = _pretty(call["result_json"])
    arguments = call["arguments"]
    return call | {
        "state_label": labels.get(call["state"], call["state"]),
        # Strings, not numbers: the template then has nothing to localize per call.
        "duration_text": format_ms(call["duration_ms"]), "bar_x": str(x), "bar_width": str(width),
        "args_text": _pretty(arguments) if arguments is not None else call["arguments_raw"],
        "failing_paths": _failing_paths(call["error_details"]),
        "result_large": result is not None and len(result) > limit,
        "result_head": result[:limit] if result is not None else None,
        "result_length": len(result) if result is not None else 0,
        "raw_result": raw_result,
    }


def _bar(call: dict[str, Any], origin: Any, span: float) -> tuple[int, int]:
    """Waterfall bar in a 0..1000 viewBox (SVG attributes, so the CSP needs no inline style)."""
    started = call["started_at"]
    if origin is None or started is None:
        return 0, 0
    total = span or 1.0
    x = min(int((started - origin).total_seconds() / total * 1000), 994)
    width = max(int((_end_of(call) - started).total_seconds() / total * 1000), 6)
    return x, min(width, 1000 - x)


def _end_of(call: dict[str, Any]) -> Any:
    """A call still running extends to now, so its bar grows while it runs."""
    if call["finished_at"] is not None:
        return call["finished_at"]
    return timezone.now() if call["state"] == "started" else call["started_at"]


def _failing_paths(details: Any) -> list[str]:
    if not isinstance(details, list):
        return []
    paths = []
    for item in details:
        if isinstance(item, dict):
            loc = ".".join(str(p) for p in item.get("loc", [])) or "(arguments)"
            paths.append(f"{loc}: {item.get('msg', '')}")
    return paths


def format_ms(value: float | None) -> str:
    """A duration in milliseconds as people read it: "-", "4.2 ms", "87 ms", "1.25 s"."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
