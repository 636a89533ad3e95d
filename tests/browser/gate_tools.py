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

MAX_WAIT_SECONDS = 60.0  # a test that never releases it still ends


def release_file(data_dir: str, key: str) -> Path:
    """The file a test writes (in the server's DATA_DIR) to let the naps of `key` go."""
    return Path(data_dir) / f"release-{key}"


@tool
async def watched_nap(seconds: float, key: str) -> str:
    """Wait until a viewer has watched this call running (the test releases `key`), then
    sleep `seconds`."""
    release = release_file(os.environ["DATA_DIR"], key)
    deadline = time.monotonic() + MAX_WAIT_SECONDS
    while not release.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(seconds)
    return f"Slept {seconds:g} s"
