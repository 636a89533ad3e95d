"""Retention: deleting finished runs past an age, with everything they stored."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from tools_app.models import TERMINAL_STATUSES, Run, RunStatus

_AGE = re.compile(r"^(\d{1,6})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


class AgeError(ValueError):
    """An age that is not written like 30d, 12h or 90m."""


def parse_age(text: str) -> timedelta:
    """`30d`, `12h`, `90m` (days, hours, minutes) as a timedelta of at least a minute."""
    match = _AGE.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise AgeError(f"{text!r} is not an age: write a whole number of days, hours or "
                       "minutes, like 30d, 12h or 90m")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@dataclass(frozen=True)
class PruneReport:
    runs: int
    batches: int
    dry_run: bool

    def __str__(self) -> str:
        verb = "Would delete" if self.dry_run else "Deleted"
        return (f"{verb} {self.runs} finished run{'s' * (self.runs != 1)} with their rounds, "
                f"tool calls and events ({self.batches} batch{'es' * (self.batches != 1)})")


def prunable(older_than: timedelta, *, keep_failed: bool) -> list[str]:
    """The ids of finished runs (never one queued, running, waiting or interrupted) that
    ended before `older_than` ago, oldest first. Stored here before then too: a run
    imported from a file keeps the original's end, but its age here counts from the
    import."""
    cutoff = timezone.now() - older_than
    statuses = set(TERMINAL_STATUSES) - ({RunStatus.FAILED} if keep_failed else set())
    rows = Run.objects.filter(status__in=statuses, finished_at__lt=cutoff,
                              created_at__lt=cutoff)
    return [str(pk) for pk in rows.order_by("finished_at").values_list("pk", flat=True)]


def prune_runs(older_than: timedelta, *, keep_failed: bool = False, batch_size: int = 200,
               dry_run: bool = False) -> PruneReport:
    """Delete the prunable runs in batches of `batch_size`, each batch in a transaction
    of its own (a long prune never holds one lock for long). A run that started again
    in the meantime is left alone: each batch re-checks the statuses it deletes."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    ids = prunable(older_than, keep_failed=keep_failed)
    if dry_run:
        return PruneReport(len(ids), 0, dry_run=True)
    deleted = batches = 0
    for start in range(0, len(ids), batch_size):
        with transaction.atomic():
            batch = Run.objects.filter(pk__in=ids[start:start + batch_size],
                                       status__in=TERMINAL_STATUSES)
            deleted += batch.count()
            batch.delete()
        batches += 1
    return PruneReport(deleted, batches, dry_run=False)
