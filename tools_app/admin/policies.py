"""Error policies, validated as runs validate their overrides, with a change history."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from tools_app.runs.snapshot.policy import LOOP_DETECTORS, loop_problems, template_problem

from ..models import (
    ErrorPolicy,
    PolicyRevision,
)
from .audit import ReadOnlyAdmin
from .revisions import WHAT_CHANGED, WHEN, WHO, describe_changes, revision_history

POLICY_FIELDS = tuple(
    f.name for f in ErrorPolicy._meta.concrete_fields if f.editable and not f.primary_key
)
LOOP_FIELDS = tuple(f"loop_{detector}_{end}" for detector in LOOP_DETECTORS
                    for end in ("at", "action", "stop_at"))


class ErrorPolicyForm(forms.ModelForm[ErrorPolicy]):
    class Meta:
        model = ErrorPolicy
        fields = POLICY_FIELDS

    def clean_arguments_error_template(self) -> str:
        return self._clean_template("arguments_error_template")

    def clean_execution_error_template(self) -> str:
        return self._clean_template("execution_error_template")

    def _clean_template(self, field: str) -> str:
        template: str = self.cleaned_data[field]
        if problem := template_problem(template):
            raise ValidationError(problem)
        return template

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if cleaned.get("max_concurrency") is not None and cleaned.get("parallel") is False:
            self.add_error(
                "max_concurrency",
                "Only meaningful when calls run in parallel: turn parallel on or clear this.",
            )
        for field, problem in loop_problems(cleaned).items():
            self.add_error(field, problem[:1].upper() + problem[1:] + ".")
        return cleaned


def policy_values(policy: ErrorPolicy) -> dict[str, Any]:
    """The policy's values as a revision records them (JSON: the cost cap's decimal as
    its text)."""
    return {name: _json_value(getattr(policy, name)) for name in POLICY_FIELDS}


def _json_value(value: Any) -> Any:
    return f"{value.normalize():f}" if isinstance(value, Decimal) else value


def policy_changes(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, list[Any]]:
    """field -> [old, new] for what differs; a creation (before None) records everything."""
    if before is None:
        return {name: [None, value] for name, value in after.items()}
    return {name: [before[name], value] for name, value in after.items()
            if before[name] != value}


@admin.register(ErrorPolicy)
class ErrorPolicyAdmin(admin.ModelAdmin[ErrorPolicy]):
    form = ErrorPolicyForm
    list_display = ("name", "is_default", "arguments_error", "execution_error",
                    "hallucinated_tool", "max_round_trips", "default_tool_timeout", "parallel",
                    "max_concurrency", "provider_max_retries", "run_timeout_seconds",
                    "cost_cap_usd", "updated_at")
    list_filter = ("is_default", "arguments_error", "execution_error", "hallucinated_tool",
                   "parallel")
    search_fields = ("name",)
    readonly_fields = ("revision_history", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": [name for name in POLICY_FIELDS if name not in LOOP_FIELDS]}),
        ("Loop health", {
            "description": "A model that calls the same tool with the same arguments again "
                           "and again, alternates between two calls, or keeps calling while "
                           "every result says the same thing. Each check flags a round from "
                           "its first threshold on (noted in the run's timeline, or also "
                           "told to the model in that call's result) and stops the run "
                           "from its stop threshold on.",
            "fields": [(f"loop_{detector}_at", f"loop_{detector}_action",
                        f"loop_{detector}_stop_at") for detector in LOOP_DETECTORS]}),
        ("History", {"fields": ("revision_history", "created_at", "updated_at")}),
    )

    def save_model(
        self, request: HttpRequest, obj: ErrorPolicy, form: forms.ModelForm[ErrorPolicy],
        change: bool
    ) -> None:
        # The admin runs this inside a transaction: the policy, its revision and the
        # demotion of the previous default are saved together or not at all.
        before = (policy_values(ErrorPolicy.objects.select_for_update().get(pk=obj.pk))
                  if change else None)
        super().save_model(request, obj, form, change)
        user = request.user if request.user.is_authenticated else None
        if changes := policy_changes(before, policy_values(obj)):
            PolicyRevision.objects.create(policy=obj, changed_by=user, changes=changes)
        if obj.is_default:
            for other in ErrorPolicy.objects.filter(is_default=True).exclude(pk=obj.pk):
                other.is_default = False
                other.save(update_fields=["is_default", "updated_at"])
                PolicyRevision.objects.create(
                    policy=other, changed_by=user, changes={"is_default": [True, False]}
                )

    @admin.display(description="Change history")
    def revision_history(self, obj: ErrorPolicy) -> str:
        return revision_history(obj, (WHEN, WHO, WHAT_CHANGED), "policy")


@admin.register(PolicyRevision)
class PolicyRevisionAdmin(ReadOnlyAdmin[PolicyRevision]):
    list_display = ("policy", "changed_by", "changed_at", "summary")
    list_filter = ("policy", "changed_by")
    search_fields = ("policy__name",)
    list_select_related = ("policy", "changed_by")

    @admin.display(description="what changed")
    def summary(self, obj: PolicyRevision) -> str:
        return describe_changes(obj.changes)


# -- API tokens ------------------------------------------------------------------------

# What ModelAdmin.get_fields returns: field names, or groups of names shown on one line
# (spelled out because a list[str] is not a list of that union).
FieldGroups = list[str | list[str] | tuple[str, ...]]
