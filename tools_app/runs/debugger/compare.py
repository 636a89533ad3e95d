"""Comparing two runs: rounds aligned by index, a round's calls aligned by (tool,
arguments), the first round where they part marked, differences of arguments, results
and text as line diffs of their JSON, and the deltas of latency, tokens and errors.

Everything here is plain data (the API returns it as JSON, the page renders it
escaped): texts come from models and tools, so they are never marked safe.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from tools_app.engine.providers.recorded import canonical_arguments
from tools_app.models import Round, Run, ToolCall
from tools_app.runs.debugger.timeline import format_ms
from tools_app.runs.snapshot.model import snapshot_of

TOTALS = (("wall_ms", "wall time (ms)"), ("rounds_count", "rounds"),
          ("tool_calls_count", "tool calls"), ("errors_count", "errors"),
          ("input_tokens", "input tokens"), ("output_tokens", "output tokens"),
          ("total_tokens", "total tokens"))


def compare_runs(a: Run, b: Run) -> dict[str, Any]:
    rounds_a, rounds_b = _rounds(a), _rounds(b)
    rounds = [_round(i, rounds_a.get(i), rounds_b.get(i))
              for i in range(max(len(rounds_a), len(rounds_b)))]
    first = next((r["index"] for r in rounds if r["diverges"]), None)
    for r in rounds:
        r["first_divergent"] = r["index"] == first
    return {
        "a": _summary(a), "b": _summary(b),
        "same_calls": first is None,
        "first_divergent_round": first + 1 if first is not None else None,
        "totals": [_delta(label, getattr(a, field), getattr(b, field))
                   for field, label in TOTALS],
        "final_text": _text_pair(a.final_text, b.final_text),
        "rounds": rounds,
    }


def _summary(run: Run) -> dict[str, Any]:
    return {"id": str(run.pk), "title": run.title, "status": run.status,
            "endpoint": snapshot_of(run).endpoint.name or None,
            "error_type": run.error_type or None, "error_message": run.error_message or None,
            "created_at": run.created_at.isoformat()}


def _rounds(run: Run) -> dict[int, dict[str, Any]]:
    rounds: dict[int, dict[str, Any]] = {r.index: {"round": r, "calls": []}
                                         for r in Round.objects.filter(run=run)}
    for call in ToolCall.objects.filter(run=run).select_related("round").order_by(
            "round__index", "call_index"):
        rounds[call.round.index]["calls"].append(call)
    return rounds


def _delta(label: str, a: float | None, b: float | None) -> dict[str, Any]:
    """Both values and B - A, with the display strings (durations as people read them)."""
    delta = b - a if a is not None and b is not None else None
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


def _round(index: int, a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    round_a = a["round"] if a else None
    round_b = b["round"] if b else None
    calls = align_calls(a["calls"] if a else [], b["calls"] if b else [])
    text = _text_pair(round_a.ai_text if round_a else None, round_b.ai_text if round_b else None)
    diverges = (a is None or b is None or not text["same"]
                or any(c["status"] != "same" for c in calls))
    return {"index": index, "number": index + 1, "diverges": diverges,
            "a": _round_facts(round_a), "b": _round_facts(round_b), "text": text,
            "latency": _delta("latency (ms)", round_a.latency_ms if round_a else None,
                              round_b.latency_ms if round_b else None),
            "tokens": _delta("tokens", _tokens(round_a), _tokens(round_b)),
            "calls": calls}


def _round_facts(round_: Round | None) -> dict[str, Any] | None:
    if round_ is None:
        return None
    return {"status": round_.status, "finish_reason": round_.finish_reason,
            "latency_ms": round_.latency_ms, "tokens": _tokens(round_)}


def _tokens(round_: Round | None) -> int | None:
    if round_ is None or (round_.input_tokens is None and round_.output_tokens is None):
        return None
    return (round_.input_tokens or 0) + (round_.output_tokens or 0)


def _key(call: ToolCall) -> tuple[str, str]:
    return call.tool_name, canonical_arguments(call.arguments_raw)


def align_calls(a: list[ToolCall], b: list[ToolCall]) -> list[dict[str, Any]]:
    """Pairs of calls: same tool and arguments first (in order), then what is left of
    the same tool (arguments differ), then the calls only one run made."""
    left_b = list(b)
    pairs: list[tuple[ToolCall | None, ToolCall | None]] = []
    unmatched_a: list[ToolCall] = []
    for call in a:
        match = next((other for other in left_b if _key(other) == _key(call)), None)
        if match is None:
            unmatched_a.append(call)
            continue
        left_b.remove(match)
        pairs.append((call, match))
    for call in unmatched_a:
        match = next((other for other in left_b if other.tool_name == call.tool_name), None)
        if match is not None:
            left_b.remove(match)
        pairs.append((call, match))
    pairs.extend((None, call) for call in left_b)
    return [_call_pair(x, y) for x, y in pairs]


def _call_pair(a: ToolCall | None, b: ToolCall | None) -> dict[str, Any]:
    known = a or b
    assert known is not None  # a pair always holds a call
    arguments_same = a is not None and b is not None and _key(a) == _key(b)
    results_same = (a is not None and b is not None and a.result_text == b.result_text
                    and a.is_error == b.is_error)
    if a is None or b is None:
        status = "only_a" if b is None else "only_b"
    elif not arguments_same:
        status = "arguments_differ"
    else:
        status = "same" if results_same else "results_differ"
    return {
        "tool": known.tool_name, "status": status,
        "a": _call_facts(a), "b": _call_facts(b),
        "arguments_diff": [] if arguments_same or a is None or b is None
        else line_diff(_parsed(a), _parsed(b)),
        "result_diff": [] if results_same or a is None or b is None
        else line_diff(a.result_text, b.result_text),
        "duration": _delta("duration (ms)", a.duration_ms if a else None,
                           b.duration_ms if b else None),
    }


def _parsed(call: ToolCall) -> Any:
    return call.arguments if call.arguments is not None else call.arguments_raw


def _call_facts(call: ToolCall | None) -> dict[str, Any] | None:
    if call is None:
        return None
    return {"call_index": call.call_index, "arguments": call.arguments_raw,
            "state": call.state, "result": call.result_text, "is_error": call.is_error,
            "error_type": call.error_type or None, "error_message": call.error_message or None,
            "duration_ms": call.duration_ms}
