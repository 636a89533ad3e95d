"""Engine events -> database rows + one RunEvent each, then a live notification.

The recorder queues each event; one writer task per run hands what is queued to
`batch_writer` as one batch (seqs allocated under the worker's lease token, the events'
row changes from `event_rows`), committed with the batches of the loop's other runs.
The engine waits for a commit only where crash safety needs it: a call's start on a tool
that is not idempotent, and drains before anything reads the run's rows (gates,
approvals, the run's end). Everything else is written while the model answers: a batch
starts at the model's announced request, and an event nobody waits for lingers briefly
so that a round's results, the next round's start and its request share a batch. A
failed batch stops the run: nothing queued after it is written, and the failure is
raised where the engine waits or at its next event. Viewers are notified after each
commit with its last seq (the socket reads rows by seq, so a lost notification loses
nothing). Streaming fragments are broadcast only, after the stored events before them.
docs/ARCHITECTURE.md draws the whole path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import cache
from typing import Any

from tools_app.engine.events import (
    PartialText,
    PartialToolCall,
    ProviderWireRequest,
    ProviderWireResponse,
    RoundStarted,
    ToolCallStarted,
)
from tools_app.runs.store.eventlog import notify
from tools_app.runs.store.lifecycle import Ending
from tools_app.runs.store.sanitize import (
    CleanPayload,
    StreamRedactor,
    clean_json,
    redact,
    stored_as_sent,
)
from tools_app.runs.store.sql.row_changes import RowChanges
from tools_app.runs.worker import batch_writer
from tools_app.runs.worker.batch_writer import Batch, write_together
from tools_app.runs.worker.event_rows import fold_events

logger = logging.getLogger(__name__)

EPHEMERAL_KINDS = frozenset({"partial_text", "partial_tool_call"})
# How long an event nobody waits for may stay queued (so what follows shares its batch)
# before the writer starts anyway: short enough that a viewer never notices, long enough
# to cover a busy worker's steps from a round's response to its next request.
LINGER_SECONDS = 0.1

Queued = tuple[Any, dict[str, Any], "asyncio.Future[int] | None"]


class StreamedText(Mapping[int, str]):
    """Round index -> the text it streamed so far: only the round in progress, since an
    earlier round has its response stored by then. Pieces are kept and joined when read,
    so a long answer of many small pieces is not copied once per piece."""

    def __init__(self) -> None:
        self._pieces: dict[int, list[str]] = {}

    def add(self, round_index: int, piece: str) -> None:
        if round_index not in self._pieces:
            self._pieces.clear()
            self._pieces[round_index] = []
        self._pieces[round_index].append(piece)

    def __getitem__(self, round_index: int) -> str:
        return "".join(self._pieces[round_index])

    def __iter__(self) -> Iterator[int]:
        return iter(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)


class RunRecorder:
    """An engine observer bound to one run and one lease token.

    Keyword-only, all optional:
    - `before_round`: an async hook awaited before each round (the runner's checkpoint).
    - `requests_announced`: the model announces each HTTP request before sending it
      (ProviderWireRequest), where the batch of what the model is told starts; otherwise
      (scripted, recorded models) it starts at the ModelRequestSent before the call.
    - `streamed`: round index -> the text it streamed so far, as shown (redacted), kept
      for a round the run ends before its response (the runner hands it to its end).
    - `call_row_defaults`: what each new call row copies from its run (the audit
      triggers would otherwise put it right with one more UPDATE per call).
    - `idempotent_tools`: tools a resumed run may call again; their calls' starts are
      not waited for.
    - `on_cancel`: called when a call's durable start commits on a run whose cancel is
      requested (the runner records why the chat stops); the call is then not started.
    """

    def __init__(self, run_id: str, token: int, secrets: tuple[str, ...] = (), *,
                 before_round: Callable[[], Awaitable[None]] | None = None,
                 requests_announced: bool = False,
                 streamed: StreamedText | None = None,
                 call_row_defaults: dict[str, Any] | None = None,
                 idempotent_tools: frozenset[str] = frozenset(),
                 on_cancel: Callable[[], None] | None = None) -> None:
        self.run_id = run_id
        self.token = token
        self.secrets = secrets
        self.before_round = before_round
        self.requests_announced = requests_announced
        self.streamed = StreamedText() if streamed is None else streamed
        self.call_row_defaults: dict[str, Any] = call_row_defaults or {}
        self.idempotent_tools = idempotent_tools
        self._round_ids: dict[int, int] = {}  # round index -> Round pk, once committed
        self._streams = StreamRedactor(secrets)
        self._queue: list[Queued] = []
        self._writer: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None  # the writer's delayed start
        self._drains = 0  # tasks waiting for the queue to be committed
        # The chat ended: what is queued stays for the run's end (hold_for_end).
        self._held = False
        # Something queued must be written as soon as the writer is free (the model's
        # request was queued while a batch was being written): no linger for it.
        self._write_next = False
        # The first batch that failed: every later event and drain raises it, and
        # nothing queued after it is written.
        self._error: Exception | None = None
        # (when, cancel_requested) as the last batch's own UPDATE read it: the heartbeat
        # needs no query of its own while the run writes.
        self.cancel_seen: tuple[float, bool] | None = None
        self.on_cancel = on_cancel

    async def __call__(self, event: Any) -> None:
        if isinstance(event, RoundStarted) and self.before_round is not None:
            await self.before_round()
        # After the checkpoint's await (a batch may have failed meanwhile); from here to
        # the queue nothing yields, so nothing is queued behind a failed batch.
        self._raise_failure()
        if event.kind in EPHEMERAL_KINDS:
            fragment = self._fragment(event)
            if fragment is not None:
                # Viewers see the round before its pieces, and none of a round whose
                # batch failed: the one wait on the request's batch (a streamed answer's
                # first piece comes long after it commits).
                await self.drain()
                await notify(self.run_id, {"fragment": fragment})
            return
        payload = self._payload(event)
        if self.secrets:
            # The one boundary every stored value crosses: the rows are written from the
            # redacted event, whichever path (streamed or not) the values came by.
            event = type(event).model_validate(payload)
        waiter = asyncio.get_running_loop().create_future() \
            if self._must_be_durable(event) else None
        self._queue.append((event, payload, waiter))
        if waiter is not None:
            self._write_now()
            # Shielded: a cancelled run stops waiting, the batch is still written.
            await asyncio.shield(waiter)
            self._stop_if_cancelled()
        elif event.kind == self._request_kind:
            # The model is about to be asked: what it is told (the round's results, the
            # round's start and this request) is written while it answers. Crash
            # safety does not need it first: a result lost with this batch is that of a
            # call whose start is stored, which a resumed run runs again if the tool is
            # idempotent and reports as an unknown outcome if not.
            self._write_now()
        else:
            self._write_soon()

    def _stop_if_cancelled(self) -> None:
        """After a call's start committed: if that commit read the run's cancel as
        requested, stop the chat here, before the tool starts, rather than at the
        heartbeat's next poll (a round's later calls would start meanwhile)."""
        if self.on_cancel is None or self.cancel_seen is None or not self.cancel_seen[1]:
            return
        self.on_cancel()
        raise asyncio.CancelledError("The run was cancelled")

    def _must_be_durable(self, event: Any) -> bool:
        """Whether the engine waits for this event's commit: a call's start on a tool
        that must not run twice (a crash after the commit leaves the call in doubt,
        reported as an unknown outcome, never silently run again)."""
        return (isinstance(event, ToolCallStarted)
                and event.tool_name not in self.idempotent_tools)

    @property
    def _request_kind(self) -> str:
        return "provider_wire_request" if self.requests_announced else "model_request_sent"

    async def drain(self) -> None:
        """Wait until every queued event is committed; raise the failure of any batch."""
        await self._written()
        self._raise_failure()

    async def settle(self) -> None:
        """Before the run's end is written: commit what is still queued, whatever
        stopped the chat (a chat cancelled in its last drain stopped waiting for it).
        A failure is logged, not raised: the run is ending anyway, and a batch that
        would come after the end is refused (its UPDATE expects the run running). A
        batch that failed before was raised to the run already: nothing is left."""
        if self._error is not None or self._held:
            return  # nothing to write, or the run's end writes it
        try:
            await self.drain()
        except Exception:
            logger.warning("run %s: events queued at its end could not be stored",
                           self.run_id, exc_info=True)

    async def hold_for_end(self) -> None:
        """The chat ended: wait for the batch being written (batches stay in order) and
        keep what is still queued for the run's end, which writes it in its own
        transaction (`take_held`): one commit fewer a run, and the end stored sooner.
        Raises the failure of any batch, as a drain would."""
        if any(waiter is not None for _, _, waiter in self._queue):
            await self.drain()  # someone waits for a commit: not expected at the end
            return
        self._held = True
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        self._raise_failure()

    def take_held(self) -> list[tuple[Any, dict[str, Any]]]:
        """What `hold_for_end` kept, for the run's end to write (once)."""
        held, self._queue = self._queue, []
        return [(event, payload) for event, payload, _ in held]

    async def _written(self) -> None:
        self._drains += 1
        try:
            self._write_now()
            while self._writer is not None and not self._writer.done():
                await asyncio.shield(self._writer)
        finally:
            self._drains -= 1

    def _write_now(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if not self._queue or self._error is not None or self._held:
            return
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())
        else:
            self._write_next = True  # the busy writer takes it next, without a linger

    def _write_soon(self) -> None:
        """Start the writer after a short linger, unless something needs it first: the
        events that follow (a round's results, its start, its request) then share the
        batch the request starts."""
        if self._writer is None or self._writer.done():
            self._linger_then_write()

    def _linger_then_write(self) -> None:
        if self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(LINGER_SECONDS,
                                                                 self._write_now)

    def _waited_for(self) -> bool:
        """Whether what is queued must be written at once: the engine waits for it (a
        call's start, a drain), or it was asked for while a batch was being written
        (the model's request)."""
        return (self._write_next or self._drains > 0
                or any(waiter is not None for _, _, waiter in self._queue))

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def _write_queued(self) -> None:
        """The run's writer: commit what is queued, one batch at a time, in order."""
        while self._queue and not self._held:
            batch, self._queue = self._queue, []
            self._write_next = False
            try:
                seq = await batch_writer.write(
                    self, [(event, payload) for event, payload, _ in batch])
            except Exception as exc:  # the run's own task decides what a failure means
                self._fail(exc, batch)
                return
            except BaseException:
                # The writer itself was cancelled (its loop is closing): whether the
                # batch committed is unknown, so nothing after it may be written.
                self._fail(RuntimeError(f"run {self.run_id}: the event writer was "
                                        "cancelled"), batch)
                raise
            for _, _, waiter in batch:
                if waiter is not None and not waiter.done():
                    waiter.set_result(seq)
            await notify(self.run_id, {"seq": seq})
            if self._queue and not self._waited_for():
                # Queued while this batch was written, and nobody waits for it: it
                # lingers for what follows, as if the writer had been idle.
                self._linger_then_write()
                return

    def _fail(self, error: Exception, batch: list[Queued]) -> None:
        """A batch failed: it and everything queued after it are never written (a later
        batch would leave a hole in the log); whoever waits on them gets the error."""
        self._error = error
        for _, _, waiter in [*batch, *self._queue]:
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
        self._queue = []

    def _payload(self, event: Any) -> CleanPayload:
        data = _dumped(event)
        if data.get("raw_stream") and _mentions_secret(data.get("body"), self.secrets):
            # The stream carried a secret in pieces (one per event, each harmless alone,
            # whole when read together), which redacting line by line cannot catch.
            data["raw_stream"] = RAW_STREAM_WITHHELD
        known = self._known_texts(event)
        if known is None:
            return CleanPayload.of(redact(data, self.secrets))
        # The body, as sent, holds no secret: redacting it (a walk of the whole
        # conversation, string by string) would change nothing. The rest is redacted.
        rest = redact({key: value for key, value in data.items() if key not in known},
                      self.secrets)
        if rest.keys() != data.keys() - known.keys():  # a secret in a field's name (!)
            return CleanPayload.of(redact(data, self.secrets))
        return CleanPayload.of({key: data[key] if key in known else rest[key]
                                for key in data}, known)

    def _known_texts(self, event: Any) -> dict[str, str] | None:
        """A wire request's body as the engine sent it, when that is what the payload
        stores (nothing to clean, no secret to redact): the whole conversation, not
        encoded again."""
        if not isinstance(event, ProviderWireRequest) or event.content is None:
            return None
        if not stored_as_sent(event.content, self.secrets):
            return None
        return {"body": event.content.decode()}

    def _fragment(self, event: PartialText | PartialToolCall) -> dict[str, Any] | None:
        """The fragment viewers may see: its text piece redacted as a stream (a secret
        split across pieces included), None while there is nothing new to show."""
        data = event.model_dump(mode="json")
        if isinstance(event, PartialText):
            data["delta"] = self._streams.feed(("text", event.round_index), event.delta)
            shown = bool(data["delta"])
            self._keep_streamed(event.round_index, data["delta"])
        else:
            data["arguments_delta"] = self._streams.feed(
                ("call", event.round_index, event.index), event.arguments_delta)
            shown = bool(data["arguments_delta"] or event.id or event.name)
        return clean_json(redact(data, self.secrets)) if shown else None

    def _keep_streamed(self, round_index: int | None, delta: str) -> None:
        self.streamed.add(round_index or 0, delta)

    def record(self, event: Any, payload: dict[str, Any]) -> int:
        """Write one event now (its own transaction); returns its seq."""
        return self.record_batch([(event, payload)])

    def record_batch(self, batch: Sequence[tuple[Any, dict[str, Any]]], *,
                     end: Ending | None = None) -> int:
        """Write events in one transaction, in order (with `end`, the run's end after
        them); returns the last seq."""
        return write_together([Batch(self, batch, end)])[0]

    def fold(self, batch: Sequence[tuple[Any, dict[str, Any]]]) -> RowChanges:
        """The row changes of a batch's events (inside its transaction: a retried
        attempt's own count reads what is stored)."""
        changes = RowChanges(self.run_id, self._round_ids, self.call_row_defaults)
        fold_events(changes, batch)
        return changes

    def committed(self, changes: RowChanges, cancel_requested: bool) -> None:
        """After the batch's commit (never before: a rolled-back round must not be
        remembered)."""
        self.cancel_seen = (time.monotonic(), cancel_requested)
        self._round_ids.update(changes.new_rounds)


RAW_STREAM_WITHHELD = ("(The raw stream is not shown: the response carried a credential, "
                       "which its events split into pieces. The assembled response above "
                       "is shown redacted.)")


def _dumped(event: Any) -> dict[str, Any]:
    """The event in pydantic's JSON mode, but a provider's wire body as it is: JSON data
    already (what was sent, or parsed from what came back), the whole conversation,
    which pydantic would walk value by value; CleanPayload still checks it is JSON."""
    if not isinstance(event, ProviderWireRequest | ProviderWireResponse):
        return event.model_dump(mode="json")  # type: ignore[no-any-return]
    dumped = event.model_dump(mode="json", exclude={"body"})
    # In the fields' order, as a whole dump has them.
    return {name: event.body if name == "body" else dumped[name]
            for name in _field_names(type(event)) if name == "body" or name in dumped}


@cache
def _field_names(event_type: type[Any]) -> tuple[str, ...]:
    return tuple(event_type.model_fields)


def _mentions_secret(body: Any, secrets: tuple[str, ...]) -> bool:
    if not secrets:
        return False
    text = json.dumps(body, ensure_ascii=False)
    return any(secret in text for secret in secrets)
