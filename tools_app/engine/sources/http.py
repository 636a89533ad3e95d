"""HTTP tools: one call, one HTTP request built from the call's arguments.

URL `{name}` placeholders (each value one URL-encoded path segment), query parameters and
a JSON body come from the arguments. Header values `env:NAME` are credentials asked of
the given `resolve_secret` (the engine never reads the environment), never stored, and
scrubbed from every text this executor produces. The model gets the response text, or
the value at a JSON pointer; a status of 400 or more is an execution error.

The response is untrusted: read up to `max_response_bytes`, within `timeout_seconds`.
Against request forgery the client is the providers' (the OutboundPolicy checks each
address connected to; unusual IP notations are refused), and redirects are followed by
hand, at most MAX_REDIRECTS, each checked again, dropping the headers off-origin.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any, Literal, Self
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools_app.engine.providers.http.clients import EndpointConfig, SharedHttpClients, new_client
from tools_app.engine.providers.http.redaction import Redactor

from ..errors import ToolArgumentsError, ToolExecutionError
from ..execution import ToolExecutionResult, arguments_as_map, result_text
from ..messages import ToolExecutionRequest
from ..outbound import (
    OutboundPolicy,
    OutboundRefusedError,
    is_ip_literal,
    unusual_address_notation,
)
from .templates import PLACEHOLDER, MissingArgument, fill_text, lookup

MAX_REDIRECTS = 3
MAX_TIMEOUT_SECONDS = 600.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
ERROR_BODY_EXCERPT = 500
ENV_PREFIX = "env:"

SecretResolver = Callable[[str], str]
"""Given an environment variable's NAME, its value (or raise): how an HTTP tool gets
the credentials its headers reference."""


class HttpConfig(BaseModel):
    """An HTTP tool's configuration (the admin validates `config` with this model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(
        "GET", description="GET, POST, PUT, PATCH or DELETE.")
    url: str = Field(description="http(s) URL; {argument} placeholders in the path or "
                     "query are filled from the call's arguments (never in the host).")
    query: dict[str, str] = Field(
        default_factory=dict, description="Query parameter -> argument name (a dotted "
        "path reaches inside one); an argument the call leaves out is left out.")
    body: Literal["arguments"] | dict[str, str] | None = Field(
        None, description='JSON body: "arguments" (all of them), a mapping of body '
        "field -> argument name, or null for none.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Header -> value; a value env:NAME is read "
        "from that environment variable when the tool runs, never stored.")
    response: str = Field(
        "text", description='What the model gets: "text" (the body as text) or a JSON '
        'pointer into the JSON body ("" for all of it, "/data/0/name" for a part).')
    timeout_seconds: float = Field(
        30.0, gt=0, le=MAX_TIMEOUT_SECONDS,
        description="For the whole exchange, redirects included.")
    max_response_bytes: int = Field(
        1_000_000, ge=1, le=50_000_000, description="Larger responses (counted after "
        "decompression) are refused.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        sample = PLACEHOLDER.sub("x", url)
        try:
            parts = urlsplit(sample)
        except ValueError as exc:
            raise ValueError(f"not a URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("give an http:// or https:// URL with a host")
        if parts.username or parts.password:
            raise ValueError("no credentials in the URL: put them in a header as env:NAME")
        if PLACEHOLDER.search(urlsplit(url).netloc):
            raise ValueError("the host cannot come from the arguments")
        if any(char.isspace() for char in url):
            raise ValueError("the URL contains white space")
        return url

    @field_validator("response")
    @classmethod
    def _check_response(cls, response: str) -> str:
        if response != "text" and response and not response.startswith("/"):
            raise ValueError('give "text" or a JSON pointer such as "/data" ("" for all)')
        return response

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not name or any(c.isspace() or c in ':"(),/;<=>?@[\\]{}' for c in name):
                raise ValueError(f"{name!r} is not a header name")
            if any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise ValueError(f"{name}: a header value cannot hold control characters")
            if value.startswith(ENV_PREFIX) and not value[len(ENV_PREFIX):]:
                raise ValueError(f"{name}: name the environment variable after env:")
        return headers

    @model_validator(mode="after")
    def _body_needs_a_method_with_one(self) -> Self:
        if self.body is not None and self.method == "GET":
            raise ValueError("a GET request has no body: map the arguments to the query, "
                             "or use another method")
        return self

    def secret_variables(self) -> list[str]:
        """The environment variables the headers read."""
        return [value[len(ENV_PREFIX):] for value in self.headers.values()
                if value.startswith(ENV_PREFIX)]


class HttpToolExecutor:
    """Executes calls as HTTP requests (see the module). Give it `clients` (a
    SharedHttpClients: one client per event loop, the owner closes them), or `client`
    (an httpx.AsyncClient from clients.new_client with the same outbound policy; not
    closed here), or let it make its own (closed by `aclose()`)."""

    def __init__(self, config: HttpConfig | dict[str, Any], *,
                 outbound: OutboundPolicy | None = None,
                 resolve_secret: SecretResolver | None = None,
                 client: httpx.AsyncClient | None = None,
                 clients: SharedHttpClients | None = None) -> None:
        self.config = config if isinstance(config, HttpConfig) else \
            HttpConfig.model_validate(config)
        # No policy given: the strict default (public addresses only).
        self.outbound = outbound if outbound is not None else OutboundPolicy()
        self._resolve_secret = resolve_secret
        self._client = client
        self._clients = clients
        self._owns_client = client is None and clients is None

    def client_config(self) -> EndpointConfig:
        """The configuration of the client this executor needs (direct connections, the
        policy enforced by its resolver); the timeout is per exchange, so the client's
        own limit on a silence is the longest a tool may set, never cutting one short."""
        config = EndpointConfig.of("http-tools", outbound=self.outbound,
                                   read_timeout=MAX_TIMEOUT_SECONDS)
        return dataclasses.replace(config, environment_proxy=False)

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def execute_with_result(self, request: ToolExecutionRequest) -> ToolExecutionResult:
        headers, redactor = self._headers(request)
        try:
            return await self._call(request, headers, redactor)
        except ToolExecutionError as exc:
            # Anything a server or a transport said may echo a credential; the original
            # is not chained, so no traceback carries its unredacted text.
            raise ToolExecutionError(redactor.text(str(exc)), tool_name=request.name,
                                     cause=exc.cause) from None

    async def _call(self, request: ToolExecutionRequest, headers: dict[str, str],
                    redactor: Redactor) -> ToolExecutionResult:
        arguments = arguments_as_map(request)
        url = self._url(request, arguments)
        body = self._body(arguments)
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                status, text = await self._exchange(request, url, body, headers)
        except TimeoutError:
            raise ToolExecutionError(
                f"HTTP tool '{request.name}': no complete answer from {url.host} within "
                f"{self.config.timeout_seconds:g} s", tool_name=request.name) from None
        text = redactor.text(text)
        if status >= 400:
            raise ToolExecutionError(
                f"HTTP tool '{request.name}': {self.config.method} {_shown(url)} answered "
                f"{status}: {text[:ERROR_BODY_EXCERPT]}", tool_name=request.name)
        value = self._selected(request, text)
        return ToolExecutionResult.success(result_text(value), result=value)

    # -- the request -----------------------------------------------------------------

    def _headers(self, request: ToolExecutionRequest) -> tuple[dict[str, str], Redactor]:
        headers: dict[str, str] = {}
        secrets: list[str] = []
        for name, value in self.config.headers.items():
            if value.startswith(ENV_PREFIX):
                value = self._secret(request, value[len(ENV_PREFIX):])
                secrets.append(value)
            headers[name] = value
        return headers, Redactor.for_values(secrets)

    def _secret(self, request: ToolExecutionRequest, variable: str) -> str:
        if self._resolve_secret is None:
            raise ToolExecutionError(
                f"HTTP tool '{request.name}' needs the credential {variable}, and no "
                "secret resolver was given", tool_name=request.name)
        try:
            return self._resolve_secret(variable)
        except Exception as exc:  # the resolver's own reason, whatever its type
            raise ToolExecutionError(f"HTTP tool '{request.name}': {exc}",
                                     tool_name=request.name) from exc

    def _url(self, request: ToolExecutionRequest, arguments: dict[str, Any]) -> httpx.URL:
        try:
            filled = fill_text(self.config.url, arguments, encode=_path_segment)
            query = {name: _query_value(lookup(arguments, path))
                     for name, path in self.config.query.items()
                     if _has(arguments, path)}
        except MissingArgument as missing:
            raise ToolArgumentsError(
                f"HTTP tool '{request.name}' needs the argument '{missing.path}' to build "
                "its URL", tool_name=request.name) from missing
        except _DotSegment as dots:
            raise ToolArgumentsError(
                f"HTTP tool '{request.name}': {str(dots)!r} cannot be a part of the URL's "
                "path", tool_name=request.name) from dots
        try:
            return httpx.URL(filled).copy_merge_params(query)
        except httpx.InvalidURL as exc:  # e.g. a value too long for a URL
            raise ToolArgumentsError(
                f"HTTP tool '{request.name}': the arguments do not make a valid URL: {exc}",
                tool_name=request.name) from exc

    def _body(self, arguments: dict[str, Any]) -> Any:
        body = self.config.body
        if body is None:
            return None
        if body == "arguments":
            return arguments
        return {field: lookup(arguments, path) for field, path in body.items()
                if _has(arguments, path)}

    # -- the exchange ----------------------------------------------------------------

    async def _exchange(self, request: ToolExecutionRequest, url: httpx.URL, body: Any,
                        headers: dict[str, str]) -> tuple[int, str]:
        method = self.config.method
        origin = _origin(url)
        for hop in range(MAX_REDIRECTS + 1):
            self._check_destination(request, url)
            outgoing = headers if _origin(url) == origin else {}
            async with self._stream(request, method, url, body, outgoing) as response:
                location = response.headers.get("location")
                if response.status_code not in REDIRECT_STATUSES or not location:
                    return response.status_code, await self._read(request, response)
            if hop == MAX_REDIRECTS:
                raise ToolExecutionError(
                    f"HTTP tool '{request.name}': more than {MAX_REDIRECTS} redirects "
                    f"(the last to {_shown(url.join(location))})", tool_name=request.name)
            url = url.join(location)
            if response.status_code == 303 or (
                    response.status_code in (301, 302) and method != "GET"):
                method, body = "GET", None  # what browsers do; 307 and 308 keep both
        raise AssertionError("unreachable: the loop returns or raises")

    def _stream(self, request: ToolExecutionRequest, method: str, url: httpx.URL,
                body: Any, headers: dict[str, str]) -> Any:
        return _GuardedStream(self._http(), request.name, method, url, body, headers)

    def _http(self) -> httpx.AsyncClient:
        if self._clients is not None:
            return self._clients.get(self.client_config())
        if self._client is None:
            self._client = new_client(self.client_config())
        return self._client

    def _check_destination(self, request: ToolExecutionRequest, url: httpx.URL) -> None:
        """What can be refused before connecting: the scheme, an address in an odd
        notation, a literal IP the policy refuses (names are judged as resolved)."""
        refusal = None
        host = url.host
        if url.scheme not in ("http", "https"):
            refusal = f"only http and https URLs can be called, not {url.scheme}:"
        elif unusual_address_notation(host):
            refusal = f"{host} is an IP address in an unusual notation, refused"
        elif is_ip_literal(host) and (reason := self.outbound.refusal(host, host)):
            refusal = (f"refused to connect to {host} ({reason}); private, loopback, "
                       "link-local and metadata addresses are blocked unless the operator "
                       "allows them (AGENTFORGE_OUTBOUND_ALLOW)")
        if refusal:
            raise ToolExecutionError(f"HTTP tool '{request.name}': {refusal}",
                                     tool_name=request.name)

    async def _read(self, request: ToolExecutionRequest, response: httpx.Response) -> str:
        """The body as text, refused past max_response_bytes (counted decompressed)."""
        cap = self.config.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise ToolExecutionError(
                        f"HTTP tool '{request.name}': the response is larger than the "
                        f"tool's limit of {cap} bytes (max_response_bytes)",
                        tool_name=request.name)
                chunks.append(chunk)
        except httpx.HTTPError as exc:  # cut off, malformed, or an undecodable encoding
            raise ToolExecutionError(
                f"HTTP tool '{request.name}': reading the response from "
                f"{response.url.host} failed: {type(exc).__name__}: {exc}",
                tool_name=request.name, cause=exc) from exc
        return b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")

    def _selected(self, request: ToolExecutionRequest, text: str) -> Any:
        pointer = self.config.response
        if pointer == "text":
            return text
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise ToolExecutionError(
                f"HTTP tool '{request.name}': the response is not JSON, so the pointer "
                f"{pointer!r} cannot be applied: {text[:ERROR_BODY_EXCERPT]}",
                tool_name=request.name) from None
        try:
            return _resolve_pointer(document, pointer)
        except LookupError:
            raise ToolExecutionError(
                f"HTTP tool '{request.name}': the response has nothing at {pointer!r}",
                tool_name=request.name) from None


class _GuardedStream:
    """client.stream(...) with transport failures turned into the tool's errors."""

    def __init__(self, client: httpx.AsyncClient, tool: str, method: str, url: httpx.URL,
                 body: Any, headers: dict[str, str]) -> None:
        self._context = client.stream(method, url, json=body, headers=headers)
        self._tool, self._url = tool, url

    async def __aenter__(self) -> httpx.Response:
        try:
            return await self._context.__aenter__()
        except httpx.HTTPError as exc:
            raise self._error(exc) from exc

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._context.__aexit__(*exc_info)

    def _error(self, exc: httpx.HTTPError) -> ToolExecutionError:
        where = f"{self._url.host}"
        if isinstance(exc, OutboundRefusedError):
            detail = str(exc)
        elif isinstance(exc, httpx.TimeoutException):
            detail = f"timed out talking to {where}"
        else:
            detail = f"could not reach {where}: {type(exc).__name__}: {exc}"
        return ToolExecutionError(f"HTTP tool '{self._tool}': {detail}",
                                  tool_name=self._tool, cause=exc)


class _DotSegment(ValueError):
    pass


def _path_segment(text: str) -> str:
    # "." and ".." would move the request to another path once normalised.
    if text in (".", ".."):
        raise _DotSegment(text)
    return quote(text, safe="")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _has(arguments: dict[str, Any], path: str) -> bool:
    try:
        lookup(arguments, path)
    except MissingArgument:
        return False
    return True


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _shown(url: httpx.URL) -> str:
    """A URL for a message: without its query, which may hold argument values."""
    return str(url.copy_with(query=None, fragment=None))


def _resolve_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: the value at `pointer` ("" is the whole document)."""
    value = document
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value[part]
        elif isinstance(value, list) and part.isdigit():
            value = value[int(part)]
        else:
            raise LookupError(pointer)
    return value
