"""The wire formats the fake server speaks."""

from .anthropic import AnthropicWire
from .base import StreamItem, Wire, WireError, encode_item
from .gemini import GeminiWire
from .openai import OpenAIWire
from .openai_responses import OpenAIResponsesWire

OPENAI = OpenAIWire()
OPENAI_RESPONSES = OpenAIResponsesWire()
ANTHROPIC = AnthropicWire()
GEMINI = GeminiWire()

__all__ = [
    "ANTHROPIC",
    "GEMINI",
    "OPENAI",
    "OPENAI_RESPONSES",
    "AnthropicWire",
    "GeminiWire",
    "OpenAIResponsesWire",
    "OpenAIWire",
    "StreamItem",
    "Wire",
    "WireError",
    "encode_item",
]
