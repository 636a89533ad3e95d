"""Comparing any two runs: who they are (ids, times, endpoints, lineage, replay modes)
and how they relate, rounds aligned by index, a round's calls aligned by (tool,
arguments), the first round where they part marked, differences of arguments, results
and text as line diffs of their JSON, and the deltas of latency, tokens and errors.

So that runs of thousands of calls compare quickly (docs/benchmarks/compare.md), rows
are read with values() (the columns shown, no model instances), a round's calls are
aligned in one pass over each side with every call's key computed once, and line diffs
are computed only for the rounds wanted in detail (the API: all; the page: the first
differing rounds, up to a number of calls, the others on demand, one at a time).

Everything here is plain data (the API returns it as JSON, the page renders it
escaped): texts come from models and tools, so they are never marked safe.
"""

from __future__ import annotations

import difflib
import json
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Collection, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from tools_app.engine.providers.recorded import canonical_arguments
from tools_app.models import Round, Run, ToolCall
from tools_app.models.prices import format_delta_usd, format_usd
from tools_app.runs.debugger import lineage as lineage_marks
from tools_app.runs.debugger.durations import format_ms

TOTALS = (("wall_ms", "wall time (ms)"), ("rounds_count", "rounds"),
          ("tool_calls_count", "tool calls"), ("errors_count", "errors"),
          ("input_tokens", "input tokens"), ("output_tokens", "output tokens"),
          ("total_tokens", "total tokens"), ("cost_usd", "cost ($)"))
CALL_STATUSES = ("same", "results_differ", "arguments_differ", "only_a", "only_b")


class CallRow(NamedTuple):
    """The columns of a call that a comparison shows (read with values_list)."""

    round_id: int
    id: int
    call_index: int
    tool_name: str
    arguments_raw: str
    state: str
    result_text: str | None
    is_error: bool
    error_type: str
    error_message: str
    duration_ms: float | None


class RoundRow(NamedTuple):
    """The columns of a round that a comparison shows (read with values_list)."""

    id: int
    round_index: int  # the column `index` (a tuple has an index method)
    status: str
    finish_reason: str
    latency_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    ai_text: str | None
    cost_usd: Decimal | None


class _Side(NamedTuple):
    round: RoundRow
    calls: list[CallRow]


def compare_runs(a: Run, b: Run, *, detail_calls: int | None = None,
                 detail_rounds: Collection[int] = ()) -> dict[str, Any]:
    """The two runs compared. Every round's calls are aligned and counted; their line
    diffs and per-call views (`calls`, and `detailed` true) are given for every round
    when `detail_calls` is None, else for the differing rounds in order while their
    calls add up to at most `detail_calls` (the first differing round always), and for
    the rounds of `detail_rounds`."""
    sides_a, sides_b = _read(a), _read(b)
    indexes = range(max(len(sides_a), len(sides_b)))
    aligned = {i: _aligned(sides_a.get(i), sides_b.get(i)) for i in indexes}
    detailed = _detailed(aligned, sides_a, sides_b, detail_calls) | set(detail_rounds)
    rounds = [_round(i, sides_a.get(i), sides_b.get(i), aligned[i], i in detailed)
              for i in indexes]
    first = next((r["index"] for r in rounds if r["diverges"]), None)
    for r in rounds:
        r["first_divergent"] = r["index"] == first
    summary_a, summary_b = _summary(a), _summary(b)
    return {
        "a": summary_a, "b": summary_b,
        "relation": relation(summary_a, summary_b),
        "same_calls": first is None,
        "first_divergent_round": first + 1 if first is not None else None,
        "totals": [_delta(label, getattr(a, field), getattr(b, field))
                   for field, label in TOTALS],
        "final_text": _text_pair(a.final_text, b.final_text),
        "rounds": rounds,
    }


def compare_round(a: Run, b: Run, index: int) -> dict[str, Any] | None:
    """One round of the two runs compared in detail (the page opening a folded round),
    reading that round's rows only; None when neither run has it."""
    side_a, side_b = _read(a, index).get(index), _read(b, index).get(index)
    if side_a is None and side_b is None:
        return None
    found = _round(index, side_a, side_b, _aligned(side_a, side_b), True)
    found["first_divergent"] = False  # not known from one round
    return found


# -- the runs -----------------------------------------------------------------------------


def _summary(run: Run) -> dict[str, Any]:
    """Who the run is: read from the stored snapshot's JSON directly (its sections can
    hold a whole recording: loading the model would validate all of it)."""
    stored = run.snapshot if isinstance(run.snapshot, Mapping) else {}
    endpoint = _section(stored, "endpoint")
    return {"id": str(run.pk), "title": run.title, "status": run.status,
            "endpoint": endpoint.get("name") or None, "model": endpoint.get("model") or None,
            "error_type": run.error_type or None, "error_message": run.error_message or None,
            "created_at": run.created_at.isoformat(),
            "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at),
            "parent": str(run.parent_id) if run.parent_id else None,
            "lineage": lineage(stored), "replay": replay_modes(stored)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _section(stored: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = stored.get(name)
    return value if isinstance(value, Mapping) else {}


def lineage(stored: Mapping[str, Any]) -> dict[str, Any]:
    """Where a run came from: `kind` (run, or the first of its lineage badges' kinds,
    runs/debugger/lineage.py, whose classification this reuses), `of` the id of the run
    it came from when that run may be stored here, and `text`, the same in words ("a
    fork at round 3")."""
    rerun = _section(stored, "rerun")
    made = lineage_marks.made_from_parent(stored)
    if made is not None:
        return {"kind": made, "of": _run_id(rerun.get("of")), "text": _made_text(made, stored)}
    kinds = lineage_marks.kinds(stored)
    if "import" in kinds:
        by = _section(stored, "imported").get("imported_by")
        return {"kind": "import", "of": None,
                "text": "received over OpenTelemetry (OTLP)"
                if _section(stored, "imported").get("otlp")
                else f"imported from a run file{f' by {by}' if by else ''}"}
    if "tryit" in kinds:
        return {"kind": "tryit", "of": None,
                "text": f"a try-it run of {_section(stored, 'tryit').get('tool')}"}
    if "replay" in kinds:
        return {"kind": "replay", "of": _run_id(_section(stored, "replay").get("source")),
                "text": "a replay of a recording"}
    return {"kind": "run", "of": None, "text": "started directly"}


def _made_text(made: str, stored: Mapping[str, Any]) -> str:
    """A run made from another in words: "a fork at round 3", "a rerun (as it was)"."""
    rerun = _section(stored, "rerun")
    if made == "splice":
        splice = _section(stored, "splice")
        return (f"a splice of a re-executed result (round {splice.get('round')}, "
                f"{splice.get('tool')})")
    if made == "fork":
        return f"a fork at round {rerun.get('fork_round')}"
    mode = ("with the configuration of its day" if rerun.get("mode") == "current"
            else "as it was")
    return f"a replaying rerun ({mode})" if made == "replay" else f"a rerun ({mode})"


def _run_id(value: Any) -> str | None:
    """A stored run id, or None for anything else (a replay's source may be a file)."""
    try:
        return str(uuid.UUID(str(value))) if value else None
    except ValueError:
        return None


def replay_modes(stored: Mapping[str, Any]) -> dict[str, str] | None:
    """Which parts of the run answered from a recording (model, tools, on_divergence),
    or None for a run that replayed nothing."""
    modes = _section(_section(stored, "rerun"), "replay") or _section(stored, "replay")
    if not lineage_marks.replays(modes):
        return None
    return {key: str(modes.get(key, default)) for key, default in
            (("model", "live"), ("tools", "live"), ("on_divergence", "stop"))}


def relation(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """How the two runs are related: `kind` (child: B came from A, parent: A from B,
    siblings, same, none) and a sentence."""
    kind, text = "none", "Not related: neither run came from the other."
    if a["id"] == b["id"]:
        kind, text = "same", "A and B are the same run."
    elif a["id"] in (b["parent"], b["lineage"]["of"]):
        kind, text = "child", f"B is {b['lineage']['text']} of A."
    elif b["id"] in (a["parent"], a["lineage"]["of"]):
        kind, text = "parent", f"A is {a['lineage']['text']} of B."
    elif a["parent"] is not None and a["parent"] == b["parent"]:
        kind, text = "siblings", "A and B came from the same run."
    return {"kind": kind, "text": text}


# -- reading ------------------------------------------------------------------------------


_ROUND_FIELDS = ("id", "index", *RoundRow._fields[2:])
_CALL_FIELDS = CallRow._fields


def _read(run: Run, index: int | None = None) -> dict[int, _Side]:
    """The run's rounds by index, each with its calls in order: two queries of the
    columns shown (`index`: that round only)."""
    rounds = Round.objects.filter(run_id=run.pk)
    calls = ToolCall.objects.filter(run_id=run.pk)
    if index is not None:
        rounds, calls = rounds.filter(index=index), calls.filter(round__index=index)
    by_id = {row.id: _Side(row, []) for row in
             map(RoundRow._make, rounds.order_by().values_list(*_ROUND_FIELDS))}
    for call in map(CallRow._make, calls.order_by("round_id", "call_index")
                    .values_list(*_CALL_FIELDS)):
        side = by_id.get(call.round_id)
        if side is not None:
            side.calls.append(call)
    return {side.round.round_index: side for side in by_id.values()}


# -- aligning -----------------------------------------------------------------------------


Pair = tuple[CallRow | None, CallRow | None, str]


def _aligned(a: _Side | None, b: _Side | None) -> list[Pair]:
    return align_calls(a.calls if a else [], b.calls if b else [])


def align_calls(a: list[CallRow], b: list[CallRow]) -> list[Pair]:
    """Pairs of calls with how they compare: same tool and arguments first (in order),
    then what is left of the same tool (arguments differ), then the calls only one run
    made. One pass over each side: a call's key is computed once, and the calls of B
    wait in a queue per key and per tool."""
    keys_b = [_key(call) for call in b]
    waiting: dict[tuple[str, str], deque[int]] = defaultdict(deque)
    for position, key in enumerate(keys_b):
        waiting[key].append(position)
    taken = [False] * len(b)
    pairs: list[Pair] = []
    unmatched_a: list[CallRow] = []
    for call in a:
        queue = waiting.get(_key(call))
        if not queue:
            unmatched_a.append(call)
            continue
        position = queue.popleft()
        taken[position] = True
        match = b[position]
        same = match.result_text == call.result_text and match.is_error == call.is_error
        pairs.append((call, match, "same" if same else "results_differ"))
    by_tool: dict[str, deque[int]] = defaultdict(deque)
    for position, call in enumerate(b):
        if not taken[position]:
            by_tool[call.tool_name].append(position)
    for call in unmatched_a:
        queue = by_tool.get(call.tool_name)
        if queue:
            position = queue.popleft()
            taken[position] = True
            pairs.append((call, b[position], "arguments_differ"))
        else:
            pairs.append((call, None, "only_a"))
    pairs.extend((None, call, "only_b") for position, call in enumerate(b)
                 if not taken[position])
    return pairs


def _key(call: CallRow) -> tuple[str, str]:
    return call.tool_name, canonical_arguments(call.arguments_raw)


def _detailed(aligned: Mapping[int, list[Pair]], sides_a: Mapping[int, _Side],
              sides_b: Mapping[int, _Side], budget: int | None) -> set[int]:
    """The rounds given in detail: all (no budget), else the differing rounds in order
    while their calls fit in `budget` (the first one always)."""
    if budget is None:
        return set(aligned)
    chosen: set[int] = set()
    spent = 0
    for index, pairs in aligned.items():
        if not _diverges(sides_a.get(index), sides_b.get(index), pairs):
            continue
        if chosen and spent + len(pairs) > budget:
            break
        chosen.add(index)
        spent += len(pairs)
    return chosen


def _diverges(a: _Side | None, b: _Side | None, pairs: list[Pair]) -> bool:
    return (a is None or b is None or a.round.ai_text != b.round.ai_text
            or any(status != "same" for _, _, status in pairs))


# -- what is shown ------------------------------------------------------------------------


def _round(index: int, a: _Side | None, b: _Side | None, pairs: list[Pair],
           detailed: bool) -> dict[str, Any]:
    round_a = a.round if a else None
    round_b = b.round if b else None
    text = _text_pair(round_a.ai_text if round_a else None, round_b.ai_text if round_b else None)
    counts = Counter(status for _, _, status in pairs)
    return {"index": index, "number": index + 1, "diverges": _diverges(a, b, pairs),
            "a": _round_facts(round_a), "b": _round_facts(round_b), "text": text,
            "latency": _delta("latency (ms)", round_a.latency_ms if round_a else None,
                              round_b.latency_ms if round_b else None),
            "tokens": _delta("tokens", _tokens(round_a), _tokens(round_b)),
            "cost": _delta("cost ($)", round_a.cost_usd if round_a else None,
                           round_b.cost_usd if round_b else None),
            "counts": {status: counts[status] for status in CALL_STATUSES if counts[status]},
            "calls_count": len(pairs), "detailed": detailed,
            "calls": [_call_pair(*pair) for pair in pairs] if detailed else []}


def _round_facts(round_: RoundRow | None) -> dict[str, Any] | None:
    if round_ is None:
        return None
    return {"status": round_.status, "finish_reason": round_.finish_reason,
            "latency_ms": round_.latency_ms, "tokens": _tokens(round_)}


def _tokens(round_: RoundRow | None) -> int | None:
    if round_ is None or (round_.input_tokens is None and round_.output_tokens is None):
        return None
    return (round_.input_tokens or 0) + (round_.output_tokens or 0)


def _delta(label: str, a: Any, b: Any) -> dict[str, Any]:
    """Both values and B - A, with the display strings (durations as people read them,
    dollars as "$0.0026" or "no price": a delta with an unpriced side is none)."""
    delta = b - a if a is not None and b is not None else None
    if "($)" in label:
        return {"name": label.replace(" ($)", ""), "a": a, "b": b, "delta": delta,
                "a_text": format_usd(a), "b_text": format_usd(b),
                "delta_text": "-" if delta is None else format_delta_usd(delta)}
    shown = format_ms if "(ms)" in label else _count
    sign = "+" if delta is not None and delta > 0 else ("-" if delta and delta < 0 else "")
    return {"name": label.replace(" (ms)", ""), "a": a, "b": b,
            "delta": round(delta, 3) if isinstance(delta, float) else delta,
            "a_text": shown(a), "b_text": shown(b),
            "delta_text": "-" if delta is None else sign + shown(abs(delta))}


def _count(value: float | None) -> str:
    return "-" if value is None else str(value)


def _text_pair(a: str | None, b: str | None) -> dict[str, Any]:
    return {"a": a, "b": b, "same": a == b, "diff": line_diff(a, b) if a != b else []}


def line_diff(a: Any, b: Any) -> list[str]:
    """A unified diff of two values as indented JSON (strings as their own lines)."""
    return list(difflib.unified_diff(_lines(a), _lines(b), "a", "b", lineterm="", n=2))


def _lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines()
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _call_pair(a: CallRow | None, b: CallRow | None, status: str) -> dict[str, Any]:
    known = a or b
    assert known is not None  # a pair always holds a call
    arguments_diff: list[str] = []
    result_diff: list[str] = []
    if a is not None and b is not None:
        if status == "arguments_differ":
            arguments_diff = line_diff(_parsed(a), _parsed(b))
        if a.result_text != b.result_text or a.is_error != b.is_error:
            result_diff = line_diff(a.result_text, b.result_text)
    return {
        "tool": known.tool_name, "status": status,
        "a": _call_facts(a), "b": _call_facts(b),
        "arguments_diff": arguments_diff, "result_diff": result_diff,
        "duration": _delta("duration (ms)", a.duration_ms if a else None,
                           b.duration_ms if b else None),
    }


def _parsed(call: CallRow) -> Any:
    """The arguments as a JSON value (their text when it is not JSON)."""
    raw = call.arguments_raw
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        return raw


def _call_facts(call: CallRow | None) -> dict[str, Any] | None:
    if call is None:
        return None
    return {"id": call.id, "call_index": call.call_index, "arguments": call.arguments_raw,
            "state": call.state, "result": call.result_text, "is_error": call.is_error,
            "error_type": call.error_type or None, "error_message": call.error_message or None,
            "duration_ms": call.duration_ms}
