"""Proxies, through a real forward proxy (proxy.py) started on loopback for the test:
the environment's HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY, CONNECT for an https
endpoint (trusted through `verify=`), and an explicit per-endpoint `proxy=`."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tools_app.engine.messages import ChatRequest, UserMessage
from tools_app.engine.providers.http.clients import environment_proxy
from tools_app.engine.providers.http.retry import RetryPolicy
from tools_app.engine.providers.openai import OpenAIChatModel

from .loopback import read_request, serving
from .wire import openai_completion

REQUEST = ChatRequest(messages=(UserMessage(text="Hi"),))
_BODY = json.dumps(openai_completion(text="Hello")).encode()
_OK = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
       % len(_BODY)) + _BODY
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class ForwardProxy:
    """proxy.py in a subprocess on a free loopback port; its access log says what it
    carried."""

    def __init__(self, directory: Path) -> None:
        self.port_file = directory / "port"
        self.log_file = directory / "proxy.log"
        self.process = subprocess.Popen(  # bounded: stopped by the fixture, or a timeout
            [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
             "--port-file", str(self.port_file), "--num-acceptors", "1",
             "--num-workers", "1", "--log-level", "INFO", "--log-file", str(self.log_file),
             "--timeout", "5"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not (self.port_file.exists() and self.port_file.read_text().strip()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("the forward proxy did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(self.port_file.read_text())}"

    def carried(self) -> list[str]:
        """The access-log lines so far (one per request or tunnel carried)."""
        if not self.log_file.exists():
            return []
        return [line for line in self.log_file.read_text().splitlines()
                if "access_log" in line]

    async def wait_for(self, text: str) -> list[str]:
        for _ in range(100):  # a tunnel is logged when it closes
            lines = [line for line in self.carried() if text in line]
            if lines:
                return lines
            await asyncio.sleep(0.05)
        raise AssertionError(f"the proxy never carried {text!r}: {self.carried()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForwardProxy]:
    running = ForwardProxy(tmp_path_factory.mktemp("proxy"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await read_request(reader)
        writer.write(_OK)
        await writer.drain()


async def _call(base_url: str, **options: object) -> str | None:
    model = OpenAIChatModel(base_url=base_url, model="m", api_key="sk-test-key-123456",
                            retry=RetryPolicy(max_retries=0), **options)  # type: ignore[arg-type]
    try:
        return (await model.chat(REQUEST)).ai_message.text
    finally:
        await model.aclose()


async def test_http_proxy_from_the_environment_is_used(
        proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    async with serving(_answer, path="/v1") as (base_url, accepted):
        port = base_url.split(":")[2].split("/")[0]
        assert await _call(base_url) == "Hello"

    assert await proxy.wait_for(f"POST 127.0.0.1:{port}/v1/chat/completions")
    assert len(accepted) == 1  # from the proxy


async def test_https_goes_through_a_connect_tunnel_with_the_given_ca(
        proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    async with serving(_answer, tls=server_context, path="/v1") as (base_url, accepted):
        port = base_url.split(":")[2].split("/")[0]
        assert await _call(base_url, verify=client_context) == "Hello"

    assert await proxy.wait_for(f"CONNECT 127.0.0.1:{port}")
    assert len(accepted) == 1


async def test_no_proxy_bypasses_the_proxy(proxy: ForwardProxy,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    async with serving(_answer, path="/v1") as (base_url, accepted):
        port = base_url.split(":")[2].split("/")[0]
        assert await _call(base_url) == "Hello"
        await asyncio.sleep(0.2)

    assert not [line for line in proxy.carried() if f"127.0.0.1:{port}" in line]
    assert len(accepted) == 1


async def test_an_explicit_proxy_is_used_without_any_environment(proxy: ForwardProxy) -> None:
    async with serving(_answer, path="/v1") as (base_url, _):
        port = base_url.split(":")[2].split("/")[0]
        assert await _call(base_url, proxy=proxy.url) == "Hello"

    assert await proxy.wait_for(f"POST 127.0.0.1:{port}/v1/chat/completions")


async def test_all_proxy_is_the_fallback(proxy: ForwardProxy,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    async with serving(_answer, path="/v1") as (base_url, _):
        port = base_url.split(":")[2].split("/")[0]
        assert await _call(base_url) == "Hello"

    assert await proxy.wait_for(f"POST 127.0.0.1:{port}/v1/chat/completions")


def test_which_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy:3128")
    monkeypatch.setenv("ALL_PROXY", "http://any-proxy:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")

    assert environment_proxy("https://api.example/v1") == "http://secure-proxy:3128"
    assert environment_proxy("http://api.example/v1") == "http://any-proxy:3128"
    assert environment_proxy("https://internal.example/v1") is None
    monkeypatch.setenv("ALL_PROXY", "socks5://any-proxy:1080")  # aiohttp cannot use it
    assert environment_proxy("http://api.example/v1") is None
