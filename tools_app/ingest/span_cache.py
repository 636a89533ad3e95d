"""Stored spans this process already holds, parsed (`SpanRecord`, with what conventions.py
read from it kept on the record), by their row: a rebuild takes an earlier span of its
run from here instead of reading its row's JSON and parsing it again.

Only an optimisation, never the source of truth: a row not found here (stored by
another process, or dropped past the bound) is read from the database. An entry is the
content of a committed row, added once its transaction committed; stored spans are
never changed, and an entry is found only by the row's id, its trace and span ids and
the moment it was stored, so a row deleted and a span stored again (same ids) is never
answered with the old content.

Bounded (least recently used dropped first) by a number of spans and by the text their
attributes and events hold.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from tools_app.ingest.spans import SpanRecord

MAX_SPANS = 10_000
MAX_CHARS = 16_000_000  # characters of attribute and event text, over all entries

# A stored span's row: its id, trace id, span id and when it was stored (the column as
# the database driver returns it, the same from the INSERT's RETURNING and a SELECT).
RowKey = tuple[int, str, str, Any]


class SpanCache:
    def __init__(self, max_spans: int = MAX_SPANS, max_chars: int = MAX_CHARS) -> None:
        self.max_spans = max_spans
        self.max_chars = max_chars
        self._entries: OrderedDict[RowKey, tuple[SpanRecord, int, str]] = OrderedDict()
        self._by_run: dict[str, set[RowKey]] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, key: RowKey) -> SpanRecord | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put_many(self, entries: Iterable[tuple[RowKey, str, SpanRecord]]) -> None:
        """Keep these (row, run id, record)."""
        with self._lock:
            for key, run, record in entries:
                self._drop(key)
                size = _text_size(record.attributes) + _text_size(record.events)
                if size > self.max_chars:
                    continue
                self._entries[key] = (record, size, run)
                self._by_run.setdefault(run, set()).add(key)
                self._chars += size
            while self._entries and (len(self._entries) > self.max_spans
                                     or self._chars > self.max_chars):
                self._drop(next(iter(self._entries)))

    def drop_runs(self, runs: Iterable[str]) -> None:
        """Forget the spans of these runs (ended: only a late span rebuilds them)."""
        with self._lock:
            for run in runs:
                for key in self._by_run.pop(run, set()):
                    self._drop(key)

    def _drop(self, key: RowKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        _, size, run = entry
        self._chars -= size
        keys = self._by_run.get(run)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_run[run]

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._by_run.clear()
            self._chars = 0


def _text_size(value: Any) -> int:
    """The characters of the strings in a JSON value (what its memory grows with)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + _text_size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    return 8


spans = SpanCache()
"""This process's cache (receive.py's rebuilds read and fill it)."""
