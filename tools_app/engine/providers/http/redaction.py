"""Credentials stay out of everything we report.

Credentials travel in request headers only. Any text or JSON that comes back from a
server or a transport (error bodies, exception messages, echoed URLs) is passed through
a model's `Redactor` before it reaches an event, a log line or an exception, so a key a
server echoes back is never shown. Each model has its own Redactor (its own secrets),
even when models share one connection pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

REDACTED = "[redacted]"
_SENSITIVE_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "password")


@dataclass(frozen=True)
class Redactor:
    """Replaces every secret value by a marker in text and JSON coming back to us."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def for_values(cls, values: Iterable[str]) -> Redactor:
        return cls(secret_values(values))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        return value

    def json(self, value: Any) -> Any:
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(item) for item in value]
        return value

    def decoded_json(self, value: Any, raw: bytes) -> Any:
        """`json(value)` for a `value` decoded from the JSON text `raw`, skipped when no
        secret can be in `raw`: none appears in it verbatim and nothing in it is escaped
        in a way that could spell one (\\u escapes, \\/, or a UTF-16/32 body)."""
        if not self.secrets:
            return value
        verbatim = self._verbatim_secrets
        if (verbatim is None or b"\\u" in raw or b"\\/" in raw or 0 in raw[:4]
                or any(secret in raw for secret in verbatim)):
            return self.json(value)
        return value

    @cached_property
    def _verbatim_secrets(self) -> tuple[bytes, ...] | None:
        """The secrets as JSON text carries them, or None if one needs escaping there."""
        if any(char in '"\\' or char < " " for secret in self.secrets for char in secret):
            return None
        return tuple(secret.encode() for secret in self.secrets)


def is_sensitive_header(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SENSITIVE_HEADER_PARTS)


def secret_values(values: Iterable[str]) -> tuple[str, ...]:
    """The values to scrub, longest first. Also the bare token of "Bearer <token>".
    Values under 8 characters are not credentials worth the risk of mangling ordinary
    text that happens to contain them."""
    found: set[str] = set()
    for value in values:
        found.add(value)
        found.update(part for part in value.split() if len(part) >= 8)
    return tuple(sorted((v for v in found if len(v) >= 8), key=len, reverse=True))
