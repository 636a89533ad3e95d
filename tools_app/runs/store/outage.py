"""Living through a database outage: the errors that mean the database is gone, a
capped, jittered backoff between attempts, and a log that says so once when the
outage starts and once when it ends (not once per failed attempt)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError

# What Django raises when the database cannot be reached or a connection broke (a
# restart, a failover, pg_terminate_backend, a refused connection, a pool timeout).
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

FIRST_DELAY = 0.5
MAX_DELAY = 10.0


class Backoff:
    """Delays between attempts: FIRST_DELAY doubling up to MAX_DELAY, each drawn between
    half and all of that step ("equal jitter"), so workers that lost the database
    together do not all come back in the same instant."""

    def __init__(self, first: float = FIRST_DELAY, cap: float = MAX_DELAY,
                 rand: Callable[[], float] = random.random) -> None:
        self._first = first
        self._cap = cap
        self._rand = rand
        self._attempts = 0

    def next_delay(self) -> float:
        step: float = min(self._cap, self._first * 2.0 ** min(self._attempts, 32))
        self._attempts += 1
        return step / 2 + self._rand() * step / 2

    def reset(self) -> None:
        self._attempts = 0


class Outage:
    """One component's view of the database: `failed` at each failed attempt (logs a
    warning at the first only, returns the delay to wait before the next attempt),
    `succeeded` at each success (logs once that the database is back)."""

    def __init__(self, logger: logging.Logger, what: str, backoff: Backoff | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._what = what
        self._backoff = backoff or Backoff()
        self._clock = clock
        self._since: float | None = None
        self._failures = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> float:
        if self._since is None:
            self._since = self._clock()
            self._logger.warning("%s: the database is unavailable (%s: %s); retrying with "
                                 "backoff until it is back", self._what, type(exc).__name__,
                                 str(exc).strip() or "no message")
        self._failures += 1
        return self._backoff.next_delay()

    def succeeded(self) -> None:
        if self._since is None:
            return
        self._logger.info("%s: the database is back after %.1f s (%d failed attempt(s))",
                          self._what, self._clock() - self._since, self._failures)
        self._since = None
        self._failures = 0
        self._backoff.reset()
