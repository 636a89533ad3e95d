"""The cost sums the audit pages read: a tool's calls' and an endpoint's runs'. A cost
nobody could price is None, shown as "no price", never as $0 (models/prices.format_usd;
engine/pricing.py states how costs are computed)."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Count, QuerySet, Sum

from tools_app.models import Run, ToolCall


def calls_cost(calls: QuerySet[ToolCall]) -> tuple[Decimal | None, int]:
    """The summed cost of `calls` (None if none is priced) and how many are priced."""
    totals = calls.aggregate(cost=Sum("cost_usd"), priced=Count("cost_usd"))
    return totals["cost"], totals["priced"]


def runs_cost(runs: QuerySet[Run]) -> tuple[Decimal | None, int]:
    """The summed cost of `runs` (an endpoint's, say; None if none is priced) and how
    many are priced."""
    totals = runs.aggregate(cost=Sum("cost_usd"), priced=Count("cost_usd"))
    return totals["cost"], totals["priced"]


def tool_costs(calls: QuerySet[ToolCall]) -> dict[str, Decimal]:
    """Each tool's summed cost over the priced ones of `calls` (a tool none of whose
    calls is priced is absent: "no price"). One grouped read of the priced calls' index
    (toolcall_tool_cost), whatever the number of unpriced ones."""
    rows = (calls.order_by().filter(cost_usd__isnull=False).values("tool_name")
            .annotate(cost=Sum("cost_usd")).values_list("tool_name", "cost"))
    return {name: cost for name, cost in rows}


def endpoint_costs(runs: QuerySet[Run]) -> dict[str, tuple[Decimal | None, int]]:
    """Each endpoint's (by id as text) summed run cost over `runs` (None when none of
    its runs is priced) and its number of priced runs: one grouped read."""
    rows = (runs.order_by().filter(endpoint__isnull=False).values("endpoint")
            .annotate(cost=Sum("cost_usd"), priced=Count("cost_usd"))
            .values_list("endpoint", "cost", "priced"))
    return {str(endpoint): (cost, priced) for endpoint, cost, priced in rows}
