"""What an endpoint's model costs: a price per endpoint and model, and its revisions.

Every save of a price in the admin writes a `PriceRevision` holding the whole price as
it is from then on. A run freezes the revision in force when it is started into its
snapshot (`runs/snapshot/frozen.price_section`) and prices each of its rounds with it,
recording the revision on the round: a later edit makes a new revision and changes no
recorded cost.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from .endpoints import ModelEndpoint

PER_MILLION_HELP = "Dollars per million tokens."
PRICE_FIELDS = ("input_per_million", "cached_input_per_million", "output_per_million")


def _per_million(verbose_name: str, *, null: bool = False, help_text: str = PER_MILLION_HELP
                 ) -> models.DecimalField[Any, Any]:
    return models.DecimalField(
        verbose_name, max_digits=12, decimal_places=6, null=null, blank=null,
        validators=[MinValueValidator(Decimal(0))], help_text=help_text)


NO_PRICE = "no price"


def format_usd(value: Decimal | None) -> str:
    """"$0.0026", "$1.50", "$0.00"; "no price" for None. Cents at least, then as many
    digits as the amount has (up to the stored 8)."""
    if value is None:
        return NO_PRICE
    exact = value.normalize()
    exponent = exact.as_tuple().exponent
    places = -exponent if isinstance(exponent, int) else 0
    shown = exact if places > 2 else value.quantize(Decimal("0.01"))
    sign = "-" if shown < 0 else ""
    return f"{sign}${abs(shown):f}"


def format_delta_usd(value: Decimal | None) -> str:
    """A difference of two costs: "+$0.0010", "-$0.50", "$0.00"; "no price" for None."""
    if value is None or value == 0:
        return format_usd(value)
    return ("+" if value > 0 else "") + format_usd(value)


def export_usd(value: Decimal | None) -> str | None:
    """A cost in an export: its exact decimal text, or None (an empty CSV cell, JSON
    null) when unpriced."""
    return None if value is None else f"{value:f}"


class ModelPrice(models.Model):
    """The current price of one model on one endpoint (an empty model: the endpoint's own
    model, whatever it is set to)."""

    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.CASCADE, related_name="prices")
    model = models.CharField(
        max_length=200, blank=True,
        help_text="The model the price is for, as a run names it (a run's model_name "
        "parameter, else the endpoint's model). Empty: the endpoint's model.")
    input_per_million = _per_million("input")
    cached_input_per_million = _per_million(
        "cached input", null=True,
        help_text="Dollars per million input tokens read from the provider's prompt cache. "
        "Empty: priced as input.")
    output_per_million = _per_million("output")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["endpoint__name", "model"]
        constraints = [models.UniqueConstraint(fields=["endpoint", "model"],
                                               name="modelprice_unique_model")]

    def __str__(self) -> str:
        return f"{self.endpoint} · {self.model or 'its model'}"

    def values(self) -> dict[str, str | None]:
        """What a revision records, as JSON (decimals as strings: exact)."""
        return {name: _text(getattr(self, name))
                for name in ("endpoint_id", "model", *PRICE_FIELDS)}

    def record_revision(self, before: dict[str, str | None] | None,
                        changed_by: Any = None) -> PriceRevision | None:
        """After a save: a revision holding the price as it is now, if it changed since
        `before` (its `values()` then; None for a new price). The admin calls this in
        its save's transaction."""
        after = self.values()
        changes = ({name: [None, value] for name, value in after.items()} if before is None
                   else {name: [before.get(name), value] for name, value in after.items()
                         if before.get(name) != value})
        if not changes:
            return None
        return PriceRevision.objects.create(
            price=self, changed_by=changed_by, changes=changes,
            **{name: getattr(self, name) for name in PRICE_FIELDS})


def _text(value: Any) -> str | None:
    """A value as a revision records it: a decimal as its shortest exact text ("2.5"
    whether read back as 2.500000 or typed as 2.5), so an unchanged price is no change."""
    if value is None:
        return None
    return f"{value.normalize():f}" if isinstance(value, Decimal) else str(value)


class PriceRevision(models.Model):
    """A price as it was from `changed_at` on, who set it, and what changed: the rows
    runs and rounds point to (never edited)."""

    price = models.ForeignKey(ModelPrice, on_delete=models.CASCADE, related_name="revisions")
    input_per_million = _per_million("input")
    cached_input_per_million = _per_million("cached input", null=True)
    output_per_million = _per_million("output")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    changed_at = models.DateTimeField(auto_now_add=True)
    changes = models.JSONField(default=dict, help_text="field -> [old, new]")

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"price revision {self.pk} of {self.price}"
