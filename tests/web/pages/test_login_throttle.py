"""Login throttling: failed logins are counted per account and address together; past the
limit, even the right password is refused from that address until the cool-off ends,
while the account stays open from elsewhere (issue 42, finding 14)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a long and correct passphrase"


@pytest.fixture
def limit(settings: Any) -> int:
    settings.AXES_FAILURE_LIMIT = 3
    return 3


def log_in(username: str, password: str, address: str = "10.0.0.1") -> Any:
    return Client(REMOTE_ADDR=address).post(
        "/accounts/login/", {"username": username, "password": password})


def test_a_username_and_address_pair_is_locked_after_the_limit_even_for_the_right_password(
    bob: AbstractUser, limit: int,
) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    answers = [log_in("bob", f"guess {i}", "10.0.0.1").status_code for i in range(limit)]

    refused = log_in("bob", PASSWORD, "10.0.0.1")

    # The form again with its error, until the failure that reaches the limit.
    assert answers == [200] * (limit - 1) + [429]
    assert refused.status_code == 429
    assert PASSWORD not in refused.content.decode()
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_a_stranger_cannot_lock_a_known_account_out(
    bob: AbstractUser, alice: AbstractUser, limit: int,
) -> None:
    """Guesses from one address lock that address out of that account only: the owner,
    elsewhere, still logs in; so does the admin, whose name a stranger also knows."""
    for user in (bob, alice):
        user.set_password(PASSWORD)
        user.save()
    for username in ("bob", "alice"):
        for i in range(limit):
            log_in(username, f"guess {i}", "203.0.113.9")

    assert log_in("bob", PASSWORD, "203.0.113.9").status_code == 429
    assert log_in("bob", PASSWORD, "10.0.0.8").status_code == 302  # the owner, elsewhere
    assert log_in("alice", PASSWORD, "10.0.0.9").status_code == 302


def test_guesses_spread_over_addresses_do_not_add_up(bob: AbstractUser, limit: int) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    for i in range(limit):
        log_in("bob", "guess", f"10.0.1.{i}")

    assert log_in("bob", PASSWORD, "10.0.1.0").status_code == 302


def test_a_successful_login_resets_the_count(bob: AbstractUser, limit: int) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    for _ in range(limit - 1):
        log_in("bob", "guess")
    assert log_in("bob", PASSWORD).status_code == 302

    for _ in range(limit - 1):
        log_in("bob", "guess")
    assert log_in("bob", PASSWORD).status_code == 302
