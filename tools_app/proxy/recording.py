"""Exchanges recorded as runs, off the request's path.

Each exchange becomes spans in the OpenTelemetry GenAI conventions: a `chat` span (the
round: the request's messages, system text and tools, the answer, tokens, finish
reason; failed with the provider's error) and, for each tool result the request carries
back to a call an earlier round proposed, an `execute_tool` span (the call's result,
failed when the client marked it so, timed from the answer that proposed it to this
request). `tools_app.ingest.receive` builds the run from them as it does from received
traces (one run builder), live viewers included. Values are redacted of the endpoint's
secrets and the client's token before anything is stored.

Each round's span is a child of the conversation's span, which never comes (no exchange
says the conversation is over): the run stays running while exchanges come, and the
ingest idle sweep (`ingest.idle`, after AGENTFORGE_OTLP_IDLE_SECONDS without one) ends
it, failed if its last exchange failed (a provider's error), else succeeded.

A recorder (`recorders.recorder()`: a process of its own, or `Recorder`, a thread of the
serving process) takes exchanges in the order they ended, so a conversation's next
request finds the previous one recorded; `drain()` waits for it.
What queued up while it was busy is recorded as one batch (`Batch`).
Its queue is bounded (`CAPACITY`): when recording falls that far behind, an exchange is
not recorded (counted in `dropped`, logged) rather than the client kept waiting or the
process's memory growing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import queue
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connections

from tools_app.engine import ChatResponse, FinishReason, json_nesting
from tools_app.ingest import receive
from tools_app.ingest.messages import Message, ProposedCall
from tools_app.ingest.snapshot import PROXY_VIA
from tools_app.ingest.spans import STATUS_ERROR, Refusal, SpanRecord
from tools_app.models import IngestedSpan
from tools_app.proxy import conversations
from tools_app.proxy.dialects import ProxiedRequest
from tools_app.proxy.exchanges import Exchange, Outcome, outcome
from tools_app.runs.store.db import write_turn
from tools_app.runs.store.sanitize import redact

logger = logging.getLogger(__name__)

SCOPE = "agentforge.proxy"
SDK = "AgentForge recording proxy"
CAPACITY = 1000
RAW_FINISH = {FinishReason.STOP: "stop", FinishReason.TOOL_EXECUTION: "tool_calls",
              FinishReason.LENGTH: "length", FinishReason.CONTENT_FILTER: "content_filter"}


MAX_BATCH = 100


@dataclass(frozen=True)
class Prepared:
    """An exchange read and made into spans, waiting to be stored with others."""
    exchange: Exchange
    request: ProxiedRequest
    result: Outcome
    trace: str
    prefix: str
    spans: list[SpanRecord]


def record_now(exchange: Exchange, loop: asyncio.AbstractEventLoop) -> None:
    """Record one exchange (on the recorder's thread, or a test's)."""
    batch = Batch(loop)
    batch.add(exchange)
    batch.flush()


class Batch:
    """Exchanges recorded together: their spans stored and their runs rebuilt by one
    `receive`, so a backlog of many conversations' exchanges costs one rebuild per run
    rather than one per exchange. What an exchange reads of earlier records (the prefix
    it continues, the rounds that proposed the calls it answers, a round of its own run
    waiting here) has the batch stored first, so the result is as if each were recorded
    alone, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: list[Prepared] = []

    def add(self, exchange: Exchange) -> None:
        try:
            request = exchange.dialect.read(json_nesting.loads(exchange.request_body))
        except ValueError:
            return  # the view refused it before it was sent
        if self._needs_flush(exchange, request):
            self._flush_earlier()
        result = self.loop.run_until_complete(outcome(exchange))
        user_id = exchange.user.pk
        trace, prefix = conversations.trace_for(user_id, exchange.run_header,
                                                request.messages)
        if any(p.trace == trace for p in self.waiting):
            self._flush_earlier()
        spans = [_round_span(exchange, request, result, trace),
                 *_tool_spans(exchange, request, trace)]
        self.waiting.append(Prepared(exchange, request, result, trace, prefix, spans))

    def flush(self) -> None:
        """Store what waits; if that fails, each exchange alone (one bad exchange does
        not lose the others' records)."""
        waiting, self.waiting = self.waiting, []
        if not waiting:
            return
        try:
            _store(waiting)
        except Exception:
            if len(waiting) == 1:
                raise
            for prepared in waiting:
                try:
                    _store([prepared])
                except Exception:
                    logger.exception("recording a proxied exchange failed (endpoint %s)",
                                     prepared.exchange.target.endpoint_name)

    def _flush_earlier(self) -> None:
        """Store what waits before the exchange being added: a failure is logged under
        the failed exchange's endpoint, and the exchange being added still goes on."""
        waiting = self.waiting
        try:
            self.flush()
        except Exception:  # flush() raises only when one exchange was waiting
            logger.exception("recording a proxied exchange failed (endpoint %s)",
                             waiting[0].exchange.target.endpoint_name)

    def _needs_flush(self, exchange: Exchange, request: ProxiedRequest) -> bool:
        if not self.waiting:
            return False
        answers_calls = any(m.role == "tool" and m.tool_call_id for m in request.messages)
        return (self.waiting[0].exchange.user.pk != exchange.user.pk
                or not exchange.run_header or answers_calls)


def _store(waiting: list[Prepared]) -> None:
    with write_turn():  # SQLite: in turn with the server's writers (other processes too)
        _store_now(waiting)


def _store_now(waiting: list[Prepared]) -> None:
    user = waiting[0].exchange.user
    received = receive.receive([s for p in waiting for s in p.spans], user, Refusal(),
                               via=PROXY_VIA)
    if not received.runs:
        return
    runs = conversations.runs_of(user.pk, {p.trace for p in waiting})
    for prepared in waiting:
        response = prepared.result.response
        if response is not None and prepared.trace in runs:
            # A failed exchange leaves its prefix in place: the client's retry continues.
            conversations.continued(user.pk, prepared.prefix)
            conversations.remember(user.pk, runs[prepared.trace], prepared.request.messages,
                                   _answer(response))


# -- spans ----------------------------------------------------------------------------------


def _round_span(exchange: Exchange, request: ProxiedRequest, result: Outcome,
                trace: str) -> SpanRecord:
    response = result.response
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": exchange.target.kind,
        "gen_ai.request.model": request.model,
        "gen_ai.input.messages": json.dumps([_parts(m) for m in request.messages]),
    }
    if request.system is not None:
        attributes["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": request.system}])
    if request.tools:
        attributes["gen_ai.tool.definitions"] = json.dumps(request.tools)
    if response is not None:
        attributes |= _response_attributes(response)
    if result.error_type:
        attributes["error.type"] = result.error_type
    return _span(exchange, trace, uuid.uuid4().hex[:16], _span_id(trace, "conversation"),
                 f"chat {request.model}".strip(), exchange.started_ns, exchange.finished_ns,
                 attributes, result.error_message)


def _response_attributes(response: ChatResponse) -> dict[str, Any]:
    answer = _answer(response)
    finish = RAW_FINISH.get(response.finish_reason) if response.finish_reason else None
    out: dict[str, Any] = {"gen_ai.output.messages": json.dumps(
        [_parts(answer) | ({"finish_reason": finish} if finish else {})])}
    if response.model_name:
        out["gen_ai.response.model"] = response.model_name
    if response.response_id:
        out["gen_ai.response.id"] = response.response_id
    if finish:
        out["gen_ai.response.finish_reasons"] = [finish]
    usage = response.usage
    if usage is not None and usage.input_tokens is not None:
        out["gen_ai.usage.input_tokens"] = usage.input_tokens
    if usage is not None and usage.output_tokens is not None:
        out["gen_ai.usage.output_tokens"] = usage.output_tokens
    return out


def _tool_spans(exchange: Exchange, request: ProxiedRequest, trace: str) -> list[SpanRecord]:
    """A span per tool result the request carries for a call an earlier round of this
    run proposed (sent again in later requests, it is the same span: stored once)."""
    results = [m for m in request.messages if m.role == "tool" and m.tool_call_id]
    proposals = _proposals(trace, {m.tool_call_id or "" for m in results}) if results else {}
    names = {c.call_id: c for m in request.messages for c in m.calls}
    spans = []
    for message in results:
        call_id = message.tool_call_id or ""
        if call_id not in proposals:
            continue
        round_id, answered_ns = proposals[call_id]
        call = names.get(call_id) or ProposedCall(call_id, "")
        failed = call_id in request.failed_results
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                      "gen_ai.tool.call.id": call_id,
                      "gen_ai.tool.call.result": message.text or ""}
        if call.arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = call.arguments
        if failed:
            attributes["error.type"] = "tool_error"
        spans.append(_span(exchange, trace, _span_id(trace, f"tool:{call_id}"), round_id,
                           f"execute_tool {call.name}".strip(), answered_ns,
                           exchange.started_ns, attributes,
                           (message.text or "the client marked the result as an error")
                           if failed else ""))
    return spans


PROPOSALS_FIRST = 8  # the newest stored spans read first, looking for proposals


def _proposals(trace: str, call_ids: set[str]) -> dict[str, tuple[str, int]]:
    """Call id -> (the span id of the round that proposed it, when that round ended),
    for those of `call_ids` whose tool span is not stored yet (a request carries every
    result of its conversation so far: the earlier ones were recorded already); from
    the stored rounds of this trace: the latest few, then (if some are not there: a
    result the model never proposed in this trace) all the others at once."""
    tool_spans = {_span_id(trace, f"tool:{call_id}"): call_id for call_id in call_ids}
    recorded = IngestedSpan.objects.filter(trace_id=trace, span_id__in=list(tool_spans))
    wanted = call_ids - {tool_spans[s] for s in recorded.values_list("span_id", flat=True)}
    out: dict[str, tuple[str, int]] = {}
    if not wanted:
        return out
    newest = list(IngestedSpan.objects.filter(trace_id=trace).order_by(
        "-start_ns", "-id").values_list("id", flat=True))
    for chunk in (newest[:PROPOSALS_FIRST], newest[PROPOSALS_FIRST:]):
        rows = {pk: (span_id, data) for pk, span_id, data in IngestedSpan.objects.filter(
            pk__in=chunk).values_list("id", "span_id", "data")}
        for span_id, data in (rows[pk] for pk in chunk if pk in rows):
            for call_id in _proposed(data) & wanted:
                out.setdefault(call_id, (span_id, int(data.get("end_ns") or 0)))
        if wanted <= out.keys():
            break
    return out


def _proposed(data: Any) -> set[str]:
    """The call ids a stored span's answer proposed (none if it is not a model call)."""
    attributes = data.get("attributes") or {} if isinstance(data, dict) else {}
    if attributes.get("gen_ai.operation.name") != "chat":
        return set()
    try:
        answers = json_nesting.loads(attributes.get("gen_ai.output.messages") or "[]")
    except ValueError:
        return set()
    return {str(part["id"]) for answer in answers if isinstance(answer, dict)
            for part in answer.get("parts") or []
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id")}


def _span(exchange: Exchange, trace: str, span_id: str, parent: str, name: str,
          start_ns: int, end_ns: int, attributes: dict[str, Any], error: str) -> SpanRecord:
    return SpanRecord(
        trace_id=trace, span_id=span_id, parent_id=parent, name=name,
        start_ns=start_ns, end_ns=max(end_ns, start_ns),
        status_code=STATUS_ERROR if error else 0,
        status_message=redact(error, exchange.secrets),
        attributes=redact(attributes, exchange.secrets),
        resource={"service.name": exchange.target.endpoint_name,
                  "telemetry.sdk.name": SDK},
        scope=SCOPE)


def _span_id(trace: str, what: str) -> str:
    return hashlib.sha256(f"{trace}\x00{what}".encode()).hexdigest()[:16]


def _answer(response: ChatResponse) -> Message:
    message = response.ai_message
    return Message(role="assistant", text=message.text, thinking=message.thinking,
                   calls=[ProposedCall(r.id or "", r.name, r.arguments)
                          for r in message.tool_execution_requests])


def _parts(message: Message) -> dict[str, Any]:
    """A message in the GenAI conventions' parts form."""
    parts: list[dict[str, Any]] = []
    if message.thinking:
        parts.append({"type": "reasoning", "content": message.thinking})
    if message.role == "tool":
        parts.append({"type": "tool_call_response", "id": message.tool_call_id,
                      "response": message.text or ""})
    elif message.text:
        parts.append({"type": "text", "content": message.text})
    parts += [{"type": "tool_call", "id": c.call_id, "name": c.name,
               "arguments": c.arguments} for c in message.calls]
    return {"role": message.role, "parts": parts}


# -- the recorder thread ----------------------------------------------------------------


class Recorder:
    """Records exchanges in the order they are handed over, on one thread of its own."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._queue: queue.Queue[Exchange | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        """Exchanges not recorded because the queue was full."""

    def submit(self, exchange: Exchange, *, wake: bool = True) -> bool:
        """Queue the exchange for recording; False (counted, logged) if the queue is
        full. Never waits. (The thread is woken at once whatever `wake` says.)"""
        try:
            self._queue.put_nowait(exchange)
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
            logger.warning("recording queue full (%d waiting): an exchange with endpoint "
                           "%s not recorded (%d dropped so far)", self._queue.maxsize,
                           exchange.target.endpoint_name, dropped)
            return False
        self._start()
        return True

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="proxy-recorder",
                                                    daemon=True)
                    self._thread.start()

    def wake(self) -> None:
        """Nothing to do: the thread is woken by each exchange queued."""

    def drain(self) -> None:
        """Wait until every exchange handed over so far is recorded."""
        self._queue.join()

    def release_connections(self) -> None:
        """Once what is queued is recorded, close the recorder's database connections
        (a test database is dropped only when no one is connected)."""
        if self._thread is not None:
            self._queue.put(None)
            self._queue.join()

    def _run(self) -> None:
        batch = Batch(asyncio.new_event_loop())
        while True:
            taken = self._take()
            try:
                close_old_connections()
                self._record(batch, taken)
            finally:
                for _ in taken:
                    self._queue.task_done()

    def _take(self) -> list[Exchange | None]:
        """The next exchange (waiting for it) and whatever else is queued already."""
        taken = [self._queue.get()]
        while len(taken) < MAX_BATCH:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return taken

    def _record(self, batch: Batch, taken: list[Exchange | None]) -> None:
        for exchange in taken:
            if exchange is None:
                self._flush(batch)
                connections.close_all()
                continue
            try:
                batch.add(exchange)
            except Exception:
                logger.exception("recording a proxied exchange failed (endpoint %s)",
                                 exchange.target.endpoint_name)
        self._flush(batch)

    @staticmethod
    def _flush(batch: Batch) -> None:
        try:
            batch.flush()
        except Exception:
            logger.exception("recording proxied exchanges failed")

