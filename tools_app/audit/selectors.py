"""Reads of the audit log: the tool calls a user may see, the tools' definition
versions, and a readable diff of two versions.

Visibility is the runs' rule: staff see every call, anyone else the calls of their own
runs; every statistic is computed over that visible set only.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connections
from django.db.models import QuerySet

from tools_app.models import ToolCall, ToolRegistration, ToolVersion

User = AbstractBaseUser | AnonymousUser

# Large columns a list of calls never shows; the run's snapshot above all (the whole
# conversation's input and every tool definition).
LIST_DEFERRED = ("result_json", "traceback", "error_details", "arguments",
                 "run__snapshot", "run__final_text", "run__error_message")


def calls_for_user(user: User) -> QuerySet[ToolCall]:
    """Every call this user may see: staff all, others those of their own runs, by the
    run's creator kept on each call (`run_owner_id`, copied by triggers:
    `audit.triggers`), so neither a list nor a statistic joins the runs: the
    indexes under `run_owner_id` give a user's calls newest first, by their runs'
    creation, or one tool's."""
    calls = ToolCall.objects.all()
    if getattr(user, "is_staff", False):
        return calls
    if user.pk is None:
        return calls.none()
    return calls.filter(run_owner_id=user.pk)


def calls_listed_for_user(user: User) -> QuerySet[ToolCall]:
    """The calls of `calls_for_user`, for lists in id order (the calls page, the API,
    exports): the same set, kept as a name of its own for the lists."""
    return calls_for_user(user)


def call_rows(calls: QuerySet[ToolCall]) -> QuerySet[ToolCall]:
    """`calls` with what a list row shows, in one query."""
    return (calls.select_related("run", "run__endpoint", "run__created_by")
            .defer(*LIST_DEFERRED))


def handler_names(calls: QuerySet[ToolCall], *, every_call: bool = False) -> list[str]:
    """The handlers that decided some visible call, for the filter's choices (at most
    100 names): every name in a loose index scan (one index seek per distinct name, not
    a DISTINCT over a million rows); for a viewer who sees only some calls
    (`every_call` false), those names their calls used, one existence check each (a
    DISTINCT over all of a user's calls would read every one)."""
    with connections[calls.db].cursor() as cursor:
        cursor.execute(_DISTINCT_HANDLERS)
        names = [row[0] for row in cursor.fetchall()]
    if every_call:
        return names
    return [name for name in names if calls.filter(handled_by=name).exists()]


# The next name after the last one found, from the handled_by index, until none is left
# (both databases run recursive CTEs lazily, so LIMIT stops it).
_DISTINCT_HANDLERS = (
    "WITH RECURSIVE h(name) AS ("
    "SELECT MIN(handled_by) FROM tools_app_toolcall WHERE handled_by > '' "
    "UNION ALL SELECT (SELECT MIN(handled_by) FROM tools_app_toolcall "
    "WHERE handled_by > h.name) FROM h WHERE h.name IS NOT NULL"
    ") SELECT name FROM h WHERE name IS NOT NULL LIMIT 100")


def versions_of(registration: ToolRegistration) -> list[ToolVersion]:
    return list(registration.versions.order_by("-created_at", "-id"))


class DiffError(ValueError):
    """A version the diff cannot find; `field` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "hunk" or "same"
    text: str


def version_by_hash(registration: ToolRegistration, field: str, value: str) -> ToolVersion:
    version = registration.versions.filter(version_hash=value).first() if value else None
    if version is None:
        raise DiffError(field, f"{field} must be the hash of one of {registration.name}'s "
                        "versions")
    return version


def diff_versions(old: ToolVersion, new: ToolVersion) -> list[DiffLine]:
    """A unified diff of the two definitions as indented JSON with sorted keys, so each
    line is one field or one schema detail. Empty when they are the same."""
    lines = difflib.unified_diff(_json_lines(old.definition), _json_lines(new.definition),
                                 fromfile=old.version_hash[:12], tofile=new.version_hash[:12],
                                 lineterm="", n=3)
    return [_diff_line(line) for line in list(lines)[2:]]  # the two file header lines


def _json_lines(definition: Any) -> list[str]:
    return json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _diff_line(line: str) -> DiffLine:
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    return DiffLine(kinds.get(line[:1], "same"), line)
