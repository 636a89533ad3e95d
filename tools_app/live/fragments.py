"""HTML fragments for the live timeline: out-of-band swaps keyed by stable DOM ids.

A batch of events re-renders the run header and every round the batch touched from the
CURRENT database state, with the same template partials the page uses. So applying a
batch twice changes nothing, and the final page equals a fresh render.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.template.loader import render_to_string

from ..models import Run
from ..runs.selectors import EventMark, header_view, round_views

PAGE = "tools_app/run_detail.html"


def render_updates(run_id: uuid.UUID | str, events: Sequence[EventMark]) -> str:
    """The same for every viewer of the run (nothing in it depends on who watches: the
    Cancel button's CSRF token is in the page, outside the header), so viewers share it."""
    run = Run.objects.select_related("created_by").get(pk=run_id)
    return render_header(run) + render_changes(run, events)


def render_header(run: Run) -> str:
    return render_to_string(f"{PAGE}#header",
                            {"run": run, "header": header_view(run), "oob": True})


def render_changes(run: Run, events: Sequence[EventMark]) -> str:
    """The rounds the events touched (current state) and the seq marker."""
    touched = sorted({e.round_index for e in events if type(e.round_index) is int})
    parts = []
    for round_view in round_views(run, touched):
        body = render_to_string(f"{PAGE}#round", {"run": run, "round": round_view})
        parts.append(f'<div hx-swap-oob="beforeend:#rounds">{body}</div>')
    parts.append(render_to_string(f"{PAGE}#seq", {"seq": events[-1].seq, "oob": True}))
    return "".join(parts)


def render_fragment(fragment: dict[str, Any]) -> str:
    """A streaming piece (never stored): text delta, or a tool call forming."""
    round_index = fragment.get("round_index")
    if not isinstance(round_index, int):
        return ""
    context: dict[str, Any] = {"round_index": round_index}
    if fragment.get("kind") == "partial_text":
        context |= {"kind": "text", "delta": fragment.get("delta", "")}
    elif fragment.get("kind") == "partial_tool_call":
        context |= {"index": int(fragment.get("index", 0))}
        if fragment.get("name"):
            start = render_to_string("tools_app/_stream.html",
                                     context | {"kind": "call_start", "name": fragment["name"]})
            delta = fragment.get("arguments_delta") or ""
            if not delta:
                return start
            args = context | {"kind": "call_args", "delta": delta}
            return start + render_to_string("tools_app/_stream.html", args)
        context |= {"kind": "call_args", "delta": fragment.get("arguments_delta", "")}
    else:
        return ""
    return render_to_string("tools_app/_stream.html", context)
