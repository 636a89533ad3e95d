"""API tokens: random, shown once, stored only as SHA-256, and looked up by that hash."""

import hashlib
import io
from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from tools_app.models import ApiToken
from tools_app.web.api.tokens import create_token, user_for_token

pytestmark = pytest.mark.django_db


def test_a_token_is_prefixed_random_and_stored_only_as_its_hash(alice: AbstractUser) -> None:
    token, plaintext = create_token(alice, "laptop")

    assert plaintext.startswith("afw_")
    assert len(plaintext) == 4 + 43  # 32 random bytes in urlsafe base64
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.token_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert stored.prefix == plaintext[:8]
    assert (stored.name, stored.user) == ("laptop", alice)
    assert plaintext not in str(model_to_dict(stored, exclude=[])) + str(stored)


def test_two_tokens_are_different(alice: AbstractUser) -> None:
    assert create_token(alice, "a")[1] != create_token(alice, "b")[1]


def test_a_token_identifies_its_user_and_records_its_use(
    alice: AbstractUser, bob: AbstractUser
) -> None:
    token, plaintext = create_token(bob, "ci")
    create_token(alice, "other")
    assert token.last_used_at is None

    assert user_for_token(plaintext) == bob

    token.refresh_from_db()
    assert token.last_used_at is not None


def test_last_used_is_written_at_most_once_a_minute(bob: AbstractUser) -> None:
    """A token in constant use costs no write per request."""
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    token, plaintext = create_token(bob, "ci")
    assert user_for_token(plaintext) == bob
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None

    with CaptureQueriesContext(connection) as queries:
        assert user_for_token(plaintext) == bob
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]

    type(token).objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    assert user_for_token(plaintext) == bob
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert token.last_used_at > first - timedelta(minutes=2)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # one character off
        lambda t: t.upper(),
        lambda t: t[4:],  # without the prefix
        lambda t: t + "x" * 100,  # oversized
        lambda t: "",
        lambda t: hashlib.sha256(t.encode()).hexdigest(),  # the stored hash is no token
    ],
)
def test_anything_but_the_exact_token_is_refused(
    alice: AbstractUser, mangle: Callable[[str], str]
) -> None:
    token, plaintext = create_token(alice, "laptop")
    assert user_for_token(mangle(plaintext)) is None
    token.refresh_from_db()
    assert token.last_used_at is None


def test_a_token_of_an_inactive_user_is_refused(bob: AbstractUser) -> None:
    _, plaintext = create_token(bob, "ci")
    bob.is_active = False
    bob.save()
    assert user_for_token(plaintext) is None


def test_the_command_prints_a_working_token_once(alice: AbstractUser) -> None:
    out = io.StringIO()
    call_command("create_api_token", "alice", "--name", "deploy", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "Token 'deploy' for alice (shown only once):"
    [plaintext] = [line for line in lines if line.startswith("afw_")]
    assert user_for_token(plaintext) == alice
    assert ApiToken.objects.get().name == "deploy"


def test_the_command_names_the_token_cli_by_default(bob: AbstractUser) -> None:
    call_command("create_api_token", "bob", stdout=io.StringIO())
    assert ApiToken.objects.get(user=bob).name == "cli"


def test_the_command_refuses_an_unknown_user() -> None:
    with pytest.raises(CommandError, match="No user named 'carol'"):
        call_command("create_api_token", "carol", stdout=io.StringIO())
    assert not ApiToken.objects.exists()


def test_the_command_refuses_an_empty_name(alice: AbstractUser) -> None:
    with pytest.raises(CommandError, match="--name must be 1-100 characters"):
        call_command("create_api_token", "alice", "--name", " ", stdout=io.StringIO())
