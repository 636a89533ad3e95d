"""The run page's list of the runs made from it, kept live over the run's socket (a
finished run's page opens one too): a rerun made while the parent's page is open
arrives at once (the `run.children` notification, not the poll), a page served before a
child was made gets the list at its resume, a child's status reaches the parent's page
at the next poll, and a child its viewer may not see changes nothing there."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser
from django.test import Client

from agentforge_web.asgi import application
from tests.runs.support import execute
from tests.web.support import Element, Tree, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs.debugger.rerun import run_rerun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both]

WAIT = 10.0  # seconds: an upper bound for one message, never a measured duration
SLOT = "run-lineage-slot"


@pytest.fixture
async def finished(bob: AbstractUser, weather_endpoint: ModelEndpoint,
                   demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    run = await sync_to_async(start_run)(bob, weather_endpoint,
                                         [demo_tools["get_weather"]], policy)
    assert await sync_to_async(execute)(run) == "succeeded"
    return run


@pytest.fixture
async def sockets() -> AsyncIterator[list[WebsocketCommunicator]]:
    opened: list[WebsocketCommunicator] = []
    yield opened
    for comm in opened:
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await comm.disconnect(timeout=WAIT)


@sync_to_async
def page_of(user: AbstractUser, run: Run) -> tuple[str, str]:
    """The run page as `user` gets it, and the cookie of that login."""
    client = Client()
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode(), str(client.cookies["sessionid"].value)


def slot_of(html: str) -> Element:
    return Tree(html).by_id(SLOT)


def children_in(html: str) -> list[tuple[str | None, str | None]]:
    """(kind, status) of each child the slot lists, newest first."""
    tree = Tree(html)
    return [(e.attrs.get("data-child-kind"), e.attrs.get("data-status"))
            for e in tree.elements if "data-child-kind" in e.attrs]


async def watching(sockets: list[WebsocketCommunicator], run: Run, user: AbstractUser, *,
                   page: str | None = None) -> WebsocketCommunicator:
    """`user`'s socket on `run`, resumed as the page (`page`: one served earlier) does."""
    served, cookie = await page_of(user, run)
    comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=[
        (b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
        (b"cookie", f"sessionid={cookie}".encode())])
    sockets.append(comm)
    connected, code = await comm.connect(timeout=WAIT)
    assert connected, f"refused with {code}"
    await comm.send_json_to({"type": "resume", "after": run.last_seq,
                             "lineage": slot_of(page or served).attrs["data-mark"]})
    return comm


async def test_a_rerun_made_while_the_parent_is_watched_arrives_at_once(
    sockets: list[WebsocketCommunicator], bob: AbstractUser, finished: Run, settings: Any,
) -> None:
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 3600  # so only the notification can bring it
    comm = await watching(sockets, finished, bob)
    assert await comm.receive_nothing(timeout=0.3)  # the page's list is current

    child = await sync_to_async(run_rerun)(run=finished, user=bob, mode="as_it_was")

    message = await comm.receive_from(timeout=WAIT)
    slot = slot_of(message)
    assert slot.attrs["hx-swap-oob"] == "true"
    assert f'href="/runs/{child.pk}/"' in message
    assert children_in(message) == [("rerun", "queued")]
    # The same list and mark as the page served now.
    page, _ = await page_of(bob, finished)
    assert children_in(page) == children_in(message)
    assert slot_of(page).attrs["data-mark"] == slot.attrs["data-mark"]
    assert "hx-swap-oob" not in slot_of(page).attrs


async def test_a_page_served_before_a_child_was_made_gets_the_list_at_its_resume(
    sockets: list[WebsocketCommunicator], bob: AbstractUser, finished: Run, settings: Any,
) -> None:
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 3600
    stale, _ = await page_of(bob, finished)
    assert children_in(stale) == []
    await sync_to_async(run_rerun)(run=finished, user=bob, mode="as_it_was")

    comm = await watching(sockets, finished, bob, page=stale)

    assert children_in(await comm.receive_from(timeout=WAIT)) == [("rerun", "queued")]


async def test_a_childs_status_reaches_the_parents_page_at_the_next_poll(
    sockets: list[WebsocketCommunicator], bob: AbstractUser, finished: Run, settings: Any,
) -> None:
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.1
    child = await sync_to_async(run_rerun)(run=finished, user=bob, mode="as_it_was")
    comm = await watching(sockets, finished, bob)  # the page lists it queued

    assert await sync_to_async(execute)(child) == "succeeded"

    assert children_in(await comm.receive_from(timeout=WAIT)) == [("rerun", "succeeded")]


async def test_a_child_its_viewer_may_not_see_changes_nothing_on_the_page(
    sockets: list[WebsocketCommunicator], bob: AbstractUser, alice: AbstractUser,
    finished: Run, settings: Any,
) -> None:
    settings.AGENTFORGE_LIVE_POLL_SECONDS = 0.1
    comm = await watching(sockets, finished, bob)
    alices = await watching(sockets, finished, alice)  # staff see every run

    await sync_to_async(run_rerun)(run=finished, user=alice, mode="as_it_was")

    assert children_in(await alices.receive_from(timeout=WAIT)) == [("rerun", "queued")]
    assert await comm.receive_nothing(timeout=0.5)  # several of bob's polls


@pytest.mark.parametrize("mark", [3, ["a"], "x" * 65])
async def test_a_resume_with_a_bad_mark_closes_with_4400(
    sockets: list[WebsocketCommunicator], bob: AbstractUser, finished: Run, mark: Any,
) -> None:
    _, cookie = await page_of(bob, finished)
    comm = WebsocketCommunicator(application, f"/ws/runs/{finished.pk}/", headers=[
        (b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
        (b"cookie", f"sessionid={cookie}".encode())])
    sockets.append(comm)
    assert (await comm.connect(timeout=WAIT))[0]
    await comm.send_json_to({"type": "resume", "after": 0, "lineage": mark})
    closed = await comm.receive_output(timeout=WAIT)
    assert (closed["type"], closed.get("code")) == ("websocket.close", 4400)
