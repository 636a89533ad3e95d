"""Executors for tools that are not Python functions of this process: canned answers
(`mock`), HTTP endpoints (`http`), MCP servers (`mcp`, imported on its own: it loads the
SDK). Each is a ToolExecutor usable with ToolService from plain Python, configured by a
pydantic model or dataclass (the admin validates a registration's `config` with the same
model). They do not validate arguments against the tool's schema themselves: wrap them
in `SchemaValidatingExecutor` (execution.py), as the runs layer does for every
non-Python tool.
"""

from .http import HttpConfig, HttpToolExecutor, SecretResolver
from .mock import MockConfig, MockResponse, MockToolExecutor

__all__ = ["HttpConfig", "HttpToolExecutor", "MockConfig", "MockResponse", "MockToolExecutor",
           "SecretResolver"]
