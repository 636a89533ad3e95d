"""HTTP tools (#12): request mapping, response selection, caps, secrets, and the SSRF
guard on a matrix of addresses and redirects. Loopback servers only; the policies here
allow 127.0.0.1 by name where a test needs to reach its own server."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pydantic
import pytest

from tests.providers.loopback import hanging_after, serving
from tools_app.engine import ToolArgumentsError, ToolExecutionError, ToolExecutionRequest
from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.sources import HttpConfig, HttpToolExecutor

from .http_server import Reply, Seen, Server, http_server

SECRET = "sk-live-0123456789abcdef"
ALLOW_SERVER = OutboundPolicy(allow=("127.0.0.1",))  # our server, nothing else local


def call(arguments: Any = None, name: str = "h") -> ToolExecutionRequest:
    return ToolExecutionRequest(id="c1", name=name, arguments=json.dumps(arguments or {}))


async def run(config: dict[str, Any], arguments: Any = None, *,
              policy: OutboundPolicy = ALLOW_SERVER, secrets: dict[str, str] | None = None,
              ) -> str:
    given = secrets or {}
    executor = HttpToolExecutor(config, outbound=policy, resolve_secret=given.__getitem__)
    try:
        return (await executor.execute_with_result(call(arguments))).text
    finally:
        await executor.aclose()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    def echo(seen: Seen) -> Reply:
        return Reply(200, json.dumps({
            "method": seen.method, "target": seen.target,
            "body": json.loads(seen.body) if seen.body else None,
            "data": {"items": [{"name": "first"}]}}).encode(),
            {"content-type": "application/json"})

    routes = {"/echo": echo, "/users/a%2Fb": echo, "/users/42": echo,
              "/text": lambda s: Reply(200, "Grüße".encode(), {
                  "content-type": "text/plain; charset=utf-8"}),
              "/big": lambda s: Reply(200, b"x" * 5000, gzipped=True),
              "/missing": lambda s: Reply(404, b'{"error": "no such user"}'),
              "/echo-headers": lambda s: Reply(200, json.dumps(s.headers).encode())}
    async with http_server(routes) as running:
        yield running


async def test_url_query_and_body_come_from_the_arguments(server: Server) -> None:
    text = await run({"method": "POST", "url": server.url + "/users/{id}",
                      "query": {"lang": "lang", "n": "limit"},
                      "body": {"name": "who.name"}},
                     {"id": 42, "lang": "en", "who": {"name": "Ann"}})
    echoed = json.loads(text)
    assert echoed["method"] == "POST"
    assert echoed["target"] == "/users/42?lang=en"  # limit not given: left out
    assert echoed["body"] == {"name": "Ann"}


async def test_a_path_argument_is_one_encoded_segment(server: Server) -> None:
    text = await run({"url": server.url + "/users/{id}"}, {"id": "a/b"})
    assert json.loads(text)["target"] == "/users/a%2Fb"
    with pytest.raises(ToolArgumentsError, match="cannot be a part of the URL's path"):
        await run({"url": server.url + "/users/{id}"}, {"id": ".."})
    with pytest.raises(ToolArgumentsError, match="needs the argument 'id'"):
        await run({"url": server.url + "/users/{id}"}, {})
    with pytest.raises(ToolArgumentsError, match="do not make a valid URL: URL too long"):
        await run({"url": server.url + "/users/{id}"}, {"id": "a" * 70_000})
    assert server.seen[-1].target == "/users/a%2Fb"  # none of these was sent


async def test_the_whole_arguments_as_body(server: Server) -> None:
    text = await run({"method": "PUT", "url": server.url + "/echo", "body": "arguments"},
                     {"a": [1, 2]})
    assert json.loads(text)["body"] == {"a": [1, 2]}


async def test_a_json_pointer_selects_what_the_model_gets(server: Server) -> None:
    assert await run({"url": server.url + "/echo", "response": "/data/items/0/name"}) == \
        "first"
    assert await run({"url": server.url + "/echo", "response": "/data/items"}) == \
        '[{"name": "first"}]'
    with pytest.raises(ToolExecutionError, match="has nothing at '/nope'"):
        await run({"url": server.url + "/echo", "response": "/nope"})
    with pytest.raises(ToolExecutionError, match="not JSON"):
        await run({"url": server.url + "/text", "response": ""})


async def test_text_is_decoded_by_its_charset(server: Server) -> None:
    assert await run({"url": server.url + "/text"}) == "Grüße"


async def test_an_error_status_is_an_execution_error_quoting_the_body(server: Server) -> None:
    with pytest.raises(ToolExecutionError, match=r"answered 404: \{\"error\": \"no such user"):
        await run({"url": server.url + "/missing"})


async def test_the_size_cap_counts_decompressed_bytes(server: Server) -> None:
    # 5000 bytes gzip to a few dozen: the cap applies to what they decompress to.
    assert len(await run({"url": server.url + "/big", "max_response_bytes": 5000})) == 5000
    with pytest.raises(ToolExecutionError, match="larger than the tool's limit of 4999"):
        await run({"url": server.url + "/big", "max_response_bytes": 4999})


async def test_header_secrets_are_resolved_sent_and_never_shown(server: Server) -> None:
    config = {"url": server.url + "/echo-headers",
              "headers": {"Authorization": "env:SERVICE_TOKEN", "X-Team": "docs"}}
    # The server echoes the headers back: the model must not get the secret either.
    text = await run(config, secrets={"SERVICE_TOKEN": SECRET})
    assert SECRET not in text
    assert "[redacted]" in text
    assert "docs" in text
    assert server.seen[-1].headers["authorization"] == SECRET


async def test_a_missing_secret_is_a_clear_error(server: Server) -> None:
    config = {"url": server.url + "/echo", "headers": {"Authorization": "env:NOT_SET"}}
    with pytest.raises(ToolExecutionError, match="'NOT_SET'"):
        await run(config, secrets={})


@pytest.mark.parametrize(("config", "problem"), [
    ({"url": "ftp://example.com/x"}, "http:// or https://"),
    ({"url": "http://user:pw@example.com/"}, "no credentials in the URL"),
    ({"url": "http://{host}/x"}, "the host cannot come from the arguments"),
    ({"url": "http://example.com/", "body": "arguments"}, "a GET request has no body"),
    ({"url": "http://example.com/", "response": "data"}, "JSON pointer"),
    ({"url": "http://example.com/", "headers": {"Bad Name": "x"}}, "not a header name"),
    ({"url": "http://example.com/", "headers": {"X-A": "a\r\nX-B: b"}}, "control char"),
    ({"url": "http://example.com/", "timeout_seconds": 0}, "greater than 0"),
    ({}, "url"),
])
def test_bad_configurations_are_refused(config: dict[str, Any], problem: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=problem):
        HttpConfig.model_validate(config)


# -- the SSRF guard ---------------------------------------------------------------------


class _PrivateNames(aiohttp.ThreadedResolver):
    """Resolves internal.example to a private address; anything else as usual."""

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        if host == "internal.example":
            return [{"hostname": host, "host": "10.0.0.5", "port": port, "family": family,
                     "proto": 0, "flags": 0}]
        return await super().resolve(host, port, family)


@pytest.fixture
def private_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiohttp, "DefaultResolver", _PrivateNames)


@pytest.mark.parametrize(("host", "reason"), [
    ("127.0.0.1", "loopback"),
    ("10.1.2.3", "private"),
    ("169.254.169.254", "link-local"),
    ("[::ffff:127.0.0.1]", "loopback"),
    ("2130706433", "unusual notation"),
    ("0x7f.1", "unusual notation"),
    ("127.1", "unusual notation"),
    ("localhost", "loopback"),  # a name resolving to loopback
    ("internal.example", "private"),  # a name resolving to a private address
])
async def test_non_public_destinations_are_refused_before_any_request(
        server: Server, private_names: None, host: str, reason: str) -> None:
    port = server.url.rsplit(":", 1)[1]
    with pytest.raises(ToolExecutionError) as refused:
        await run({"url": f"http://{host}:{port}/echo"}, policy=OutboundPolicy())
    assert reason in str(refused.value)
    assert str(refused.value).startswith("HTTP tool 'h': ")
    assert server.seen == []


async def test_the_operator_can_allow_loopback(server: Server) -> None:
    text = await run({"url": server.url + "/echo"}, policy=OutboundPolicy(allow_loopback=True))
    assert json.loads(text)["method"] == "GET"


def redirect_to(location: str) -> Any:
    return lambda seen: Reply(302, b"", {"location": location})


@pytest.mark.parametrize(("target", "reason"), [
    ("http://[::1]:{port}/echo", "loopback"),  # loopback outside the allowed 127.0.0.1
    ("http://10.0.0.1/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://2130706433:{port}/echo", "unusual notation"),
    ("file:///etc/passwd", "only http and https"),
])
async def test_a_redirect_to_a_refused_destination_is_refused(target: str,
                                                              reason: str) -> None:
    routes: dict[str, Any] = {}
    async with http_server(routes) as running:
        port = running.url.rsplit(":", 1)[1]
        routes["/start"] = redirect_to(target.format(port=port))
        with pytest.raises(ToolExecutionError, match=reason):
            await run({"url": running.url + "/start"})
        assert [seen.target for seen in running.seen] == ["/start"]


async def test_a_redirect_chain_is_checked_at_every_hop() -> None:
    routes: dict[str, Any] = {
        "/a": redirect_to("/b"), "/b": redirect_to("http://169.254.169.254/")}
    async with http_server(routes) as running:
        with pytest.raises(ToolExecutionError, match="link-local"):
            await run({"url": running.url + "/a"})
        assert [seen.target for seen in running.seen] == ["/a", "/b"]


async def test_three_redirects_are_followed_and_a_fourth_refused() -> None:
    routes: dict[str, Any] = {"/0": redirect_to("/1"), "/1": redirect_to("/2"),
                              "/2": redirect_to("/3"), "/3": redirect_to("/4"),
                              "/4": lambda s: Reply(200, b"arrived")}
    async with http_server(routes) as running:
        assert await run({"url": running.url + "/1"}) == "arrived"
        with pytest.raises(ToolExecutionError, match="more than 3 redirects"):
            await run({"url": running.url + "/0"})
        assert "/4" not in [seen.target for seen in running.seen[4:]]


async def test_303_turns_a_post_into_a_get_and_307_keeps_it() -> None:
    def method(seen: Seen) -> Reply:
        return Reply(200, f"{seen.method} {seen.body.decode()}".encode())

    routes: dict[str, Any] = {"/see-other": lambda s: Reply(303, b"", {"location": "/m"}),
                              "/temporary": lambda s: Reply(307, b"", {"location": "/m"}),
                              "/m": method}
    async with http_server(routes) as running:
        config = {"method": "POST", "body": "arguments"}
        assert await run(config | {"url": running.url + "/see-other"}, {"a": 1}) == "GET "
        assert await run(config | {"url": running.url + "/temporary"}, {"a": 1}) == \
            'POST {"a":1}'


async def test_credentials_do_not_follow_a_redirect_to_another_origin(server: Server) -> None:
    other = server.url.replace("127.0.0.1", "localhost")
    routes: dict[str, Any] = {"/away": redirect_to(other + "/echo-headers")}
    policy = OutboundPolicy(allow=("127.0.0.1", "localhost"))
    async with http_server(routes) as first:
        text = await run({"url": first.url + "/away",
                          "headers": {"Authorization": "env:TOKEN"}},
                         policy=policy, secrets={"TOKEN": SECRET})
    assert "authorization" not in json.loads(text)
    assert first.seen[0].headers["authorization"] == SECRET


async def test_a_server_that_never_answers_runs_into_the_tools_timeout() -> None:
    async with serving(hanging_after(), path="/slow") as (url, accepted):
        with pytest.raises(ToolExecutionError,
                           match=r"no complete answer from 127\.0\.0\.1 within 0\.2 s"):
            await run({"url": url, "timeout_seconds": 0.2})
    assert len(accepted) == 1
