"""The run page's lineage section, kept live: the list of the runs made from this one
(reruns, forks, splices), as its viewer may see them, with their statuses.

The page carries a digest of the list it was served with (`data-mark` on
#run-lineage-slot, `lineage.children_mark`) and sends it with its resume. The socket
compares it with the list as it is now at the resume, when a child is created (the
`run.children` notification, from runs.store.eventlog.notify_child_after_commit) and at
every poll (a child's status moves on; a notification lost), and sends the section again,
out of band, only when it differs. Nothing is stored in the parent's event log: a child
is not an event of its parent's run."""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from tools_app.models import Run
from tools_app.runs.debugger import lineage
from tools_app.runs.store.selectors import run_list_for_user

from .fragments import PAGE

# The longest mark a page may send (children_mark's are 16 hex digits).
MARK_MAX = 64


def lineage_update(run: Run, user: Any, mark: str | None) -> tuple[str, str | None]:
    """(the mark of `run`'s children as `user` may see them now, the lineage section's
    out-of-band HTML when that differs from `mark`, else None; None when `mark` is None,
    a client that did not say what it shows). One query when nothing changed (of `run`
    it needs only its id, title and creation time)."""
    children, more = lineage.children_of(run, run_list_for_user(user))
    now = lineage.children_mark(children, more)
    if mark is None or now == mark:
        return now, None
    current = Run.objects.get(pk=run.pk)
    found = lineage.Lineage(lineage.origin_of(current), children, more)
    html = render_to_string(f"{PAGE}#lineage_slot",
                            {"run": current, "lineage": found, "oob": True})
    return now, html
