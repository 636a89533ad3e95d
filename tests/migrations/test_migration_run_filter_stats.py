"""PostgreSQL keeps statistics on the runs' snapshot as text (migration
`0016_auditscale2_run_filter_stats`), so the `tool_version` filter is planned from how
many runs hold a version, not from a guess."""

from __future__ import annotations

import pytest
from django.db import connection


@pytest.mark.scaleout  # PostgreSQL only: SQLite reads the newest runs first whatever it estimates
@pytest.mark.django_db
def test_the_snapshot_text_has_statistics_on_postgresql() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_statisticsobjdef(oid) FROM pg_statistic_ext "
                       "WHERE stxname = 'tools_app_run_snapshot_text'")
        [(definition,)] = cursor.fetchall()
    assert "snapshot::text" in definition.replace("(snapshot)", "snapshot")
    assert "tools_app_run" in definition
