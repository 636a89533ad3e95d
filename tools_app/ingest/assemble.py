"""A run's spans, whichever arrived so far and in whatever order, as the run they
describe (`RunPlan`): its rounds (model-call spans, in time order), each with the tool
calls its answer proposed, and each call with what its tool span says.

A tool span joins the call its `gen_ai.tool.call.id` / `tool_call.id` names; one without
an id that any answer proposed joins its parent's round when the parent is a model call,
else the last round that started before it. Calls whose tool span never came keep the
result the next request carried back to the model, if any; a call with neither is an
unknown outcome. Tool spans before any model-call span go in a first round standing for
the model call the trace does not hold (`MISSING_ROUND`). Nothing is made up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tools_app.ingest import conventions as conv
from tools_app.ingest.conventions import RoundFacts, ToolFacts
from tools_app.ingest.messages import Message
from tools_app.ingest.spans import SpanRecord

MISSING_ROUND = "missing"  # a round's status when the trace has no span of its model call
FINISH_REASONS = {"stop": "stop", "end_turn": "stop", "tool_calls": "tool_execution",
                  "tool_call": "tool_execution", "function_call": "tool_execution",
                  "tool_use": "tool_execution", "length": "length", "max_tokens": "length",
                  "content_filter": "content_filter"}


@dataclass
class CallPlan:
    key: str
    call_id: str
    tool_name: str
    arguments: str | None = None
    state: str = "unknown_outcome"
    result_text: str | None = None
    is_error: bool = False
    error_type: str = ""
    error_message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    span_id: str = ""


@dataclass
class RoundPlan:
    key: str
    span: SpanRecord | None = None
    facts: RoundFacts | None = None
    calls: list[CallPlan] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.span is None:
            return MISSING_ROUND
        return "failed" if self.span.failed else "responded"

    @property
    def finish_reason(self) -> str:
        raw = self.facts.finish_reason if self.facts else None
        return FINISH_REASONS.get(raw, "other") if raw else ""


@dataclass
class RunPlan:
    title: str
    failed: bool
    error_type: str
    error_message: str
    started_at: datetime | None
    finished_at: datetime | None
    rounds: list[RoundPlan]
    tools: dict[str, dict[str, Any]]
    source: dict[str, Any]
    first_messages: list[Message]

    @property
    def final_text(self) -> str | None:
        answered = [r for r in self.rounds if r.facts and r.facts.output]
        last = answered[-1].facts if answered else None
        return last.output.text if last and last.output else None

    @property
    def wall_ms(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds() * 1000


def plan(spans: list[SpanRecord]) -> RunPlan:
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    by_role: dict[str, list[SpanRecord]] = {conv.ROUND: [], conv.TOOL: [], conv.AGENT: []}
    for span in ordered:
        by_role.get(conv.role_of(span), []).append(span)
    used: set[str] = set()
    rounds = [_round(span, used) for span in by_role[conv.ROUND]]
    _place_tool_spans(rounds, by_role[conv.TOOL])
    _fill_from_later_requests(rounds)
    failed_span = _failure(ordered, by_role[conv.AGENT])
    error_type, error_message = conv.error_of(failed_span) if failed_span else (None, None)
    return RunPlan(
        title=_title(ordered, by_role[conv.AGENT], rounds),
        failed=failed_span is not None, error_type=error_type or "",
        error_message=error_message or "",
        started_at=moment(min((s.start_ns for s in ordered if s.start_ns), default=0)),
        finished_at=moment(max((s.end_ns for s in ordered), default=0)),
        rounds=rounds, tools=_tools(rounds), source=_source(ordered),
        first_messages=next((r.facts.inputs for r in rounds if r.facts and r.facts.inputs),
                            []))


def _round(span: SpanRecord, used: set[str]) -> RoundPlan:
    """A model-call span's round, with the calls its answer proposed (keyed by call id;
    an id already used by an earlier round, or none, by the span and position)."""
    facts = conv.round_facts(span)
    calls = []
    for index, call in enumerate(facts.output.calls if facts.output else []):
        key = call.call_id if call.call_id and call.call_id not in used \
            else f"proposed:{span.span_id}:{index}"
        used.add(key)
        calls.append(CallPlan(key=key, call_id=call.call_id, tool_name=call.name,
                              arguments=call.arguments))
    return RoundPlan(key=span.span_id, span=span, facts=facts, calls=calls)


def _place_tool_spans(rounds: list[RoundPlan], tools: list[SpanRecord]) -> None:
    proposed: dict[str, CallPlan] = {}
    for call in (c for r in rounds for c in r.calls if c.call_id):
        proposed.setdefault(call.call_id, call)
    for span in tools:
        facts = conv.tool_facts(span)
        _fill_from_tool_span(_call_for(span, facts, rounds, proposed), span, facts)


def _call_for(span: SpanRecord, facts: ToolFacts, rounds: list[RoundPlan],
              proposed: dict[str, CallPlan]) -> CallPlan:
    """The call a tool span executed: the one proposed with its id, else (no id) one of
    its round's proposed calls of that tool, else a call of its own in its round."""
    found = proposed.get(facts.call_id) if facts.call_id else None
    if found is not None and not found.span_id:
        return found
    round_ = _round_for(rounds, span)
    found = None if facts.call_id else _unmatched(round_, facts.name)
    if found is not None:
        return found
    key = facts.call_id if facts.call_id and facts.call_id not in proposed \
        else f"span:{span.span_id}"
    call = CallPlan(key=key, call_id=facts.call_id or "", tool_name=facts.name or "")
    round_.calls.append(call)
    if call.call_id:
        proposed.setdefault(call.call_id, call)
    return call


def _unmatched(round_: RoundPlan, name: str | None) -> CallPlan | None:
    """The round's first proposed call of the tool that no tool span has filled yet
    (for a tool span without a call id)."""
    return next((c for c in round_.calls if not c.span_id and c.tool_name == name), None)


def _round_for(rounds: list[RoundPlan], span: SpanRecord) -> RoundPlan:
    """The round a tool span without a known call id belongs to: its parent's, or the
    last one started before it (the first round stands for a missing model call)."""
    parent = next((r for r in rounds if r.key == span.parent_id), None)
    if parent is not None:
        return parent
    before = [r for r in rounds if r.span is not None and r.span.start_ns <= span.start_ns]
    if before:
        return before[-1]
    if not rounds or rounds[0].span is not None:
        rounds.insert(0, RoundPlan(key=MISSING_ROUND))
    return rounds[0]


def _fill_from_tool_span(call: CallPlan, span: SpanRecord, facts: ToolFacts) -> None:
    call.span_id = span.span_id
    call.tool_name = facts.name or call.tool_name
    call.arguments = facts.arguments if facts.arguments is not None else call.arguments
    call.result_text = facts.result
    call.started_at, call.finished_at = moment(span.start_ns), moment(span.end_ns)
    call.duration_ms = span.duration_ms
    if span.failed:
        call.state, call.is_error = "execution_error", True
        call.error_type, call.error_message = facts.error_type or "", facts.error_message or ""
    else:
        call.state = "succeeded"


def _fill_from_later_requests(rounds: list[RoundPlan]) -> None:
    """Calls with no tool span: the result a later request sent back to the model (the
    latest one that did). Read from the last request back to the first round with such
    a call, and not past it: each request of a conversation may carry all of it."""
    waiting = next((index for index, round_ in enumerate(rounds)
                    if any(not call.span_id for call in round_.calls)), None)
    if waiting is None:
        return
    results: dict[str, str | None] = {}  # the results of the requests after a round
    for index in range(len(rounds) - 1, waiting - 1, -1):
        round_ = rounds[index]
        for call in round_.calls:
            if not call.span_id and call.call_id in results:
                call.state, call.result_text = "succeeded", results[call.call_id]
        if index == waiting:
            return
        for message in reversed(round_.facts.inputs or []) if round_.facts else []:
            if message.role == "tool" and message.tool_call_id:
                results.setdefault(message.tool_call_id, message.text)


def _failure(spans: list[SpanRecord], agents: list[SpanRecord]) -> SpanRecord | None:
    """The span whose failure is the run's: a failed agent span, or a failed root."""
    return next((s for s in agents if s.failed), None) or next(
        (s for s in spans if s.failed and s.root), None)


def _title(spans: list[SpanRecord], agents: list[SpanRecord], rounds: list[RoundPlan]) -> str:
    ids = {s.span_id for s in spans}
    outermost = [s for s in agents if s.parent_id not in ids] or agents
    if outermost:
        return conv.agent_title(outermost[0])
    root = next((s for s in spans if s.root), None)
    if root is not None and root.name:
        return root.name
    model = next((r.facts.model for r in rounds if r.facts and r.facts.model), None)
    return f"chat {model}" if model else "OpenTelemetry trace"


def _tools(rounds: list[RoundPlan]) -> dict[str, dict[str, Any]]:
    """Every tool the trace offered or called, by name, with its definition if given."""
    tools: dict[str, dict[str, Any]] = {}
    for round_ in rounds:
        for definition in round_.facts.tool_definitions if round_.facts else []:
            tools.setdefault(definition["name"], definition)
    for call in (c for r in rounds for c in r.calls):
        if call.tool_name:
            tools.setdefault(call.tool_name, {"name": call.tool_name, "description": "",
                                              "parameters": {}})
    return tools


def _source(spans: list[SpanRecord]) -> dict[str, Any]:
    """Where the spans came from: service, SDK, instrumentation scopes, conventions."""
    resource = next((s.resource for s in spans if s.resource), {})
    sdk = " ".join(str(resource[k]) for k in ("telemetry.sdk.name", "telemetry.sdk.language",
                                              "telemetry.sdk.version") if k in resource)
    found: list[str] = []
    for span in spans:
        found += [c for c in conv.conventions_of(span) if c not in found]
    scopes = sorted({s.scope for s in spans if s.scope})
    return {"service": str(resource.get("service.name") or ""), "sdk": sdk,
            "conventions": found, "scopes": scopes, "trace_ids": sorted({s.trace_id
                                                                           for s in spans})}


def moment(ns: int) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns else None
