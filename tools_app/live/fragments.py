"""HTML fragments for the live timeline: out-of-band swaps keyed by stable DOM ids.

A batch of events carries the run header and re-renders what the batch touched from the
CURRENT database state, with the same template partials the page uses: every round it
touched, except a round whose only news is that calls started or finished, of which only
those calls' lanes and the round's time axis are rendered (the rest of the round does not
depend on its calls' progress, and a round's model call carries its whole request body).
So applying a batch twice changes nothing, and the final page equals a fresh render.
A batch that starts a round also carries the run's controls that need its rounds (the
"Fork from a round" form), which the page shows only once the run has rounds.

Every batch carries the header, so a viewer that connects or resumes later gets it; it
is rendered again only when what it shows changed (`live_header`), and then its parts
that stay the same for a run's life (title, model, origin, settings) are the template's
`{% memo %}` blocks' kept renderings.

Streamed pieces (`render_fragment`) go into a round's stream, on the page only while the
round waits for its answer: a batch says which rounds it left with one
(`LiveBatch.streams`), so the consumer sends pieces only where they have a target.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from django.template.loader import render_to_string
from django.utils import timezone, translation
from django.utils.safestring import SafeString

from tools_app.models import Run
from tools_app.runs.debugger.kept_renderings import KeptRenderings
from tools_app.runs.debugger.run_header import RUN_COLUMNS, header_view, live_run
from tools_app.runs.debugger.timeline import live_views
from tools_app.runs.store.selectors import EventMark

PAGE = "tools_app/run_detail.html"

# Events that change nothing of their round but one call's lane and the round's axis.
LANE_EVENTS = frozenset({"tool_call_started", "tool_call_finished"})
# A round's status while its model call has not answered: the page shows its stream.
STREAMING = "requested"


class LiveBatch(NamedTuple):
    html: str
    # Round index -> whether the batch leaves the round's stream on the page (the round
    # waits for its answer), for every round it rendered whole (replacing the old one).
    streams: dict[int, bool]


def render_updates(run_id: uuid.UUID | str, events: Sequence[EventMark]) -> str:
    return render_batch(run_id, events).html


def render_batch(run_id: uuid.UUID | str, events: Sequence[EventMark]) -> LiveBatch:
    """The same for every viewer of the run (nothing in it depends on who watches: the
    Cancel button's CSRF token is in the page, outside the header), so viewers share it.
    One template rendering for the whole batch (`run_detail.html#live_batch`)."""
    run, owner = live_run(run_id)
    whole, lanes = touched(events)
    rounds, lane_rounds = live_views(run, whole, lanes)
    html = render_to_string(f"{PAGE}#live_batch", {
        "run": run, "header_html": live_header(run, header_view(run, owner)), "oob": True,
        "rounds": rounds, "lane_rounds": lane_rounds, "seq": events[-1].seq,
        # Only when a round starts (the form's rounds change then): a person may be
        # typing in it while the run goes on.
        "run_controls": any(event.kind == "round_started" for event in events)})
    return LiveBatch(html, {r["index"]: r["status"] == STREAMING for r in rounds})


# The run's columns that change while it goes on but that the header does not show
# (its counts are the lanes', in `header_view`). The snapshot is left out too: the header
# shows only the sections of it that `header_inputs` adds. Any other column is compared,
# shown or not, so a column added later can only make the header render more often.
NOT_IN_HEADER = frozenset({"snapshot", "last_seq", "lease_owner", "lease_token",
                           "lease_expires_at", "resume_count", "cancel_requested",
                           "waiting_since", "tool_calls_count", "errors_count",
                           "loop_detections"})
HEADER_COLUMNS = tuple(name for name in RUN_COLUMNS if name not in NOT_IN_HEADER)
HEADERS_KEPT = 1024  # runs whose last header is kept (about 2 KB each)

_headers: KeptRenderings[SafeString] = KeptRenderings(HEADERS_KEPT)


def header_inputs(run: Run, header: Mapping[str, Any]) -> tuple[Any, ...]:
    """Everything the header partial reads: the run's columns (`HEADER_COLUMNS`), the
    snapshot's sections it shows, `header_view`'s values, and the time zone and
    language its dates and words are rendered in. Equal inputs, equal header."""
    snapshot = run.snapshot if isinstance(run.snapshot, dict) else {}
    policy = snapshot.get("policy")
    return (tuple(getattr(run, name) for name in HEADER_COLUMNS), snapshot.get("endpoint"),
            policy.get("name") if isinstance(policy, dict) else policy,
            snapshot.get("imported"), dict(header), timezone.get_current_timezone_name(),
            translation.get_language())


def live_header(run: Run, header: Mapping[str, Any]) -> SafeString:
    """The run header as an out-of-band swap: the one rendered for the run's previous
    batch when its inputs are the same (the header is the same for every viewer, so a
    viewer that joined since gets the right one too), else rendered now."""
    return _headers.get(run.pk, header_inputs(run, header),
                        lambda: render_header(run, header))


def render_header(run: Run, header: Mapping[str, Any]) -> SafeString:
    html: SafeString = render_to_string(f"{PAGE}#live_header",
                                        {"run": run, "header": header, "oob": True})
    return html


def touched(events: Sequence[EventMark]) -> tuple[list[int], dict[int, set[str]]]:
    """The rounds to render whole, and for the others the calls whose lanes changed."""
    whole: set[int] = set()
    lanes: dict[int, set[str]] = {}
    for event in events:
        index = event.round_index
        if type(index) is not int:
            continue
        if event.kind in LANE_EVENTS and isinstance(event.call_id, str):
            lanes.setdefault(index, set()).add(event.call_id)
        else:
            whole.add(index)
    return sorted(whole), {i: ids for i, ids in sorted(lanes.items()) if i not in whole}


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


class PageStreams:
    """Which streamed pieces one viewer's page has a target for.

    A round's stream (#round-N-stream) is on the page while the round waits for its
    answer, empty when drawn; each batch that renders a round whole says whether it has
    one now. A round no batch of this socket rendered is one the page was served with
    (a round's start is notified before its pieces): pieces come only while it waits, so
    its stream is there. A tool call's later pieces need the block its first one made.
    """

    def __init__(self) -> None:
        self.streaming: dict[int, bool] = {}  # round -> has a stream, as a batch left it
        self.calls: dict[int, set[int]] = {}  # round -> calls whose block its stream has

    def rendered(self, streams: Mapping[int, bool]) -> None:
        for index, streaming in streams.items():
            self.streaming[index] = streaming
            self.calls.pop(index, None)  # a new, empty stream (or none)

    def admits(self, fragment: Mapping[str, Any]) -> bool:
        """Whether the page has the target of this piece (recorded as sent if so)."""
        index = fragment.get("round_index")
        if not isinstance(index, int) or not self.streaming.get(index, True):
            return False
        if fragment.get("kind") != "partial_tool_call":
            return True
        calls = self.calls.setdefault(index, set())
        call = int(fragment.get("index", 0))
        if fragment.get("name"):
            calls.add(call)  # its piece makes the call's block
            return True
        return call in calls
