"""The provider registry: a kind names a dotted path, imported on first use.

Adding a provider is one line here plus one module. Nothing is imported until a model
of that kind is built, so the engine starts without loading any wire adapter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import ChatModel

if TYPE_CHECKING:  # the adapters' modules stay unimported until a model is built
    from tools_app.engine.providers.http.endpoint import EndpointSettings

PROVIDERS: dict[str, str] = {
    "openai": "tools_app.engine.providers.openai.OpenAIChatModel",
    "openai_compatible": "tools_app.engine.providers.openai.OpenAICompatibleChatModel",
    "openai_responses": "tools_app.engine.providers.openai_responses.OpenAIResponsesModel",
    "anthropic": "tools_app.engine.providers.anthropic.AnthropicChatModel",
    "gemini": "tools_app.engine.providers.gemini.GeminiChatModel",
    "scripted": "tools_app.engine.providers.scripted.ScriptedChatModel",
}


def provider_kinds() -> list[str]:
    return sorted(PROVIDERS)


def chat_model_class(kind: str) -> Any:
    """The class (or factory) registered for `kind`, imported now."""
    try:
        path = PROVIDERS[kind]
    except KeyError:
        raise ValueError(f"unknown provider kind {kind!r}; known kinds: "
                         f"{', '.join(provider_kinds())}") from None
    module_name, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


def build_chat_model(kind: str, settings: EndpointSettings | None = None, /,
                     **options: Any) -> ChatModel:
    """A ChatModel of `kind`: a wire adapter built from the endpoint's `settings` (or
    their fields as keywords); the scripted model from its own keywords."""
    cls = chat_model_class(kind)
    model = cls(**options) if settings is None else cls(settings, **options)
    if not isinstance(model, ChatModel):
        raise TypeError(f"provider {kind!r} built {model!r}, which is not a ChatModel")
    return model
