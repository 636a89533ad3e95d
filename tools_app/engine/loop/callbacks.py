"""Calling what a caller hands the engine (observers, error handlers, the approver, the
breakpoint hooks): each may be a plain function or a coroutine function."""

from __future__ import annotations

import inspect
from typing import Any


async def maybe_await(value: Any) -> Any:
    """A callback's return value: awaited if it is awaitable, else as it is."""
    return await value if inspect.isawaitable(value) else value
