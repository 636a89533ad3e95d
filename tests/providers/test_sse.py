"""The event-stream decoder: the WHATWG rules plus the tolerances real servers need."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tools_app.engine.providers.http.sse import SseEvent, aiter_sse


async def _lines(text: str) -> AsyncIterator[str]:
    for line in text.splitlines():
        yield line


async def decode(text: str) -> list[SseEvent]:
    return [event async for event in aiter_sse(_lines(text))]


async def test_it_reads_events_with_names_ids_and_data() -> None:
    events = await decode("event: ping\nid: 7\ndata: {}\n\ndata: [DONE]\n\n")

    assert events == [SseEvent(event="ping", data="{}", id="7"),
                      SseEvent(event="message", data="[DONE]", id="7")]


async def test_it_joins_multi_line_data_and_skips_comments() -> None:
    events = await decode(": keep-alive\ndata: a\ndata: b\n\n")

    assert events == [SseEvent(event="message", data="a\nb")]


async def test_it_tolerates_a_leading_space_before_the_field_name() -> None:
    events = await decode(' data: {"x": 1}\n\ndata: {"x": 2}\n\n')

    assert [e.data for e in events] == ['{"x": 1}', '{"x": 2}']


async def test_it_dispatches_the_last_event_when_the_body_has_no_final_blank_line() -> None:
    events = await decode("event: message_stop\ndata: {\"type\":\"message_stop\"}")

    assert events == [SseEvent(event="message_stop", data='{"type":"message_stop"}')]


async def test_it_ignores_events_without_data_and_crlf_endings() -> None:
    events = await decode("event: nothing\r\n\r\ndata:x\r\n\r\n")

    assert events == [SseEvent(event="message", data="x")]


async def test_a_byte_order_mark_at_the_start_of_the_stream_is_ignored() -> None:
    events = await decode('\ufeffdata: {"x": 1}\n\ndata: {"x": 2}\n\n')

    assert [e.data for e in events] == ['{"x": 1}', '{"x": 2}']


async def test_a_byte_order_mark_later_in_the_stream_is_not_stripped() -> None:
    events = await decode('data: a\n\n\ufeffdata: b\n\ndata: c\n\n')

    assert [e.data for e in events] == ["a", "c"]  # "\ufeffdata" is an unknown field


async def test_a_whitespace_only_line_does_not_end_an_event() -> None:
    events = await decode("data: a\n \ndata: b\n\t\ndata: c\n\n")

    assert events == [SseEvent(event="message", data="a\nb\nc")]


async def test_only_an_empty_line_dispatches() -> None:
    events = await decode("event: one\ndata: a\n   \n\ndata: b\n\n")

    assert events == [SseEvent(event="one", data="a"), SseEvent(event="message", data="b")]
