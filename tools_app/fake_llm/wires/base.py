"""What every wire format provides, and the helpers they share."""

from __future__ import annotations

import json
import random
import string
import time
from typing import Any, Protocol

from ..conversation import Conversation, Reply

StreamItem = tuple[str | None, Any]
"""One server-sent event: (event name or None, data: a JSON value or a raw string)."""

_ALNUM = string.ascii_letters + string.digits
# Random bytes mapped onto letters and digits by one translate() call: the fastest way
# to make ids in pure Python (the slight bias is irrelevant: ids are not secrets, they
# only have to look real and not collide within a test run).
_ID_TABLE = bytes((_ALNUM * 5)[:256], "ascii")
_rng = random.Random()  # noqa: S311
# One encoder, built once: json.dumps() builds a new one per call when given options.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class WireError(Exception):
    """A request this wire format cannot accept; answered with a provider-shaped 4xx.

    `param` and `code` fill OpenAI's error fields of those names; `details` is Gemini's
    google.rpc details list. Each wire uses what its real error body has.
    """

    def __init__(self, message: str, status: int = 400, *, param: str | None = None,
                 code: str | None = None, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
        self.details = details


class Wire(Protocol):
    name: str
    stream_content_type: str
    event_separator: str

    def parse(self, body: dict[str, Any], path_model: str | None, stream: bool) -> Conversation:
        """Read the neutral conversation out of a request body (raise WireError)."""
        ...

    def check(self, body: dict[str, Any]) -> None:
        """Raise WireError, with the real API's message, for a body the real API refuses
        (unknown fields, unpaired tool calls and results, empty content). Strict mode
        only; `parse` stays lenient, so fault rehearsals can send anything."""
        ...

    def refusal_body(self, error: WireError) -> Any:
        """The provider's error body for a refused request."""
        ...

    def json_body(self, reply: Reply, conversation: Conversation) -> Any: ...

    def stream_items(self, reply: Reply, conversation: Conversation,
                     chunk_size: int) -> list[StreamItem]: ...

    def error_body(self, status: int, message: str, error_type: str | None) -> Any: ...

    def error_item(self, status: int, message: str, error_type: str | None) -> StreamItem:
        """The event a provider sends when a stream fails midway."""
        ...

    def response_headers(self) -> list[tuple[bytes, bytes]]: ...


def random_id(prefix: str, length: int) -> str:
    return prefix + _rng.randbytes(length).translate(_ID_TABLE).decode("ascii")


def now() -> int:
    return int(time.time())


def dumps(value: Any) -> str:
    """Compact JSON, as the real APIs send it."""
    return _ENCODER.encode(value)


def encode_item(item: StreamItem, separator: str) -> bytes:
    event, data = item
    payload = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}{separator[:len(separator) // 2]}" if event else ""
    return f"{head}data: {payload}{separator}".encode()


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def arguments_object(raw: str) -> Any:
    """Arguments as the JSON value providers that send objects put on the wire.

    A script may hold invalid JSON on purpose; then the raw string is sent as is, so
    the client meets the same kind of malformed call a misbehaving model produces.
    """
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def bool_or(value: Any, default: bool) -> bool:
    return value if isinstance(value, bool) else default
