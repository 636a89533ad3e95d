"""On SQLite a tool page's chart counts calls per quarter hour of UTC in SQL and folds
them into local hours, days and weeks in Python (Django's Trunc there is a Python
function per row), or in UTC cuts the stored text to hours, days and weeks in SQL: the
buckets are the ones TruncHour / TruncDay / TruncWeek give, in any time zone, half-hour
offsets and daylight saving included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Count, F, Q
from django.db.models.functions import TruncDay, TruncHour, TruncWeek
from django.utils import timezone

from tools_app.audit.tool_stats import Bucket, _moment, _sqlite_buckets
from tools_app.models import Round, Run, ToolCall

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 1, 0, 7, tzinfo=UTC)  # spans New York's spring DST change


@pytest.fixture
def calls() -> None:
    run = Run.objects.create(title="t", snapshot={})
    Run.objects.filter(pk=run.pk).update(created_at=START)
    round_ = Round.objects.create(run=run, index=0)
    moments = [START + timedelta(minutes=97 * i) for i in range(400)]  # about 27 days
    ToolCall.objects.bulk_create(
        ToolCall(run=run, round=round_, call_index=i, call_id=f"c{i}", tool_name="t",
                 is_error=i % 7 == 0, started_at=None if i % 11 == 0 else at)
        for i, at in enumerate(moments))


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York",
                                  "Australia/Eucla"])
@pytest.mark.parametrize(("unit", "trunc"), [("hour", TruncHour), ("day", TruncDay),
                                             ("week", TruncWeek)])
def test_the_same_buckets_as_django_trunc(calls: None, zone: str, unit: str,
                                          trunc: type[TruncHour]) -> None:
    with timezone.override(zone):
        rows = (ToolCall.objects.annotate(at=_moment()).values(bucket=trunc(F("at")))
                .annotate(calls=Count("pk"), errors=Count("pk", filter=Q(is_error=True)))
                .order_by("bucket"))
        expected = [Bucket(r["bucket"], r["calls"], r["errors"]) for r in rows]
        found = _sqlite_buckets(ToolCall.objects.all(), unit)
    assert found == expected
    assert sum(b.calls for b in found) == 400
