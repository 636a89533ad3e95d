"""Making untrusted values safe to store: NUL escaping, size caps, secret redaction.

PostgreSQL text and jsonb cannot hold NUL (U+0000), and a tool can return anything,
so every string on its way into the database passes through here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring_ascii  # the C encoder's, as json.dumps uses
from typing import Any, overload

import pydantic_core
from django.conf import settings
from django.db.models import Field, Model

NUL_REPLACEMENT = "\\u0000"
REDACTED = "[redacted]"


def max_value_bytes() -> int:
    return int(settings.AGENTFORGE_MAX_VALUE_BYTES)


@overload
def clean_text(value: str, *, limit: int | None = None) -> str: ...
@overload
def clean_text(value: None, *, limit: int | None = None) -> None: ...
@overload
def clean_text(value: str | None, *, limit: int | None = None) -> str | None: ...
def clean_text(value: str | None, *, limit: int | None = None) -> str | None:
    """Escape NULs and truncate past `limit` bytes with an explicit marker."""
    if value is None:
        return None
    cap = max_value_bytes() if limit is None else limit
    if value.isascii() and len(value) <= cap and "\x00" not in value:
        return value  # the common case: one byte a character, nothing to change
    text = value.replace("\x00", NUL_REPLACEMENT)
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (half of a UTF-16 pair, as a JSON "\ud800" escape decodes
        # to) is not UTF-8: keep it visible as its escape.
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        encoded = text.encode("utf-8")
    if len(encoded) <= cap:
        return text
    # A cut through a multi-byte character drops its partial bytes too; count them.
    head = encoded[:cap].decode("utf-8", errors="ignore")
    dropped = len(encoded) - len(head.encode("utf-8"))
    return f"{head}[truncated {dropped} bytes]"


def fit_column(model: type[Model], field: str, value: str | None) -> str:
    """`value` cleaned and cut to fit a CharField of `model` (its max_length counts
    characters on every database), the truncation marker included: a tool name or call
    id from a model can be any length, and PostgreSQL refuses one that does not fit."""
    text = clean_text(value) or ""
    column = model._meta.get_field(field)
    max_chars = column.max_length if isinstance(column, Field) else None
    if max_chars is None or len(text) <= max_chars:
        return text
    kept = max_chars
    while kept + len(marker := f"[+{len(text) - kept} chars]") > max_chars:
        kept = max_chars - len(marker)  # at most twice: the count has one digit more
    return text[:kept] + marker


def clean_json(value: Any, *, limit: int | None = None) -> Any:
    """Apply clean_text to every string (keys included) inside a JSON value."""
    return _clean_json(value, max_value_bytes() if limit is None else limit,
                       max_value_bytes())


def clean_json_data(value: Any) -> Any:
    """clean_json for JSON data (string keys, lists: pydantic's JSON-mode dumps), with
    a fast path: the value serialised by the C encoder shows at once whether anything
    needs cleaning (`clean_json_encoded`)."""
    return clean_json_encoded(value)[0]


def clean_json_encoded(value: Any, cap: int | None = None) -> tuple[Any, str | None]:
    """clean_json_data, and the value's JSON text as `json.dumps` writes it (a
    JSONField's own encoding, so the database layer need not write it again) when
    nothing needed cleaning; None with a value that did. Nothing does when its text
    has no NaN or Infinity, no NUL, no lone surrogate, and is shorter than the cap
    (`max_value_bytes`) as a whole (its ASCII-escaped text is never shorter than the
    UTF-8 of any string in it). A round's wire request, which carries the whole
    conversation, is most of what the recorder cleans."""
    try:
        text = _scalar_text(value)
        if text is None:
            text = _STRICT_JSON.encode(value)
    except TypeError:  # not JSON data: as pydantic's JSON mode would have given it
        return clean_json(pydantic_core.to_jsonable_python(value)), None
    except ValueError:  # NaN or Infinity in it
        return clean_json(value), None
    if (len(text) <= (max_value_bytes() if cap is None else cap)
            and "\\u0000" not in text and "\\ud" not in text):
        return value, text
    return clean_json(value), None


# json.dumps' own text (its default separators and ASCII escapes), NaN refused; made
# once: json.dumps builds a new encoder on every call given any option.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


# The texts json.dumps writes for the scalars an event's payload is mostly made of (a
# round index, a time, a name, a flag). Why: JSONEncoder.encode builds a new C encoder
# for every value but a string, and a round's payloads hold a few dozen of them.
_LITERALS: dict[Any, str] = {None: "null", True: "true", False: "false"}


def _scalar_text(value: Any) -> str | None:
    """`value`'s text as `_STRICT_JSON` writes it, if it is a plain scalar (None, a
    bool, an int, a finite float, a str; not a subclass, which may encode otherwise);
    else None."""
    kind = value.__class__
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else None
    if value is None or kind is bool:
        return _LITERALS[value]
    return None


@dataclass(frozen=True, slots=True)
class Encoded:
    """A JSON column's value with its text as `json.dumps` writes it (the JSONField's
    own encoding): `rowsql` stores the text instead of encoding the value again."""

    value: Any
    text: str


class CleanPayload(dict[str, Any]):
    """An event's payload, cleaned for storage (`clean_json_data` on each of its
    values), with the JSON text of each value and of the whole: the event row and the
    columns that copy its values (a round's request body, a call's result) are stored
    from these texts, not encoded again. Never changed once made: the texts must stay
    its values'."""

    texts: dict[str, str]

    @classmethod
    def of(cls, data: dict[str, Any], known: dict[str, str] | None = None) -> CleanPayload:
        """`known`: the texts of values known to need no cleaning (a wire body as the
        engine sent it, checked by `sendable_as_stored`), taken as they are."""
        payload = cls()
        payload.texts = {}
        cap = max_value_bytes()
        for key, value in data.items():
            if known and key in known:
                payload[key] = value
                payload.texts[key] = known[key]
                continue
            cleaned, text = clean_json_encoded(value, cap)
            payload[key] = cleaned
            if text is not None:
                payload.texts[key] = text
        return payload

    def column(self, key: str) -> Any:
        """One value, as a JSON column stores it (with its text when known)."""
        value = self[key]
        text = self.texts.get(key)
        return value if text is None else Encoded(value, text)

    def stored(self) -> Any:
        """The whole payload as the event row stores it: its text composed from its
        values' as `json.dumps` writes a dict (', ' and ': ' separators)."""
        if len(self.texts) != len(self):
            return dict(self)  # a value was cleaned: the database layer encodes it
        return Encoded(dict(self), "{" + ", ".join(
            f"{_json_key(key)}: {self.texts[key]}" for key in self) + "}")


def stored_as_sent(content: bytes, secrets: Iterable[str]) -> bool:
    """Whether JSON text as the engine sends it (compact UTF-8, `encode_json`) holds a
    value that cleaning and redacting leave as it is, so the text can be stored for it:
    no NUL, no lone surrogate (the engine then writes ASCII escapes: any "\\ud" is
    refused), no string over the cap (none is longer in UTF-8 than the whole text),
    and no secret. A secret is found in the text as it is in the strings, unless JSON
    escapes one of its characters (a quote, a backslash, a control character): such a
    secret cannot be looked for in the text, and the answer is no."""
    if (len(content) > max_value_bytes() or b"\\u0000" in content
            or b"\\ud" in content):
        return False
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue  # redact() leaves these
        if any(char in '"\\' or ord(char) < 0x20 for char in secret):
            return False
        if secret.encode() in content:
            return False
    return True


@lru_cache(maxsize=256)
def _json_key(key: str) -> str:
    return json.dumps(key)


def _clean_json(value: Any, limit: int, key_limit: int) -> Any:
    if isinstance(value, str):
        return clean_text(value, limit=limit)
    if isinstance(value, dict):
        return {clean_text(str(k), limit=key_limit): _clean_json(v, limit, key_limit)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_json(v, limit, key_limit) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or Infinity (PostgreSQL's jsonb and SQLite's json_valid refuse
        # them): stored as the strings Python's json module would have written.
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """Replace every occurrence of a secret inside a JSON value with a marker."""
    needles = [s for s in secrets if s and len(s) >= 4]
    if not needles:
        return value
    return _redact(value, needles)


def _redact(value: Any, needles: list[str]) -> Any:
    if isinstance(value, str):
        for needle in needles:
            value = value.replace(needle, REDACTED)
        return value
    if isinstance(value, dict):
        return {_redact(k, needles): _redact(v, needles) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, needles) for v in value]
    return value


class StreamRedactor:
    """Redacts secrets from text that arrives in pieces (a streamed answer, a tool
    call's arguments): each piece is released only up to where a secret could still be
    starting, so a secret split across two pieces is never shown. What is held back is
    released with the next piece; the stored response supersedes the pieces anyway."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = [s for s in secrets if s and len(s) >= 4]
        self._pending: dict[Hashable, str] = {}

    def feed(self, stream: Hashable, piece: str) -> str:
        """The redacted text of `stream` that is safe to show now."""
        if not self.secrets:
            return piece
        text = self._pending.pop(stream, "") + piece
        held = self._unfinished_secret_length(text)
        if held:
            self._pending[stream] = text[-held:]
            text = text[:-held]
        return str(_redact(text, self.secrets))

    def _unfinished_secret_length(self, text: str) -> int:
        """The longest end of `text` that is the beginning of a secret, not all of it."""
        longest = 0
        for secret in self.secrets:
            for length in range(min(len(text), len(secret) - 1), longest, -1):
                if secret.startswith(text[-length:]):
                    longest = length
                    break
        return longest
