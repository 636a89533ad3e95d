"""The snapshot of a run received over OTLP: what the trace says about its model, tools
and first messages, marked imported (`imported.via` "OTLP", `imported.otlp` the source:
service, SDK, conventions, scopes). Which round and call rows stand for which spans is
kept beside it (`IngestedLayout`, tools_app/ingest/rows), with `inputs_digest`: a
rebuild whose snapshot would come out the same neither builds nor writes it.

A tool that is registered here under the trace's tool name is frozen as registered, so
a person may execute one of its calls again against it; any other tool is frozen from
the trace's definition (or its name alone) and never runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from tools_app.ingest.assemble import RunPlan
from tools_app.ingest.messages import Message
from tools_app.ingest.rows import digest
from tools_app.models import ToolRegistration
from tools_app.runs.snapshot.frozen import dump_messages, tools_section
from tools_app.runs.snapshot.model import (
    SNAPSHOT_VERSION,
    EndpointSnapshot,
    ImportedSection,
    PolicySnapshot,
    RunSnapshot,
    ToolSnapshot,
)
from tools_app.runs.store.sanitize import clean_json, clean_json_data

VIA = "OTLP"
# Raised when `build`, or anything it calls that is not in `inputs_digest` (the snapshot
# model's own version is), changes what it makes: every received run's snapshot rebuilt.
RECEIVED_SNAPSHOT_VERSION = 1
PROXY_VIA = "proxy"  # spans the recording proxy made of its exchanges (tools_app/proxy)
# What a received run's endpoint is called, by how its spans came.
SOURCE_NAMES = {VIA: "OpenTelemetry", PROXY_VIA: "Recording proxy"}


class Registered:
    """The tools registered here by name, each name read once per request; and the
    sections every run of a request would make alike, made once: a tool frozen from
    its definition in the trace (by name and definition), the default policy."""

    def __init__(self) -> None:
        self._found: dict[str, ToolRegistration | None] = {}
        self._from_trace: dict[tuple[str, str], ToolSnapshot] = {}
        self._policy: PolicySnapshot | None = None

    def from_trace(self, name: str, definition: dict[str, Any]) -> ToolSnapshot:
        """The tool frozen from the trace's definition (or its name alone); never run.
        Shared by the snapshots built from it, which only dump it."""
        key = (name, repr(definition))  # a definition is JSON data: repr tells them apart
        tool = self._from_trace.get(key)
        if tool is None:
            tool = self._from_trace[key] = _every_field(ToolSnapshot.model_validate(
                clean_json({"name": name, "description": definition.get("description", ""),
                            "json_schema": definition.get("parameters") or {},
                            "kind": "mock", "config": {}})))
        return tool

    def policy(self) -> PolicySnapshot:
        """The default policy with every field set (shared as `from_trace`'s tools)."""
        if self._policy is None:
            self._policy = _every_field(PolicySnapshot())
        return self._policy

    def of(self, names: Iterable[str]) -> dict[str, ToolRegistration]:
        missing = sorted(set(names) - self._found.keys())
        if missing:
            self._found |= dict.fromkeys(missing)
            self._found |= {t.name: t for t in
                            ToolRegistration.objects.filter(name__in=missing)}
        return {name: tool for name in names if (tool := self._found.get(name)) is not None}


def inputs_digest(plan: RunPlan, *, username: str | None, registered: Registered,
                  via: str = VIA) -> str:
    """What `build` makes the run's snapshot from, as one short string: equal digests,
    equal snapshots. "" when the trace names a registered tool (frozen as registered
    now, which may have changed): such a snapshot is built every time."""
    if registered.of(plan.tools):
        return ""
    return digest({"version": (RECEIVED_SNAPSHOT_VERSION, SNAPSHOT_VERSION),
                   "username": username, "via": via, "model": _model(plan),
                   "source": plan.source, "tools": plan.tools,
                   "first_messages": plan.first_messages})


def build(plan: RunPlan, *, username: str | None, registered: Registered,
          via: str = VIA) -> dict[str, Any]:
    """The stored snapshot for the run `plan` describes. `via`: how the spans came
    (OTLP, or the recording proxy)."""
    model = _model(plan)
    service = plan.source.get("service") or "unknown service"
    snapshot = RunSnapshot(
        endpoint=_every_field(EndpointSnapshot(name=f"{SOURCE_NAMES.get(via, via)}: {service}",
                                               model=model or "")),
        tools=_tools(plan, registered), policy=registered.policy(), parameters={},
        messages=dump_messages(_chat_messages(plan.first_messages)),
        # JSON data made here (string keys, lists): the encoded check is clean_json's
        # result for it, without walking every string of it.
        imported=ImportedSection.model_validate(clean_json_data({
            "from": ", ".join(plan.source.get("trace_ids", [])[:3]),
            "imported_by": username, "via": via, "otlp": plan.source})))
    return snapshot.stored()


def _model(plan: RunPlan) -> str:
    return next((r.facts.model for r in plan.rounds if r.facts and r.facts.model), "")


def _tools(plan: RunPlan, tools: Registered) -> list[ToolSnapshot]:
    registered = tools.of(plan.tools)
    out: list[ToolSnapshot] = []
    for name, definition in plan.tools.items():
        if name in registered:
            out += tools_section([registered[name]])
        else:
            out.append(tools.from_trace(name, definition))
    return out


def _every_field[S: BaseModel](section: S) -> S:
    """The section with its defaults set too: a stored snapshot keeps only the fields
    set, and run files need every field of these sections."""
    return type(section).model_validate(section.model_dump())


def _chat_messages(messages: list[Message]) -> list[ChatMessage]:
    """The first request's messages as the run's conversation (the roles the engine
    knows; text the span did not carry stays empty)."""
    out: list[ChatMessage] = []
    names = {c.call_id: c.name for m in messages for c in m.calls}
    for message in messages:
        text = message.text or ""
        if message.role in ("system", "developer"):
            out.append(SystemMessage(text=text))
        elif message.role in ("user", "human"):
            out.append(UserMessage(text=text))
        elif message.role in ("assistant", "ai", "model"):
            out.append(AiMessage(text=message.text, tool_execution_requests=tuple(
                ToolExecutionRequest(id=c.call_id, name=c.name, arguments=c.arguments or "")
                for c in message.calls)))
        elif message.role == "tool" and message.tool_call_id:
            out.append(ToolExecutionResultMessage(
                id=message.tool_call_id, tool_name=names.get(message.tool_call_id, ""),
                text=text))
    return out
