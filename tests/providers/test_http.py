"""The HTTP layer's small parts: backoff, Retry-After parsing, error bodies, redaction."""

from __future__ import annotations

import email.utils
import json

import httpx
import pytest

from tools_app.engine.providers.http.jsoncodec import loads_json
from tools_app.engine.providers.http.redaction import Redactor
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.engine.providers.http.wire_errors import (
    ErrorDetails,
    is_retryable_status,
    parse_retry_after,
)


def test_the_backoff_follows_the_sdks() -> None:
    lowest, highest = RetryPolicy(random=lambda: 1.0), RetryPolicy(random=lambda: 0.0)

    assert [lowest.backoff(n) for n in range(6)] == [0.375, 0.75, 1.5, 3.0, 6.0, 6.0]
    assert [highest.backoff(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


@pytest.mark.parametrize(("status", "retryable"), [
    (400, False), (401, False), (403, False), (404, False), (408, True), (409, True),
    (422, False), (429, True), (500, True), (502, True), (503, True), (504, True), (529, True),
])
def test_which_statuses_are_retryable(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"retry-after-ms": "1500"}, 1.5),
    ({"retry-after": "7"}, 7.0),
    ({"retry-after": "0.25"}, 0.25),
    ({"retry-after": email.utils.formatdate(1_000_120, usegmt=True)}, 120.0),
    ({"retry-after": "soon"}, None),
    ({}, None),
])
def test_retry_after_is_read_in_all_its_forms(headers: dict[str, str],
                                              seconds: float | None) -> None:
    assert parse_retry_after(httpx.Headers(headers), clock=lambda: 1_000_000.0) == seconds


@pytest.mark.parametrize(("body", "described"), [
    ({"error": {"message": "Bad", "type": "invalid_request_error", "code": "x"}},
     "invalid_request_error: Bad (code x)"),
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     "overloaded_error: Overloaded"),
    ({"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}},
     "RESOURCE_EXHAUSTED: Quota (code 429)"),
    ([{"error": {"code": 400, "message": "Bad", "status": "INVALID_ARGUMENT"}}],
     "INVALID_ARGUMENT: Bad (code 400)"),
    ({"error": "plain text"}, "plain text"),
    ({"detail": "no error key"}, "no error details"),
])
def test_error_bodies_of_every_provider_are_read(body: object, described: str) -> None:
    assert ErrorDetails.from_body(body).describe() == described


def test_the_redactor_scrubs_text_and_json() -> None:
    redactor = Redactor(("sk-secret-123",))

    assert redactor.text("key sk-secret-123 leaked") == "key [redacted] leaked"
    assert redactor.json({"a": ["sk-secret-123"], "sk-secret-123": 1}) == {
        "a": ["[redacted]"], "[redacted]": 1}


@pytest.mark.parametrize("raw", [
    b'{"a": [1, 2.5, "x", null, true]}',
    b'{"a": "\\ud800 half a pair"}',  # no Rust string holds it: json decides
    b'\xef\xbb\xbf{"a": 1}',  # a byte order mark
    '{"a": "utf-16 body"}'.encode("utf-16"),
    b'{"a": 123456789012345678901234567890, "a": 2}',
    '{"a": "text"}',
])
def test_loads_json_reads_what_json_loads_reads(raw: bytes | str) -> None:
    assert loads_json(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [b"[1, 2", b"<html>", b'{"a": "\xff"}', b""])
def test_loads_json_refuses_what_json_loads_refuses(raw: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(ValueError):
        loads_json(raw)
