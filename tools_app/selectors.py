"""Reads. Views, the consumer and the API get their data here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


@dataclass
class CallView:
    call: ToolCall
    bar_x: int
    bar_width: int
    failing_paths: list[str]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.call, name)


@dataclass
class RoundView:
    round: Round
    calls: list[CallView]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.round, name)


def round_views(run: Run, indexes: Iterable[int] | None = None) -> list[RoundView]:
    rounds = Round.objects.filter(run=run).order_by("index").prefetch_related("tool_calls")
    if indexes is not None:
        rounds = rounds.filter(index__in=list(indexes))
    return [RoundView(round=r, calls=_call_views(r)) for r in rounds]


def _call_views(round_: Round) -> list[CallView]:
    calls = sorted(round_.tool_calls.all(), key=lambda c: c.call_index)
    starts = [c.started_at for c in calls if c.started_at]
    ends = [_end_of(c) for c in calls if c.started_at]
    origin = min(starts) if starts else None
    span = (max(ends) - origin).total_seconds() if origin and ends else 0.0
    return [_call_view(c, origin, span) for c in calls]


def _call_view(call: ToolCall, origin: Any, span: float) -> CallView:
    """Waterfall bar in a 0..1000 viewBox (SVG attributes, so the CSP needs no inline style)."""
    x, width = 0, 0
    if origin is not None and call.started_at is not None:
        end = _end_of(call)
        total = span or 1.0
        x = int((call.started_at - origin).total_seconds() / total * 1000)
        width = max(int((end - call.started_at).total_seconds() / total * 1000), 6)
        x = min(x, 994)
    return CallView(call=call, bar_x=x, bar_width=min(width, 1000 - x),
                    failing_paths=_failing_paths(call.error_details))


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
