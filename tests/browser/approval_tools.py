"""A tool that requires a person's approval, for the browser approval tests. Registered
only when the browser suite starts its server (AGENTFORGE_TOOL_MODULES)."""

from __future__ import annotations

from tools_app.engine import tool


@tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (needs a person's approval)."""
    return f"sent '{subject}' to {to}"
