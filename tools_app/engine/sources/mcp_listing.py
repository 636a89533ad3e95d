"""Connect and list, as the MCP Inspector does: a server's tools, resources and prompts,
and the JSON-RPC messages that went each way while they were listed (the wire log).

`WireLog` is filled by the transport's streams (mcp_client.open_client's `record`):
every message sent and received, in order, as the JSON it is on the wire, and a
transport fault as a line of its own. It is raw: the caller redacts secrets and makes
the server's words storable before keeping it. `list_everything` reads each list page
by page (bounded), asking for resources and prompts only when the server's
capabilities say it has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mcp import Client
from mcp_types import Prompt, Resource, Tool, jsonrpc_message_adapter

LIST_PAGES_CAP = 100  # a server whose lists never end cannot hang a sync
LOG_MESSAGES_CAP = 500  # past it the log notes how many more went by

Direction = Literal["sent", "received"]


@dataclass
class WireLog:
    """The JSON-RPC messages of one session, in the order they crossed the transport."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0

    def record(self, direction: Direction, message: Any) -> None:
        """`message`: a SessionMessage (its JSON-RPC envelope is kept) or the exception
        a transport put in the read stream (kept as its one-line text)."""
        if len(self.entries) >= LOG_MESSAGES_CAP:
            self.dropped += 1
            return
        envelope = getattr(message, "message", None)
        if envelope is not None:
            self.entries.append({"direction": direction, "message":
                                 jsonrpc_message_adapter.dump_python(
                                     envelope, mode="json", by_alias=True,
                                     exclude_none=True)})
        else:
            self.entries.append({"direction": direction,
                                 "fault": f"{type(message).__name__}: {message}"})

    def as_list(self) -> list[dict[str, Any]]:
        if not self.dropped:
            return list(self.entries)
        return [*self.entries, {"direction": "received",
                                "fault": f"{self.dropped} more messages not kept"}]


@dataclass(frozen=True)
class McpListing:
    """What a server offers, as its lists answered."""

    server_name: str
    server_version: str
    protocol_version: str
    tools: list[Tool]
    resources: list[Resource]
    prompts: list[Prompt]


async def list_everything(client: Client) -> McpListing:
    """Every page of the server's tools, and of its resources and prompts if it
    declares them (a server without them answers "method not found")."""
    capabilities = client.server_capabilities
    tools: list[Tool] = await _pages(client.list_tools, "tools")
    resources: list[Resource] = (await _pages(client.list_resources, "resources")
                                 if capabilities.resources is not None else [])
    prompts: list[Prompt] = (await _pages(client.list_prompts, "prompts")
                             if capabilities.prompts is not None else [])
    info = client.server_info
    return McpListing(server_name=info.name if info else "",
                      server_version=info.version if info else "",
                      protocol_version=client.protocol_version,
                      tools=tools, resources=resources, prompts=prompts)


async def _pages(list_page: Any, attribute: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(LIST_PAGES_CAP):
        page = await list_page(cursor=cursor)
        items.extend(getattr(page, attribute))
        cursor = page.next_cursor
        if cursor is None:
            break
    return items
