"""Error policies (what the model is told when a tool fails) and their revisions."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class ArgumentsErrorMode(models.TextChoices):
    RETHROW = "rethrow", "Stop the run (default)"
    TO_MODEL = "to_model", "Send a message to the model"


class ExecutionErrorMode(models.TextChoices):
    TO_MODEL = "to_model", "Send a message to the model (default)"
    RETHROW = "rethrow", "Stop the run"


class HallucinatedToolMode(models.TextChoices):
    RAISE = "raise", "Stop the run (default)"
    TELL_MODEL = "tell_model", "Tell the model which tools exist"


class ErrorPolicy(models.Model):
    """How a run reacts to tool errors; edited in the admin, frozen into each run."""

    name = models.CharField(max_length=100, unique=True)
    arguments_error = models.CharField(
        max_length=16, choices=ArgumentsErrorMode.choices, default=ArgumentsErrorMode.RETHROW
    )
    arguments_error_template = models.TextField(
        default="Invalid arguments for tool '{tool}': {error}. Fix them and call it again.",
        help_text="Placeholders: {tool}, {error}, {arguments}.",
    )
    execution_error = models.CharField(
        max_length=16, choices=ExecutionErrorMode.choices, default=ExecutionErrorMode.TO_MODEL
    )
    execution_error_template = models.TextField(
        default="{error}", help_text="Placeholders: {tool}, {error}, {arguments}."
    )
    hallucinated_tool = models.CharField(
        max_length=16, choices=HallucinatedToolMode.choices, default=HallucinatedToolMode.RAISE
    )
    max_round_trips = models.PositiveIntegerField(
        default=100, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    default_tool_timeout = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001), MaxValueValidator(3600)],
        help_text="Seconds; empty means no timeout unless the tool sets one.",
    )
    parallel = models.BooleanField(default=True, help_text="Run one round's calls concurrently.")
    max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(256)]
    )
    provider_max_retries = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(10)]
    )
    run_timeout_seconds = models.FloatField(
        "run deadline (seconds)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(86400)],
        help_text="A run still going this long after a worker took it up fails as "
        "RunTimeout (time waiting for a person is not counted). Empty: no deadline.",
    )
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "error policies"

    def __str__(self) -> str:
        return self.name


class PolicyRevision(models.Model):
    """Who changed which policy values, when, from what to what."""

    policy = models.ForeignKey(ErrorPolicy, on_delete=models.CASCADE, related_name="revisions")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(auto_now_add=True)
    changes = models.JSONField(default=dict, help_text="field -> [old, new]")

    class Meta:
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.policy} changed {self.changed_at:%Y-%m-%d %H:%M}"
