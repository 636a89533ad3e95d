"""A finished run leaves nothing in flight: its last round and its calls end in a final
state, and the text a cancelled streaming round received is kept (issue #16)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from tests.runs.support import calls, execute, fake_llm_server, rounds, start
from tools_app.fake_llm import BackgroundServer
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    RunStatus,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.services import run_cancel
from tools_app.runs.store.leases import claim
from tools_app.runs.store.lifecycle import finish
from tools_app.runs.worker import recorder

pytestmark = pytest.mark.both

LONG_TEXT = "The answer streams in slowly, piece by piece, " * 40

SCRIPTS = {"scripts": {
    # 8 characters per event, 50 ms apart: minutes of stream, cancelled long before.
    "slow-text": {"steps": [{"text": LONG_TEXT}], "chunk_delay_ms": 50},
    "refusing": {"steps": [{"faults": [{"kind": "status", "status": 400, "times": None}]}]},
    "quick": {"steps": [{"text": "Streamed whole."}], "chunk_size": 4},
}}


@pytest.fixture(scope="module")
def fake_server() -> Iterator[BackgroundServer]:
    with fake_llm_server(SCRIPTS) as server:
        yield server


def streaming_endpoint(server: BackgroundServer, model: str) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        name=model, kind="openai_compatible", base_url=server.base_urls()["openai"],
        model=model, stream=True)


def test_cancelling_a_streaming_run_ends_its_round_cancelled_with_the_text_so_far(
    fake_server: BackgroundServer, policy: ErrorPolicy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = start(streaming_endpoint(fake_server, "slow-text"), [], policy)
    shown: list[str] = []

    async def viewers(run_id: str, message: dict[str, Any]) -> None:
        fragment = message.get("fragment")
        if fragment is None:
            return
        shown.append(fragment["delta"])
        if len(shown) == 3:  # the user presses Cancel while the answer streams
            await sync_to_async(run_cancel)(run=await Run.objects.aget(pk=run_id))

    monkeypatch.setattr(recorder, "notify", viewers)

    assert execute(run) == "cancelled"

    [round_] = rounds(run)
    assert round_.status == "cancelled"
    assert round_.finished_at is not None
    assert round_.ai_text is not None
    assert round_.ai_text.startswith("".join(shown[:3]))
    assert len(round_.ai_text) < len(LONG_TEXT)


def test_a_round_whose_model_call_failed_ends_failed(
    fake_server: BackgroundServer, policy: ErrorPolicy,
) -> None:
    run = start(streaming_endpoint(fake_server, "refusing"), [], policy)

    assert execute(run) == "failed"

    [round_] = rounds(run)
    assert (round_.status, round_.ai_text) == ("failed", None)
    assert round_.finished_at is not None


def test_a_streamed_response_keeps_its_raw_event_stream(
    fake_server: BackgroundServer, policy: ErrorPolicy,
) -> None:
    run = start(streaming_endpoint(fake_server, "quick"), [], policy)

    assert execute(run) == "succeeded", run.error_message

    [round_] = rounds(run)
    assert round_.raw_stream is not None
    lines = round_.raw_stream.splitlines()
    assert lines[0].startswith("data: {")
    assert lines[-1] == "data: [DONE]" or "data: [DONE]" in lines
    assert '"content":"Stre"' in round_.raw_stream.replace(" ", "")
    assert round_.response_json["choices"][0]["message"]["content"] == "Streamed whole."


def test_a_run_stopped_by_a_call_cancels_the_sibling_still_running(
    make_endpoint: Any, tools: dict[str, ToolRegistration],
) -> None:
    """Stop-the-run policy, parallel calls: the failing call stops the run while its
    sibling sleeps; the sibling must not stay "started" in a finished run."""
    stopping = ErrorPolicy.objects.create(name="Stop", execution_error="rethrow", parallel=True)
    script = [{"tool_calls": [{"name": "wait_here", "arguments": {"seconds": 30}},
                              {"name": "always_fails", "arguments": {}}]},
              {"text": "never reached"}]
    run = start(make_endpoint(script), [tools["wait_here"], tools["always_fails"]], stopping)

    assert execute(run) == "failed"

    states = {c.tool_name: c.state for c in calls(run)}
    assert states == {"wait_here": "cancelled", "always_fails": "execution_error"}
    sibling = next(c for c in calls(run) if c.tool_name == "wait_here")
    assert sibling.finished_at is not None  # its bar stops


@pytest.mark.parametrize(("end", "round_state"), [
    (RunStatus.FAILED, "failed"), (RunStatus.CANCELLED, "cancelled"),
    (RunStatus.SUCCEEDED, "failed")])
def test_the_end_of_a_run_closes_every_call_and_round_left_in_flight(
    weather_endpoint: ModelEndpoint, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, end: RunStatus, round_state: str,
) -> None:
    """Whatever way the engine stopped (a stop-the-run error raised while a sibling's
    cancellation was still being recorded, a cancel, a crash), the finishing move leaves
    no call started or proposed and no round requested."""
    run = start(weather_endpoint, [demo_tools["get_weather"]], policy)
    token = claim(str(run.pk), "worker-1")
    assert token is not None
    answered = Round.objects.create(run=run, index=0, status="responded")
    asked = Round.objects.create(run=run, index=1, status="requested")
    now = timezone.now()
    for n, state in enumerate(["execution_error", "started", "proposed"]):
        ToolCall.objects.create(run=run, round=answered, call_index=n, call_id=f"c{n}",
                                tool_name="get_weather", state=state, started_at=now)

    with transaction.atomic():
        seq = finish(str(run.pk), token, end, {}, {1: "partial answer", 0: "stale"})

    assert [c.state for c in calls(run)] == ["execution_error", "cancelled", "cancelled"]
    assert calls(run)[1].finished_at is not None  # the started one's bar stops
    asked.refresh_from_db()
    assert (asked.status, asked.ai_text) == (round_state, "partial answer")
    answered.refresh_from_db()
    assert (answered.status, answered.ai_text) == ("responded", None)
    # The run's last event names its last round, so live viewers see it re-rendered.
    assert RunEvent.objects.get(run=run, seq=seq).payload["round_index"] == 1
