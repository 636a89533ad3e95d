"""Model prices, with their revisions: every save writes the price as it is from then on
(a `PriceRevision`), which the runs started after it freeze and price their rounds with."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..models import ModelPrice, PriceRevision
from ..models.prices import PRICE_FIELDS
from .audit import ReadOnlyAdmin
from .revisions import WHAT_CHANGED, WHEN, WHO, Column, describe_changes, revision_history

NUMBER = Column("Revision", lambda r: f"#{r.pk}")  # what a run's cost names


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin[ModelPrice]):
    list_display = ("endpoint", "model", "input_per_million", "cached_input_per_million",
                    "output_per_million", "current_revision", "updated_at")
    list_filter = ("endpoint",)
    search_fields = ("endpoint__name", "model")
    list_select_related = ("endpoint",)
    readonly_fields = ("revision_history", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("endpoint", "model"),
                "description": "Dollars per million tokens. A run started from now on "
                               "uses this price for every round; runs started before keep "
                               "the revision they used."}),
        ("Price per million tokens", {"fields": PRICE_FIELDS}),
        ("History", {"fields": ("revision_history", "created_at", "updated_at")}),
    )

    def save_model(self, request: HttpRequest, obj: ModelPrice,
                   form: forms.ModelForm[ModelPrice], change: bool) -> None:
        # Inside the admin's transaction: the price and its revision together.
        before = ModelPrice.objects.select_for_update().get(pk=obj.pk).values() if change else None
        super().save_model(request, obj, form, change)
        obj.record_revision(before, request.user if request.user.is_authenticated else None)

    @admin.display(description="revision")
    def current_revision(self, obj: ModelPrice) -> str:
        latest = obj.revisions.order_by("-id").first()
        return f"#{latest.pk}" if latest else "—"

    @admin.display(description="Change history")
    def revision_history(self, obj: ModelPrice) -> str:
        return revision_history(obj, (NUMBER, WHEN, WHO, WHAT_CHANGED), "price")


@admin.register(PriceRevision)
class PriceRevisionAdmin(ReadOnlyAdmin[PriceRevision]):
    list_display = ("id", "price", "input_per_million", "cached_input_per_million",
                    "output_per_million", "changed_by", "changed_at", "summary")
    list_filter = ("price", "changed_by")
    search_fields = ("price__endpoint__name", "price__model")
    list_select_related = ("price__endpoint", "changed_by")

    @admin.display(description="what changed")
    def summary(self, obj: PriceRevision) -> str:
        return describe_changes(obj.changes)
