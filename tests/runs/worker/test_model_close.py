"""A run releases its model's pooled HTTP connections when it ends, however it ends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import execute, start
from tools_app.models import ErrorPolicy, ToolRegistration
from tools_app.runs.snapshot import engine as rebuild
from tools_app.runs.worker import runner

pytestmark = pytest.mark.both


class ClosingSpy:
    closed = 0

    def __init__(self, model: Any) -> None:
        self.model = model

    async def chat(self, request: Any) -> Any:
        return await self.model.chat(request)

    async def aclose(self) -> None:
        ClosingSpy.closed += 1


@pytest.fixture
def spied_models(monkeypatch: pytest.MonkeyPatch) -> type[ClosingSpy]:
    real = rebuild.engine_for_snapshot

    def with_spy(data: Any) -> Any:
        engine = real(data)
        return rebuild.RunEngine(model=ClosingSpy(engine.model), service=engine.service,
                                  secrets=engine.secrets)

    ClosingSpy.closed = 0
    monkeypatch.setattr(runner, "engine_for_snapshot", with_spy)
    return ClosingSpy


@pytest.mark.parametrize(("script", "status"), [
    ([{"text": "done"}], "succeeded"),
    ([{"tool_calls": [{"name": "get_weather", "arguments": "{not json"}]}], "failed"),
])
def test_the_model_is_closed_when_the_run_ends(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    spied_models: type[ClosingSpy], script: list[dict[str, Any]], status: str,
) -> None:
    run = start(make_endpoint(script), [demo_tools["get_weather"]], policy)
    assert execute(run) == status
    assert spied_models.closed == 1
