"""The base of the engine's exception tree (drawn in errors.py, which re-exports these).

Kept apart from errors.py, which depends on the messages (and so on the tool
specifications): argument validation, used by the specifications, raises these.
"""

from __future__ import annotations

from typing import Any


class AgentForgeError(Exception):
    """Base of every error the engine raises on purpose."""


class ToolError(AgentForgeError):
    def __init__(self, message: str, *, tool_name: str | None = None) -> None:
        super().__init__(message)
        self.tool_name = tool_name


class ToolArgumentsError(ToolError):
    """The arguments of a tool call could not be parsed or did not validate.

    `errors` keeps pydantic's structured errors (loc, msg, type) when there are some.
    """

    def __init__(
        self,
        message: str,
        *,
        tool_name: str | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message, tool_name=tool_name)
        self.errors = errors or []


class ToolExecutionError(ToolError):
    """The tool itself raised; the original exception is `__cause__` and `.cause`."""

    def __init__(
        self, message: str, *, tool_name: str | None = None, cause: BaseException | None = None
    ) -> None:
        super().__init__(message, tool_name=tool_name)
        self.cause = cause
