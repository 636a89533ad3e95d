"""The typed events a run emits to its observers, and their JSON form."""

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from tools_app.engine import (
    EngineEvent,
    HallucinatedToolError,
    ReturnBehavior,
    ToolArgumentsError,
    ToolService,
    emit,
    tool,
)
from tools_app.engine.events import PartialText

from .support import EventLog, call, calls, final, scripted, user


@tool
async def fetch() -> dict[str, int]:
    await asyncio.sleep(0.05)
    return {"n": 1}


@tool
async def explode() -> str:
    await asyncio.sleep(0)
    raise RuntimeError("explode failed")


class AsyncEventLog(EventLog):
    async def __call__(self, event: Any) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.events.append(event)


async def run_with_parallel_round_error_and_answer(*observers: Any) -> None:
    service = ToolService(observers=observers[:1]).tools([fetch, explode])
    model = scripted(calls(call("fetch"), call("explode")), final("partly done"))
    await service.chat(model, [user()], observers=observers[1:])


EXPECTED_KINDS = [
    "chat_started",
    "round_started",
    "model_request_sent",
    "model_response_received",
    "tool_call_proposed",
    "tool_call_proposed",
    "tool_call_started",
    "tool_call_started",
    "tool_call_finished",
    "tool_call_finished",
    "round_started",
    "model_request_sent",
    "model_response_received",
    "chat_finished",
]


async def test_sync_and_async_observers_see_the_same_events_in_order() -> None:
    sync_log, async_log = EventLog(), AsyncEventLog()
    await run_with_parallel_round_error_and_answer(sync_log, async_log)
    assert sync_log.kinds() == EXPECTED_KINDS
    assert async_log.events == sync_log.events


async def test_events_of_a_parallel_round_with_an_error() -> None:
    log = EventLog()
    await run_with_parallel_round_error_and_answer(log)
    events = log.events

    assert (events[0].tool_names, events[0].message_count) == (["fetch", "explode"], 1)
    assert [e.round_index for e in events[1:10]] == [0] * 9
    assert [e.round_index for e in events[10:]] == [1, 1, 1, 1]
    assert [e.message_count for e in log.of_kind("model_request_sent")] == [1, 4]
    assert log.of_kind("model_request_sent")[0].tool_names == ["fetch", "explode"]

    proposed = log.of_kind("tool_call_proposed")
    assert [(p.call_index, p.request.name, p.known_tool) for p in proposed] == [
        (0, "fetch", True),
        (1, "explode", True),
    ]
    assert [e.tool_name for e in log.of_kind("tool_call_started")] == ["fetch", "explode"]

    failed, succeeded = log.of_kind("tool_call_finished")
    assert (failed.call_id, failed.tool_name) == ("call_0_1", "explode")
    assert failed.outcome == "execution_error"
    assert failed.is_error is True
    assert failed.text == "RuntimeError: explode failed"
    assert failed.error_type == "ToolExecutionError"
    assert failed.handled_by == "execution_error_to_model"
    assert failed.stopped_run is False
    assert "RuntimeError: explode failed" in (failed.traceback or "")

    assert (succeeded.call_id, succeeded.outcome) == ("call_0_0", "succeeded")
    assert succeeded.is_error is False
    assert succeeded.result_json == {"n": 1}
    assert succeeded.text == '{"n": 1}'
    assert succeeded.handled_by is None
    assert succeeded.started_at <= succeeded.finished_at

    finished = events[-1]
    assert finished.final_text == "partly done"
    assert finished.reason == "model_stopped"
    assert (finished.rounds, finished.tool_calls) == (2, 2)
    assert finished.usage is not None


async def test_an_immediate_return_is_reported_as_such() -> None:
    log = EventLog()
    service = ToolService(observers=[log]).tool(fetch, return_behavior=ReturnBehavior.IMMEDIATE)
    await service.chat(scripted(calls(call("fetch"))), [user()])
    assert log.kinds()[-1] == "chat_finished"
    assert log.events[-1].reason == "immediate_return"
    assert log.events[-1].final_text is None


async def test_a_stopped_run_reports_which_handler_stopped_it() -> None:
    log = EventLog()

    @tool
    def needs(value: int) -> int:
        return value

    model = scripted(calls(call("needs", {"value": "x"})), final())
    with pytest.raises(ToolArgumentsError):
        await ToolService(observers=[log]).tools([needs]).chat(model, [user()])
    [finished] = log.of_kind("tool_call_finished")
    assert finished.outcome == "arguments_error"
    assert finished.handled_by == "rethrow_arguments_error"
    assert finished.stopped_run is True
    assert finished.text is None
    assert finished.error_details[0]["loc"] == ["value"]
    assert log.kinds()[-1] == "chat_failed"
    assert log.events[-1].error_type == "ToolArgumentsError"
    assert log.events[-1].cancelled is False


async def test_a_hallucinated_call_is_reported() -> None:
    log = EventLog()
    model = scripted(calls(call("imaginary")), final())
    with pytest.raises(HallucinatedToolError, match="imaginary"):
        await ToolService(observers=[log]).tools([fetch]).chat(model, [user()])
    [proposed] = log.of_kind("tool_call_proposed")
    assert proposed.known_tool is False
    [finished] = log.of_kind("tool_call_finished")
    assert (finished.outcome, finished.stopped_run) == ("hallucinated", True)
    assert finished.handled_by == "throw_on_hallucinated_tool"


async def test_an_observer_that_raises_stops_the_run() -> None:
    def fussy(event: Any) -> None:
        if event.kind == "tool_call_started":
            raise RuntimeError("observer refused")

    ran: list[int] = []

    @tool
    def count() -> None:
        ran.append(1)

    with pytest.raises(RuntimeError, match="observer refused"):
        await ToolService(observers=[fussy]).tools([count]).chat(
            scripted(calls(call("count")), final()), [user()]
        )
    assert ran == []


async def test_emit_outside_a_run_does_nothing() -> None:
    await emit(PartialText(delta="nobody listens"))


async def test_every_event_is_json_and_round_trips_through_the_union() -> None:
    log = EventLog()
    await run_with_parallel_round_error_and_answer(log)
    adapter: TypeAdapter[Any] = TypeAdapter(EngineEvent)
    for event in log.events:
        text = json.dumps(event.model_dump(mode="json"))
        restored = adapter.validate_json(text)
        assert type(restored) is type(event)
        assert restored == event


async def test_a_run_without_observers_builds_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events are built only for someone: with no observer neither the loop nor the
    provider makes one (each would be a pydantic validation per event, every round)."""
    import tools_app.engine.events as events_module
    from tools_app.engine.providers import build_chat_model

    built: list[str] = []
    original = events_module._Event.__init__

    def counting_init(self: Any, **fields: Any) -> None:
        built.append(type(self).__name__)
        original(self, **fields)

    monkeypatch.setattr(events_module._Event, "__init__", counting_init)
    replies = iter([{"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}]},
        {"choices": [{"message": {"role": "assistant", "content": "done"},
                      "finish_reason": "stop"}]}])

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=next(replies))

    model = build_chat_model("openai", model="m", transport=httpx.MockTransport(handle))
    result = await ToolService().tools([fetch]).chat(model, [user()])
    assert result.final_response.ai_message.text == "done"
    assert built == []

    log = EventLog()
    await ToolService(observers=[log]).tools([fetch]).chat(
        scripted(calls(call("fetch")), final()), [user()])
    assert {"RoundStarted", "ToolCallStarted", "ToolCallFinished"} <= set(built)
