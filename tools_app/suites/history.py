"""A suite's history: each endpoint's pass rate in each of its suite runs, oldest first
(the suite page draws it as a chart, `web.pages.charts.pass_rate_chart`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Sum

from tools_app.models import SuiteCell


@dataclass(frozen=True)
class RatePoint:
    """One endpoint in one suite run: `passed` of its `evaluated` runs passed."""

    suite_run_id: str
    started_at: datetime
    endpoint_name: str
    passed: int
    evaluated: int

    @property
    def rate(self) -> float:
        return self.passed / self.evaluated


def suite_history(suite_runs: Any) -> list[RatePoint]:
    """The pass rate per endpoint of each of these suite runs (a queryset) that has
    evaluated runs, oldest suite run first, endpoints by name."""
    rows = (SuiteCell.objects.filter(suite_run__in=suite_runs)
            .values("suite_run_id", "suite_run__created_at", "endpoint_name")
            .annotate(passed_runs=Sum("passed"), evaluated_runs=Sum("evaluated"))
            .order_by("suite_run__created_at", "suite_run_id", "endpoint_name"))
    return [RatePoint(str(row["suite_run_id"]), row["suite_run__created_at"],
                      row["endpoint_name"], row["passed_runs"], row["evaluated_runs"])
            for row in rows if row["evaluated_runs"]]
