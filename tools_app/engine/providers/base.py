"""The ChatModel protocol every provider implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..messages import ChatRequest, ChatResponse


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a ChatRequest. Streaming providers report partial text
    and tool-call fragments through `events.emit` while they build the response."""

    async def chat(self, request: ChatRequest) -> ChatResponse: ...
