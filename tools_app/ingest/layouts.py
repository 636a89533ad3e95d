"""A received run's layout as stored (`IngestedLayout`): which of its rows stand for which
spans (`rows.Layout`) and the digest of what its snapshot was last built from. Read for
all the runs a request rebuilds at once, written in one upsert.

A run received before layouts had a row of their own kept its layout in its snapshot:
that one is read instead, and its next rebuild writes the row (and a snapshot without
it, as its stored digest matches nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools_app.ingest.rows import Layout
from tools_app.models import IngestedLayout, Run
from tools_app.runs.store.eventlog import run_key
from tools_app.runs.store.sql import rowsql

SNAPSHOT_LAYOUT = "snapshot__imported__otlp__layout"  # where such a run kept it


@dataclass(frozen=True)
class Stored:
    entries: Layout
    snapshot_digest: str
    has_row: bool  # False: read from the snapshot of a run received before the rows


def of(run_ids: Sequence[str]) -> dict[str, Stored]:
    """Each run's layout, by run key (`eventlog.run_key`); one query, and one more for
    the runs without a row."""
    found = {run_key(run): Stored(_listed(entries), digest, has_row=True)
             for run, entries, digest in IngestedLayout.objects.filter(
                 run_id__in=run_ids).values_list("run_id", "rows", "snapshot_digest")}
    without = [run for run in run_ids if run_key(run) not in found]
    if without:
        found |= {run_key(run): Stored(_listed(entries), "", has_row=False)
                  for run, entries in Run.objects.filter(pk__in=without).values_list(
                      "pk", SNAPSHOT_LAYOUT)}
    return found


def save(layouts: list[dict[str, Any]]) -> None:
    """Write these layouts ({"run", "rows", "snapshot_digest"}), made or replaced."""
    rowsql.insert(IngestedLayout, layouts, conflict=("run",),
                  on_conflict_update=("rows", "snapshot_digest"))


def _listed(entries: Any) -> Layout:
    return entries if isinstance(entries, list) else []
