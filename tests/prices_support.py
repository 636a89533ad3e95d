"""Prices for tests: set as the admin sets them (each save a revision)."""

from __future__ import annotations

from decimal import Decimal

from tools_app.models import ModelEndpoint, ModelPrice, PriceRevision


def set_price(endpoint: ModelEndpoint, *, input_per_million: str, output_per_million: str,
              cached_input_per_million: str | None = None, model: str = "") -> PriceRevision:
    """The endpoint's price (for `model`, blank: its own), saved with its new revision."""
    price = ModelPrice.objects.filter(endpoint=endpoint, model=model).first()
    before = price.values() if price is not None else None
    price = price or ModelPrice(endpoint=endpoint, model=model)
    price.input_per_million = Decimal(input_per_million)
    price.output_per_million = Decimal(output_per_million)
    price.cached_input_per_million = (None if cached_input_per_million is None
                                      else Decimal(cached_input_per_million))
    price.save()
    revision = price.record_revision(before)
    assert revision is not None, "the price did not change"
    return revision
