"""The scale-out harness: real `manage.py db_worker` processes on the pytest-django
PostgreSQL test database, the Redis channel layer, and bounded waits.

Every test here is marked `scaleout` (the Makefile runs them with DATABASE_URL pointing
at PostgreSQL and REDIS_URL at Redis) and uses `django_db(transaction=True)`, so the
rows a test creates are committed and the worker processes see them. The test process
enqueues into django-tasks-db's table (the `TASKS` setting is switched to the database
backend for each test); the workers claim from it.

Workers run with a 2 s lease and a 0.3 s heartbeat, so the reaper (at a worker's start
and every second in its reaper thread) notices a SIGKILLed worker within seconds.
Every worker is SIGKILLed (its whole process group) at the end of the test that started
it, before pytest-django flushes the tables.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django_tasks_db.models import DBTaskResult

from agentforge_web.channel_layers import redis_channel_layers
from tools_app.fake_llm import BackgroundServer, FakeLLMApp, ScriptSet
from tools_app.models import (
    TERMINAL_STATUSES,
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunEvent,
    ToolRegistration,
)
from tools_app.runs import services
from tools_app.tools.registry import sync_tools

from .slow_tools import COUNTER_DIR_ENV, counter_file

REPO_ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = "2"
HEARTBEAT_SECONDS = "0.3"
EXECUTE_RUN = "tools_app.runs.tasks.execute_run"
# Upper bounds of waits, never measured durations.
START_TIMEOUT = 30.0
RUN_TIMEOUT = 60.0


# -- configuration ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _scaleout_configuration(settings: Any) -> None:
    """PostgreSQL + Redis, or fail saying so; the test process enqueues into the database
    backend. (`make test` runs these only in its scale-out pass.)"""
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.fail("scale-out tests need DATABASE_URL=postgres://... and REDIS_URL "
                    "(see the Makefile's test target)")
    settings.TASK_BACKEND = "database"
    settings.TASKS = {"default": {
        "BACKEND": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"}}


@pytest.fixture
def core_layer(settings: Any) -> None:
    """channels_redis's core layer (AGENTFORGE_CHANNEL_LAYER=core, the default), in this
    process and in the workers the test starts, whatever the environment chose."""
    settings.AGENTFORGE_CHANNEL_LAYER = "core"
    settings.CHANNEL_LAYERS = redis_channel_layers("core", settings.REDIS_URL, 1000)


@pytest.fixture
def pubsub_layer(settings: Any) -> None:
    """channels_redis's pub/sub layer (AGENTFORGE_CHANNEL_LAYER=pubsub), in this process
    and in the workers the test starts."""
    settings.AGENTFORGE_CHANNEL_LAYER = "pubsub"
    settings.CHANNEL_LAYERS = redis_channel_layers("pubsub", settings.REDIS_URL, 0)


def database_url() -> str:
    """The URL of the test database pytest-django created (not the configured one)."""
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def counter_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "counters"
    directory.mkdir()
    return directory


def counted(directory: Path, tool_name: str) -> list[str]:
    """The arguments a slow tool was entered with, one per execution, in order."""
    path = counter_file(directory, tool_name)
    if not path.exists():
        return []
    return [line.split(" ", 1)[1] for line in path.read_text(encoding="utf-8").splitlines()]


# -- worker processes ------------------------------------------------------------------


@dataclass
class Worker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def sigkill(self) -> None:
        """What the OOM killer does: no handler, no clean-up."""
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def sigterm(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.name} did not exit within {timeout} s\n"
                                 f"{self.log()[-4000:]}") from None

    def assert_exits_with(self, code: int, timeout: float) -> None:
        returncode = self.wait_exit(timeout)
        assert returncode == code, (f"worker {self.name} exited with {returncode}\n"
                                    f"{self.log()[-4000:]}")


@dataclass
class WorkerPool:
    """Starts `manage.py db_worker` processes; `stop_all` kills whatever is left."""

    directory: Path
    env: dict[str, str]
    workers: list[Worker] = field(default_factory=list)

    def start(self, name: str, *, interval: str = "0.1", **extra_env: str) -> Worker:
        log_path = self.directory / f"{name}.log"
        command = [sys.executable, "manage.py", "db_worker", "--no-reload",
                   "--no-startup-delay", "--interval", interval, "--worker-id", name]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=self.env | {
                    # The channel layer this process uses now (a test may choose one).
                    "AGENTFORGE_CHANNEL_LAYER": django_settings.AGENTFORGE_CHANNEL_LAYER,
                } | extra_env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        worker = Worker(name, process, log_path)
        self.workers.append(worker)
        return worker

    def wait_ready(self, *workers: Worker, timeout: float = START_TIMEOUT) -> None:
        """Until each worker has started polling for tasks (its start-up reap is done)."""
        wait_until(lambda: all("Starting worker" in w.log() for w in workers),
                   timeout, "the workers to start", self)
        for worker in workers:
            assert worker.alive(), worker.log()

    def logs(self) -> str:
        return "\n".join(f"--- worker {w.name} (exit {w.process.poll()}) ---\n"
                         f"{w.log()[-3000:]}" for w in self.workers)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
        for worker in self.workers:
            try:
                worker.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.process.kill()


def worker_env(counters: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        DATABASE_URL=database_url(),
        TASK_BACKEND="database",
        REDIS_URL=django_settings.REDIS_URL,
        AGENTFORGE_LEASE_SECONDS=LEASE_SECONDS,
        AGENTFORGE_HEARTBEAT_SECONDS=HEARTBEAT_SECONDS,
        AGENTFORGE_TOOL_MODULES="tools_app.tools.example_tools,tests.scaleout.slow_tools",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p),
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="INFO",
        **{COUNTER_DIR_ENV: str(counters)},
    )
    env.update(overrides)
    return env


@pytest.fixture
def workers(tmp_path: Path, counter_dir: Path) -> Iterator[WorkerPool]:
    pool = WorkerPool(tmp_path, worker_env(counter_dir))
    try:
        yield pool
    finally:
        pool.stop_all()


# -- waiting ---------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               pool: WorkerPool | None = None, interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = f"\n{pool.logs()}" if pool is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{logs}")
        time.sleep(interval)


def wait_terminal(run: Run, pool: WorkerPool, timeout: float = RUN_TIMEOUT) -> Run:
    wait_until(lambda: Run.objects.filter(pk=run.pk, status__in=TERMINAL_STATUSES).exists(),
               timeout, f"run {run.pk} to finish", pool)
    run.refresh_from_db()
    return run


def wait_status(run: Run, status: str, pool: WorkerPool, timeout: float = RUN_TIMEOUT) -> None:
    wait_until(lambda: Run.objects.filter(pk=run.pk, status=status).exists(),
               timeout, f"run {run.pk} to be {status}", pool)


# -- runs and what they stored ---------------------------------------------------------


@pytest.fixture
def slow_tools(db: None) -> dict[str, ToolRegistration]:
    sync_tools(["tests.scaleout.slow_tools"])
    return {t.name: t for t in ToolRegistration.objects.filter(enabled=True)}


def start_run(endpoint: ModelEndpoint, tools: Sequence[ToolRegistration], policy: ErrorPolicy,
              text: str = "Please help", user: Any = None) -> Run:
    return services.run_create(user=user, endpoint=endpoint, tools=list(tools), policy=policy,
                               messages=services.conversation(user_message=text))


def seqs_of(run: Run) -> list[int]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))


def assert_seqs_complete(run: Run) -> None:
    """No seq duplicated or missing, and Run.last_seq is the last one."""
    seqs = seqs_of(run)
    run.refresh_from_db()
    assert len(seqs) == len(set(seqs)), f"duplicated seqs: {seqs}"
    assert set(seqs) == set(range(1, run.last_seq + 1)), f"seqs {seqs}, last {run.last_seq}"


def statuses(run: Run) -> list[str]:
    return [e.payload["status"]
            for e in RunEvent.objects.filter(run=run, kind="run_status").order_by("seq")]


def tasks_of(run: Run) -> list[DBTaskResult]:
    return [t for t in DBTaskResult.objects.filter(task_path=EXECUTE_RUN).order_by("enqueued_at")
            if t.args_kwargs.get("args") == [str(run.pk)]]


# -- the fake provider -----------------------------------------------------------------


@pytest.fixture
def fake_llm() -> Iterator[Callable[[dict[str, Any]], BackgroundServer]]:
    """Start a fake OpenAI-compatible server (loopback, free port) with a script set."""
    servers: list[BackgroundServer] = []

    def start(scripts: dict[str, Any]) -> BackgroundServer:
        server = BackgroundServer(FakeLLMApp(ScriptSet.model_validate(scripts))).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def fake_endpoint(server: BackgroundServer, model: str, *, stream: bool = False,
                  name: str | None = None) -> ModelEndpoint:
    return ModelEndpoint.objects.create(
        name=name or f"fake {model} {'stream' if stream else 'json'}", kind="openai_compatible",
        base_url=server.base_urls()["openai"], model=model, stream=stream,
    )


def provider_requests(server: BackgroundServer, model: str | None = None) -> list[dict[str, Any]]:
    """The fake server's request log (provider requests only), oldest first."""
    return [r for r in list(server.app.requests)
            if r["step"] is not None and (model is None or r["model"] == model)]


def steps_requested(server: BackgroundServer, model: str | None = None) -> list[int]:
    return [r["step"] for r in provider_requests(server, model)]
