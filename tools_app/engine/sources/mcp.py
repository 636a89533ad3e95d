"""MCP tools: a tool of an MCP server, executed through the process's session to it.

`McpToolExecutor` runs one remote tool (arguments parsed with `arguments_as_map`; the
runs layer validates them against the tool's schema before). What the server returns
is untrusted and may be large: text blocks go to the model as they are (capped), an
image or audio block as a one-line description ("[image/png, 1234 bytes]"), embedded
resources as their text or such a description, resource links as their URI; with no
content blocks, the structured content as JSON. The audit result keeps the blocks'
metadata, never their bytes. A result with `isError` is a `ToolExecutionError` (so the
run's error policy applies), as is every failure of the server or its session
(the connection: mcp_client.py; sessions: mcp_sessions.py).

`tool_definitions` turns a server's tools/list answer into what a registration stores:
name, description, input schema and the annotations (read-only, destructive,
idempotent, open-world hints).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    Tool,
)

from ..errors import ToolExecutionError
from ..execution import ToolExecutionResult, arguments_as_map
from ..messages import ToolExecutionRequest
from .mcp_client import McpCallError, McpServerConfig
from .mcp_sessions import MCP_SESSIONS, McpSessions

__all__ = [
    "MCP_SESSIONS",
    "McpCallError",
    "McpServerConfig",
    "McpSessions",
    "McpToolDefinition",
    "McpToolExecutor",
    "convert_result",
    "tool_definitions",
]

DEFAULT_MAX_TEXT_BYTES = 256 * 1024
ANNOTATION_HINTS = ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")


@dataclass(frozen=True)
class ConvertedResult:
    text: str
    """For the model."""
    audit: dict[str, Any]
    """For the audit log: the blocks without their bytes."""


class McpToolExecutor:
    """Executes a registered tool by calling `remote_name` on an MCP server."""

    def __init__(self, config: McpServerConfig, remote_name: str, *,
                 sessions: McpSessions = MCP_SESSIONS,
                 max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES) -> None:
        self.config = config
        self.remote_name = remote_name
        self.sessions = sessions
        self.max_text_bytes = max_text_bytes

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        arguments = arguments_as_map(request)
        try:
            result = await self.sessions.call_tool(self.config, self.remote_name, arguments)
        except McpCallError as exc:
            raise ToolExecutionError(str(exc), tool_name=request.name, cause=exc) from exc
        converted = convert_result(result, max_text_bytes=self.max_text_bytes)
        if result.is_error:
            raise ToolExecutionError(
                f"MCP tool {self.remote_name!r} of server {self.config.name!r} reported an "
                f"error: {converted.text or '(no message)'}", tool_name=request.name)
        return ToolExecutionResult.success(converted.text, result=converted.audit)


def convert_result(result: CallToolResult, *, max_text_bytes: int) -> ConvertedResult:
    """The model's text and the audit's record of one tools/call result."""
    pieces = [_block_text(block) for block in result.content]
    if not pieces and result.structured_content is not None:
        pieces = [json.dumps(result.structured_content, ensure_ascii=False)]
    audit: dict[str, Any] = {"content": [_block_audit(block) for block in result.content]}
    if result.structured_content is not None:
        audit["structured_content"] = result.structured_content
    if result.is_error:
        audit["is_error"] = True
    return ConvertedResult(cap_text("\n".join(pieces), max_text_bytes), audit)


def _block_text(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        return f"[{block.mime_type}, {decoded_size(block.data)} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, BlobResourceContents):
            mime = resource.mime_type or "application/octet-stream"
            return f"[{mime}, {decoded_size(resource.blob)} bytes: {resource.uri}]"
        return resource.text
    return f"[{type(block).__name__}]"  # a block type from a newer protocol


def _block_audit(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, ImageContent | AudioContent):
        return {"type": block.type, "mime_type": block.mime_type,
                "bytes": decoded_size(block.data)}
    if isinstance(block, EmbeddedResource) and isinstance(block.resource,
                                                          BlobResourceContents):
        resource = block.resource
        return {"type": "resource", "uri": str(resource.uri),
                "mime_type": resource.mime_type, "bytes": decoded_size(resource.blob)}
    return block.model_dump(mode="json", exclude_none=True, by_alias=False)


def decoded_size(data: str) -> int:
    """The size of base64 `data` once decoded, without decoding megabytes for it."""
    stripped = data.strip()
    padding = len(stripped) - len(stripped.rstrip("="))
    size = len(stripped) * 3 // 4 - padding
    if size < 0 or len(stripped) % 4:
        try:  # not canonical base64: measure it the slow way
            return len(base64.b64decode(stripped + "=" * (-len(stripped) % 4)))
        except (binascii.Error, ValueError):
            return len(stripped)
    return size


def cap_text(text: str, limit: int) -> str:
    """`text` cut to `limit` UTF-8 bytes, with a marker saying how much was dropped."""
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= limit:
        return text
    head = encoded[:limit].decode("utf-8", errors="ignore")
    return f"{head}[truncated {len(encoded) - len(head.encode('utf-8'))} bytes]"


@dataclass(frozen=True)
class McpToolDefinition:
    """What a registration stores of one remote tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, bool]
    """The hints the server gave (read_only_hint, destructive_hint, ...), only those."""
    title: str | None = None

    @property
    def idempotent(self) -> bool:
        """Safe to run again after a crash: what the server says, or read-only tools."""
        return bool(self.annotations.get("idempotent_hint")
                    or self.annotations.get("read_only_hint"))


def tool_definitions(tools: list[Tool]) -> list[McpToolDefinition]:
    return [_definition(tool) for tool in tools]


def _definition(tool: Tool) -> McpToolDefinition:
    hints: dict[str, bool] = {}
    title = tool.title
    if tool.annotations is not None:
        for hint in ANNOTATION_HINTS:
            value = getattr(tool.annotations, hint)
            if value is not None:
                hints[hint] = bool(value)
        title = title or tool.annotations.title
    return McpToolDefinition(name=tool.name, description=tool.description or "",
                             input_schema=dict(tool.input_schema), annotations=hints,
                             title=title)
