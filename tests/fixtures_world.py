"""A small world for run tests: demo tools registered, a policy, scripted endpoints."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.tools.registry import sync_tools


@pytest.fixture
def demo_tools(db: None) -> dict[str, ToolRegistration]:
    sync_tools(["tools_app.tools.example_tools"])
    return {t.name: t for t in ToolRegistration.objects.all()}


@pytest.fixture
def policy(db: None) -> ErrorPolicy:
    return ErrorPolicy.objects.create(name="Test policy", is_default=True)


@pytest.fixture
def make_endpoint(db: None) -> Any:
    def make(
        script: list[dict[str, Any]], *, name: str = "scripted", **fields: Any
    ) -> ModelEndpoint:
        return ModelEndpoint.objects.create(name=name, kind="scripted", script=script, **fields)

    return make


WEATHER_SCRIPT = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Hangzhou"}},
                    {"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"text": "Here you go: {last_results}"},
]


@pytest.fixture
def weather_endpoint(make_endpoint: Any) -> ModelEndpoint:
    return make_endpoint(WEATHER_SCRIPT, name="weather")  # type: ignore[no-any-return]
