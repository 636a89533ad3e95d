"""What every proxied request looks up, kept per process for a few seconds: the user an
API token belongs to, and the endpoint a path names (built for calling, `Target`).

Only found answers are kept (a token or endpoint created a moment ago works at once;
junk tokens cannot fill the cache). A kept answer is dropped when its row changes:
saving or deleting a token, a user or an endpoint in this process clears the cache at
once (signals); a change made elsewhere (another process, a queryset update) is seen
within `TTL_SECONDS`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models.signals import post_delete, post_save

from tools_app.models import ApiToken, ModelEndpoint
from tools_app.proxy.upstream import Target

TTL_SECONDS = 5.0
MAX_ENTRIES = 10_000  # past this the cache starts over rather than grow without bound


class _Expiring[K, V]:
    """A dict whose entries are forgotten `TTL_SECONDS` after they were kept."""

    def __init__(self) -> None:
        self._entries: dict[K, tuple[V, float]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if _now() >= expires:
            with self._lock:
                self._entries.pop(key, None)
            return None
        return value

    def keep(self, key: K, value: V) -> None:
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (value, _now() + TTL_SECONDS)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_USERS: _Expiring[str, User] = _Expiring()
_TARGETS: _Expiring[tuple[str, str], Target] = _Expiring()


def _now() -> float:
    return time.monotonic()


def _token_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()  # the plaintext is not kept


def cached_user(token: str) -> User | None:
    return _USERS.get(_token_key(token))


def keep_user(token: str, user: User) -> None:
    _USERS.keep(_token_key(token), user)


def cached_target(reference: str, dialect_name: str) -> Target | None:
    return _TARGETS.get((reference, dialect_name))


def keep_target(reference: str, dialect_name: str, target: Target) -> None:
    _TARGETS.keep((reference, dialect_name), target)


def forget_users(**_: Any) -> None:
    _USERS.clear()


def forget_targets(**_: Any) -> None:
    _TARGETS.clear()


def _connect() -> None:
    for model in (ApiToken, get_user_model()):
        post_save.connect(forget_users, sender=model, dispatch_uid=f"proxy-users-{model}")
        post_delete.connect(forget_users, sender=model, dispatch_uid=f"proxy-users-d-{model}")
    post_save.connect(forget_targets, sender=ModelEndpoint, dispatch_uid="proxy-targets")
    post_delete.connect(forget_targets, sender=ModelEndpoint, dispatch_uid="proxy-targets-d")


_connect()
