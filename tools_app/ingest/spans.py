"""Received spans as plain data: `SpanRecord`, read from the protos once and stored as
JSON (`IngestedSpan.data`), so a run can be rebuilt from its spans at any time.

Attribute values keep their types (strings, numbers, booleans, lists, maps; bytes as
hex). A span with no valid trace or span id is refused, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tools_app.ingest.wire import hex_id

STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR
# SpanFlags: whether the span says if its parent is remote, and that it is.
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200
RESOURCE_KEYS = ("service.name", "service.version", "telemetry.sdk.name",
                 "telemetry.sdk.language", "telemetry.sdk.version")


@dataclass(frozen=True)
class SpanRecord:
    trace_id: str
    span_id: str
    parent_id: str = ""
    name: str = ""
    start_ns: int = 0
    end_ns: int = 0
    status_code: int = 0
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    remote_parent: bool = False
    # What conventions.py read from the span, kept with it (a span never changes) in a
    # record read from its row (`from_stored`), which later rebuilds may take again from
    # span_cache; None: read each time (a record of a request, used once). Read-only.
    parsed: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def root(self) -> bool:
        """The trace's root here: no parent, or a parent in another process (the span
        a request from another service started), whose spans never come here."""
        return not self.parent_id or self.remote_parent

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR

    @property
    def duration_ms(self) -> float | None:
        if not self.start_ns or self.end_ns < self.start_ns:
            return None
        return (self.end_ns - self.start_ns) / 1e6

    def stored(self) -> dict[str, Any]:
        """The JSON kept for the span (its ids are columns of their own)."""
        return {"parent_id": self.parent_id, "name": self.name, "start_ns": self.start_ns,
                "end_ns": self.end_ns, "status_code": self.status_code,
                "status_message": self.status_message, "attributes": self.attributes,
                "events": self.events, "resource": self.resource, "scope": self.scope,
                "remote_parent": self.remote_parent}

    @classmethod
    def from_stored(cls, trace_id: str, span_id: str, data: dict[str, Any]) -> SpanRecord:
        def text(key: str) -> str:
            value = data.get(key)
            return value if isinstance(value, str) else ""

        def number(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) else 0

        def mapping(key: str) -> dict[str, Any]:
            value = data.get(key)
            return value if isinstance(value, dict) else {}

        events = data.get("events")
        return cls(trace_id=trace_id, span_id=span_id, parent_id=text("parent_id"),
                   name=text("name"), start_ns=number("start_ns"), end_ns=number("end_ns"),
                   status_code=number("status_code"), status_message=text("status_message"),
                   attributes=mapping("attributes"),
                   events=[e for e in events if isinstance(e, dict)]
                   if isinstance(events, list) else [],
                   resource=mapping("resource"), scope=text("scope"),
                   remote_parent=data.get("remote_parent") is True, parsed={})


@dataclass
class Refusal:
    """Spans of a request that were not accepted, and why (the first reason)."""

    count: int = 0
    reason: str = ""

    def add(self, reason: str) -> None:
        self.count += 1
        self.reason = self.reason or reason


def records(request: ExportTraceServiceRequest, refusal: Refusal) -> list[SpanRecord]:
    """Every span of the request as a record; spans without valid ids go to `refusal`."""
    out: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _picked(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                problem = _id_problem(span)
                if problem:
                    refusal.add(problem)
                    continue
                out.append(_record(span, resource, scope))
    return out


def _id_problem(span: Span) -> str:
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return "a span has no valid trace_id (16 bytes, not all zero)"
    if len(span.span_id) != 8 or not any(span.span_id):
        return "a span has no valid span_id (8 bytes, not all zero)"
    return ""


def _record(span: Span, resource: dict[str, Any], scope: str) -> SpanRecord:
    return SpanRecord(
        trace_id=hex_id(span.trace_id), span_id=hex_id(span.span_id),
        parent_id=hex_id(span.parent_span_id) if len(span.parent_span_id) == 8 else "",
        name=span.name, start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
        status_code=span.status.code, status_message=span.status.message,
        attributes=attributes(span.attributes),
        events=[{"name": event.name, "time_ns": event.time_unix_nano,
                 "attributes": attributes(event.attributes)} for event in span.events],
        resource=resource, scope=scope,
        remote_parent=bool(span.parent_span_id) and span.flags & HAS_IS_REMOTE != 0
        and span.flags & IS_REMOTE != 0)


def _picked(resource: dict[str, Any]) -> dict[str, Any]:
    return {key: resource[key] for key in RESOURCE_KEYS if key in resource}


def attributes(pairs: Any) -> dict[str, Any]:
    """Key-value pairs as a dict (a repeated key: the last wins, as SDKs do)."""
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None
