"""Exporting runs, live as they go, to the operator's OTLP/HTTP endpoint
(`AGENTFORGE_OTLP_ENDPOINT`, headers `AGENTFORGE_OTLP_HEADERS` in the form of
`OTEL_EXPORTER_OTLP_HEADERS`; off when the endpoint is unset).

Nothing here runs on a run's path but `notify`: the receiver of `run_event_committed`
(sent after each commit of a run's events, in the embedded worker and in `db_worker`
processes alike) marks the run as changed, and returns. Two threads of this process do
the rest, in the manner of the SDK's BatchSpanProcessor:

- the collector takes the changed runs (one entry a run however many of its events
  are committed meanwhile, so at most the runs going at once), reads their rows from
  where each run's export got to (`spans.Progress`: the rounds still open, not the
  whole run) and turns what ended since into spans (`spans.due`), put on a bounded
  queue without waiting: when it is full, the span is dropped and counted. The
  conversations it keeps for that (`spans.Conversation`) stay within a budget of
  characters (`AGENTFORGE_OTLP_EXPORT_MEMORY_MB`): past it, the least recently changed
  runs' are let go, and each of those runs is read whole once more at its next change;
- the sender takes up to a batch of spans from the queue (or what came within the
  schedule delay) and hands them to the SDK's `OTLPSpanExporter`, which encodes them and
  retries what the endpoint answers with a retryable status; a batch that still fails is
  counted as failed spans.

The counts (spans sent, dropped, failed; the last failure) are kept per process in a
`TraceExportStatus` row, shown in the admin and by `manage.py worker_status`.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import socket
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections
from django.dispatch import receiver
from django.utils import timezone
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from tools_app.models import TraceExportStatus
from tools_app.otlp_export import spans
from tools_app.runs.store.eventlog import run_event_committed, run_key

logger = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
SCHEDULE_DELAY_S = 1.0  # the SDK's default: a batch waits at most this long to fill
BATCH_SIZE = 512
# Runs whose export progress is remembered, ended ones too (as None: nothing more to
# send), so a later event of the run reads and sends only what is new; the oldest are
# forgotten first.
TRACKED_RUNS = 10_000


def traces_url(endpoint: str) -> str:
    """The endpoint as the operator gave it, a base URL (like OTEL_EXPORTER_OTLP_ENDPOINT)
    or the traces URL itself."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def headers_from(raw: str) -> dict[str, str]:
    """`k=v,k2=v2` with URL-encoded values, read by the SDK's own parser."""
    return dict(parse_env_headers(raw, liberal=True)) if raw else {}


@dataclass
class Counts:
    sent: int = 0
    dropped: int = 0
    failed: int = 0
    last_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class RunExporter:
    """One process's export: the changed runs, the bounded span queue, the two threads."""

    def __init__(self, exporter: SpanExporter, *, queue_size: int, endpoint: str,
                 memory_budget: int) -> None:
        self.exporter = exporter
        self.endpoint = endpoint
        self.queue: queue.Queue[ReadableSpan] = queue.Queue(maxsize=queue_size)
        self.counts = Counts()
        self._changed: OrderedDict[str, None] = OrderedDict()
        self._changed_lock = threading.Condition()
        self._runs: OrderedDict[str, spans.Progress | None] = OrderedDict()
        # The runs whose conversation is kept, least recently changed first, with its
        # size; their sum is `kept_size`, at most `memory_budget` characters.
        self._kept: OrderedDict[str, int] = OrderedDict()
        self.kept_size = 0
        self.memory_budget = memory_budget
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._stopping = False
        self._collecting = False
        self._saved: tuple[int, int, int] | None = None

    # -- on the run's path --------------------------------------------------------------

    def notify(self, run_id: str) -> None:
        """Mark the run as changed (never waits on the database or the network)."""
        with self._changed_lock:
            self._changed[run_id] = None
            self._changed_lock.notify()
        if not self._threads:
            self._start()

    # -- the collector ------------------------------------------------------------------

    def collect(self, run_id: str) -> None:
        """Queue the spans of what ended in the run since its last collection."""
        progress = self._runs.get(run_id)
        if progress is None and run_id in self._runs:  # ended, gone or received
            self._remember(run_id, None)
            return
        read = spans.read(run_id, progress)
        if read is None:
            self._remember(run_id, None)
            return
        rows, progress = read
        for span in spans.due(rows, progress):
            try:
                self.queue.put_nowait(span)
            except queue.Full:
                with self.counts.lock:
                    self.counts.dropped += 1
        self._remember(run_id, None if progress.ended else progress)

    def _remember(self, run_id: str, progress: spans.Progress | None) -> None:
        self._runs[run_id] = progress
        self._runs.move_to_end(run_id)
        self.kept_size -= self._kept.pop(run_id, 0)
        if progress is not None and progress.conversation is not None:
            self._kept[run_id] = progress.kept_size
            self.kept_size += progress.kept_size
        while len(self._runs) > TRACKED_RUNS:
            forgotten, _ = self._runs.popitem(last=False)
            self.kept_size -= self._kept.pop(forgotten, 0)
        while self.kept_size > self.memory_budget:
            let_go, size = self._kept.popitem(last=False)
            self.kept_size -= size
            kept = self._runs[let_go]
            if kept is not None:
                kept.conversation = None

    def _collector(self) -> None:
        try:
            self._collect_changed()
        finally:
            connections.close_all()  # this thread's own

    def _collect_changed(self) -> None:
        while True:
            with self._changed_lock:
                while not self._changed and not self._stopping:
                    self._changed_lock.wait()
                if not self._changed:
                    return
                run_id, _ = self._changed.popitem(last=False)
                self._collecting = True
            try:
                close_old_connections()
                self.collect(run_id)
            except Exception:
                logger.exception("OTLP export: reading run %s failed", run_id)
            finally:
                with self._changed_lock:
                    self._collecting = False
                    self._changed_lock.notify_all()

    def drain(self) -> None:
        """Wait until every run marked so far is collected and every queued span sent
        (or failed) and counted."""
        with self._changed_lock:
            self._changed_lock.wait_for(lambda: not self._changed and not self._collecting)
        self.queue.join()

    # -- the sender ---------------------------------------------------------------------

    def send_batch(self, timeout: float) -> int:
        """Export up to a batch of queued spans (waiting up to `timeout` for the first);
        returns how many were taken."""
        batch: list[ReadableSpan] = []
        try:
            batch.append(self.queue.get(timeout=timeout) if timeout else self.queue.get_nowait())
            while len(batch) < BATCH_SIZE:
                batch.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        if batch:
            self._export(batch)
        return len(batch)

    def _export(self, batch: list[ReadableSpan]) -> None:
        try:
            result = self.exporter.export(batch)
            error = "" if result is SpanExportResult.SUCCESS else \
                f"the endpoint did not accept {len(batch)} spans"
        except Exception as exc:  # the exporter's own failure must not stop the thread
            error = f"{type(exc).__name__}: {exc}"
        with self.counts.lock:
            if error:
                self.counts.failed += len(batch)
                self.counts.last_error = error
            else:
                self.counts.sent += len(batch)

    def _sender(self) -> None:
        try:
            self._send_queued()
        finally:
            connections.close_all()  # this thread's own

    def _send_queued(self) -> None:
        while not (self._stopping and self.queue.empty() and not self._collector_alive()):
            taken = self.send_batch(SCHEDULE_DELAY_S)
            try:
                close_old_connections()
                self.save_status()
            except Exception:
                logger.warning("OTLP export: could not store its counts", exc_info=True)
            for _ in range(taken):
                self.queue.task_done()

    def _collector_alive(self) -> bool:
        return bool(self._threads) and self._threads[0].is_alive()

    def flush(self) -> None:
        """Collect every changed run and send everything queued, on this thread."""
        while True:
            with self._changed_lock:
                if not self._changed:
                    break
                run_id, _ = self._changed.popitem(last=False)
            self.collect(run_id)
        while taken := self.send_batch(0):
            for _ in range(taken):
                self.queue.task_done()
        self.save_status()

    def save_status(self) -> None:
        """Store the counts, when they changed since last stored (an idle exporter
        writes nothing)."""
        with self.counts.lock:
            now = (self.counts.sent, self.counts.dropped, self.counts.failed)
            values: dict[str, Any] = {
                "endpoint": self.endpoint[:300], "sent": now[0], "dropped": now[1],
                "failed": now[2], "last_error": self.counts.last_error[:2000],
                "updated_at": timezone.now()}
        if now == self._saved:
            return
        TraceExportStatus.objects.update_or_create(process=process_key(), defaults=values)
        self._saved = now

    def _start(self) -> None:
        with self._start_lock:
            if self._threads:
                return
            for name, target in (("otlp-export-collector", self._collector),
                                 ("otlp-export-sender", self._sender)):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
            atexit.register(self.stop)

    def stop(self, timeout: float = 5.0) -> None:
        """Let both threads finish what is queued (waiting at most `timeout` each)."""
        with self._changed_lock:
            if self._stopping:
                return
            self._stopping = True
            self._changed_lock.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        self.exporter.shutdown()


def process_key() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:120]


_EXPORTER: RunExporter | None = None
_EXPORTER_LOCK = threading.Lock()


def configured() -> RunExporter | None:
    """This process's exporter, made on first use; None when no endpoint is set."""
    global _EXPORTER
    endpoint = settings.AGENTFORGE_OTLP_ENDPOINT
    if not endpoint:
        return None
    if _EXPORTER is None or _EXPORTER.endpoint != traces_url(endpoint):
        with _EXPORTER_LOCK:
            if _EXPORTER is None or _EXPORTER.endpoint != traces_url(endpoint):
                _EXPORTER = build(endpoint, settings.AGENTFORGE_OTLP_HEADERS)
    return _EXPORTER


def build(endpoint: str, headers: str, *, queue_size: int | None = None) -> RunExporter:
    url = traces_url(endpoint)
    otlp = OTLPSpanExporter(endpoint=url, headers=headers_from(headers),
                            timeout=settings.AGENTFORGE_OTLP_TIMEOUT)
    return RunExporter(otlp, endpoint=url,
                       queue_size=queue_size or settings.AGENTFORGE_OTLP_QUEUE_SIZE,
                       memory_budget=settings.AGENTFORGE_OTLP_EXPORT_MEMORY_MB * 2**20)


def shutdown() -> None:
    """Stop this process's exporter after sending what it holds (the next run that
    changes makes a new one if an endpoint is still set)."""
    global _EXPORTER
    with _EXPORTER_LOCK:
        exporter, _EXPORTER = _EXPORTER, None
    if exporter is not None:
        exporter.stop()


@receiver(run_event_committed, dispatch_uid="agentforge-otlp-export")
async def run_changed(sender: Any, run_id: str, message: dict[str, Any],
                      **kwargs: Any) -> None:
    """A run's events were committed: its new spans are due (streaming fragments are
    not stored, so they change nothing to export)."""
    if "seq" not in message:
        return
    try:
        exporter = configured()
        if exporter is not None:
            exporter.notify(run_key(run_id))
    except Exception:  # exporting must never fail a run
        logger.warning("OTLP export: could not take run %s", run_id, exc_info=True)
