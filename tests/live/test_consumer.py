"""The live timeline socket, through the full ASGI stack (origin check, session auth).

The consumer relays: on "resume after N" it sends every later event's fragments read
from the database by seq, then one batch per notification. The database is the truth,
so dropped or duplicate notifications never leave a gap or a double.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone

from agentforge_web.asgi import application
from tests.web.support import PAYLOAD, Tree, assert_inert, start_run
from tools_app.live import consumers
from tools_app.live import reads as live_reads
from tools_app.live.fragments import render_updates
from tools_app.live.notify import group_name
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.debugger.rerun import ReplayOptions, run_rerun
from tools_app.runs.store.eventlog import notify
from tools_app.runs.store.selectors import event_marks_after
from tools_app.runs.worker import recorder
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = b"http://127.0.0.1:8000"
WAIT = 10.0  # seconds: an upper bound for one message, never a measured duration
TERMINAL = {"succeeded", "failed", "cancelled"}


# -- helpers ---------------------------------------------------------------------------


@sync_to_async
def session_cookie(user: AbstractUser) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


def socket(run_id: Any, *, cookie: str | None = None, origin: bytes | None = ORIGIN,
           extra: list[tuple[bytes, bytes]] | None = None,
           host: bytes = b"127.0.0.1:8000") -> WebsocketCommunicator:
    headers = [(b"host", host)]
    if origin is not None:
        headers.append((b"origin", origin))
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/",
                                 headers=headers + (extra or []))


@pytest.fixture
async def sockets() -> AsyncIterator[list[WebsocketCommunicator]]:
    """Sockets opened by a test; closed at its end so no consumer task outlives it."""
    opened: list[WebsocketCommunicator] = []
    yield opened
    for comm in opened:
        # After a receive timed out, the communicator has already cancelled the app.
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await comm.disconnect(timeout=WAIT)


@pytest.fixture
def weather_run(
    bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> Callable[[], Awaitable[Run]]:
    async def make() -> Run:
        return await sync_to_async(start_run)(bob, weather_endpoint,
                                              [demo_tools["get_weather"]], policy)
    return make


async def open_socket(sockets: list[WebsocketCommunicator], run_id: Any, user: AbstractUser,
                      after: int | None = 0) -> WebsocketCommunicator:
    comm = socket(run_id, cookie=await session_cookie(user))
    sockets.append(comm)
    connected, code = await comm.connect(timeout=WAIT)
    assert connected, f"refused with {code}"
    if after is not None:
        await comm.send_json_to({"type": "resume", "after": after})
    return comm


async def refusal(comm: WebsocketCommunicator) -> int:
    """The close code of a refused socket; nothing may be sent before the close.

    Refusing before the handshake (an HTTP 403 to the browser) and accepting then
    closing at once (so the page sees the 4xxx code) are both refusals.
    """
    connected, code = await comm.connect(timeout=WAIT)
    if not connected:
        return int(code)
    closed = await comm.receive_output(timeout=WAIT)
    assert closed["type"] == "websocket.close", f"sent before the close: {closed}"
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect(timeout=WAIT)
    return int(closed["code"])


def seq_of(html: str) -> int:
    return int(Tree(html).by_id("run-seq").attrs["data-seq"] or "")


def status_of(html: str) -> str:
    badges = [e for e in Tree(html).elements
              if "data-status" in e.attrs and any(a.attrs.get("id") == "run-header"
                                                  for a in e.ancestors_or_self())]
    assert len(badges) == 1
    return badges[0].attrs["data-status"] or ""


def round_ids(html: str) -> set[str]:
    return {i for i in Tree(html).ids() if re.fullmatch(r"round-\d+", i)}


async def last_seq(run_id: Any) -> int:
    return (await Run.objects.aget(pk=run_id)).last_seq


async def expected_updates(run_id: Any, after: int) -> str:
    events = await sync_to_async(event_marks_after)(run_id, after)
    return await sync_to_async(render_updates)(run_id, events)


async def watch_until_done(comm: WebsocketCommunicator, execution: asyncio.Future[Any],
                           run_id: Any, limit: int = 200) -> list[str]:
    """Collect messages until the header is terminal and the client holds the last seq."""
    received: list[str] = []
    for _ in range(limit):
        received.append(await comm.receive_from(timeout=WAIT))
        if status_of(received[-1]) in TERMINAL:
            await asyncio.wait_for(execution, WAIT)
            if seq_of(received[-1]) == await last_seq(run_id):
                return received
    raise AssertionError(f"no terminal state after {limit} messages")


async def call_ids(run_id: Any) -> set[str]:
    return {f"call-{pk}" async for pk in
            ToolCall.objects.filter(run_id=run_id).values_list("pk", flat=True)}


# -- who may connect -------------------------------------------------------------------


async def test_an_anonymous_socket_is_closed_with_4401(weather_run: Any) -> None:
    run = await weather_run()
    comm = socket(run.pk)
    assert await refusal(comm) == 4401


async def test_a_forged_session_is_closed_with_4401(weather_run: Any) -> None:
    run = await weather_run()
    comm = socket(run.pk, cookie="not-a-session")
    assert await refusal(comm) == 4401


async def test_another_users_run_is_closed_with_4403(
    weather_run: Any, alice: AbstractUser, charlie: AbstractUser,
    make_endpoint: Any, policy: ErrorPolicy,
) -> None:
    bobs = await weather_run()
    alices = await sync_to_async(start_run)(alice, await sync_to_async(make_endpoint)(
        [{"text": "hi"}], name="alices"), [], policy)
    for run in (bobs, alices):
        comm = socket(run.pk, cookie=await session_cookie(charlie))
        assert await refusal(comm) == 4403


async def test_bob_cannot_watch_alices_run(
    alice: AbstractUser, bob: AbstractUser, make_endpoint: Any, policy: ErrorPolicy,
) -> None:
    endpoint = await sync_to_async(make_endpoint)([{"text": "hi"}])
    run = await sync_to_async(start_run)(alice, endpoint, [], policy)
    comm = socket(run.pk, cookie=await session_cookie(bob))
    assert await refusal(comm) == 4403


async def test_an_unknown_run_is_closed_with_4403(bob: AbstractUser) -> None:
    comm = socket("00000000-0000-0000-0000-000000000000", cookie=await session_cookie(bob))
    assert await refusal(comm) == 4403


async def test_staff_can_watch_another_users_run(
    weather_run: Any, alice: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, alice)
    first = await comm.receive_from(timeout=WAIT)
    assert status_of(first) == "queued"
    assert seq_of(first) == 1


@pytest.mark.parametrize("origin", [
    b"https://evil.example", b"null", None, b"http://127.0.0.1.evil.example",
    b"http://127.0.0.1:3000",  # another app on the same host: cookies are not port-bound
    b"http://127.0.0.1", b"http://127.0.0.1:99999", b"http://127.0.0.1:x",
    b"ftp://127.0.0.1:8000", b"http://localhost:8000",  # an allowed host, but not this one
])
async def test_a_foreign_or_missing_origin_is_refused(
    weather_run: Any, bob: AbstractUser, origin: bytes | None,
) -> None:
    run = await weather_run()
    comm = socket(run.pk, cookie=await session_cookie(bob), origin=origin)
    connected, _ = await comm.connect(timeout=WAIT)
    assert connected is False


@pytest.mark.parametrize(("origin", "host"), [
    (b"http://127.0.0.1:8000", b"127.0.0.1:8000"),
    (b"http://localhost:8000", b"localhost:8000"),
    (b"http://LOCALHOST:8000", b"localhost:8000"),
    (b"https://localhost", b"localhost"),  # behind a proxy: Host without a port
    (b"http://localhost", b"localhost"),
])
async def test_the_own_origin_is_accepted(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
    origin: bytes, host: bytes,
) -> None:
    run = await weather_run()
    comm = socket(run.pk, cookie=await session_cookie(bob), origin=origin, host=host)
    sockets.append(comm)
    connected, _ = await comm.connect(timeout=WAIT)
    assert connected is True


async def test_a_proxy_port_in_the_origin_needs_the_same_port_in_host_or_a_trusted_origin(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
    settings: Any,
) -> None:
    run = await weather_run()
    cookie = await session_cookie(bob)
    proxied = socket(run.pk, cookie=cookie, origin=b"https://localhost:8443", host=b"localhost")
    assert (await proxied.connect(timeout=WAIT))[0] is False

    settings.CSRF_TRUSTED_ORIGINS = ["https://localhost:8443"]
    trusted = socket(run.pk, cookie=cookie, origin=b"https://localhost:8443", host=b"localhost")
    sockets.append(trusted)
    assert (await trusted.connect(timeout=WAIT))[0] is True


# -- the client's first message --------------------------------------------------------


@pytest.mark.parametrize("text", [
    "not json",
    "{",
    "[]",
    "0",
    '"resume"',
    "{}",
    '{"type": "resume"}',
    '{"type": "resume", "after": -1}',
    '{"type": "resume", "after": "x"}',
    '{"type": "resume", "after": null}',
    '{"type": "resume", "after": NaN}',
    '{"type": "resume", "after": Infinity}',
    '{"type": "resume", "after": 1e400}',
    '{"type": "resume", "after": 100000000000000000000000000000}',
    '{"type": "hello", "after": 0}',
    '{"type": "resume", "after": 0, "padding": "' + "x" * 2_000_000 + '"}',
])
async def test_a_bad_first_message_closes_with_4400(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator], text: str,
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=None)
    await comm.send_to(text_data=text)
    closed = await comm.receive_output(timeout=WAIT)
    assert closed == {"type": "websocket.close", "code": 4400}


async def test_a_second_message_closes_with_4400_and_reads_nothing_again(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One resume per socket (a reconnect is a new socket): a client repeating it could
    otherwise make the server read and send the whole run again and again."""
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)
    reads: list[int] = []
    monkeypatch.setattr(live_reads, "event_marks_after",
                        lambda *args, **kwargs: reads.append(1) or [])

    await comm.send_json_to({"type": "resume", "after": 0})

    assert await comm.receive_output(timeout=WAIT) == {"type": "websocket.close", "code": 4400}
    assert reads == []


async def test_a_binary_frame_closes_with_4400(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=None)
    await comm.send_to(bytes_data=b'{"type": "resume", "after": 0}')
    assert await comm.receive_output(timeout=WAIT) == {"type": "websocket.close", "code": 4400}


async def test_nothing_is_sent_before_the_client_says_where_it_is(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=None)
    await notify(str(run.pk), {"seq": 1})
    await notify(str(run.pk), {"fragment": {"kind": "partial_text", "round_index": 0,
                                            "delta": "early"}})
    assert await comm.receive_nothing(timeout=0.3)
    await comm.send_json_to({"type": "resume", "after": 0})
    assert seq_of(await comm.receive_from(timeout=WAIT)) == 1


# -- replay from the database ----------------------------------------------------------


async def test_replay_after_zero_sends_the_header_and_every_round(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    assert await execute_run(str(run.pk)) == "succeeded"
    comm = await open_socket(sockets, run.pk, bob, after=0)

    html = await comm.receive_from(timeout=WAIT)

    tree = Tree(html)
    assert tree.by_id("run-header").attrs.get("hx-swap-oob") == "true"
    assert status_of(html) == "succeeded"
    assert round_ids(html) == {"round-0", "round-1"}
    assert await call_ids(run.pk) <= set(tree.ids())
    assert len(await call_ids(run.pk)) == 2
    assert seq_of(html) == await last_seq(run.pk)
    assert html == await expected_updates(run.pk, 0)
    assert await comm.receive_nothing(timeout=0.2)


async def test_replay_after_k_sends_only_what_changed_after_k(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    await execute_run(str(run.pk))
    second_round = await RunEvent.objects.filter(
        run_id=run.pk, kind="round_started", payload__round_index=1).aget()
    k = second_round.seq - 1
    comm = await open_socket(sockets, run.pk, bob, after=k)

    html = await comm.receive_from(timeout=WAIT)

    assert round_ids(html) == {"round-1"}
    assert not await call_ids(run.pk) & set(Tree(html).ids())  # the calls are in round 0
    assert {"run-header", "run-seq"} <= set(Tree(html).ids())
    assert seq_of(html) == await last_seq(run.pk)
    assert html == await expected_updates(run.pk, k)


async def test_replay_after_the_last_seq_sends_nothing(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    await execute_run(str(run.pk))
    comm = await open_socket(sockets, run.pk, bob, after=await last_seq(run.pk))
    assert await comm.receive_nothing(timeout=0.3)
    comm2 = await open_socket(sockets, run.pk, bob, after=await last_seq(run.pk) + 50)
    assert await comm2.receive_nothing(timeout=0.3)


async def test_a_long_history_arrives_in_batches_without_gaps(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, sockets: list[WebsocketCommunicator],
) -> None:
    # 130 rounds of 1 call: well over one batch (500 events) of history.
    script = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}] * 130
    endpoint = await sync_to_async(make_endpoint)([*script, {"text": "done"}], name="long")
    run = await sync_to_async(start_run)(bob, endpoint, [demo_tools["get_weather"]], policy)
    snapshot = (await Run.objects.aget(pk=run.pk)).snapshot
    snapshot["policy"]["max_round_trips"] = 1000
    # The same call every round on purpose: loop health must not stop it or add notes.
    snapshot["policy"] |= dict.fromkeys(("loop_repeat_at", "loop_repeat_stop_at",
                                         "loop_no_progress_at"), None)
    await Run.objects.filter(pk=run.pk).aupdate(snapshot=snapshot)
    assert await execute_run(str(run.pk)) == "succeeded"
    final = await last_seq(run.pk)
    assert final > 500
    comm = await open_socket(sockets, run.pk, bob, after=0)

    seqs: list[int] = []
    rounds: set[str] = set()
    while not seqs or seqs[-1] < final:
        html = await comm.receive_from(timeout=WAIT)
        seqs.append(seq_of(html))
        rounds |= round_ids(html)
    assert len(seqs) >= 2
    assert seqs == sorted(set(seqs))
    assert rounds == {f"round-{i}" for i in range(131)}
    assert await comm.receive_nothing(timeout=0.2)


# -- live ------------------------------------------------------------------------------


async def test_live_run_streams_to_the_end(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    first = await comm.receive_from(timeout=WAIT)
    assert (status_of(first), seq_of(first)) == ("queued", 1)

    execution = asyncio.ensure_future(execute_run(str(run.pk)))
    received = await watch_until_done(comm, execution, run.pk)

    assert execution.result() == "succeeded"
    seqs = [seq_of(m) for m in received]
    assert seqs == sorted(set(seqs)), "a seq was sent twice or out of order"
    assert seqs[-1] == await last_seq(run.pk)
    assert status_of(received[-1]) == "succeeded"
    seen = set().union(*(Tree(m).ids() for m in received))
    assert {"round-0", "round-1"} <= seen
    assert await call_ids(run.pk) <= seen
    assert await comm.receive_nothing(timeout=0.2)


async def test_dropped_notifications_leave_no_gap(
    make_endpoint: Any, demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    bob: AbstractUser, sockets: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """calculator is not idempotent: each call's start is committed (and notified)
    before it runs, so the run sends several notifications, every other one lost."""
    calls = {"sent": 0, "dropped": 0}

    async def lossy_notify(run_id: str, message: dict[str, Any]) -> None:
        if (calls["sent"] + calls["dropped"]) % 2:
            calls["dropped"] += 1
            return
        calls["sent"] += 1
        await notify(run_id, message)

    monkeypatch.setattr(recorder, "notify", lossy_notify)
    endpoint = await sync_to_async(make_endpoint)([
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2 + 3"}}]},
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
        {"text": "done"}], name="sums")
    run = await sync_to_async(start_run)(bob, endpoint, [demo_tools["calculator"]], policy)
    comm = await open_socket(sockets, run.pk, bob, after=0)
    assert seq_of(await comm.receive_from(timeout=WAIT)) == 1

    execution = asyncio.ensure_future(execute_run(str(run.pk)))
    received = await watch_until_done(comm, execution, run.pk)

    assert calls["dropped"] >= 1
    assert calls["sent"] >= 1  # and one sent after a dropped one (every other)
    seen = set().union(*(Tree(m).ids() for m in received))
    assert {"round-0", "round-1"} <= seen
    assert await call_ids(run.pk) <= seen
    assert seq_of(received[-1]) == await last_seq(run.pk)


async def test_only_the_final_notification_is_enough(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every notification of the recorder is lost: the runner's last one brings it all."""
    async def drop(run_id: str, message: dict[str, Any]) -> None:
        return None

    monkeypatch.setattr(recorder, "notify", drop)
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    assert seq_of(await comm.receive_from(timeout=WAIT)) == 1

    execution = asyncio.ensure_future(execute_run(str(run.pk)))
    received = await watch_until_done(comm, execution, run.pk)

    assert len(received) == 1
    assert round_ids(received[0]) == {"round-0", "round-1"}
    assert received[0] == await expected_updates(run.pk, 1)


async def test_a_duplicate_notification_sends_nothing_new(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    await execute_run(str(run.pk))
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)
    final = await last_seq(run.pk)

    for seq in (final, final, 1, 3):
        await notify(str(run.pk), {"seq": seq})
    layer = get_channel_layer()
    await layer.group_send(group_name(str(run.pk)), {"type": "run.event", "seq": final})

    assert await comm.receive_nothing(timeout=0.3)


async def test_a_reconnecting_client_gets_exactly_what_it_missed(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    seen = seq_of(await comm.receive_from(timeout=WAIT))
    await comm.disconnect(timeout=WAIT)
    sockets.remove(comm)

    await execute_run(str(run.pk))  # nobody is watching
    again = await open_socket(sockets, run.pk, bob, after=seen)

    html = await again.receive_from(timeout=WAIT)
    assert html == await expected_updates(run.pk, seen)
    assert status_of(html) == "succeeded"
    assert seq_of(html) == await last_seq(run.pk)


# -- ephemeral streaming fragments -----------------------------------------------------


XSS = '<script>alert(1)</script><img src=x onerror=alert(2)> hx-get="/admin/"'


async def test_a_partial_text_fragment_is_an_escaped_oob_append(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)

    await notify(str(run.pk), {"fragment": {"kind": "partial_text", "round_index": 2,
                                            "delta": XSS}})
    html = await comm.receive_from(timeout=WAIT)

    tree = Tree(html)
    assert [e.attrs.get("hx-swap-oob") for e in tree.elements] == ["beforeend:#round-2-stext"]
    assert "<script" not in html
    assert "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert [t for t, _ in tree.texts] == [XSS]


async def test_a_partial_tool_call_fragment_is_an_escaped_oob_append(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)

    await notify(str(run.pk), {"fragment": {"kind": "partial_tool_call", "round_index": 0,
                                            "index": 1, "name": XSS,
                                            "arguments_delta": '{"a": "<img src=x>'}})
    start = await comm.receive_from(timeout=WAIT)
    await notify(str(run.pk), {"fragment": {"kind": "partial_tool_call", "round_index": 0,
                                            "index": 1, "arguments_delta": "</script>"}})
    more = await comm.receive_from(timeout=WAIT)

    for html in (start, more):
        assert "<script" not in html
        assert "</script" not in html
        assert "<img" not in html
    tree = Tree(start)
    assert tree.elements[0].attrs["hx-swap-oob"] == "beforeend:#round-0-stream"
    assert "data-upsert" in tree.by_id("round-0-scall-1").attrs
    assert tree.by_id("round-0-scall-1-args").tag == "pre"
    assert [t for t, _ in tree.texts] == [XSS, '{"a": "<img src=x>']
    assert Tree(more).elements[0].attrs["hx-swap-oob"] == "beforeend:#round-0-scall-1-args"
    assert [t for t, _ in Tree(more).texts] == ["</script>"]


async def drain(comm: WebsocketCommunicator, run_id: Any, limit: int = 500) -> list[str]:
    """Every message up to a sentinel fragment sent now (the layer delivers in order)."""
    await notify(str(run_id), {"fragment": {"kind": "partial_text", "round_index": 999,
                                            "delta": "sentinel"}})
    received: list[str] = []
    for _ in range(limit):
        html = await comm.receive_from(timeout=WAIT)
        if "#round-999-stext" in html:
            return received
        received.append(html)
    raise AssertionError("the sentinel never arrived")


async def test_a_streamed_run_sends_its_pieces_and_the_stored_rounds(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    policy: ErrorPolicy, sockets: list[WebsocketCommunicator],
) -> None:
    script = [{"text": "Let me <b>check</b>",
               "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
              {"text": "Done: {last_result}"}]
    endpoint = await sync_to_async(make_endpoint)(script, name="streamed", stream=True)
    run = await sync_to_async(start_run)(bob, endpoint, [demo_tools["get_weather"]], policy)
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)

    assert await execute_run(str(run.pk)) == "succeeded"
    received = await drain(comm, run.pk)

    pieces = [m for m in received if 'id="run-seq"' not in m]
    batches = [m for m in received if 'id="run-seq"' in m]
    text = "".join(t for m in pieces if "#round-0-stext" in m for t, _ in Tree(m).texts)
    assert text == "Let me <b>check</b>"
    args = "".join(t for m in pieces if "#round-0-scall-0-args" in m for t, _ in Tree(m).texts)
    assert args == '{"city": "Paris"}'
    assert any("#round-0-stream" in m and "get_weather" in m for m in pieces)
    assert all("<b>" not in m for m in received)
    assert status_of(batches[-1]) == "succeeded"
    assert seq_of(batches[-1]) == await last_seq(run.pk)


def text_piece(round_index: int, delta: str) -> dict[str, Any]:
    return {"fragment": {"kind": "partial_text", "round_index": round_index, "delta": delta}}


def call_piece(round_index: int, delta: str, name: str | None = None) -> dict[str, Any]:
    return {"fragment": {"kind": "partial_tool_call", "round_index": round_index, "index": 0,
                         "arguments_delta": delta, **({"name": name} if name else {})}}


async def add_event(run: Run, kind: str, round_index: int) -> int:
    """An event of round `round_index` after the run's others (as the recorder stores)."""
    seq = await RunEvent.objects.filter(run=run).acount() + 1
    await RunEvent.objects.acreate(run=run, seq=seq, kind=kind,
                                   payload={"round_index": round_index})
    return seq


async def test_pieces_go_into_a_waiting_rounds_stream_and_none_after_it_answered(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """Pieces come faster than batches: one read after the round was answered removes
    its stream, and the pieces still queued behind it have nothing to go into."""
    run = await weather_run()
    await Round.objects.acreate(run=run, index=0, status="requested")
    started = await add_event(run, "round_started", 0)
    comm = await open_socket(sockets, run.pk, bob, after=started - 1)
    assert "round-0-stext" in Tree(await comm.receive_from(timeout=WAIT)).ids()

    await notify(str(run.pk), text_piece(0, "Let me"))
    assert "Let me" in await comm.receive_from(timeout=WAIT)
    await Round.objects.filter(run=run, index=0).aupdate(status="responded")
    answered = await add_event(run, "model_response_received", 0)
    await notify(str(run.pk), {"seq": answered})
    assert "round-0-stream" not in Tree(await comm.receive_from(timeout=WAIT)).ids()
    await notify(str(run.pk), text_piece(0, " look"))
    await notify(str(run.pk), call_piece(0, '{"city"', name="get_weather"))

    assert await drain(comm, run.pk) == []


async def test_a_calls_later_pieces_follow_its_first_on_this_page(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """The page was served with round 0 waiting, its stream empty: a call that began
    streaming before has no block there until a piece with its name makes one."""
    run = await weather_run()
    await Round.objects.acreate(run=run, index=0, status="requested")
    started = await add_event(run, "round_started", 0)
    comm = await open_socket(sockets, run.pk, bob, after=started)

    await notify(str(run.pk), call_piece(0, '{"city": "Pa'))  # its block is not there
    await notify(str(run.pk), text_piece(0, "more text"))
    await notify(str(run.pk), call_piece(0, '{"city"', name="get_weather"))
    await notify(str(run.pk), call_piece(0, ': "Oslo"}'))
    received = await drain(comm, run.pk)

    targets = [Tree(m).elements[0].attrs["hx-swap-oob"] for m in received]
    assert targets == ["beforeend:#round-0-stext", "beforeend:#round-0-stream",
                       "beforeend:#round-0-scall-0-args"]
    assert "Pa" not in "".join(received)


async def test_an_unknown_or_malformed_fragment_sends_nothing(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)
    for fragment in ({"kind": "partial_text", "delta": "no round"},
                     {"kind": "partial_text", "round_index": "0", "delta": "x"},
                     {"kind": "other", "round_index": 0}):
        await notify(str(run.pk), {"fragment": fragment})
    assert await comm.receive_nothing(timeout=0.3)


async def test_hostile_values_reach_the_socket_escaped_and_inert(
    bob: AbstractUser, make_endpoint: Any, demo_tools: dict[str, ToolRegistration],
    sockets: list[WebsocketCommunicator],
) -> None:
    telling = await ErrorPolicy.objects.acreate(name="tell", hallucinated_tool="tell_model")
    endpoint = await sync_to_async(make_endpoint)([
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": PAYLOAD}},
                        {"name": "always_fails", "arguments": {"reason": PAYLOAD}},
                        {"name": PAYLOAD, "arguments": {"q": PAYLOAD}}]},
        {"text": f"Model says {PAYLOAD}"},
    ], name="hostile")
    tools = [demo_tools["get_weather"], demo_tools["always_fails"]]
    run = await sync_to_async(start_run)(bob, endpoint, tools, telling, text=PAYLOAD)
    comm = await open_socket(sockets, run.pk, bob, after=0)
    await comm.receive_from(timeout=WAIT)

    execution = asyncio.ensure_future(execute_run(str(run.pk)))
    received = await watch_until_done(comm, execution, run.pk)

    assert execution.result() == "succeeded"
    for html in received:
        assert_inert(html, scripts=0)
    texts = " ".join(t for m in received for t, _ in Tree(m).texts)
    assert texts.count(PAYLOAD) >= 5  # tool output, error, tool name, model text, title


async def test_a_replay_going_live_shows_its_divergence_as_it_happens(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """A rerun replaying the recorded model, told to go on live where it diverges: the
    viewer's socket brings the divergence (escaped) without a reload."""
    original = await weather_run()
    assert await execute_run(str(original.pk)) == "succeeded"
    await ToolCall.objects.filter(run=original, call_index=0).aupdate(
        result_text=f"recorded {PAYLOAD}")
    again = await sync_to_async(run_rerun)(
        run=original, user=bob, mode="as_it_was",
        replay=ReplayOptions(model="recorded", tools="live", on_divergence="live"))
    _client, page = await browser_of(bob, again.pk)
    assert "replay-divergence" not in Tree(page).ids()  # nothing diverged yet
    comm = await open_socket(sockets, again.pk, bob, after=again.last_seq)

    execution = asyncio.ensure_future(execute_run(str(again.pk)))
    received = await watch_until_done(comm, execution, again.pk)

    assert execution.result() == "succeeded"
    shown = [m for m in received if "replay-divergence" in Tree(m).ids()]
    assert shown, "the divergence never reached the socket"
    box = Tree(shown[-1]).by_id("replay-divergence")
    assert "hx-disable" in box.attrs
    assert any(e.attrs.get("id") == "run-header" for e in box.ancestors_or_self())
    text = " ".join(t for t, _ in Tree(shown[-1]).texts)
    assert "at round 1, call 1 (get_weather): the result differs" in text
    assert "recorded <script>" in text  # the recorded result, as text
    assert_inert(shown[-1], scripts=0)


# -- the live header's cancel button ----------------------------------------------------


@sync_to_async
def browser_of(user: AbstractUser, run_id: Any) -> tuple[Client, str]:
    """A logged-in browser that has loaded the run page: (client, page html)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.get(f"/runs/{run_id}/")
    assert response.status_code == 200
    return client, response.content.decode()


async def test_the_live_headers_cancel_button_submits_the_pages_form(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """The header is swapped in live while the run is going: its Cancel must still work.
    The button names the page's form (which holds the viewer's CSRF token); the header
    itself carries no token, so it can be one rendering for every viewer."""
    run = await weather_run()
    browser, page = await browser_of(bob, run.pk)
    cookies = "; ".join(f"{k}={v.value}" for k, v in browser.cookies.items())
    comm = socket(run.pk, extra=[(b"cookie", cookies.encode())])
    sockets.append(comm)
    assert (await comm.connect(timeout=WAIT))[0]
    await comm.send_json_to({"type": "resume", "after": 0})

    header = await comm.receive_from(timeout=WAIT)

    assert "csrfmiddlewaretoken" not in header
    buttons = [e for e in Tree(header).tags("button") if e.attrs.get("form") == "cancel-form"]
    assert len(buttons) == 1
    forms = [e for e in Tree(page).tags("form") if e.attrs.get("id") == "cancel-form"]
    assert [f.attrs.get("action") for f in forms] == [f"/runs/{run.pk}/cancel/"]
    tokens = {e.attrs["value"] for e in Tree(page).tags("input")
              if e.attrs.get("name") == "csrfmiddlewaretoken"}  # this form's and the nav's
    assert len(tokens) == 1
    response = await sync_to_async(browser.post)(f"/runs/{run.pk}/cancel/",
                                                 {"csrfmiddlewaretoken": tokens.pop()})
    assert response.status_code == 302
    assert (await Run.objects.aget(pk=run.pk)).status == "cancelled"


async def test_every_viewer_of_a_run_gets_the_same_live_message(
    weather_run: Any, bob: AbstractUser, alice: AbstractUser,
    sockets: list[WebsocketCommunicator],
) -> None:
    """Nothing in a live message depends on who watches: one rendering serves them all."""
    run = await weather_run()
    received = []
    for user, csrf in ((bob, "a" * 32), (alice, "b" * 32)):  # owner, staff
        cookie = f"sessionid={await session_cookie(user)}; csrftoken={csrf}"
        comm = socket(run.pk, extra=[(b"cookie", cookie.encode())])
        sockets.append(comm)
        assert (await comm.connect(timeout=WAIT))[0]
        await comm.send_json_to({"type": "resume", "after": 0})
        received.append(await comm.receive_from(timeout=WAIT))
    assert received[0] == received[1]
    assert "csrfmiddlewaretoken" not in received[0]
    assert status_of(received[0]) == "queued"


@sync_to_async
def append_status_event(run_id: Any) -> int:
    from django.db import transaction

    from tools_app.runs.store.eventlog import append_event

    with transaction.atomic():
        return append_event(str(run_id), None, "run_status", {"status": "queued"})


async def test_a_viewer_leaving_mid_read_does_not_cancel_it_for_the_others(
    weather_run: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await weather_run()
    after = await last_seq(run.pk)
    seq = await append_status_event(run.pk)
    release = asyncio.Event()
    real = live_reads._read_and_render

    async def slow(run_id: str, since: int) -> live_reads.Batch:
        await release.wait()
        return await real(run_id, since)

    monkeypatch.setattr(live_reads, "_read_and_render", slow)
    any_read = live_reads.Freshness(read_since=0.0)
    leaving = asyncio.ensure_future(live_reads.updates_after(str(run.pk), after, any_read))
    staying = asyncio.ensure_future(live_reads.updates_after(str(run.pk), after, any_read))
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()

    batch = await asyncio.wait_for(staying, WAIT)
    assert (batch.after, batch.last, batch.complete) == (after, seq, True)
    assert leaving.cancelled()
    # ...and the rendering is then reused, without another read.
    monkeypatch.setattr(live_reads, "_read_and_render", None)
    assert await live_reads.updates_after(str(run.pk), after, any_read) == batch


async def test_a_shared_batch_read_too_early_for_a_viewer_is_read_again(
    weather_run: Any,
) -> None:
    """"Complete" means complete when read: a viewer notified of a later seq, or one that
    subscribed after the read, must not be handed that batch."""
    import time

    run = await weather_run()
    first = await live_reads.updates_after(str(run.pk), 0, live_reads.Freshness(0.0))
    assert first.complete
    again = await live_reads.updates_after(str(run.pk), 0,
                                          live_reads.Freshness(read_since=first.read_at))
    assert again is first  # shared while fresh enough

    seq = await append_status_event(run.pk)
    notified = await live_reads.updates_after(
        str(run.pk), 0, live_reads.Freshness(read_since=time.monotonic(), covering=seq))
    assert (notified.last, notified.complete) == (seq, True)
    assert seq_of(notified.html) == seq


async def test_a_viewer_joining_within_the_sharing_window_still_gets_every_event(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """Viewer A's batch after seq 0 is fresh in the cache when an event commits whose
    notification viewer B never gets (B was not subscribed yet): B's resume after 0
    must not stop at A's batch."""
    run = await weather_run()
    viewer_a = await open_socket(sockets, run.pk, bob)
    seen_by_a = seq_of(await viewer_a.receive_from(timeout=WAIT))

    seq = await append_status_event(run.pk)  # committed; nobody notified
    viewer_b = await open_socket(sockets, run.pk, bob)

    assert seq > seen_by_a
    assert seq_of(await viewer_b.receive_from(timeout=WAIT)) == seq


@pytest.mark.parametrize(("failed", "usable", "kept"), [
    (False, True, True),  # a read that went well keeps its connection
    (True, True, True),  # an error, but the connection still works: kept, error cleared
    (True, False, False),  # an error that broke it: closed, the next read opens a new one
])
async def test_live_reads_keep_their_connection_unless_it_broke(
    failed: bool, usable: bool, kept: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every viewer's reads run on one thread, which keeps its connection (opening one
    per live message was most of that message's cost), but not a broken one."""
    from django.db import connections

    def read() -> Any:
        Run.objects.exists()
        conn = connections["default"]
        conn.errors_occurred = failed
        monkeypatch.setattr(conn, "is_usable", lambda: usable)
        return conn

    conn = await live_reads.kept_connection(read)()

    assert (conn.connection is not None) is kept
    assert conn.errors_occurred is False or not kept


async def test_cancelling_a_queued_run_reaches_its_live_viewers(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """No worker runs a queued run, so its cancel is written by the request itself: the
    viewers must still be told, or their page shows "queued" until a reload."""
    from tools_app.runs.services import run_cancel

    run = await weather_run()
    viewers = [await open_socket(sockets, run.pk, bob) for _ in range(2)]
    for viewer in viewers:
        assert status_of(await viewer.receive_from(timeout=WAIT)) == "queued"

    await sync_to_async(run_cancel)(run=run)

    for viewer in viewers:
        html = await viewer.receive_from(timeout=WAIT)
        assert status_of(html) == "cancelled"
        assert seq_of(html) == await last_seq(run.pk)


async def test_a_run_the_reaper_interrupts_shows_it_live(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    from tools_app.runs.store.leases import claim, reap_expired_runs

    run = await weather_run()
    assert await sync_to_async(claim)(str(run.pk), "a-worker-that-dies") is not None
    viewer = await open_socket(sockets, run.pk, bob)
    assert status_of(await viewer.receive_from(timeout=WAIT)) == "running"
    await Run.objects.filter(pk=run.pk).aupdate(lease_expires_at=timezone.now())

    assert await sync_to_async(reap_expired_runs)() == [str(run.pk)]

    assert status_of(await viewer.receive_from(timeout=WAIT)) == "interrupted"


@pytest.mark.both
async def test_logging_out_closes_the_sessions_live_sockets(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    """A logout (in another tab, say) ends the session's sockets at once, with the code
    that tells the page not to reconnect; other sessions' sockets stay open."""
    run = await weather_run()
    key = await session_cookie(bob)
    mine = socket(run.pk, cookie=key)
    others = await open_socket(sockets, run.pk, bob)  # bob, logged in elsewhere
    sockets.append(mine)
    assert (await mine.connect(timeout=WAIT))[0]
    await mine.send_json_to({"type": "resume", "after": 0})
    await mine.receive_from(timeout=WAIT)
    await others.receive_from(timeout=WAIT)

    browser = Client()
    browser.cookies["sessionid"] = key
    response = await sync_to_async(browser.post)("/accounts/logout/")
    assert response.status_code == 302

    closed = await mine.receive_output(timeout=WAIT)
    assert (closed["type"], closed["code"]) == ("websocket.close", 4401)
    assert await others.receive_nothing(timeout=0.3)
    seq = await append_status_event(run.pk)
    await notify(str(run.pk), {"seq": seq})
    assert seq_of(await others.receive_from(timeout=WAIT)) == seq


def test_the_session_group_name_hides_the_session_key() -> None:
    name = consumers.session_group("k" * 32)
    assert "k" * 8 not in name
    assert name == consumers.session_group("k" * 32) != consumers.session_group("j" * 32)
    assert len(name) < 100
    assert name.replace(".", "").isalnum()


@pytest.mark.parametrize("change", ["deactivate", "new_password", "delete"])
async def test_a_user_who_loses_their_rights_loses_their_live_sockets(
    weather_run: Any, bob: AbstractUser, alice: AbstractUser,
    sockets: list[WebsocketCommunicator], change: str,
) -> None:
    """Only a logout closed sockets: a deactivated user, or the other sessions of one
    whose password changed, kept streaming. Other users' sockets are untouched."""
    run = await weather_run()
    bobs = await open_socket(sockets, run.pk, bob)
    alices = await open_socket(sockets, run.pk, alice)
    await bobs.receive_from(timeout=WAIT)
    await alices.receive_from(timeout=WAIT)

    def apply() -> None:
        if change == "deactivate":
            bob.is_active = False
            bob.save()
        elif change == "new_password":
            bob.set_password("a whole new passphrase")
            bob.save()
        else:
            Run.objects.filter(pk=run.pk).update(created_by=None)
            bob.delete()

    await sync_to_async(apply)()

    closed = await bobs.receive_output(timeout=WAIT)
    assert (closed["type"], closed["code"]) == ("websocket.close", 4401)
    assert await alices.receive_nothing(timeout=0.3)


async def test_a_save_that_cannot_change_rights_keeps_the_sockets_open(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
) -> None:
    run = await weather_run()
    bobs = await open_socket(sockets, run.pk, bob)
    await bobs.receive_from(timeout=WAIT)

    def touch() -> None:
        bob.first_name = "Robert"
        bob.save()  # every field, rights included: the socket checks and stays
        bob.save(update_fields=["last_login"])  # a login elsewhere: nobody is told

    await sync_to_async(touch)()

    assert await bobs.receive_nothing(timeout=0.5)
    seq = await append_status_event(run.pk)
    await notify(str(run.pk), {"seq": seq})
    assert seq_of(await bobs.receive_from(timeout=WAIT)) == seq


async def test_a_viewer_no_longer_staff_stops_seeing_another_users_run(
    weather_run: Any, bob: AbstractUser, alice: AbstractUser,
    sockets: list[WebsocketCommunicator],
) -> None:
    """Staff see every run: taking that right away closes the sockets on other users'
    runs (4403), not those on the viewer's own."""
    run = await weather_run()  # bob's run
    alices = await open_socket(sockets, run.pk, alice)
    await alices.receive_from(timeout=WAIT)

    def demote() -> None:
        alice.is_staff = alice.is_superuser = False
        alice.save(update_fields=["is_staff", "is_superuser"])

    await sync_to_async(demote)()

    closed = await alices.receive_output(timeout=WAIT)
    assert (closed["type"], closed["code"]) == ("websocket.close", 4403)


async def test_a_channel_layer_failing_during_the_handshake_answers_4013_not_500(
    weather_run: Any, bob: AbstractUser, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis restarting: the first command on a stale connection fails. The socket is
    accepted and closed with 4013 ("try again later"), which the page retries with a
    growing delay; the server logs one line, no traceback (issue 42, finding 5)."""
    from autobahn.websocket.protocol import WebSocketProtocol
    from channels.layers import InMemoryChannelLayer

    run = await weather_run()

    async def redis_restarting(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Redis is restarting")

    monkeypatch.setattr(InMemoryChannelLayer, "group_add", redis_restarting)
    monkeypatch.setattr(InMemoryChannelLayer, "group_discard", redis_restarting)

    with caplog.at_level("WARNING", logger="tools_app.live.consumers"):
        code = await refusal(socket(run.pk, cookie=await session_cookie(bob)))

    assert code == consumers.CLOSE_TRY_AGAIN == 4013
    # What daphne closes an accepted socket with (autobahn refuses 1011 and 1013).
    assert code == 1000 or 3000 <= code <= 4999
    sent: list[bytes] = []
    protocol = WebSocketProtocol()
    protocol.state, protocol.closeHandshakeTimeout = WebSocketProtocol.STATE_OPEN, 0
    protocol.sendFrame = lambda opcode, payload: sent.append(payload)
    protocol.sendClose(code=code)  # raises for a code daphne cannot send
    assert sent == [code.to_bytes(2, "big")]
    [handshake] = [r for r in caplog.records if "handshake failed" in r.getMessage()]
    assert "ConnectionError: Redis is restarting" in handshake.getMessage()
    assert all(record.exc_info is None for record in caplog.records)


async def test_a_channel_the_layer_cannot_make_answers_4013_not_500(
    weather_run: Any, bob: AbstractUser, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The pub/sub layer subscribes a socket's channel when Channels makes it, before the
    handshake is read: with Redis down, that failed the application (a 500 to the
    browser). It is answered as a failing handshake is, with one line logged."""
    from channels.layers import InMemoryChannelLayer

    run = await weather_run()

    async def redis_down(*args: Any, **kwargs: Any) -> str:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(InMemoryChannelLayer, "new_channel", redis_down)

    with caplog.at_level("WARNING", logger="tools_app.live.consumers"):
        code = await refusal(socket(run.pk, cookie=await session_cookie(bob)))

    assert code == consumers.CLOSE_TRY_AGAIN
    [made] = [r for r in caplog.records if "channel could not be made" in r.getMessage()]
    assert "ConnectionError: Redis is down" in made.getMessage()
    assert all(record.exc_info is None for record in caplog.records)


async def test_a_viewer_deactivated_unnoticed_is_closed_at_the_next_poll(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator],
    settings: Any,
) -> None:
    """Issue 42, finding 11: on the in-memory channel layer, a deactivation made in another
    process (`manage.py shell`) sends this one no notice; the socket's own poll checks the
    viewer again and closes it (4401)."""
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.1
    run = await weather_run()
    bobs = await open_socket(sockets, run.pk, bob)
    await bobs.receive_from(timeout=WAIT)

    # update(): no signal, no notice, as from another process.
    await sync_to_async(type(bob).objects.filter(pk=bob.pk).update)(is_active=False)

    closed = await receive_close(bobs)
    assert closed["code"] == 4401


async def test_a_viewer_demoted_unnoticed_is_closed_on_another_users_run(
    weather_run: Any, alice: AbstractUser, sockets: list[WebsocketCommunicator],
    settings: Any,
) -> None:
    """The same for the right to see the run: staff rights taken away unnoticed close the
    socket on another user's run (4403) at the next poll."""
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.1
    run = await weather_run()  # bob's run
    alices = await open_socket(sockets, run.pk, alice)
    await alices.receive_from(timeout=WAIT)

    await sync_to_async(type(alice).objects.filter(pk=alice.pk).update)(
        is_staff=False, is_superuser=False)

    closed = await receive_close(alices)
    assert closed["code"] == 4403


async def receive_close(comm: WebsocketCommunicator) -> dict[str, Any]:
    """The close that ends the socket, skipping updates the polls sent before it."""
    while True:
        output = await comm.receive_output(timeout=WAIT)
        if output["type"] == "websocket.close":
            return output  # type: ignore[no-any-return]


async def test_without_any_notification_the_viewer_still_gets_every_event(
    weather_run: Any, bob: AbstractUser, sockets: list[WebsocketCommunicator], settings: Any,
) -> None:
    """A channel layer that lost its connection delivers nothing: the socket reads the
    database every few seconds anyway, so the timeline goes on (and shows the end)."""
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.1
    run = await weather_run()
    comm = await open_socket(sockets, run.pk, bob)
    await comm.receive_from(timeout=WAIT)

    seq = await append_status_event(run.pk)  # committed; no notification at all

    assert seq_of(await comm.receive_from(timeout=WAIT)) == seq
    assert await comm.receive_nothing(timeout=0.3)  # nothing sent twice
