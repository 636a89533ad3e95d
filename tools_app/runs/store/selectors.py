"""Reads. Views, the consumer and the API get their data here."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db.models import Count, Exists, F, OuterRef, QuerySet, TextField, Window
from django.db.models.functions import Cast

from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunEvent,
    RunPause,
    RunStatus,
    ToolRegistration,
)
from tools_app.runs.store.sql import prepared

User = AbstractBaseUser | AnonymousUser


def run_list_for_user(user: User) -> QuerySet[Run]:
    return _visible_to(user, _listed_runs())


def _listed_runs() -> QuerySet[Run]:
    """Runs as the pages list and show them: with their endpoint and owner, newest first."""
    return Run.objects.select_related("endpoint", "created_by").order_by("-created_at")


def _visible_to(user: User, runs: QuerySet[Run]) -> QuerySet[Run]:
    """The runs this user may see: any for staff, else their own."""
    if getattr(user, "is_staff", False):
        return runs
    return runs.filter(created_by_id=user.pk)


class WaitingRuns(NamedTuple):
    """The runs waiting for a decision a user may take: how many, and the one that
    started waiting last (None when none waits)."""

    total: int
    newest: dict[str, Any] | None


def waiting_for(user: User) -> WaitingRuns:
    """Runs waiting for a decision this user may take: an approval or a breakpoint
    (status waiting means one of them). Whoever may see a run may decide on it (the
    views and the API check nothing more): staff any run, others their own.

    One query on the status index (the navigation asks it on every page and every few
    seconds): the count over the window, with the newest waiting run's row."""
    runs = Run.objects.filter(status=RunStatus.WAITING)
    if not getattr(user, "is_staff", False):
        # An expression, not the column: SQLite's planner would read the owner's index
        # (every run they ever started) rather than the status index (the few waiting).
        runs = runs.alias(owner=F("created_by_id") + 0).filter(owner=user.pk)
    open_pause = RunPause.objects.filter(run_id=OuterRef("pk"), resolved_at__isnull=True)
    row = runs.annotate(total=Window(Count("pk")), paused=Exists(open_pause)).order_by(
        "-waiting_since", "-pk").values(
        "pk", "title", "waiting_since", "total", "paused", "created_by__username").first()
    if row is None:
        return WaitingRuns(0, None)
    return WaitingRuns(row["total"], {
        "id": str(row["pk"]), "title": row["title"], "owner": row["created_by__username"],
        "waits_for": "a breakpoint" if row["paused"] else "an approval",
        "since": row["waiting_since"]})


def run_for_api(run_id: str | uuid.UUID, user: User) -> Run | None:
    """As `run_get_for_user`, without joining the run's endpoint and owner rows: the
    API's answers take those from the run's snapshot (a view that does follow them
    loads them lazily), and a client polling a run pays for a lookup of one table, a
    prepared read (prepared.py: every API call on a run starts with it)."""
    if not user.is_authenticated:
        return None
    try:
        key = as_uuid(run_id)
    except (ValueError, TypeError, AttributeError):  # not a UUID (a query string's id)
        return None
    if getattr(user, "is_staff", False):
        found = prepared.instances("run_by_pk", Run, _run_by_pk, key)
    else:
        found = prepared.instances("api_own_run", Run, _own_run_by_pk, key, user.pk)
    return found[0] if found else None


def run_row(run_id: str | uuid.UUID) -> Run:
    """The run's row, every field: a prepared read (prepared.py), as every run's claim
    reads it. Raises Run.DoesNotExist."""
    found = prepared.instances("run_by_pk", Run, _run_by_pk, as_uuid(run_id))
    if not found:
        raise Run.DoesNotExist(run_id)
    return found[0]


def run_rows(run_ids: Sequence[str | uuid.UUID]) -> list[Run]:
    """The rows of these runs (those that exist, in no order), every field: one
    prepared read, as a group of runs' claims reads them."""
    return prepared.instances("runs_by_pk", Run, _runs_by_pk,
                              [as_uuid(run_id) for run_id in run_ids])


def _runs_by_pk(run_ids: Any) -> QuerySet[Run]:
    return Run.objects.filter(pk__in=run_ids).order_by()


def _run_by_pk(run_id: Any) -> QuerySet[Run]:
    return Run.objects.filter(pk=run_id).order_by()


def _own_run_by_pk(run_id: Any, user_id: Any) -> QuerySet[Run]:
    return Run.objects.filter(pk=run_id, created_by_id=user_id).order_by()


def _visible_run(run_id: str | uuid.UUID, user: User, runs: QuerySet[Run]) -> Run | None:
    """The run of `runs` with this id if this user may see it, else None."""
    if not user.is_authenticated:
        return None
    try:
        return _visible_to(user, runs).filter(pk=run_id).first()
    except (ValueError, TypeError, ValidationError):  # not a UUID (a query string's id)
        return None


def endpoint_names() -> list[str]:
    return list(ModelEndpoint.objects.order_by("name").values_list("name", flat=True))


def policy_names() -> list[str]:
    return list(ErrorPolicy.objects.order_by("name").values_list("name", flat=True))


def tool_names() -> list[str]:
    return list(ToolRegistration.objects.order_by("name").values_list("name", flat=True))


def run_get_for_user(run_id: str | uuid.UUID, user: User) -> Run | None:
    """The run if this user may see it (their own, or any for staff), else None."""
    return _visible_run(run_id, user, _listed_runs())


def events_after(run_id: str | uuid.UUID, seq: int, limit: int = 500) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id, seq__gt=seq).order_by("seq")[:limit])


class EventMark(NamedTuple):
    """What the live timeline needs of an event: its seq, the round it touched, its kind
    and, for a tool call's event, the call's id (what the live batch re-renders)."""

    seq: int
    round_index: Any  # an int for events of a round; None (or anything else) otherwise
    kind: str = ""
    call_id: Any = None  # a str for a tool call's events


def event_marks_after(run_id: str | uuid.UUID, seq: int, limit: int = 500) -> list[EventMark]:
    """Like events_after, without the payloads: a wire event's payload holds a whole
    request body (the conversation so far), which a live update never needs."""
    def marks(run: Any, after: Any) -> QuerySet[RunEvent, Any]:
        return (RunEvent.objects.filter(run_id=run, seq__gt=after).order_by("seq")
                .values_list("seq", "payload__round_index", "kind", "payload__call_id")[:limit])

    # Prepared: every live batch begins with this read (prepared.py).
    return [EventMark(*row) for row in prepared.rows(("event_marks", limit), marks,
                                                     as_uuid(run_id), seq)]


class StoredEvent(NamedTuple):
    """An event as the API sends it, its payload the JSON text the database holds."""

    seq: int
    kind: str
    payload_json: str
    created_at: datetime


def event_texts_after(run_id: str | uuid.UUID, seq: int,
                      limit: int = 500) -> list[StoredEvent]:
    """Like events_after, each payload left as its stored JSON text: a client that is
    sent the events as JSON (the API's event stream) gets the text itself, not the
    text decoded into objects and encoded again, which for a wire event is a whole
    request body."""
    def texts(run: Any, after: Any) -> QuerySet[RunEvent, Any]:
        return (RunEvent.objects.filter(run_id=run, seq__gt=after).order_by("seq")
                .values_list("seq", "kind", Cast("payload", TextField()), "created_at")[:limit])

    # Prepared: every read of an event stream begins with this one (prepared.py).
    return [StoredEvent(*row) for row in prepared.rows(("event_texts", limit), texts,
                                                       as_uuid(run_id), seq)]


def run_status(run_id: str | uuid.UUID) -> str | None:
    """The run's status, or None if there is no such run (a prepared read)."""
    found = prepared.rows("run_status", lambda run: Run.objects.filter(pk=run)
                          .values_list("status"), as_uuid(run_id))
    return str(found[0][0]) if found else None


def as_uuid(run_id: str | uuid.UUID) -> uuid.UUID:
    return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(run_id)


def endpoints_for_playground() -> QuerySet[ModelEndpoint]:
    return ModelEndpoint.objects.order_by("kind", "name")


def tools_for_playground() -> QuerySet[ToolRegistration]:
    return ToolRegistration.objects.filter(enabled=True).order_by("name")


# The demo endpoint a fresh install's playground starts on (seed_demo creates it): the
# first endpoint by name would be a demo made to fail ("bad arguments").
PLAYGROUND_DEFAULT_ENDPOINT = "Scripted: weather in parallel"
# The message it starts with: what that endpoint's script answers (seed_demo's script
# looks up these two cities).
PLAYGROUND_DEFAULT_MESSAGE = "What's the weather in Hangzhou and in London?"


def playground_default_endpoint() -> ModelEndpoint | None:
    preferred = ModelEndpoint.objects.filter(name=PLAYGROUND_DEFAULT_ENDPOINT).first()
    return preferred or endpoints_for_playground().first()


def tools_a_script_calls(endpoint: ModelEndpoint) -> list[str]:
    """The ids of the enabled tools a scripted endpoint's script calls: without them
    its run would only meet "unknown tool" errors."""
    names = script_tool_names(endpoint)
    return [str(pk) for pk in tools_for_playground().filter(name__in=names).values_list(
        "pk", flat=True)]


def script_tool_names(endpoint: ModelEndpoint) -> list[str]:
    """The names of the tools a scripted endpoint's script calls, in the order it first
    calls them (none for other endpoints)."""
    if endpoint.kind != "scripted" or not isinstance(endpoint.script, list):
        return []
    names = (call.get("name") for step in endpoint.script if isinstance(step, dict)
             for call in step.get("tool_calls") or () if isinstance(call, dict))
    return list(dict.fromkeys(name for name in names if isinstance(name, str)))


def script_tools() -> dict[str, list[dict[str, str]]]:
    """Per scripted endpoint (by id): the tools its script calls, each `{"name", "id"}`
    (the id of the enabled tool of that name, what the playground ticks; "" if none)."""
    calls = {str(e.pk): script_tool_names(e)
             for e in ModelEndpoint.objects.filter(kind="scripted").only("kind", "script")}
    wanted = {name for names in calls.values() for name in names}
    ids = {name: str(pk) for pk, name in tools_for_playground().filter(
        name__in=wanted).values_list("pk", "name")}
    return {endpoint: [{"name": name, "id": ids.get(name, "")} for name in names]
            for endpoint, names in calls.items()}


def scripted_endpoint_ids() -> list[str]:
    return [str(pk) for pk in ModelEndpoint.objects.filter(kind="scripted").values_list(
        "pk", flat=True)]


def policies() -> QuerySet[ErrorPolicy]:
    return ErrorPolicy.objects.order_by("-is_default", "name")


def default_policy() -> ErrorPolicy | None:
    """The policy a run takes when none is named: a prepared read (prepared.py), as
    every run started without one looks it up."""
    found = prepared.instances("default_policy", ErrorPolicy, _first_policy)
    return found[0] if found else None


def _first_policy() -> QuerySet[ErrorPolicy]:
    return policies()[:1]
