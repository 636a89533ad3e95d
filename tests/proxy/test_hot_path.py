"""What the proxy keeps between requests: the token's user and the endpoint (dropped
when their rows change, or after a few seconds for a change it cannot see), and the
recorder's bounded queue (an exchange past it is not recorded, and the client is not
kept waiting)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db.models import Count

from tests.proxy.conftest import Proxy
from tools_app.models import ApiToken, ModelEndpoint, Round, Run
from tools_app.proxy import lookups, recording
from tools_app.proxy.recording import Recorder

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def _ask(proxy: Proxy, endpoint: str = "fake-openai") -> httpx.Response:
    return httpx.post(f"{proxy.openai_base(endpoint)}/chat/completions", json=HELLO,
                      headers={"Authorization": f"Bearer {proxy.token}"})


@pytest.mark.both
def test_a_deleted_token_is_refused_at_its_next_request(proxy: Proxy) -> None:
    assert _ask(proxy).status_code == 200
    assert lookups.cached_user(proxy.token) is not None  # kept by the first request

    ApiToken.objects.filter(user_id=proxy.user.pk).get().delete()

    refused = _ask(proxy)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"


def test_a_deactivated_user_is_refused_at_their_next_request(proxy: Proxy) -> None:
    assert _ask(proxy).status_code == 200
    user = User.objects.get(pk=proxy.user.pk)
    user.is_active = False
    user.save()

    assert _ask(proxy).status_code == 401


def test_a_renamed_endpoint_is_no_longer_found_by_its_old_name(proxy: Proxy) -> None:
    assert _ask(proxy).status_code == 200
    endpoint = ModelEndpoint.objects.get(name="fake-openai")
    endpoint.name = "renamed"
    endpoint.save()

    assert _ask(proxy).status_code == 404
    assert _ask(proxy, "renamed").status_code == 200


def test_a_change_without_signals_is_seen_once_the_kept_answer_expires(
        proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(lookups, "_now", lambda: clock[0])
    assert _ask(proxy).status_code == 200
    # A queryset update (as another process would make it) sends no signal.
    User.objects.filter(pk=proxy.user.pk).update(is_active=False)

    assert _ask(proxy).status_code == 200  # still the kept answer
    clock[0] += lookups.TTL_SECONDS
    assert _ask(proxy).status_code == 401


def test_an_unknown_token_is_not_kept(proxy: Proxy) -> None:
    response = httpx.post(f"{proxy.openai_base()}/chat/completions", json=HELLO,
                          headers={"Authorization": "Bearer afw_not-a-token"})
    assert response.status_code == 401
    assert lookups.cached_user("afw_not-a-token") is None


def test_a_full_recording_queue_drops_the_exchange_counted_and_logged(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    entered, release = threading.Event(), threading.Event()

    def held(batch: Any, exchange: Any) -> None:
        entered.set()
        release.wait()

    monkeypatch.setattr(recording.Batch, "add", held)
    recorder = Recorder(capacity=1)
    exchange: Any = type("E", (), {"target": type("T", (), {"endpoint_name": "ep"})()})()
    assert recorder.submit(exchange)
    entered.wait()  # the recorder holds the first; the queue is empty again
    assert recorder.submit(exchange)  # fills the queue
    with caplog.at_level(logging.WARNING, logger=recording.__name__):
        assert not recorder.submit(exchange)
    assert recorder.dropped == 1
    assert "recording queue full" in caplog.text
    assert "endpoint ep" in caplog.text
    release.set()
    recorder.drain()
    assert recorder.dropped == 1


@pytest.fixture
def first_add_held(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """The recorder's first exchange held as it is added to its batch: (entered, set
    once it is held; release, to let it go on), so the next ones queue meanwhile."""
    entered, release = threading.Event(), threading.Event()
    add = recording.Batch.add

    def held_once(batch: Any, exchange: Any) -> None:
        if not entered.is_set():
            entered.set()
            release.wait()
        add(batch, exchange)

    monkeypatch.setattr(recording.Batch, "add", held_once)
    return entered, release


@pytest.mark.both
def test_exchanges_queued_meanwhile_are_recorded_together_as_if_one_by_one(
        proxy: Proxy, monkeypatch: pytest.MonkeyPatch, settings: Any,
        first_add_held: tuple[threading.Event, threading.Event]) -> None:
    settings.AGENTFORGE_PROXY_RECORDER = "thread"  # held and counted in this process
    entered, release = first_add_held
    store = recording._store
    stored: list[list[str]] = []

    def counted(waiting: list[Any]) -> None:
        stored.append([p.exchange.run_header for p in waiting])
        store(waiting)

    monkeypatch.setattr(recording, "_store", counted)
    for run in ("a", "b", "b", "c"):  # a is being recorded while the others queue
        response = httpx.post(f"{proxy.openai_base()}/chat/completions", json=HELLO,
                              headers={"Authorization": f"Bearer {proxy.token}",
                                       "X-AgentForge-Run": run})
        assert response.status_code == 200
        if run == "a":
            entered.wait()
    release.set()
    proxy.recorded()

    # b's second round waits for its first to be stored; c goes with it.
    assert stored == [["a"], ["b"], ["b", "c"]]
    assert Round.objects.filter(run__created_by_id=proxy.user.pk).count() == 4
    assert Run.objects.filter(created_by_id=proxy.user.pk).count() == 3
    counts = sorted(Run.objects.filter(created_by_id=proxy.user.pk)
                    .annotate(n=Count("rounds")).values_list("n", flat=True))
    assert counts == [1, 1, 2]


def test_the_recording_queue_is_bounded_by_default() -> None:
    assert Recorder()._queue.maxsize == recording.CAPACITY > 0


def test_a_failed_store_of_the_exchange_waiting_before_another_loses_only_that_one(
        proxy: Proxy, monkeypatch: pytest.MonkeyPatch, settings: Any,
        caplog: pytest.LogCaptureFixture,
        first_add_held: tuple[threading.Event, threading.Event]) -> None:
    settings.AGENTFORGE_PROXY_RECORDER = "thread"  # held and failed in this process
    first = ModelEndpoint.objects.get(name="fake-openai")
    ModelEndpoint.objects.create(name="other-openai", kind="openai", base_url=first.base_url,
                                 model="fake-model", api_key_env=first.api_key_env)
    entered, release = first_add_held
    store = recording._store
    failed: list[list[str]] = []

    def failing_for_b_alone(waiting: list[Any]) -> None:
        if not failed and [p.exchange.run_header for p in waiting] == ["b"]:
            failed.append([p.exchange.target.endpoint_name for p in waiting])
            raise RuntimeError("the store failed")
        store(waiting)

    monkeypatch.setattr(recording, "_store", failing_for_b_alone)
    # b's second round (another endpoint) has b's first stored alone first: that fails.
    for run, endpoint in (("a", "fake-openai"), ("b", "fake-openai"),
                          ("b", "other-openai"), ("c", "fake-openai")):
        response = httpx.post(f"{proxy.openai_base(endpoint)}/chat/completions", json=HELLO,
                              headers={"Authorization": f"Bearer {proxy.token}",
                                       "X-AgentForge-Run": run})
        assert response.status_code == 200
        if run == "a":
            entered.wait()
    with caplog.at_level(logging.ERROR, logger=recording.__name__):
        release.set()
        proxy.recorded()

    assert failed == [["fake-openai"]]
    logged = [r.getMessage() for r in caplog.records if r.name == recording.__name__]
    assert logged == ["recording a proxied exchange failed (endpoint fake-openai)"]
    # Only b's first round is missing: b's second and c are recorded.
    assert Round.objects.filter(run__created_by_id=proxy.user.pk).count() == 3
    assert Run.objects.filter(created_by_id=proxy.user.pk).count() == 3
