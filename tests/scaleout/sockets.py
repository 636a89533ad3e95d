"""Live timeline sockets of the scale-out tests: one opened as a logged-in user, the
batches read until the run ends, the seq and status a batch carries."""

from __future__ import annotations

import asyncio
import re
import time

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agentforge_web.asgi import application
from tools_app.models import TERMINAL_STATUSES, Run

from .conftest import RUN_TIMEOUT, WorkerPool

ORIGIN = b"http://127.0.0.1:8000"
RECEIVE_TIMEOUT = 30.0  # one message; covers a worker process starting up
TERMINAL = {str(s) for s in TERMINAL_STATUSES}
SEQ_RE = re.compile(r'<span id="run-seq" data-seq="(\d+)"')
STATUS_RE = re.compile(r'<section id="run-header".*?data-status="([a-z_]+)"', re.DOTALL)


@sync_to_async
def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


async def open_socket(sockets: list[WebsocketCommunicator], run: Run,
                      user: AbstractUser) -> WebsocketCommunicator:
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", ORIGIN),
               (b"cookie", f"sessionid={await session_cookie(user)}".encode())]
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
    sockets.append(comm)
    connected, code = await comm.connect(timeout=RECEIVE_TIMEOUT)
    assert connected, f"refused with {code}"
    await comm.send_json_to({"type": "resume", "after": 0})
    return comm


def seq_of(batch: str) -> int:
    found = SEQ_RE.findall(batch)
    assert len(found) == 1, batch[:500]
    return int(found[0])


def status_of(batch: str) -> str:
    found = STATUS_RE.findall(batch)
    assert len(found) == 1, batch[:500]
    return str(found[0])


async def last_seq(run: Run) -> int:
    return (await Run.objects.aget(pk=run.pk)).last_seq


async def receive_until_done(comm: WebsocketCommunicator, run: Run, pool: WorkerPool,
                             deadline: float = RUN_TIMEOUT) -> list[str]:
    """Batches until the header is terminal and the client holds Run.last_seq (bounded)."""
    batches: list[str] = []
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        try:
            batches.append(await comm.receive_from(timeout=RECEIVE_TIMEOUT))
        except TimeoutError:
            break
        if status_of(batches[-1]) in TERMINAL and seq_of(batches[-1]) == await last_seq(run):
            return batches
    raise AssertionError(f"no terminal state after {len(batches)} batches "
                         f"(last seq {[seq_of(b) for b in batches][-1:]})\n{pool.logs()}")


async def wait_terminal(run: Run, pool: WorkerPool, timeout: float = RUN_TIMEOUT) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = await Run.objects.aget(pk=run.pk)
        if current.status in TERMINAL:
            return current
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run.pk} did not finish within {timeout} s\n{pool.logs()}")
