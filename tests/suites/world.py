"""The suites' test world (fixtures the conftest and the API tests import): the fake
provider with three models of different quality, an endpoint per model, the demo tools
and a default policy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runs.support import fake_llm_server
from tools_app.fake_llm import BackgroundServer
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.tools.registry import sync_tools

from .support import model_scripts

MODELS = ("good", "sloppy", "bad")


@pytest.fixture
def fake_models() -> Iterator[BackgroundServer]:
    with fake_llm_server(model_scripts()) as server:
        yield server


@pytest.fixture
def endpoints(db: None, fake_models: BackgroundServer) -> dict[str, ModelEndpoint]:
    url = fake_models.base_urls()["openai"]
    return {name: ModelEndpoint.objects.create(name=name, kind="openai_compatible",
                                               base_url=url, model=name)
            for name in MODELS}


@pytest.fixture
def suite_world(db: None, endpoints: dict[str, ModelEndpoint]) -> dict[str, ModelEndpoint]:
    sync_tools(["tools_app.tools.example_tools"])
    assert ToolRegistration.objects.filter(name="get_weather").exists()
    ErrorPolicy.objects.create(name="Suite policy", is_default=True)
    return endpoints
