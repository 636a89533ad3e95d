"""One model endpoint's settings as one object, built once by whoever knows the endpoint
(the app: from a run's frozen snapshot) and handed down whole:

    build_chat_model(kind, settings) -> WireChatModel(settings)
        -> ProviderHttpClient(provider, settings) -> settings.connection() (the pool's key)

The adapters also take the same fields as keywords (`OpenAIChatModel(model="m", ...)`),
which build this object and nothing else, so the fields are declared here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import httpx

from tools_app.engine.messages import ChatRequestParameters
from tools_app.engine.outbound import OutboundPolicy
from tools_app.engine.providers.http.clients import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    EndpointConfig,
    SharedHttpClients,
    Verify,
)
from tools_app.engine.providers.http.retry import RetryPolicy


@dataclass(frozen=True, kw_only=True)
class EndpointSettings:
    """What a wire adapter needs to call one endpoint. Where the HTTP client comes from
    (`transport`, `http_client`, `clients`) is described in client.py."""

    model: str
    base_url: str | None = None
    """None or empty: the adapter's public API (`default_base_url`)."""
    api_key: str | None = None
    stream: bool = False
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    parameters: ChatRequestParameters | None = None
    """Request defaults; a request's own parameters override them."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    """Seconds to get a connection (a free one from the pool, or a new one)."""
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """Seconds of silence allowed per attempt: until the first byte, then between bytes."""
    max_retries: int | None = None
    """Overrides `retry.max_retries` (None: the policy's own)."""
    retry: RetryPolicy | None = None
    proxy: str | None = None
    """An http:// proxy URL; None: the *_PROXY environment variables decide."""
    verify: Verify = True
    """TLS trust: a CA bundle path or an SSLContext."""
    outbound: OutboundPolicy | None = None
    """Where connections may go (outbound.py); None: anywhere."""
    limits: httpx.Limits | None = None
    """The pool's size; None: DEFAULT_LIMITS."""
    transport: httpx.AsyncBaseTransport | None = None
    """Replaces aiohttp's pool outright (tests: httpx.MockTransport)."""
    http_client: httpx.AsyncClient | None = None
    clients: SharedHttpClients | None = None

    @classmethod
    def of(cls, settings: EndpointSettings | None, options: Mapping[str, object],
           ) -> EndpointSettings:
        """The settings an adapter was given: the object, or its fields as keywords."""
        if settings is None:
            return cls(**options)  # type: ignore[arg-type]
        if options:
            raise TypeError("give the endpoint's settings as one EndpointSettings or as "
                            f"keywords, not both (got {', '.join(sorted(options))})")
        return settings

    def for_provider(self, provider: str, default_base_url: str | None) -> EndpointSettings:
        """These settings with the provider's default base URL filled in; checks what
        every provider needs (a base URL and a model) and the retry count."""
        base = self.base_url or default_base_url
        if not base:
            raise ValueError(f"{provider}: base_url is required")
        if not self.model:
            raise ValueError(f"{provider}: model is required")
        if self.max_retries is not None and self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        return self if base == self.base_url else replace(self, base_url=base)

    def retry_policy(self) -> RetryPolicy:
        policy = self.retry or RetryPolicy()
        if self.max_retries is None:
            return policy
        return replace(policy, max_retries=self.max_retries)

    def connection(self) -> EndpointConfig:
        """What makes two HTTP clients interchangeable (no credentials: those are
        headers), the key of the shared client cache."""
        if not self.base_url:
            raise ValueError("the base URL is not known yet: see for_provider()")
        return EndpointConfig.of(
            self.base_url, proxy=self.proxy, connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout, limits=self.limits, verify=self.verify,
            outbound=self.outbound)


def attempt_timeouts(seconds: float) -> tuple[float, float]:
    """An endpoint's one per-attempt timeout as the HTTP client's (connect, read) limits:
    `seconds` of silence allowed before the first byte and between bytes, and at most
    that (and at most the default) to connect. httpx has no limit on an attempt's whole
    duration: a run's deadline bounds that."""
    return min(seconds, DEFAULT_CONNECT_TIMEOUT), seconds
