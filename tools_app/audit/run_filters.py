"""Finding runs: the filters of `GET /api/runs`, checked one by one (an unknown filter or
a bad value names itself), and keyset pagination (newest first; no OFFSET scans)."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, Model, OuterRef, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive, make_aware

from tools_app.audit.search import search_runs
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolCall

EXPORT_FILTERS = ("status", "endpoint", "tool", "user", "q", "since", "until", "tool_version",
                  "policy", "error_type", "has_errors", "waiting_for_me", "loop_detected")
RUN_FILTERS = (*EXPORT_FILTERS, "cursor", "limit")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY = 200


class FilterError(ValueError):
    """A filter the caller cannot use; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Page:
    runs: list[Run]
    next_cursor: str | None


def apply_filters[M: Model](rows: QuerySet[M], params: Mapping[str, str],
                            allowed: tuple[str, ...],
                            filters: Mapping[str, Callable[[QuerySet[M], str], QuerySet[M]]],
                            ) -> QuerySet[M]:
    """`rows` narrowed by each filter given in `params`; a parameter not in `allowed` is
    refused, naming itself and the filters there are (shared by runs and calls)."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise FilterError(unknown[0], f"unknown filter {', '.join(unknown)}: the filters are "
                          f"{', '.join(allowed)}")
    for name, apply in filters.items():
        value = params.get(name)
        if value is not None:
            rows = apply(rows, value)
    return rows


def matching_runs(runs: QuerySet[Run], params: Mapping[str, str],
                  allowed: tuple[str, ...] = RUN_FILTERS) -> QuerySet[Run]:
    """`runs` (already limited to what the caller may see) that match the filters in
    `params`, newest first; a parameter not in `allowed` is refused."""
    return apply_filters(runs, params, allowed, _FILTERS).order_by("-created_at", "-pk")


def filtered_runs(runs: QuerySet[Run], params: Mapping[str, str]) -> Page:
    """One page of the matching runs, newest first, and the cursor of the next page
    (None on the last)."""
    runs = matching_runs(runs, params)
    limit = _limit(params.get("limit"))
    if "cursor" in params:
        created, pk = _decode_cursor(params["cursor"])
        # The bound on created_at alone first: an OR of the two cases only would keep
        # SQLite from seeking the index to the cursor (it read every newer run).
        runs = runs.filter(Q(created_at__lte=created),
                           Q(created_at__lt=created) | Q(pk__lt=pk))
    page = list(runs[:limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return Page(page, _encode_cursor(page[-1]) if more else None)


def _status(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    wanted = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in wanted if v not in RunStatus.values]
    if bad or not wanted:
        raise FilterError("status", f"status must be one or more of "
                          f"{', '.join(RunStatus.values)} (comma-separated), not {value!r}")
    return runs.filter(status__in=wanted)


def _endpoint(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    try:
        return runs.filter(endpoint_id=uuid.UUID(value))
    except ValueError:
        return runs.filter(endpoint__name=value)


def _tool(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Runs in which the model called this tool."""
    return runs.filter(Exists(ToolCall.objects.filter(run_id=OuterRef("pk"), tool_name=value)))


def _user(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_by__username=value)


def _text(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Words in the user's message (the title), the final answer, the error, or in any
    tool call's arguments, result or error (`audit.search`: the databases' full-text
    indexes)."""
    text = value.strip()
    if not text or len(text) > MAX_QUERY:
        raise FilterError("q", f"q must be 1 to {MAX_QUERY} characters")
    return search_runs(runs, text)


def _since(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_at__gte=_moment("since", value))


def _until(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    return runs.filter(created_at__lt=_moment("until", value))


def _tool_version(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """Runs whose snapshot froze a tool with this version hash. Matched in the stored JSON
    text, key and value together: both databases write `"version_hash": "<hash>"`, and
    the same characters inside any string of the snapshot (a message quoting them) are
    stored escaped (\\"), so they never match."""
    if not (len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise FilterError("tool_version", "tool_version must be a tool version hash "
                          "(64 lowercase hex digits)")
    as_text = Cast("snapshot", TextField())
    return runs.alias(snapshot_text=as_text).filter(
        snapshot_text__contains=f'"version_hash": "{value}"')


POLICY_NAME_MAX = ErrorPolicy._meta.get_field("name").max_length or 100
ERROR_TYPE_MAX = Run._meta.get_field("error_type").max_length or 200
BOOLEANS = {"true": True, "false": False}


def _policy(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """The error policy's name as frozen in the run's snapshot: a policy renamed or
    deleted since still finds the runs that used it under the name they used."""
    name = _bounded("policy", value, POLICY_NAME_MAX, "an error policy's name")
    return runs.filter(snapshot__policy__name=name)


def _error_type(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """The run's error type, or any of its calls' (exactly, as stored: `ZeroDivisionError`,
    `ToolArgumentsError`, ...)."""
    kind = _bounded("error_type", value, ERROR_TYPE_MAX, "an error type")
    in_calls = ToolCall.objects.filter(run_id=OuterRef("pk"), error_type=kind)
    return runs.filter(Q(error_type=kind) | Exists(in_calls))


def _has_errors(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: the run failed or one of its calls ended in an error; false: neither."""
    if value not in BOOLEANS:
        raise FilterError("has_errors", f"has_errors must be true or false, not {value[:40]!r}")
    erring = Q(status=RunStatus.FAILED) | Exists(
        ToolCall.objects.filter(run_id=OuterRef("pk"), is_error=True))
    return runs.filter(erring if BOOLEANS[value] else ~erring)


def _waiting_for_me(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: the runs waiting for a decision the caller may take (an approval or a
    breakpoint: status waiting), the navigation's "Waiting for you"; false: the others.
    `runs` are those the caller may see, and whoever may see a run may decide on it
    (its owner; staff: any run). Every such run, of every kind: a list that hides
    some kinds by default must not hide these from this filter."""
    if value not in BOOLEANS:
        raise FilterError("waiting_for_me",
                          f"waiting_for_me must be true or false, not {value[:40]!r}")
    waiting = Q(status=RunStatus.WAITING)
    return runs.filter(waiting if BOOLEANS[value] else ~waiting)


def _loop_detected(runs: QuerySet[Run], value: str) -> QuerySet[Run]:
    """true: runs in which loop health flagged a round (a repeated call, ping-pong, no
    progress), whatever it did then; false: the others. Read from the run's count, which
    the recorder keeps with the events (a partial index holds the flagged runs)."""
    if value not in BOOLEANS:
        raise FilterError("loop_detected",
                          f"loop_detected must be true or false, not {value[:40]!r}")
    if BOOLEANS[value]:
        return runs.filter(loop_detections__gt=0)
    return runs.filter(loop_detections=0)


def _bounded(field: str, value: str, limit: int, what: str) -> str:
    text = value.strip()
    if not text or len(text) > limit:
        raise FilterError(field, f"{field} must be {what}: 1 to {limit} characters")
    return text


_FILTERS = {"status": _status, "endpoint": _endpoint, "tool": _tool, "user": _user,
            "q": _text, "since": _since, "until": _until, "tool_version": _tool_version,
            "policy": _policy, "error_type": _error_type, "has_errors": _has_errors,
            "waiting_for_me": _waiting_for_me, "loop_detected": _loop_detected}


def _moment(field: str, value: str) -> datetime:
    try:
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise FilterError(field, f"{field} must be an ISO 8601 date and time, like "
                          "2026-12-01T09:30:00Z")
    return make_aware(moment) if is_naive(moment) else moment


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not (value.isascii() and value.isdigit() and len(value) <= 3
            and 1 <= int(value) <= MAX_LIMIT):
        raise FilterError("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(value)


def _encode_cursor(run: Run) -> str:
    raw = f"{run.created_at.isoformat()}|{run.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(value: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        created, pk = raw.split("|")
        moment = parse_datetime(created)
        if moment is None:
            raise ValueError(created)
        return moment, uuid.UUID(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise FilterError("cursor", "cursor must be a next_cursor this API returned") from None
