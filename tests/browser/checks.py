"""What hostile output could cause in a page, watched for by the browser tests (dialogs,
requests leaving the allowed URLs, page errors, CSP reports, injected elements), and
where their screenshots go (AGENTFORGE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit

from .support import Server

SCREENSHOTS = os.environ.get("AGENTFORGE_SCREENSHOTS") == "1"


def screenshot_path(server: Server, name: str) -> str:
    folder = server.root / "docs" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / name)


def no_dialogs(page: Any) -> list[str]:
    """Every JavaScript dialog the page opens (an executed payload would open one)."""
    opened: list[str] = []

    async def dismiss(dialog: Any) -> None:
        opened.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    return opened


HALLUCINATED_NAME = "<img src=x onerror=alert(1)>"


# Every URL the app's pages may load: its own pages, static files, run sockets and the
# navigation's poll of the runs waiting for the user.
ALLOWED_PATH = re.compile(
    r"^/(|playground/|accounts/login/|favicon\.ico|static/[\w./-]+"
    r"|runs/[0-9a-f-]{36}/|ws/runs/[0-9a-f-]{36}/|runs/waiting\.json)$"
)


# Elements a payload would create if it were parsed as markup anywhere on the page.
INJECTED = ("img, script:not([src]), [hx-get], [hx-post], [hx-trigger], [onerror], "
            "a[href^='javascript'], iframe, object, embed")


class Watch:
    """Everything the page does that a payload could cause."""

    def __init__(self, page: Any, server: Server) -> None:
        self.origin = server.base_url
        self.ws_origin = server.ws_base
        self.dialogs: list[str] = []
        self.urls: list[str] = []
        self.console: list[str] = []
        page.on("dialog", self.on_dialog)
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("websocket", lambda socket: self.urls.append(socket.url))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))

    async def on_dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()

    def unexpected_urls(self) -> list[str]:
        bad = []
        for url in self.urls:
            parts = urlsplit(url)
            origin = f"{parts.scheme}://{parts.netloc}"
            if origin not in (self.origin, self.ws_origin) or not ALLOWED_PATH.match(parts.path):
                bad.append(url)
        return bad

    def assert_clean(self) -> None:
        assert self.dialogs == []
        assert self.unexpected_urls() == []
        assert not [m for m in self.console if "Content Security Policy" in m]
        assert not [m for m in self.console if m.startswith("pageerror")]


class Problems:
    """Dialogs, page errors and CSP reports: what markup run as code would cause."""

    def __init__(self, page: Any) -> None:
        self.seen: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda error: self.seen.append(f"pageerror: {error}"))
        page.on("console", lambda m: self.seen.append(m.text)
                if "Content Security Policy" in m.text else None)

    async def _dialog(self, dialog: Any) -> None:
        self.seen.append(f"dialog: {dialog.message}")
        await dialog.dismiss()
