"""The named users of the web-layer tests: alice (staff superuser), bob and charlie
(plain users). tests/conftest.py registers this module for every test (pytest_plugins).

No passwords: tests log in with force_login, which also skips the deliberately slow
password hasher.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client


@pytest.fixture
def alice(db: None) -> AbstractUser:
    user: AbstractUser = get_user_model().objects.create_user(
        "alice", "alice@example.com", is_staff=True, is_superuser=True
    )
    return user


@pytest.fixture
def bob(db: None) -> AbstractUser:
    user: AbstractUser = get_user_model().objects.create_user("bob", "bob@example.com")
    return user


@pytest.fixture
def alice_client(client: Client, alice: AbstractUser) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def charlie(db: None) -> AbstractUser:
    user: AbstractUser = get_user_model().objects.create_user("charlie", "charlie@example.com")
    return user


@pytest.fixture
def bob_client(bob: AbstractUser) -> Client:
    client = Client()
    client.force_login(bob)
    return client
