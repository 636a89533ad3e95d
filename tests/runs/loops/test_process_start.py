"""A process that executes runs imports at start what its first run would import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
import django
django.setup()
lazy = ["tools_app.engine.providers.openai", "tools_app.engine.providers.anthropic",
        "tools_app.engine.providers.gemini", "channels_redis.core"]
from tools_app.engine.providers.http.clients import default_ssl_context
before = {name: name in sys.modules for name in lazy}
tls_before = default_ssl_context.cache_info().currsize
from tools_app.runs.loops.process import preload_for_runs
preload_for_runs()
print(json.dumps({"before": before, "after": {name: name in sys.modules for name in lazy},
                  "tls": [tls_before, default_ssl_context.cache_info().currsize]}))
"""


def _in_fresh_process(tmp_path: Path, code: str, env: dict[str, str]) -> dict[str, Any]:
    """The JSON `code` prints last, run in a fresh process on a SQLite file of its own
    with `env` over this one's environment."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
           "DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
           **env}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _probe(tmp_path: Path) -> dict[str, Any]:
    """What a fresh process holds before and after `preload_for_runs()`."""
    return _in_fresh_process(tmp_path, PROBE, {"REDIS_URL": "redis://127.0.0.1:1/0"})


def test_the_provider_adapters_and_the_channel_layer_are_imported_at_start(
    tmp_path: Path,
) -> None:
    """A db_worker's first run imported them (100-150 ms of its first steps, with the
    other runs it started with waiting on the same event loop). The layer is built,
    not connected: no Redis is needed for this."""
    seen = _probe(tmp_path)

    assert not any(seen["before"].values())  # lazy until then
    assert all(seen["after"].values())


def test_the_model_clients_tls_context_is_built_at_start(tmp_path: Path) -> None:
    """Built by a process's first model client otherwise: 40-90 ms of CPU on the event
    loop every run of the process shares (seen in a db_worker's profile as the first
    runs of a burst started)."""
    assert _probe(tmp_path)["tls"] == [0, 1]


SERVER_GC = """
import gc, json
import agentforge_web.asgi
print(json.dumps({"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_a_started_server_froze_its_start_and_collects_young_objects_less_often(
    tmp_path: Path,
) -> None:
    """The ASGI application, once imported (as daphne does), has frozen what start-up
    built and raised the young generation's threshold (the older ones as Python has
    them)."""
    # The embedded default (no Redis, the in-process backend), its worker not started.
    seen = _in_fresh_process(tmp_path, SERVER_GC, {
        "AGENTFORGE_EMBEDDED_WORKER": "0", "DEBUG": "1", "REDIS_URL": "",
        "TASK_BACKEND": "inprocess"})

    assert seen["thresholds"] == [10_000, 10, 10]
    assert seen["frozen"] > 100_000  # modules, Django's setup, the validators


RECORDER_GC = """
import gc, json, multiprocessing, os
from tools_app.proxy import recorder_child
ours, theirs = multiprocessing.Pipe()
ours.close()  # the server gone at once: the recorder's loop ends after its start
recorder_child.main(theirs, os.environ["DJANGO_SETTINGS_MODULE"], os.environ["DB_NAME"], 0)
print(json.dumps({"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_the_proxys_recorder_process_starts_as_the_server_does(tmp_path: Path) -> None:
    """Its span cache holds a conversation's parsed spans for as long as it goes on:
    full collections walking all of start-up too showed in its profile as the cost of
    whatever allocated when one began."""
    seen = _in_fresh_process(tmp_path, RECORDER_GC, {
        "DEBUG": "1", "REDIS_URL": "", "DB_NAME": str(tmp_path / "db.sqlite3")})

    assert seen["thresholds"] == [10_000, 10, 10]
    assert seen["frozen"] > 100_000
