"""A `db_worker` survives its database (issue 42, finding 1): every connection of the
test database is terminated while the worker runs, and the database refuses new ones
for a while; once it is back, the worker claims again without being restarted.

Three runs tell: one in flight when the database goes (its lease runs out meanwhile, so
it is handed back and resumed), one queued before the outage (its task held by a row
lock the worker's claim skips, released by the outage itself), and one started after.
With DEBUG on (the worker under Django's autoreloader, where a dead claim thread left a
live process claiming nothing) and off (where the process exited 1).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import SyncToAsync
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from tools_app.live.run_waits import close_read_connections
from tools_app.models import ErrorPolicy, Run, RunStatus, ToolRegistration, WorkerHeartbeat

from .conftest import (
    REPO_ROOT,
    Worker,
    WorkerPool,
    counted,
    start_run,
    tasks_of,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

# How long the database keeps refusing connections once the worker has noticed: a
# condition set up (several backoff retries), never a measured duration.
REFUSED_FOR = 4.0
# Upper bounds of waits.
NOTICE_TIMEOUT = 30.0
RECOVERY_TIMEOUT = 120.0
# The run in flight sleeps in its tool through the outage (idempotent: resumed, it runs
# again).
IN_FLIGHT = [{"tool_calls": [{"name": "slow_lookup", "arguments": {"key": "in-flight",
                                                                   "seconds": 6}}]},
             {"text": "Done: {last_result}"}]
QUICK = [{"tool_calls": [{"name": "tally", "arguments": {"tag": "quick"}}]},
         {"text": "Done: {last_result}"}]
POOL_TIMEOUT = "1"
OUTAGE_LOGGED = "the database is unavailable"
RECOVERY_LOGGED = "the database is back"


def start_worker(pool: WorkerPool, name: str, *, debug: bool) -> Worker:
    """A db_worker with two slots (its claim loop turns while a run is in flight); with
    DEBUG on under the autoreloader, as `manage.py db_worker` runs by default then. Its
    pool gives up waiting for a connection well within the outage, so its claim turns
    fail and back off (with the default the turn would wait the outage out)."""
    command = [sys.executable, "manage.py", "db_worker", "--reload" if debug else "--no-reload",
               "--no-startup-delay", "--interval", "0.1", "--worker-id", name,
               "--concurrency", "2"]
    env = pool.env | {"DEBUG": "1" if debug else "0",
                      "SECRET_KEY": "outage-test-secret-key-" + "x" * 40,
                      "AGENTFORGE_DB_POOL_TIMEOUT": POOL_TIMEOUT}
    log_path = pool.directory / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    worker = Worker(name, process, log_path)
    pool.workers.append(worker)
    return worker


def server_connection(dbname: str, **options: Any) -> psycopg.Connection[Any]:
    db = connection.settings_dict
    return psycopg.connect(host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432,
                           user=db.get("USER") or "postgres",
                           password=db.get("PASSWORD") or None, dbname=dbname, **options)


def queued_and_held(run: Run) -> psycopg.Connection[Any]:
    """Hold `run`'s ready task under a row lock (FOR KEY SHARE) on a connection of its
    own: the workers' claim (FOR UPDATE SKIP LOCKED) passes it by until that connection
    dies. The task is made ready only once locked, so no worker takes it before."""
    [task] = tasks_of(run)
    holder = server_connection(connection.settings_dict["NAME"])
    table = DBTaskResult._meta.db_table
    holder.execute(f'SELECT 1 FROM "{table}" WHERE id = %s FOR KEY SHARE',
                   [task.pk])
    DBTaskResult.objects.filter(pk=task.pk).update(run_after=get_date_max())
    return holder


@pytest.fixture(autouse=True)
def no_dead_connection_left_behind() -> Iterator[None]:
    """These tests terminate every connection to the test database, the ones other
    threads of this process keep too (asgiref's thread for sync code called from async
    tests, the API streams' read thread): closed afterwards, so that the tests after
    these open new ones instead of meeting dead ones."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
    close_read_connections()
    connections.close_all()


@contextlib.contextmanager
def database_refusing_connections(dbname: str, last_pid: int) -> Iterator[None]:
    """The database refuses new connections and every connection to it is terminated
    (`last_pid`'s last, once the others are gone), until the block ends."""
    with server_connection("postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> %s AND pid <> pg_backend_pid()",
                          [dbname, last_pid])
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", [last_pid])
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS true')


@pytest.mark.parametrize("debug", [True, False], ids=["debug-on", "debug-off"])
def test_a_worker_claims_again_after_its_database_comes_back(
    debug: bool, workers: WorkerPool, counter_dir: Path, make_endpoint: Any,
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    worker = start_worker(workers, "w-outage", debug=debug)
    workers.wait_ready(worker)
    quick = make_endpoint(QUICK, name="quick")
    tools = [slow_tools["tally"], slow_tools["slow_lookup"]]

    in_flight = start_run(make_endpoint(IN_FLIGHT, name="slow"), tools, policy, text="in flight")
    wait_until(lambda: counted(counter_dir, "slow_lookup"), NOTICE_TIMEOUT,
               "the run in flight to enter its tool", workers)
    with transaction.atomic():  # its task not ready yet when the enqueue commits
        queued = start_run(quick, tools, policy, text="queued before")
        DBTaskResult.objects.filter(pk__in=[t.pk for t in tasks_of(queued)]).update(
            run_after=timezone.now() + timedelta(days=1))
    holder = queued_and_held(queued)

    with database_refusing_connections(connection.settings_dict["NAME"], holder.info.backend_pid):
        wait_until(lambda: OUTAGE_LOGGED in worker.log(), NOTICE_TIMEOUT,
                   "the worker to notice the outage", workers)
        time.sleep(REFUSED_FOR)
        assert worker.alive(), worker.log()
    holder.close()
    connection.close()  # the test's own connection died too

    started_after = start_run(quick, tools, policy, text="started after")
    for run in (started_after, queued, in_flight):
        run = wait_terminal(run, workers, timeout=RECOVERY_TIMEOUT)
        assert run.status == RunStatus.SUCCEEDED, (run.pk, run.error_type, run.error_message,
                                                   workers.logs())
    assert queued.final_text == started_after.final_text == "Done: tallied quick"
    assert worker.alive(), worker.log()

    # Logged once when the outage began and once when it ended, not once a retry.
    log = worker.log()
    assert log.count(f"worker w-outage: {OUTAGE_LOGGED}") == 1, log
    assert log.count(f"worker w-outage: {RECOVERY_LOGGED}") == 1, log
    # The health check finds the worker claiming (it raises, exit 1, when stuck).
    wait_until(lambda: WorkerHeartbeat.objects.filter(
        worker_id="w-outage", last_claimed_at__isnull=False).exists(), NOTICE_TIMEOUT,
        "the worker's heartbeat", workers)
    call_command("worker_status")


def test_a_pooled_connection_that_died_is_replaced_before_it_is_lent() -> None:
    """Issue 42, finding 3: after the database's return the pool's idle connections are
    dead; each is checked as it is lent (settings: the pool's `check`), so the first
    request after the return gets a working one, not an error."""
    pool: Any = connection.pool
    idle = [pool.getconn() for _ in range(2)]
    for conn in idle:
        pool.putconn(conn)
    connection.ensure_connection()  # the test's own, kept out of the pool meanwhile
    with server_connection("postgres", autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> %s AND pid <> pg_backend_pid()",
                      [connection.settings_dict["NAME"], connection.connection.info.backend_pid])
    lent = [pool.getconn() for _ in range(2)]
    try:
        assert [conn.execute("SELECT 1").fetchone() for conn in lent] == [(1,), (1,)]
    finally:
        for conn in lent:
            pool.putconn(conn)
