"""The connection an async test's ORM call opens on asgiref's shared thread is closed
by the helper the root conftest runs after every test (else it outlives the test, and
the PostgreSQL pass's test database cannot be dropped at its end)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests import async_orm_thread

pytestmark = [pytest.mark.both, pytest.mark.django_db(transaction=True)]


async def test_an_async_orm_call_opens_a_connection_the_helper_closes() -> None:
    await User.objects.acount()
    assert async_orm_thread.has_open_connection()

    async_orm_thread.close_connections()

    assert not async_orm_thread.has_open_connection()
