"""Helpers of the tests that start the server as a real process (test_embedded_restart,
test_serve_command): the repository root, an upper bound for each wait, the
environment of a fresh SQLite database, and a free loopback port."""

from __future__ import annotations

import os
import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 30.0  # an upper bound for each wait, never a measured duration


def environment(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("AGENTFORGE_EMBEDDED_WORKER", "REDIS_URL", "TASK_BACKEND",
                        "DATABASE_URL")}
    return env | {"DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "DATA_DIR": str(tmp),
                  "DJANGO_SETTINGS_MODULE": "agentforge_web.settings", "LOG_LEVEL": "WARNING"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
