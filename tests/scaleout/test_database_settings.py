"""PostgreSQL as the scale-out configuration connects: parameters bound by the server
(not quoted into the SQL in Python), statements unnamed (no prepared-plan reuse, so
each is planned with its values), connections from a pool."""

from __future__ import annotations

import pytest
from django.db import connection
from psycopg import ClientCursor

from tools_app.models import Run

pytestmark = [pytest.mark.scaleout, pytest.mark.django_db]


def test_parameters_are_bound_by_the_server_and_nothing_is_prepared() -> None:
    with connection.cursor() as cursor:
        assert not isinstance(cursor.cursor, ClientCursor)
        cursor.execute("SELECT count(*) FROM tools_app_run WHERE status = %s", ["queued"])
        assert cursor.fetchone() == (Run.objects.filter(status="queued").count(),)
    assert connection.connection is not None
    assert connection.connection.prepare_threshold is None
    assert connection.pool is not None
