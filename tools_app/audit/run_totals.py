"""How many runs the runs list's filters select ("1,234 runs"), without letting a count
at 100,000 runs slow the page: counted up to `CAP` (then "more than CAP") and within
`BUDGET` seconds (then not counted), as the calls list counts its calls
(`audit.call_totals`). The list's default (no try-it runs, newest first) and an ordinary
user's runs are counted from an index alone; a filter only a scan decides (a rare
error type, a word) may meet the deadline, and the database is told to stop
(`audit.deadline`) rather than read every run.
"""

from __future__ import annotations

from django.db import OperationalError
from django.db.models import QuerySet

from tools_app.audit.call_totals import CAP, Tally
from tools_app.audit.deadline import deadline, stopped
from tools_app.audit.run_filters import tryit_ids
from tools_app.models import Run

__all__ = ["CAP", "Tally", "run_total"]

# Seconds a count may take. The list's default and most filters count from an index in
# a few milliseconds; one that must check every run (a rare error type, a tool, a
# word) gives up soon, as its count would take longer than the page.
BUDGET = 0.04


def run_total(matched: QuerySet[Run], tryit: str = "any") -> Tally:
    """How many runs `matched` holds (`run_filters.matching_runs`: the runs the user may
    see that the filters select) of a kind (`tryit`: any, true, false, checked), up to
    CAP, within BUDGET seconds. Runs that are no try-it runs are counted as all of them
    less the try-it ones (few, found by their ids): a test of each run would read its
    row, where the filters' own index alone counts them."""
    runs = matched.order_by().values("pk")
    try:
        with deadline(runs.db, BUDGET):
            if tryit == "true":
                found = runs.filter(is_tryit=True)[:CAP + 1].count()
                return Tally(min(found, CAP), more=found > CAP)
            tried = runs.filter(pk__in=tryit_ids(runs.db))[:CAP + 1].count() \
                if tryit == "false" else 0
            found = runs[:CAP + 1 + tried].count() - tried
    except OperationalError as exc:
        if not stopped(exc):
            raise
        return Tally(None)
    return Tally(min(found, CAP), more=found > CAP)
