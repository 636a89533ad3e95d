"""first_login_hint: how to log in the first time, without ever creating a user."""

import io
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def hint() -> str:
    out = io.StringIO()
    call_command("first_login_hint", stdout=out)
    return out.getvalue()


def test_without_a_superuser_it_prints_the_createsuperuser_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PORT", raising=False)
    output = hint()

    assert "    DEBUG=1 .venv/bin/python manage.py createsuperuser\n" in output
    assert ".venv/bin/python manage.py createsuperuser --noinput" in output
    for variable in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD",
                     "DJANGO_SUPERUSER_EMAIL"):
        assert f"{variable}=" in output
    assert "http://127.0.0.1:8000/" in output
    assert not get_user_model().objects.exists()


def test_a_plain_user_is_not_enough(bob: AbstractUser) -> None:
    assert "createsuperuser" in hint()
    assert get_user_model().objects.count() == 1


def test_with_a_superuser_it_only_says_where_to_log_in(
    alice: AbstractUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PORT", raising=False)
    assert hint() == "Log in at http://127.0.0.1:8000/ (admin: http://127.0.0.1:8000/admin/).\n"


def test_the_url_uses_the_port_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "9123")
    assert "http://127.0.0.1:9123/" in hint()
    assert ":8000" not in hint()


def test_the_printed_placeholders_pasted_unedited_create_no_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No default password ships: running the --noinput line without filling it in fails.
    values = dict(re.findall(r"(DJANGO_SUPERUSER_\w+)='([^']*)'", hint()))
    assert set(values) == {"DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD",
                           "DJANGO_SUPERUSER_EMAIL"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError):
        call_command("createsuperuser", interactive=False, stdout=io.StringIO(),
                     stderr=io.StringIO())
    assert not get_user_model().objects.exists()


@pytest.mark.parametrize("debug", [True, False])
def test_it_says_clearly_when_debug_is_on(settings: Any, debug: bool) -> None:
    settings.DEBUG = debug
    assert ("DEBUG is on" in hint()) is debug
