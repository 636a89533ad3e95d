"""Tools for the browser XSS test: their results and errors carry markup payloads.

Registered only when the browser suite starts its server (AGENTFORGE_TOOL_MODULES); the
suite keeps them disabled until the XSS test enables them, so other pages stay clean.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

from pydantic import Field

from tools_app.engine import tool

PAYLOADS = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<button hx-get="/evil" hx-trigger="load">x</button>',
    '<a href="javascript:alert(1)">x</a>',
    "{{7*7}}",
)
ALL_PAYLOADS = " ".join(PAYLOADS)


@tool
def xss_echo(
    text: Annotated[str, Field(description="Any text; echoed back with markup appended")],
) -> dict[str, Any]:
    """Echo the text back together with markup payloads (browser XSS test)."""
    return {"echo": text, "payloads": list(PAYLOADS), "html": ALL_PAYLOADS}


@tool
def xss_fails(
    text: Annotated[str, Field(description="Text for the error message")] = "",
) -> NoReturn:
    """Always raise an error whose message is markup (browser XSS test)."""
    raise RuntimeError(f"{text} {ALL_PAYLOADS}")
