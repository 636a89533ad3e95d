"""API tokens: a new token's secret shown once, never stored in the clear."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from tools_app.web.api.tokens import assign_new_secret

from ..models import (
    ApiToken,
)
from .policies import FieldGroups


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at")
    list_filter = ("created_at", "last_used_at")
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> FieldGroups:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix", "created_at", "last_used_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        # Moving a token to another user would hand them a credential: issue a new one.
        return [] if obj is None else ["user", "prefix", "created_at", "last_used_at"]

    def save_model(
        self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm[ApiToken], change: bool
    ) -> None:
        plaintext = None if change else assign_new_secret(obj)
        super().save_model(request, obj, form, change)
        if plaintext is not None:
            messages.success(
                request, f"Copy the token now, it will not be shown again: {plaintext}"
            )
