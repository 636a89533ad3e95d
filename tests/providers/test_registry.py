"""The lazy provider registry: a kind maps to a dotted path imported on first use."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tools_app.engine import ChatModel, ScriptedChatModel
from tools_app.engine.providers import PROVIDERS, build_chat_model, provider_kinds
from tools_app.engine.providers.anthropic import AnthropicChatModel
from tools_app.engine.providers.gemini import GeminiChatModel
from tools_app.engine.providers.http.endpoint import EndpointSettings, attempt_timeouts
from tools_app.engine.providers.openai import OpenAIChatModel, OpenAICompatibleChatModel


def test_the_known_kinds() -> None:
    assert provider_kinds() == ["anthropic", "gemini", "openai", "openai_compatible",
                                "openai_responses", "scripted"]


@pytest.mark.parametrize(("kind", "cls", "url"), [
    ("openai", OpenAIChatModel, "https://api.openai.com/v1"),
    ("anthropic", AnthropicChatModel, "https://api.anthropic.com"),
    ("gemini", GeminiChatModel, "https://generativelanguage.googleapis.com/v1beta"),
])
def test_it_builds_each_wire_adapter_with_its_default_base_url(kind: str, cls: type,
                                                               url: str) -> None:
    model = build_chat_model(kind, base_url=None, model="m", api_key="k", stream=True,
                             extra_headers={}, max_retries=1)

    assert type(model) is cls
    assert isinstance(model, ChatModel)
    assert model.http.base_url == url
    assert model.stream is True
    assert model.http.retry.max_retries == 1  # type: ignore[attr-defined]


def test_an_openai_compatible_endpoint_needs_a_base_url_and_no_key() -> None:
    model = build_chat_model("openai_compatible", base_url="http://127.0.0.1:11434/v1",
                             model="llama3.2")

    assert type(model) is OpenAICompatibleChatModel
    assert model.max_tokens_field == "max_tokens"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="openai_compatible: base_url is required"):
        build_chat_model("openai_compatible", model="llama3.2")


def test_one_settings_object_reaches_the_http_client_whole() -> None:
    settings = EndpointSettings(model="m", base_url="http://127.0.0.1:9/v1/", api_key="k",
                                connect_timeout=1, read_timeout=7, max_retries=4,
                                proxy="http://proxy.invalid:3128")

    model: Any = build_chat_model("openai_compatible", settings)

    assert model.settings is settings  # its base URL was known: nothing to fill in
    assert model.http.config == settings.connection()
    assert model.http.base_url == "http://127.0.0.1:9/v1"
    assert (model.http.timeouts.connect, model.http.timeouts.read) == (1, 7)
    assert model.http.retry.max_retries == 4
    with pytest.raises(TypeError, match="not both"):
        build_chat_model("openai_compatible", settings, stream=True)


def test_an_endpoint_timeout_bounds_connecting_and_every_silence() -> None:
    assert attempt_timeouts(120) == (5.0, 120)  # connecting never takes the default longer
    assert attempt_timeouts(0.5) == (0.5, 0.5)


def test_it_builds_the_scripted_model() -> None:
    model = build_chat_model("scripted", steps=[{"text": "Hi"}])

    assert isinstance(model, ScriptedChatModel)


def test_an_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown provider kind 'cohere'; known kinds: "
                                         "anthropic, gemini, openai"):
        build_chat_model("cohere", model="x")


def test_adapters_are_imported_only_when_used_and_never_import_django() -> None:
    code = (
        "import sys, tools_app.engine\n"
        "assert 'tools_app.engine.providers.openai' not in sys.modules\n"
        "from tools_app.engine.providers import build_chat_model\n"
        f"for kind in {sorted(set(PROVIDERS) - {'scripted'})!r}:\n"
        "    build_chat_model(kind, base_url='http://127.0.0.1:1', model='m')\n"
        "assert 'tools_app.engine.providers.openai' in sys.modules\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'channels')]\n"
    )

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
