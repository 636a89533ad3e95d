"""JSON for provider bodies: the text we send and the parser for what comes back.

`encode_json` writes exactly what httpx's `json=` would send (compact, UTF-8, no NaN),
so the body announced to observers and the body on the wire are the same bytes.
`loads_json` is `json.loads` on pydantic-core's faster parser where that parser agrees.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core

# Made once: json.dumps() with any option builds a new encoder on every call.
_JSON_UTF8 = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_JSON_ASCII = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON text, NaN refused.

    A string holding a lone surrogate (a tool can return one) has no UTF-8 form: then
    the body is written with ASCII escapes, which carry it as JSON's own "\\ud800".
    """
    try:
        return _JSON_UTF8.encode(value).encode()
    except UnicodeEncodeError:
        return _JSON_ASCII.encode(value).encode()


def loads_json(data: bytes | str) -> Any:
    """`json.loads(data)`, on pydantic-core's parser when it can. What that parser
    refuses goes to json.loads, which decides: a lone surrogate escape (it has no Rust
    string), a byte order mark, UTF-16/32 text, and text that is not JSON at all
    (json's ValueError then)."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return json.loads(data)


def decode_json_or_none(content: bytes) -> Any:
    """The decoded body, or None when it is not JSON."""
    try:
        return loads_json(content)
    except ValueError:
        return None
