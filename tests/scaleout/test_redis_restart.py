"""The channel layer's Redis restarts in the middle of a run (reliability sweep: faults).

The run goes on in its worker process (notifications are best effort). On the core
layer an open socket ends with its channel-layer connection, closed with 4013 too (as is
one whose layer connection the restart left broken); on the pub/sub layer it
stays open, kept current by its polls, and its subscriptions come back with Redis. A
handshake while Redis is down is closed with 4013 ("try again later"; daphne cannot
send 1013), and the page, reconnecting with backoff, gets the whole run once Redis is
back.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser

from agentforge_web.channel_layers import redis_channel_layers
from tools_app.fake_llm import BackgroundServer
from tools_app.live.consumers import CLOSE_TRY_AGAIN as TRY_AGAIN
from tools_app.models import ErrorPolicy, Run, ToolRegistration

from .conftest import WorkerPool, fake_endpoint, start_run
from .sockets import (
    ORIGIN,
    RECEIVE_TIMEOUT,
    last_seq,
    receive_until_done,
    seq_of,
    session_cookie,
    status_of,
    wait_terminal,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db(transaction=True)]

SLOW_ROUNDS = {"latency_ms": 400, "steps": [
    *({"tool_calls": [{"name": "tally", "arguments": {"tag": f"t{i}"}}]} for i in range(6)),
    {"text": "All done: {last_result}"},
]}


class PrivateRedis:
    """A redis-server of this test's own on a free loopback port, to stop and restart."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the private redis-server did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(params=["pubsub", "core"])
def private_redis(request: pytest.FixtureRequest, tmp_path: Path,
                  settings: Any) -> Iterator[PrivateRedis]:
    """The channel layer (each kind, as settings.py configures it) on a private Redis."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    settings.AGENTFORGE_CHANNEL_LAYER = request.param
    settings.CHANNEL_LAYERS = redis_channel_layers(request.param, redis.url, 1000)
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.5
    try:
        yield redis
    finally:
        redis.kill()


async def handshake(run: Run, user: AbstractUser) -> tuple[WebsocketCommunicator, int | None]:
    """A socket and the code it was closed with at once (None: it is open)."""
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", ORIGIN),
               (b"cookie", f"sessionid={await session_cookie(user)}".encode())]
    from agentforge_web.asgi import application

    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
    connected, code = await comm.connect(timeout=RECEIVE_TIMEOUT)
    if not connected:
        return comm, int(code)
    output = await comm.receive_output(timeout=1.0) if not await comm.receive_nothing(
        timeout=0.3) else None
    if output is not None and output["type"] == "websocket.close":
        return comm, int(output["code"])
    return comm, None


STOPPED = -1  # closed_with: the application stopped without closing the socket


@pytest.fixture
def slow_run(
    bob: AbstractUser, fake_llm: Callable[[dict[str, Any]], BackgroundServer],
    slow_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> Run:
    server = fake_llm({"scripts": {"slow": SLOW_ROUNDS}})
    return start_run(fake_endpoint(server, "slow"), [slow_tools["tally"]], policy, user=bob)


async def closed_with(comm: WebsocketCommunicator) -> int | None:
    """The code the socket's application closed it with; STOPPED if it stopped without
    closing (the test harness raises what the application raised; daphne would close
    the connection as abnormal); None if it is still open."""
    deadline = time.monotonic() + RECEIVE_TIMEOUT
    while time.monotonic() < deadline:
        if comm.future.done() and comm.output_queue.empty():
            return STOPPED  # the application returned: daphne closes the connection
        try:
            output = await comm.receive_output(timeout=RECEIVE_TIMEOUT)
        except TimeoutError:
            return None
        except Exception:  # the application stopped (redis' ConnectionError, StopConsumer)
            return STOPPED
        if output["type"] == "websocket.close":
            return int(output.get("code", 1000))
    return None


async def test_a_redis_restart_mid_run_loses_nothing_and_answers_no_500(
    private_redis: PrivateRedis, slow_run: Run, bob: AbstractUser, workers: WorkerPool,
    settings: Any,
) -> None:
    run = slow_run
    viewer, code = await handshake(run, bob)
    assert code is None
    await viewer.send_json_to({"type": "resume", "after": 0})
    assert status_of(await viewer.receive_from(timeout=RECEIVE_TIMEOUT)) == "queued"
    workers.start("w-redis", REDIS_URL=private_redis.url)

    # Redis goes away while the run is in its rounds.
    deadline = time.monotonic() + RECEIVE_TIMEOUT
    while await last_seq(run) < 6 and time.monotonic() < deadline:
        await viewer.receive_from(timeout=RECEIVE_TIMEOUT)
    private_redis.kill()
    if settings.AGENTFORGE_CHANNEL_LAYER == "core":
        # The open socket ends with its channel layer connection, closed with "try
        # again later" (the page reconnects with backoff), not a server error...
        assert await closed_with(viewer) == TRY_AGAIN
    else:
        # The pub/sub layer's subscriptions wait for Redis: the socket stays open and
        # its polls carry the run to its end meanwhile.
        followed = await receive_until_done(viewer, run, workers)
        assert status_of(followed[-1]) == "succeeded"
        await viewer.disconnect(timeout=RECEIVE_TIMEOUT)
    # ...and a handshake while Redis is down is told to try again later, never a 500.
    during, code_during = await handshake(run, bob)
    assert code_during == TRY_AGAIN
    assert await closed_with(during) is not None
    await asyncio.sleep(1.0)
    private_redis.start()

    final = await wait_terminal(run, workers)
    assert final.status == "succeeded", (final.error_type, final.error_message)
    # A page reconnecting after the restart gets everything, on the first try or after
    # a "try again later" (at the handshake, or from a layer whose connection the
    # restart left broken, once the socket reads).
    first: dict[str, Any] = {}
    for _ in range(20):
        again, code = await handshake(run, bob)
        if code is None:
            await again.send_json_to({"type": "resume", "after": 0})
            first = await again.receive_output(timeout=RECEIVE_TIMEOUT)
            if first["type"] == "websocket.send":
                break
            code = int(first["code"])
        assert code == TRY_AGAIN
        await again.disconnect(timeout=RECEIVE_TIMEOUT)
        await asyncio.sleep(0.25)
    assert first["type"] == "websocket.send"
    replay = [first["text"]]
    if status_of(replay[0]) != final.status or seq_of(replay[0]) != final.last_seq:
        replay += await receive_until_done(again, run, workers)
    assert status_of(replay[-1]) == "succeeded"
    assert seq_of(replay[-1]) == final.last_seq
    await again.disconnect(timeout=RECEIVE_TIMEOUT)


@pytest.mark.parametrize("private_redis", ["pubsub"], indirect=True)
async def test_a_subscription_gets_notices_again_once_redis_is_back(
    private_redis: PrivateRedis,
) -> None:
    """On the pub/sub layer a viewer subscribed before Redis went away hears of the run
    again after the restart, without reconnecting: the layer subscribes again on its new
    connection. (The core layer keeps its groups in Redis: a restart forgets them, and
    its sockets end instead, as the test above shows.)"""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    await layer.group_add("run.restarted", channel)
    private_redis.kill()
    await asyncio.sleep(1.0)
    private_redis.start()

    deadline = time.monotonic() + RECEIVE_TIMEOUT
    received = asyncio.ensure_future(layer.receive(channel))
    try:
        # Sent until heard: a send made before the layer is subscribed again is lost
        # (at most once), as a notification is; the viewer's poll covers that one.
        while not received.done():
            assert time.monotonic() < deadline, "no notice after the restart"
            with contextlib.suppress(Exception):  # the layer's connection comes back
                await layer.group_send("run.restarted", {"type": "run.event", "seq": 9})
            await asyncio.wait({received}, timeout=0.5)
        assert received.result() == {"type": "run.event", "seq": 9}
    finally:
        received.cancel()
        with contextlib.suppress(BaseException):
            await received
        await layer.group_discard("run.restarted", channel)
