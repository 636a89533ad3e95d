"""Bearer tokens for the JSON API: created once, shown once, stored only as SHA-256.

A token is "afw_" + 32 random bytes (urlsafe base64), so it is unguessable and a plain
(unsalted, fast) SHA-256 is enough: salting and slow hashes protect low-entropy
passwords, not random secrets, and an unsalted hash lets us look the token up by index.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from functools import partial
from typing import Any

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS
from django.db.models import QuerySet
from django.utils import timezone

from tools_app.models import ApiToken
from tools_app.runs.store.sql import prepared

TOKEN_PREFIX = "afw_"  # noqa: S105 - a public marker that makes leaked tokens greppable
PREFIX_LENGTH = 8  # what the admin shows to tell tokens apart: "afw_" + 4 characters
_MAX_TOKEN_LENGTH = 100  # a real token is 47 characters; refuse to hash junk of any size
# "Last used" is kept to the minute: writing it on every request made each API read a
# database write too (on SQLite, one more writer queueing behind the runs' events).
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def assign_new_secret(token: ApiToken) -> str:
    """Give an unsaved token a fresh secret and return its plaintext (never stored)."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.token_hash = hash_token(plaintext)
    token.prefix = plaintext[:PREFIX_LENGTH]
    return plaintext


def create_token(user: User, name: str) -> tuple[ApiToken, str]:
    token = ApiToken(user=user, name=name)
    plaintext = assign_new_secret(token)
    token.save()
    return token, plaintext


def user_for_token(plaintext: str) -> User | None:
    """The active user a token belongs to (recording its use), or None."""
    if not plaintext.startswith(TOKEN_PREFIX) or len(plaintext) > _MAX_TOKEN_LENGTH:
        return None
    digest = hash_token(plaintext)
    token = _token_with_user(digest)
    # The index lookup already matched; compare_digest keeps the final check
    # constant-time in case the lookup ever becomes case- or collation-insensitive.
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        # A queryset update: no read-modify-write race with the admin editing the name.
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def _token_with_user(digest: str) -> ApiToken | None:
    """The token with this hash and its user, in one prepared read (runs/store/sql/prepared.py):
    every API request pays for this lookup, and the ORM's join was built again each
    time. Unordered: the hash is unique."""
    user_model: Any = ApiToken._meta.get_field("user").related_model  # AUTH_USER_MODEL
    token_names = prepared.concrete_names(ApiToken)
    user_names = prepared.concrete_names(user_model)
    found = prepared.rows("api_token_with_user", partial(_token_row, token_names, user_names),
                          digest)
    if not found:
        return None
    row = found[0]
    token = ApiToken.from_db(DEFAULT_DB_ALIAS, token_names, row[:len(token_names)])
    token.user = user_model.from_db(DEFAULT_DB_ALIAS, user_names, row[len(token_names):])
    return token


def _token_row(token_names: tuple[str, ...], user_names: tuple[str, ...],
               digest: str) -> QuerySet[ApiToken, Any]:
    picked: QuerySet[ApiToken, Any] = ApiToken.objects.filter(token_hash=digest).order_by(
    ).values_list(*token_names, *(f"user__{name}" for name in user_names))
    return picked
