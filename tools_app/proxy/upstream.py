"""Where a proxied request goes: a registered endpoint of a kind that speaks the client's
format, called with the endpoint's own key.

The endpoint is frozen and built as a run's would be (`chat_model_for`: its key read
from the environment variable it names, extra headers and proxy read the same way,
the outbound policy, the process's shared HTTP clients), so the proxy reaches only
what runs may reach and shares their connection pools. The built adapter is kept per
endpoint version: its parsers assemble responses, its HTTP client sends the client's
body unchanged with the endpoint's credentials in place of the client's.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import httpx
from django.db.models import Q

from tools_app.engine.providers.adapter import WireChatModel
from tools_app.models import ModelEndpoint
from tools_app.proxy.dialects import Dialect
from tools_app.runs.snapshot.engine import chat_model_for
from tools_app.runs.snapshot.frozen import endpoint_section

# Client headers that say which version of the API the client speaks: passed on.
PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")
# Response headers never passed back: the connection's own, and what the proxy re-does.
DROPPED_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding",
                             "content-length", "content-encoding", "set-cookie", "server",
                             "date", "proxy-authenticate", "upgrade", "trailer", "te"})


@dataclass(frozen=True)
class Target:
    endpoint_id: str
    endpoint_name: str
    kind: str
    adapter: WireChatModel
    secrets: tuple[str, ...]
    """The endpoint's secret values (key, secret headers, proxy): redacted from records."""


class EndpointUnusable(Exception):
    """The endpoint cannot be called (its key's variable unset or not allowed...)."""


_TARGETS: dict[tuple[str, datetime], Target] = {}
_LOCK = threading.Lock()


def find_endpoint(reference: str, dialect: Dialect) -> ModelEndpoint | None:
    """The registered endpoint named `reference` (or with that id) that speaks `dialect`."""
    match = Q(name=reference)
    with contextlib.suppress(ValueError):  # not an id: the name alone
        match |= Q(pk=uuid.UUID(reference))
    return ModelEndpoint.objects.filter(match, kind__in=dialect.kinds).first()


def target_for(endpoint: ModelEndpoint) -> Target:
    """The endpoint built for calling, once per version of its row."""
    key = (str(endpoint.pk), endpoint.updated_at)
    with _LOCK:
        found = _TARGETS.get(key)
    if found is not None:
        return found
    section = endpoint_section(endpoint)
    # The client names the model; the adapter needs one to be built.
    section = section.model_copy(update={"model": section.model or "proxied"})
    try:
        adapter, secrets = chat_model_for(section, max_retries=0)
    except Exception as exc:  # ImproperlyConfigured, ValueError: told to the client
        raise EndpointUnusable(str(exc)) from exc
    if not isinstance(adapter, WireChatModel):
        raise EndpointUnusable(f"endpoint {endpoint.name!r} is not an HTTP provider")
    target = Target(endpoint_id=str(endpoint.pk), endpoint_name=endpoint.name,
                    kind=endpoint.kind, adapter=adapter, secrets=secrets)
    with _LOCK:
        for old in [k for k in _TARGETS if k[0] == key[0]]:
            del _TARGETS[old]  # an older version of the row
        _TARGETS[key] = target
    return target


async def send(target: Target, dialect: Dialect, body: bytes, *, stream: bool,
               client_headers: Mapping[str, str]) -> httpx.Response:
    """The client's body sent to the endpoint; the response open, its body unread."""
    http = target.adapter.http
    headers = http.request_headers(stream=stream)
    for name in PASSED_HEADERS:
        if name in client_headers:
            headers[name] = client_headers[name]
    client = http.client()
    request = client.build_request("POST", _parsed(http.url(dialect.path)), content=body,
                                   headers=headers)
    return await client.send(request, stream=True)


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> httpx.URL:
    """An endpoint's URL parsed once (httpx parses a string URL at every request)."""
    return httpx.URL(url)


def passed_back(headers: httpx.Headers) -> list[tuple[str, str]]:
    """The provider's response headers the client gets."""
    return [(k, v) for k, v in headers.multi_items() if k.lower() not in DROPPED_HEADERS]
