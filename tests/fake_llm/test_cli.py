"""The two ways to start the server: `python -m tools_app.fake_llm` and the management
command. Both are started for real as subprocesses on a free loopback port."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tools_app.fake_llm.__main__ import build_parser
from tools_app.management.commands.fake_llm_server import Command

from .support import openai_body

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


def test_main_parses_its_arguments() -> None:
    defaults = build_parser().parse_args([])
    given = build_parser().parse_args(
        ["--port", "9001", "--host", "127.0.0.2", "--script", "s.json", "--record-limit", "0",
         "--lenient"])

    assert (defaults.host, defaults.port, defaults.script, defaults.lenient) == (
        "127.0.0.1", 8765, None, False)
    assert (given.host, given.port, given.script, given.record_limit, given.lenient) == (
        "127.0.0.2", 9001, "s.json", 0, True)


def test_management_command_has_the_same_options() -> None:
    parser = Command().create_parser("manage.py", "fake_llm_server")

    options = vars(parser.parse_args(["--port", "9002", "--script", "s.json", "--lenient"]))

    assert (options["port"], options["script"], options["host"], options["lenient"]) == (
        9002, "s.json", "127.0.0.1", True)


def test_bad_port_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--port", "eighty"])


@pytest.mark.parametrize(
    ("command", "lenient"),
    [
        ([sys.executable, "-m", "tools_app.fake_llm"], False),
        ([sys.executable, "manage.py", "fake_llm_server"], True),
    ],
    ids=["python-m", "manage.py-lenient"],
)
def test_server_process_serves_the_script_file(command: list[str], lenient: bool,
                                               tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": {"cli-model": {"steps": [{"text": "from cli"}]}}}))
    port = _free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port), "--script", str(script),
         *(["--lenient"] if lenient else [])],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        health = _wait_until_listening(base, process)
        answer = httpx.post(f"{base}/v1/chat/completions", json=openai_body(model="cli-model"),
                            timeout=10).json()
    finally:
        output = _stop(process)

    assert health["scripts"] == ["cli-model"]
    assert health["strict"] is not lenient
    assert answer["choices"][0]["message"]["content"] == "from cli"
    assert f"listening on http://127.0.0.1:{port}" in output
    assert f"OpenAI base_url http://127.0.0.1:{port}/v1" in output


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_listening(base: str, process: subprocess.Popen[str]) -> dict[str, object]:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"the server exited early: {errors}")
        try:
            health: dict[str, object] = httpx.get(f"{base}/_fake/health", timeout=1).json()
            return health
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"the server did not answer within {START_TIMEOUT} s")


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    try:
        stdout, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, _ = process.communicate(timeout=10)
    return stdout
