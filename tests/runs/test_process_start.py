"""A process that executes runs imports at start what its first run would import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import django
django.setup()
lazy = ["tools_app.engine.providers.openai", "tools_app.engine.providers.anthropic",
        "tools_app.engine.providers.gemini", "channels_redis.core"]
before = {name: name in sys.modules for name in lazy}
from tools_app.runs.process import preload_for_runs
preload_for_runs()
print(json.dumps({"before": before, "after": {name: name in sys.modules for name in lazy}}))
"""


def test_the_provider_adapters_and_the_channel_layer_are_imported_at_start(
    tmp_path: Path,
) -> None:
    """A db_worker's first run imported them (100-150 ms of its first steps, with the
    other runs it started with waiting on the same event loop). The layer is built,
    not connected: no Redis is needed for this."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
           "DATA_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert not any(seen["before"].values())  # lazy until then
    assert all(seen["after"].values())
