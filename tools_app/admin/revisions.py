"""The change history of a price or a policy on its admin page: its latest revisions as a
table (the columns are the page's), a link to all of them, and what each one changed."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from ..models import ErrorPolicy, ModelPrice, PolicyRevision, PriceRevision

SHOWN = 50  # the latest revisions on the page; the link lists them all

Revision = PriceRevision | PolicyRevision


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Any], object]  # the revision -> what its cell shows (escaped)


WHEN = Column("When", lambda r: date_format(localtime(r.changed_at), "DATETIME_FORMAT"))
WHO = Column("Who", lambda r: r.changed_by.get_username() if r.changed_by else "—")
WHAT_CHANGED = Column("What changed", lambda r: describe_changes(r.changes))


def describe_changes(changes: dict[str, list[Any]]) -> str:
    return "; ".join(
        f"{name}: {json.dumps(old, ensure_ascii=False)} → {json.dumps(new, ensure_ascii=False)}"
        for name, (old, new) in changes.items()
    )


def revision_history(owner: ModelPrice | ErrorPolicy, columns: Sequence[Column],
                     owner_field: str) -> str:
    """The owner's latest revisions, newest first, one row each, and a link to the
    revisions' list filtered on it (`owner_field`: the revision's key to its owner, also
    the noun of the link)."""
    if owner.pk is None:
        return "Every save is recorded here."
    revisions: list[Revision] = list(owner.revisions.select_related("changed_by")[:SHOWN])
    if not revisions:
        return "No changes recorded."
    headers = format_html_join("", "<th>{}</th>", ((column.header,) for column in columns))
    row = "<tr>" + "<td>{}</td>" * len(columns) + "</tr>"
    rows = format_html_join("", row, ([column.value(r) for column in columns]
                                      for r in revisions))
    meta = owner.revisions.model._meta
    url = (reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
           + f"?{owner_field}__id__exact={owner.pk}")
    return format_html(
        "<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>"
        '<p><a href="{}">All revisions of this {}</a></p>', headers, rows, url, owner_field)
