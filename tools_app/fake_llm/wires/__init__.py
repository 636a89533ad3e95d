"""The three wire formats the fake server speaks."""

from .anthropic import AnthropicWire
from .base import StreamItem, Wire, WireError, encode_item
from .gemini import GeminiWire
from .openai import OpenAIWire

OPENAI = OpenAIWire()
ANTHROPIC = AnthropicWire()
GEMINI = GeminiWire()

__all__ = [
    "ANTHROPIC",
    "GEMINI",
    "OPENAI",
    "AnthropicWire",
    "GeminiWire",
    "OpenAIWire",
    "StreamItem",
    "Wire",
    "WireError",
    "encode_item",
]
