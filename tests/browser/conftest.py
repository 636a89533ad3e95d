"""The browser suite's world: a real daphne server on a fresh database, and Chromium.

The database is a fresh SQLite file; in the scale-out pass (DATABASE_URL names a
PostgreSQL server, for the tests marked `both`) a fresh PostgreSQL database of its own
on that server, dropped at the end, so the audit pages are driven on both databases.

The server is started once per session in a subprocess (embedded worker on), with the
demo seeded, alice (superuser) and bob (plain user) created, and the extra endpoints
and policies of `world.py`. Each test gets its own headless Chromium.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import pytest_asyncio
from playwright.async_api import async_playwright

pytest.register_assert_rewrite("tests.browser.support")

from .support import CHROMIUM, CHROMIUM_ARGS, Server, new_page  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DAPHNE = str(Path(PYTHON).with_name("daphne"))
TOOL_MODULES = ("tools_app.tools.example_tools,tests.browser.xss_tools,"
                "tests.browser.approval_tools,tests.browser.gate_tools")
START_TIMEOUT = 30.0
PASSWORDS = {"alice": "alice-browser-pw-7Q", "bob": "bob-browser-pw-9Z"}

CREATE_BOB_AND_WORLD = (
    "from django.contrib.auth import get_user_model; "
    "get_user_model().objects.create_user('bob', 'bob@example.com', {password!r}); "
    "from tests.browser import world; world.setup()"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_server_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


@contextmanager
def _browser_database(tmp: Path) -> Iterator[str]:
    """The server's DATABASE_URL: a SQLite file, or a PostgreSQL database of its own."""
    outer = _postgres_server_url()
    if outer is None:
        yield f"sqlite:///{tmp / 'db.sqlite3'}"
        return
    name = f"agentforge_browser_{os.getpid()}"
    with _admin_connection(outer) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(outer)._replace(path=f"/{name}"))
    finally:
        with _admin_connection(outer) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin_connection(url: str) -> psycopg.Connection[Any]:
    # On the server's maintenance database (the outer test run's own need not exist
    # yet); CREATE / DROP DATABASE cannot run inside a transaction.
    maintenance = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    return psycopg.connect(maintenance, autocommit=True)


def _server_env(tmp: Path, database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    # tests/conftest.py turns the embedded worker off for in-process tests; this server
    # must run its runs. Scale-out settings of the outer test run must not leak in.
    for name in ("AGENTFORGE_EMBEDDED_WORKER", "REDIS_URL", "TASK_BACKEND", "SECRET_KEY",
                 "SECRET_KEY_FILE"):
        env.pop(name, None)
    env.update({
        "DATABASE_URL": database_url,
        "DATA_DIR": str(tmp),
        "DEBUG": "1",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
        "AGENTFORGE_TOOL_MODULES": TOOL_MODULES,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        "SERVE_STATIC": "1",
        "LOG_LEVEL": "WARNING",
    })
    return env


def _manage(env: dict[str, str], *args: str, extra: dict[str, str] | None = None,
            ) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PYTHON, "manage.py", *args], cwd=ROOT,
                            env={**env, **(extra or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(process: subprocess.Popen[bytes], what: str) -> None:
    out, _ = process.communicate(timeout=60)
    if process.returncode != 0:
        raise RuntimeError(f"{what} failed ({process.returncode}):\n{out.decode()[-3000:]}")


def _wait_until_up(server: Server, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited ({process.returncode}):\n"
                               f"{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/accounts/login/", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"daphne did not answer within {START_TIMEOUT} s:\n"
                       f"{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)")
    tmp = tmp_path_factory.mktemp("browser")
    with _browser_database(tmp) as database_url:
        yield from _serve(tmp, _server_env(tmp, database_url))


def _serve(tmp: Path, env: dict[str, str]) -> Iterator[Server]:
    _finish(_manage(env, "migrate", "--noinput", "-v0"), "migrate")
    _finish(_manage(env, "seed_demo"), "seed_demo")
    port = _free_port()
    log = tmp / "daphne.log"
    srv = Server(base_url=f"http://127.0.0.1:{port}", env=env, root=ROOT, log=log,
                 passwords=dict(PASSWORDS))
    # The users, the extra world and the server start side by side (SQLite WAL copes).
    alice = _manage(env, "createsuperuser", "--noinput", extra={
        "DJANGO_SUPERUSER_USERNAME": "alice", "DJANGO_SUPERUSER_PASSWORD": PASSWORDS["alice"],
        "DJANGO_SUPERUSER_EMAIL": "alice@example.com"})
    bob = _manage(env, "shell", "-c", CREATE_BOB_AND_WORLD.format(password=PASSWORDS["bob"]))
    with log.open("wb") as log_file:
        daphne = subprocess.Popen(
            [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "agentforge_web.asgi:application"],
            cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        _finish(alice, "createsuperuser alice")
        _finish(bob, "create bob and the browser world")
        _wait_until_up(srv, daphne, log)
        yield srv
    finally:
        daphne.terminate()
        try:
            daphne.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daphne.kill()
            daphne.wait(timeout=10)


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def browser() -> AsyncIterator[Any]:
    """One Chromium for the package; every test opens its own contexts (cookie jars)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                    args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="package")
async def open_page(browser: Any, server: Server) -> AsyncIterator[Callable[..., Any]]:
    """`await open_page(user="alice", record=True)`: a page in its own browser context,
    closed after the test."""
    contexts: list[Any] = []

    async def factory(**options: Any) -> Any:
        page = await new_page(browser, server, **options)
        contexts.append(page.context)
        return page

    yield factory
    for context in contexts:
        await context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed browser test shows the end of the server's log."""
    report = yield
    server = getattr(item, "funcargs", {}).get("server")
    if report.failed and isinstance(server, Server):
        report.sections.append(("daphne log (tail)", server.log_tail()))
    return report
