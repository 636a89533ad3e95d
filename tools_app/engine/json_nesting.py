"""JSON from outside whose nesting may be deeper than Python's parser can follow.

`json.loads("[" * 5000 + "]" * 5000)` raises RecursionError, which code catching
ValueError (and Django's JSON form field) lets through as a crash. Here that text is
malformed JSON like any other: `loads` and `Decoder` raise `JsonNestingError`, a
json.JSONDecodeError (so a ValueError) that says "nested too deeply".
"""

from __future__ import annotations

import json
from typing import Any


class JsonNestingError(json.JSONDecodeError):
    """JSON nested deeper than the parser can follow."""

    def __init__(self) -> None:
        super().__init__("nested too deeply", "", 0)

    def __str__(self) -> str:
        return "nested too deeply"


def loads(data: str | bytes | bytearray) -> Any:
    """`json.loads(data)`, too deep a nesting raised as JsonNestingError."""
    try:
        return json.loads(data)
    except RecursionError:
        raise JsonNestingError from None


class Decoder(json.JSONDecoder):
    """The decoder for `cls=` (Django's forms.JSONField takes it as `decoder`)."""

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().decode(s, *args, **kwargs)
        except RecursionError:
            raise JsonNestingError from None
