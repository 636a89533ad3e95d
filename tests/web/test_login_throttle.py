"""Login throttling: failed logins are counted per account and per address; past the
limit, even the right password is refused until the cool-off ends."""

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


def test_an_account_is_locked_after_the_limit_even_for_the_right_password(
    bob: AbstractUser, limit: int,
) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    answers = [log_in("bob", f"guess {i}", f"10.0.0.{i}").status_code for i in range(limit)]

    refused = log_in("bob", PASSWORD, "10.0.9.9")

    # The form again with its error, until the failure that reaches the limit.
    assert answers == [200] * (limit - 1) + [429]
    assert refused.status_code == 429
    assert PASSWORD not in refused.content.decode()
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_an_address_is_locked_after_the_limit_whatever_the_usernames(
    bob: AbstractUser, limit: int,
) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    for i in range(limit):
        log_in(f"nobody{i}", "guess", "10.0.0.7")

    assert log_in("bob", PASSWORD, "10.0.0.7").status_code == 429
    assert log_in("bob", PASSWORD, "10.0.0.8").status_code == 302  # another address


def test_a_successful_login_resets_the_count(bob: AbstractUser, limit: int) -> None:
    bob.set_password(PASSWORD)
    bob.save()
    for _ in range(limit - 1):
        log_in("bob", "guess")
    assert log_in("bob", PASSWORD).status_code == 302

    for _ in range(limit - 1):
        log_in("bob", "guess")
    assert log_in("bob", PASSWORD).status_code == 302
