"""A small, tolerant Server-Sent Events decoder (the `text/event-stream` format).

It follows the WHATWG rules (fields `event`, `data`, `id`; comments start with `:`;
only an empty line dispatches, a line of whitespace does not; a UTF-8 byte order mark
at the very start of the stream is dropped) with two tolerances that real
OpenAI-compatible servers need:
leading whitespace before a field name is ignored (a body that starts with
" data: ..."), and an event still pending when the body ends is dispatched (some
servers omit the final blank line). Whether that last event is complete is for the
caller to judge: a cut-off JSON payload fails to parse there.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str
    id: str | None = None


@dataclass
class SseDecoder:
    """Feeds lines (without their line ending) and returns the events they complete."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None
    _has_fields: bool = False
    _started: bool = False

    def feed(self, line: str) -> SseEvent | None:
        if not self._started:
            self._started = True
            line = line.removeprefix("\ufeff")  # the stream's BOM, not the line's
        if line.startswith("data: ") and not line.endswith(("\r", "\n")):
            self._data.append(line[6:])  # the common line, decoded as below would do
            self._has_fields = True
            return None
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        line = line.lstrip()
        if not line or line.startswith(":"):  # whitespace only: a nameless field
            return None
        name, _, value = line.partition(":")
        self._apply(name.strip(), value[1:] if value.startswith(" ") else value)
        return None

    def flush(self) -> SseEvent | None:
        """The event left pending when the body ended without a blank line."""
        return self._dispatch()

    def _apply(self, name: str, value: str) -> None:
        self._has_fields = True
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value

    def _dispatch(self) -> SseEvent | None:
        if not self._has_fields or not self._data:
            self._reset()
            return None
        event = SseEvent(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._reset()
        return event

    def _reset(self) -> None:
        self._event, self._data, self._has_fields = "", [], False


async def aiter_sse(lines: AsyncIterable[str]) -> AsyncIterator[SseEvent]:
    """The events of an event-stream body given line by line."""
    decoder = SseDecoder()
    async for line in lines:
        event = decoder.feed(line)
        if event is not None:
            yield event
    last = decoder.flush()
    if last is not None:
        yield last
