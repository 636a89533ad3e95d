"""What the run page and the live timeline show of a run's rounds and their calls, as
display-ready dicts: bars on a time axis, approvals, what was not executed, which wire
bodies a round has (the bodies themselves for its panel, `wire_panel`); the header
above them is run_header.py. Rows come from prepared reads and values()
queries, never a model instance per call, so a run of many calls renders quickly."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pydantic_core
from django.conf import settings
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    JSONField,
    JSONNull,
    Q,
    QuerySet,
)
from django.utils import timezone

from tools_app.engine import json_nesting
from tools_app.models import (
    CallDecision,
    DecisionKind,
    Round,
    Run,
    RunEvent,
    RunPause,
    RunStatus,
    ToolCall,
    ToolCallState,
)
from tools_app.runs.debugger.durations import format_ms
from tools_app.runs.debugger.reexecution_reads import lane_adder as reexec_lanes
from tools_app.runs.snapshot.model import snapshot_of
from tools_app.runs.store.sanitize import fit_column
from tools_app.runs.store.sql import prepared
from tools_app.runs.worker.breakpoint_hooks import edited_calls


def round_views(run: Run, indexes: Iterable[int] | None = None, *,
                display: bool = True) -> list[dict[str, Any]]:
    """Rounds with their calls, as plain dicts with display values computed here.

    Rows are read with values() (no model instances) and the template gets plain dicts
    and precomputed strings: a finished run with 1,000 tool calls must render fast
    (see docs/benchmarks.md). Neither reads a round's wire bodies (a round's request
    repeats the whole conversation): the page says which it has. `display=False` gives
    the rows' own values only, what the JSON API reports: no pretty JSON or bars, which
    were half the cost of a client polling a run.
    """
    wanted = list(indexes) if indexes is not None else None
    return _rounds_of(run, wanted, _calls_by_round(run, wanted), "id", display)


def live_views(run: Run, whole: Collection[int], lanes: Mapping[int, Collection[str]],
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """For a live batch: the rounds `whole` as `round_views` shows them, and for each
    round of `lanes` (whose only news is that the calls it names started or finished)
    its time axis and those calls' lanes, the same views as in its whole round. The
    lane rounds' own rows (their model call) are not read;
    the calls of all the rounds are read together (nothing is read when there are no
    rounds). A round some of whose named calls
    match no stored call is rendered whole: an event's call id is the one the provider
    sent, redacted, and a stored one is cut to fit its column (`storage.fit_column`), so a
    very long id or one holding a secret differs, and its lane would never be updated."""
    by_round = _calls_by_round(run, [*whole, *lanes], keyed_by_index=True)
    whole_rounds = list(whole)
    lane_rounds = []
    for index, call_ids in lanes.items():
        views, axis = _call_views(by_round.get(index, []))
        changed = [view for view in views if view["call_id"] in call_ids]
        if {view["call_id"] for view in changed} != set(call_ids):
            whole_rounds.append(index)
        else:
            lane_rounds.append({"index": index, "axis": axis, "calls": views,
                                "changed": changed})
    rounds = (_rounds_of(run, sorted(whole_rounds), by_round, "index", True)
              if whole_rounds else [])
    return rounds, lane_rounds


def _calls_by_round(run: Run, indexes: list[int] | None, *, keyed_by_index: bool = False,
                    ) -> dict[int, list[dict[str, Any]]]:
    """The calls of the rounds `indexes` (all: None) with their decisions and
    re-executions, by round id (or index), in call order."""
    if indexes == []:
        return {}
    columns = ("pk", "round_id", *(("round__index",) if keyed_by_index else ()), *CALL_FIELDS)

    def calls(run_pk: Any, *wanted: Any) -> QuerySet[ToolCall, Any]:
        found = ToolCall.objects.filter(run=run_pk).order_by("call_index")
        picked: QuerySet[ToolCall, Any] = (
            found.filter(round__index__in=wanted[0]) if wanted else found).values(*columns)
        return picked

    by_round: dict[int, list[dict[str, Any]]] = {}
    approval = _approval_state(run)
    reexecutions = reexec_lanes(run, indexes=indexes)
    arguments = (run.pk,) if indexes is None else (run.pk, indexes)
    for call in prepared.rows(("calls", columns), calls, *arguments):
        key = call.pop("round__index") if keyed_by_index else call["round_id"]
        by_round.setdefault(key, []).append(reexecutions(approval(call)))
    return by_round


def _rounds_of(run: Run, indexes: list[int] | None, by_round: dict[int, list[dict[str, Any]]],
               key: str, display: bool) -> list[dict[str, Any]]:
    """The rounds `indexes` (all: None) with their calls from `by_round` (by round `key`:
    "id" or "index")."""
    if indexes == []:
        return []

    def rounds(run_pk: Any, *wanted: Any) -> QuerySet[Round, Any]:
        found = Round.objects.filter(run=run_pk).order_by("index")
        picked: QuerySet[Round, Any] = (
            found.filter(index__in=wanted[0]) if wanted else found).values(
            "id", "response", *RECORD_ROUND_FIELDS, **(wire_flags() if display else {}))
        return picked

    added = _added_messages(run)
    loops = _loop_notes(run) if display else {}
    finished = run.is_terminal
    arguments = (run.pk,) if indexes is None else (run.pk, indexes)
    return [_round_view(r, by_round.get(r[key], []), finished, display) | {
        "added_messages": added.get(r["index"], []), "final": _is_final(run, r),
        "loop_notes": loops.get(r["index"], [])}
        for r in prepared.rows(("rounds", display), rounds, *arguments)]


def _is_final(run: Run, round_: dict[str, Any]) -> bool:
    """The round whose text is the run's final answer (shown once, in the header)."""
    return (run.final_text is not None and round_["index"] == run.rounds_count - 1
            and round_["ai_text"] == run.final_text)


def unexecuted_requests(round_: Mapping[str, Any], recorded: int) -> list[dict[str, Any]]:
    """The calls a stored response proposed past the `recorded` ones: a run that stopped
    on its round-trip cap stores the round's response, but its calls never ran."""
    response = round_.get("response")
    if round_["status"] != "responded" or not isinstance(response, dict):
        return []
    requests = (response.get("ai_message") or {}).get("tool_execution_requests") or []
    return [r for r in requests[recorded:] if isinstance(r, dict)]


def _not_executed_call(round_index: int, call_index: int,
                       request: dict[str, Any]) -> dict[str, Any]:
    """A lane for a proposed call that never ran (no ToolCall row: nothing happened)."""
    raw = str(request.get("arguments") or "")
    try:
        parsed: Any = json_nesting.loads(raw) if raw else {}
    except ValueError:
        parsed = None
    return {"pk": None, "dom_id": f"round-{round_index}-unexecuted-{call_index}",
            "call_id": str(request.get("id", "")), "tool_name": str(request.get("name", "")),
            "state": "not_executed", "state_label": "Not executed", "duration_ms": None,
            "attempts": 0, "arguments": parsed, "arguments_raw": raw, "error_details": None,
            "result_text": None, "result_json": None, "is_error": False, "error_type": "",
            "error_message": "", "handled_by": "", "stopped_run": False, "traceback": "",
            "started_at": None, "finished_at": None, "decision": None,
            "awaiting_decision": False, "held_at_breakpoint": False,
            "breakpoint_edit": None, "ran_edited": False,
            "reexecutable": False, "reexecutions": []}


def _added_messages(run: Run) -> dict[int, list[dict[str, Any]]]:
    """Round index -> the messages people added at a breakpoint before its model call."""
    if not snapshot_of(run).breakpoints:
        return {}
    added: dict[int, list[dict[str, Any]]] = {}
    rows = RunPause.objects.filter(run=run, before="model", resolved_at__isnull=False).exclude(
        message="").values("round_index", "message", "resolved_by_label")
    for row in rows:
        added.setdefault(row["round_index"], []).append(dict(row))
    return added


LOOP_DETECTOR_LABELS = {"repeated_call": "repeated call", "ping_pong": "ping-pong",
                        "no_progress": "no progress"}
LOOP_OUTCOMES = {"note": "Noted only: the run went on unchanged.",
                 "tell_model": "The model was told it is repeating itself.",
                 "stop": "The policy stopped the run here: the round's calls did not run."}


def _loop_notes(run: Run) -> dict[int, list[dict[str, Any]]]:
    """Round index -> what loop health found in it (its LoopDetected events, in order).
    Only a run that recorded some reads them (its `loop_detections` count)."""
    if not run.loop_detections:
        return {}
    notes: dict[int, list[dict[str, Any]]] = {}
    payloads = RunEvent.objects.filter(run=run, kind="loop_detected").order_by(
        "seq").values_list("payload", flat=True)
    for payload in payloads:
        index = payload.get("round_index") if isinstance(payload, dict) else None
        if type(index) is not int:
            continue
        detector, action = str(payload.get("detector")), str(payload.get("action"))
        notes.setdefault(index, []).append({
            "detector": detector, "action": action,
            "label": LOOP_DETECTOR_LABELS.get(detector, detector),
            "detail": str(payload.get("detail", "")),
            "outcome": LOOP_OUTCOMES.get(action, ""),
            "told": payload.get("told") if isinstance(payload.get("told"), str) else None})
    return notes


def _breakpoint_edits(run: Run) -> dict[tuple[int, str], dict[str, Any]]:
    """(round id, stored call id) -> the arguments a person gave the call at a
    breakpoint (the ones it runs with), who and when."""
    if not snapshot_of(run).breakpoints:
        return {}
    by_round = edited_calls(str(run.pk))
    if not by_round:
        return {}
    round_ids = dict(Round.objects.filter(run=run, index__in=list(by_round)).values_list(
        "index", "id"))
    edits: dict[tuple[int, str], dict[str, Any]] = {}
    for index, calls in by_round.items():
        for call_id, pause in calls.items():
            arguments = pause.edited_arguments[call_id]
            edits[(round_ids.get(index, -1), fit_column(ToolCall, "call_id", call_id))] = {
                "arguments": arguments, "arguments_text": pretty_json(arguments),
                "edited_by_label": pause.resolved_by_label, "edited_at": pause.resolved_at}
    return edits


# A breakpoint's edit is what a call ran with once it started, unless it was refused
# (a rejection stands) or names no tool of the run: those never ran.
_NOT_RUN_STATES = frozenset({ToolCallState.PROPOSED, ToolCallState.REJECTED,
                             ToolCallState.HALLUCINATED})


def _approval_state(run: Run) -> Any:
    """Adds to a call's dict its decision (if any), whether it awaits one now, and the
    arguments a person gave it at a breakpoint if it ran with them."""
    flagged = snapshot_of(run).approval_tools()
    decisions: dict[int, dict[str, Any]] = {}
    if flagged:
        rows = CallDecision.objects.filter(run=run).values(
            "tool_call_id", "decision", "arguments", "message", "decided_by_label",
            "decided_at")
        decisions = {row["tool_call_id"]: dict(row) for row in rows}
    labels = dict(DecisionKind.choices)
    waiting = run.status == RunStatus.WAITING
    pause = run.open_pause if waiting else None
    held = frozenset(pause.call_ids) if pause is not None else frozenset()
    breakpoint_edits = _breakpoint_edits(run)

    def add(call: dict[str, Any]) -> dict[str, Any]:
        decision = decisions.get(call["pk"])
        if decision is not None:
            decision = decision | {
                "label": labels.get(decision["decision"], decision["decision"]),
                "arguments_text": (pretty_json(decision["arguments"])
                                   if decision["arguments"] is not None else None)}
        awaiting = (waiting and decision is None and call["tool_name"] in flagged
                    and call["state"] == ToolCallState.PROPOSED)
        extra = {"state_label": "Awaiting approval"} if awaiting else {}
        if call["call_id"] in held and call["state"] == ToolCallState.PROPOSED:
            extra = {"state_label": "Held at a breakpoint"}
        edit = breakpoint_edits.get((call["round_id"], call["call_id"]))
        if call["started_at"] is None or call["state"] in _NOT_RUN_STATES:
            edit = None
        return call | {"decision": decision, "awaiting_decision": awaiting,
                       "held_at_breakpoint": call["call_id"] in held,
                       "breakpoint_edit": edit,
                       "ran_edited": edit is not None or bool(decision and decision[
                           "arguments"] is not None)} | extra

    return add


# A round's own values; the page adds which wire bodies it has (`WIRE_FLAGS`), not the
# bodies: those are read when their panel is opened (`wire_panel`). A round's request
# repeats the whole conversation so far, so a long run's page (and each live batch of
# a round) would otherwise carry every round's copy of it.
RECORD_ROUND_FIELDS = ("index", "status", "finish_reason", "latency_ms", "first_token_ms",
                       "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd",
                       "price_revision_id", "attempts", "thinking", "ai_text")
WIRE_FLAGS = {"has_request": "request_json", "has_response": "response_json",
              "has_stream": "raw_stream"}
CALL_FIELDS = ("call_id", "tool_name", "state", "duration_ms", "attempts", "arguments",
               "arguments_raw", "error_details", "result_text", "result_json", "is_error",
               "error_type", "error_message", "handled_by", "stopped_run", "traceback",
               "started_at", "finished_at", "cost_usd")


def wire_flags() -> dict[str, ExpressionWrapper[Q]]:
    """Whether each body is there: neither SQL NULL nor, for a JSON one, JSON null (a
    provider's answer is stored as it came, and `null` is no body to show)."""
    return {flag: ExpressionWrapper(_present(column), output_field=BooleanField())
            for flag, column in WIRE_FLAGS.items()}


def _present(column: str) -> Q:
    present = Q(**{f"{column}__isnull": False})
    if isinstance(Round._meta.get_field(column), JSONField):
        present &= ~Q(**{column: JSONNull()})
    return present


def _round_view(round_: dict[str, Any], calls: list[dict[str, Any]], finished: bool,
                display: bool) -> dict[str, Any]:
    view = {name: round_[name] for name in RECORD_ROUND_FIELDS}
    if finished:  # while the run goes on, the rows of proposed calls are about to come
        calls = calls + [_not_executed_call(round_["index"], len(calls) + n, request)
                         for n, request in enumerate(unexecuted_requests(round_, len(calls)))]
    if not display:
        return view | {"calls": calls}
    view["calls"], view["axis"] = _call_views(calls)
    view["not_executed"] = sum(1 for c in calls if c["state"] == "not_executed")
    view["awaiting_decisions"] = sum(1 for c in calls if c["awaiting_decision"])
    view |= {flag: bool(round_[flag]) for flag in WIRE_FLAGS}
    view["has_wire"] = view["has_request"] or view["has_response"]
    return view


def wire_panel(run: Run, index: int) -> dict[str, Any] | None:
    """Round `index`'s wire request and response and its stream as it arrived, as its
    panel on the run page shows them; None: the run has no such round."""
    found = Round.objects.filter(run=run, index=index).values(
        "request_json", "response_json", "raw_stream").first()
    if found is None:
        return None
    return {"index": index,
            "wire": [_wire_view("request", found["request_json"]),
                     _wire_view("response", found["response_json"])],
            "stream": _stream_view(found["raw_stream"])}


def pretty_json(value: Any) -> str:
    """Indented JSON. pydantic-core's encoder: the standard library's falls back to pure
    Python as soon as `indent` is set, which made this the slowest part of a page."""
    return pydantic_core.to_json(value, indent=2).decode()


def _wire_view(which: str, body: Any) -> dict[str, Any]:
    """Pretty and raw JSON of a wire body; past the display limit only a head is shown
    (a long conversation's request repeats the whole history every round)."""
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    pretty = pretty_json(body) if body is not None else ""
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body is not None else ""
    return {"which": which, "large": len(pretty) > limit, "size": len(raw),
            "pretty": pretty[:limit], "raw": raw[:limit]}


def _stream_view(raw: str | None) -> dict[str, Any] | None:
    """A streamed response's event-stream lines as they arrived (stored redacted)."""
    if raw is None:
        return None
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    return {"text": raw[:limit], "large": len(raw) > limit, "size": len(raw)}


def _call_views(calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The round's calls on one time axis: 0 is the first call's start, the end the last
    call's end (a running call's is now); each bar is placed by its offset on it."""
    starts = [c["started_at"] for c in calls if c["started_at"]]
    ends = [_end_of(c) for c in calls if c["started_at"]]
    origin = min(starts) if starts else None
    span = (max(ends) - origin).total_seconds() if origin and ends else 0.0
    labels = dict(ToolCallState.choices)
    limit = settings.AGENTFORGE_DISPLAY_LIMIT
    return [_call_view(c, origin, span, labels, limit) for c in calls], _axis(span, starts)


def _axis(span: float, starts: list[Any]) -> dict[str, Any]:
    """The scale drawn above a round's bars: five evenly spaced labels, 0 to the span.
    None for fewer than two calls that started: there is nothing to compare."""
    if len(starts) < 2:
        return {"ticks": []}
    return {"ticks": [format_ms(span * 1000 * n / 4) for n in range(5)],
            "span_text": format_ms(span * 1000)}


def _call_view(call: dict[str, Any], origin: Any, span: float, labels: dict[str, str],
               limit: int) -> dict[str, Any]:
    x, width = _bar(call, origin, span)
    result = call["result_text"]
    raw_result = None
    if call["result_json"] is not None and call["result_json"] != result:
        raw_result = pretty_json(call["result_json"])
    arguments = call["arguments"]
    return call | {
        "dom_id": call.get("dom_id") or f"call-{call['pk']}",
        "state_label": call.get("state_label") or labels.get(call["state"], call["state"]),
        "running": call["state"] == ToolCallState.STARTED and call["finished_at"] is None,
        "elapsed_ms": _elapsed_ms(call),
        "elapsed_text": format_ms(float(_elapsed_ms(call) or 0)),
        # Strings, not numbers: the template then has nothing to localize per call.
        "duration_text": format_ms(call["duration_ms"]), "bar_x": str(x), "bar_width": str(width),
        "args_text": pretty_json(arguments) if arguments is not None else call["arguments_raw"],
        "failing_paths": _failing_paths(call["error_details"]),
        "result_large": result is not None and len(result) > limit,
        "result_head": result[:limit] if result is not None else None,
        "result_length": len(result) if result is not None else 0,
        "raw_result": raw_result,
    }


def _elapsed_ms(call: dict[str, Any]) -> str:
    """How long a running call has run at rendering (the page's script ticks it on)."""
    if call["started_at"] is None or call["finished_at"] is not None:
        return ""
    return str(int((timezone.now() - call["started_at"]).total_seconds() * 1000))


def _bar(call: dict[str, Any], origin: Any, span: float) -> tuple[int, int]:
    """Waterfall bar in a 0..1000 viewBox (SVG attributes, so the CSP needs no inline style)."""
    started = call["started_at"]
    if origin is None or started is None:
        return 0, 0
    total = span or 1.0
    x = min(int((started - origin).total_seconds() / total * 1000), 994)
    width = max(int((_end_of(call) - started).total_seconds() / total * 1000), 6)
    return x, min(width, 1000 - x)


def _end_of(call: dict[str, Any]) -> Any:
    """A call still running extends to now, so its bar grows while it runs."""
    if call["finished_at"] is not None:
        return call["finished_at"]
    return timezone.now() if call["state"] == "started" else call["started_at"]


def _failing_paths(details: Any) -> list[str]:
    if not isinstance(details, list):
        return []
    paths = []
    for item in details:
        if isinstance(item, dict):
            # Schema-validated tools name the value by its JSON pointer; Python tools by
            # pydantic's location.
            pointer = item.get("pointer")
            loc = (pointer if isinstance(pointer, str) else
                   ".".join(str(p) for p in item.get("loc", []))) or "(arguments)"
            paths.append(f"{loc}: {item.get('msg', '')}")
    return paths

