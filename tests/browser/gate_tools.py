"""A tool that holds its call until the browser test has seen it running, for the live
timeline test: with a fixed sleep, a page that connects late on a loaded machine finds
the round already over, and the test would lose that race. Registered only when the
browser suite starts its server (AGENTFORGE_TOOL_MODULES)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from tools_app.engine import tool

RELEASE_FILE = "release-watched-nap"  # in the server's DATA_DIR, written by the test
MAX_WAIT_SECONDS = 60.0  # a test that never releases it still ends


@tool
async def watched_nap(seconds: float) -> str:
    """Wait until a viewer has watched this call running, then sleep `seconds`."""
    release = Path(os.environ["DATA_DIR"]) / RELEASE_FILE
    deadline = time.monotonic() + MAX_WAIT_SECONDS
    while not release.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(seconds)
    return f"Slept {seconds:g} s"
