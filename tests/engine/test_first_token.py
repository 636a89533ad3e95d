"""Time to first token: measured by the loop from the first streamed piece."""

from __future__ import annotations

from typing import Any

from tools_app.engine import ScriptedChatModel, ToolService, UserMessage
from tools_app.engine.events import ModelResponseReceived


async def _responses(model: ScriptedChatModel) -> list[ModelResponseReceived]:
    seen: list[Any] = []
    await ToolService().chat(model, [UserMessage(text="hi")], observers=[seen.append])
    return [e for e in seen if isinstance(e, ModelResponseReceived)]


async def test_a_streamed_answer_reports_its_first_token_time() -> None:
    (event,) = await _responses(ScriptedChatModel([{"text": "hello there"}], stream=True))
    assert event.first_token_ms is not None
    assert 0 <= event.first_token_ms <= event.latency_ms


async def test_an_unstreamed_answer_has_no_first_token_time() -> None:
    (event,) = await _responses(ScriptedChatModel([{"text": "hello there"}]))
    assert event.first_token_ms is None
