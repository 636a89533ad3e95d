"""The compare page (`/runs/compare?a=<run id>&b=<run id>`): any two runs the user may
see, side by side (runs/debugger/compare.py).

The runs list and the calls list tick rows into a plain GET form (`?run=<id>&run=<id>`,
a call's row ticking its run); two ticked runs redirect to the page (A the older), and
anything else is refused with a message saying what to tick. The page shows the
differing rounds in detail, up to DETAIL_CALLS calls; every other round is folded, and
opening one loads its calls alone (`&round=<index>`: with htmx that round's fragment,
without it the page with that round in detail)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from tools_app.models import Run
from tools_app.runs.debugger import lineage
from tools_app.runs.debugger.compare import compare_round, compare_runs
from tools_app.runs.store import selectors
from tools_app.web.pages.access import AuthenticatedHttpRequest

TEMPLATE = "tools_app/run_compare.html"
# The calls of the differing rounds the page shows in detail at first (the first
# differing round always); two runs whose every call differs would otherwise draw
# thousands of diffs.
DETAIL_CALLS = 200
# How much of a call's arguments and result a row shows (the diff below it is whole);
# a row of two same calls shows the arguments once, briefly.
ARGUMENTS_SHOWN, RESULT_SHOWN, ARGUMENTS_BRIEF = 2000, 200, 160
STATUS_WORDS = {"same": "same", "results_differ": "results differ",
                "arguments_differ": "arguments differ", "only_a": "only in A",
                "only_b": "only in B"}


class Refused(Exception):
    """What the user asked cannot be compared; the message says what to do instead."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@require_GET
@login_required
def run_compare(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Two runs side by side: `?a=<run id>&b=<run id>`, both visible to the user, or
    the ticks of a list (`?run=<id>&run=<id>`), redirected to that."""
    try:
        if "run" in request.GET:
            a, b = _ticked(request, request.GET.getlist("run"))
            older, newer = sorted((a, b), key=lambda run: (run.created_at, str(run.pk)))
            return redirect(f"{reverse('run_compare')}?{urlencode({'a': older.pk, 'b': newer.pk})}")
        a, b = (_named(request, key) for key in ("a", "b"))
        index = _round_index(request.GET.get("round"))
    except Refused as refusal:
        return render(request, TEMPLATE, {"refusal": str(refusal)}, status=refusal.status)
    if index is not None and getattr(request, "htmx", False):
        return _round_fragment(request, a, b, index)
    comparison = compare_runs(a, b, detail_calls=DETAIL_CALLS,
                              detail_rounds=() if index is None else (index,))
    for round_ in comparison["rounds"]:
        _shown(round_)
    comparison["final_text"]["lines"] = _diff_lines(comparison["final_text"]["diff"])
    return render(request, TEMPLATE, {
        "comparison": comparison, "run_a": a, "run_b": b, "runs": (a, b),
        # each run's facts with its lineage badges, as the runs list and run page show them
        "sides": [comparison[side] | {"badges": lineage.badges(run.snapshot)}
                  for side, run in (("a", a), ("b", b))],
        "query": urlencode({"a": a.pk, "b": b.pk}),
        "swapped": urlencode({"a": b.pk, "b": a.pk}),
    })


def _round_fragment(request: AuthenticatedHttpRequest, a: Run, b: Run,
                    index: int) -> HttpResponse:
    """One folded round's calls, opened (the page's htmx request)."""
    found = compare_round(a, b, index)
    if found is None:
        raise Http404("Neither run has this round")
    _shown(found)
    return render(request, f"{TEMPLATE}#round_body",
                  {"r": found, "run_a": a, "run_b": b})


def _ticked(request: AuthenticatedHttpRequest, ticked: list[str]) -> tuple[Run, Run]:
    """The two runs of a list's ticked rows (a call's row names its run)."""
    ids = [value.strip() for value in ticked if value.strip()]
    if len(ids) != 2:
        counted = {0: "none was", 1: "one was"}.get(len(ids), f"{len(ids)} were")
        raise Refused(f"Tick exactly two rows to compare their runs: {counted} ticked.")
    if ids[0] == ids[1]:
        raise Refused("The two ticked rows are of the same run: tick rows of two "
                      "different runs.")
    return _visible(request, ids[0], "the first ticked run"), \
        _visible(request, ids[1], "the second ticked run")


def _named(request: AuthenticatedHttpRequest, key: str) -> Run:
    value = request.GET.get(key, "").strip()
    if not value:
        raise Refused("Name the two runs to compare: ?a=<run id>&b=<run id> "
                      f"({key} missing), or tick two rows in the runs list or the "
                      "tool calls list.")
    return _visible(request, value, f"run {key.upper()}")


def _visible(request: AuthenticatedHttpRequest, run_id: str, which: str) -> Run:
    run = selectors.run_get_for_user(run_id, request.user)
    if run is None:
        why = ("does not exist" if request.user.is_staff
               else "does not exist or is not one of your runs")
        raise Refused(f"Cannot compare: {which} ({run_id[:64]}) {why}.", status=404)
    return run


def _round_index(value: str | None) -> int | None:
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 6):
        raise Refused("round must be a round's index (a whole number from 0)")
    return int(value)


def _shown(round_: dict[str, Any]) -> None:
    """Adds what the page shows of a round: its counts in words, and for each call in
    detail the texts cut to their cells and the diff lines with their kind (a filter
    per line, or Django's truncatechars on long results, was most of a page's time)."""
    round_["counts_text"] = _counts_text(round_)
    round_["text"]["lines"] = _diff_lines(round_["text"]["diff"])
    for call in round_["calls"]:
        for side in ("a", "b"):
            facts = call[side]
            if facts is not None:
                facts["arguments_shown"] = _cut(facts["arguments"], ARGUMENTS_SHOWN)
                facts["arguments_brief"] = _cut(facts["arguments"], ARGUMENTS_BRIEF)
                facts["result_shown"] = _cut(facts["result"] or "", RESULT_SHOWN)
        call["diff_lines"] = _diff_lines([*call["arguments_diff"], *call["result_diff"]])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _diff_lines(lines: list[str]) -> list[tuple[str, str]]:
    """(CSS class, line) of each line of a unified diff."""
    return [(_LINE_KINDS.get(line[:1], "") if line[:3] not in ("---", "+++") else "head",
             line) for line in lines]


_LINE_KINDS = {"+": "add", "-": "del", "@": "hunk"}


def _counts_text(round_: dict[str, Any]) -> str:
    """"10 calls: 9 same, 1 arguments differ"."""
    total = round_["calls_count"]
    if not total:
        return "no tool calls"
    parts = ", ".join(f"{n} {STATUS_WORDS[status]}" for status, n in round_["counts"].items())
    return f"{total} call{'s' if total != 1 else ''}: {parts}"
