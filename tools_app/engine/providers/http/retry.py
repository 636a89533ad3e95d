"""The retry policy and the engine's one retry loop.

The policy is the official OpenAI/Anthropic SDKs' one: connection errors, timeouts,
408, 409, 429 and every 5xx (529 overloaded included) are retried `max_retries` times
(2 by default) after min(0.5 * 2^n, 8) s with jitter (x0.75..1.0), or after the
`retry-after-ms` / `Retry-After` the server sent when that is at most 60 s. A server
that asks for a longer pause is not retried: the error says how long it asked for.
`x-should-retry` overrides the status rule both ways, as in the SDKs (wire_errors.py).
Nothing else in the engine retries a provider call, so retries never nest.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tools_app.engine.errors import ProviderError
from tools_app.engine.providers.http.wire_errors import copy_error

DEFAULT_MAX_RETRIES = 2

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """The SDKs' retry policy; `sleep`, `random` and `clock` are test seams."""

    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    sleep: Sleep = asyncio.sleep
    random: Callable[[], float] = random.random
    clock: Callable[[], float] = time.time

    def backoff(self, retries_done: int) -> float:
        """The pause before retry number `retries_done + 1`: 0.5, 1, 2... up to 8 s."""
        delay = min(self.initial_delay * 2.0 ** min(retries_done, 1000), self.max_delay)
        return max(delay * (1 - 0.25 * self.random()), 0.0)

    def wait_before_retry(self, number: int, error: ProviderError) -> float | None:
        """The pause before another attempt after attempt `number` failed with `error`,
        or None when there is to be no other attempt."""
        if not error.retryable or number > self.max_retries:
            return None
        asked = error.retry_after
        if asked is not None and asked > self.max_retry_after:
            return None
        if asked is not None and asked > 0:
            return asked
        return self.backoff(number - 1)

    def final_error(self, provider: str, attempts: int, error: ProviderError) -> ProviderError:
        """The error raised when attempt number `attempts` failed with `error` and no
        other attempt follows: it says why."""
        asked = error.retry_after
        detail = str(error).removeprefix(f"{provider}: ")
        if error.retryable and asked is not None and asked > self.max_retry_after:
            return copy_error(
                error, f"{provider}: rate-limited or unavailable; the provider asked to "
                f"retry after {asked:g} s, more than the {self.max_retry_after:g} s this "
                f"client waits, so it was not retried (HTTP {error.status} "
                f"{detail.removeprefix(f'HTTP {error.status} ')})")
        if error.retryable and attempts > 1:
            return copy_error(
                error, f"{provider}: provider unavailable after {attempts} attempts "
                f"(last: {detail})")
        return error


class AttemptFailed(Exception):
    """One attempt failed; carries the mapped ProviderError."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


Report = Callable[[int, ProviderError, float | None], Awaitable[None]]


async def with_retries[T](
    attempt: Callable[[], Awaitable[T]], *, provider: str, policy: RetryPolicy,
    report: Report,
) -> tuple[T, int]:
    """THE retry loop: run `attempt` until it succeeds or the policy says stop. An
    attempt fails by raising AttemptFailed; every failure is `report`ed. Returns the
    result and the number of the attempt that gave it."""
    number = 0
    while True:
        number += 1
        try:
            return await attempt(), number
        except AttemptFailed as failed:
            error = failed.error
        wait = policy.wait_before_retry(number, error)
        await report(number, error, wait)
        if wait is None:
            raise policy.final_error(provider, number, error)
        await policy.sleep(wait)
