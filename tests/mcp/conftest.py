"""MCP tests: the process's MCP sessions are closed after each test, so every server
process a test started is gone when it ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools_app.engine.sources.mcp import MCP_SESSIONS


@pytest.fixture(autouse=True)
def _close_mcp_sessions() -> Iterator[None]:
    yield
    MCP_SESSIONS.close()
