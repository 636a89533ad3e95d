"""Error policies (what the model is told when a tool fails, what happens when it goes
round in circles) and their revisions."""

from __future__ import annotations

from decimal import Decimal

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


class LoopAction(models.TextChoices):
    """What a loop-health detector does when it flags a round (engine/loop/health.py)."""

    NOTE = "note", "Note it in the timeline only"
    TELL_MODEL = "tell_model", "Tell the model it is repeating itself"
    STOP = "stop", "Stop the run"


LOOP_STOP_HELP = ("The run stops (LoopDetectedError) from this many on, before the round's "
                  "calls run, whatever the action above. Empty: never.")
LOOP_ACTION_HELP = "What happens from the threshold above on."


class ErrorPolicy(models.Model):
    """How a run reacts to tool errors and to a model going round in circles (loop
    health); edited in the admin, frozen into each run."""

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
    cost_cap_usd = models.DecimalField(
        "cost cap (dollars)", max_digits=12, decimal_places=4, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0.0001"))],
        help_text="A run stops (CostCapExceededError) before a model call once what it "
        "spent, plus the least that call can cost, would pass this. Needs a price for the "
        "run's model (Model prices). Empty: no cap.",
    )
    # Loop health (engine/loop/health.py): per detector, from `*_at` on the round is
    # flagged with `*_action`, from `*_stop_at` on the run stops.
    loop_repeat_at = models.PositiveSmallIntegerField(
        "repeated calls: flag at", null=True, blank=True, default=3,
        validators=[MinValueValidator(2), MaxValueValidator(100)],
        help_text="Flag a call when the run has made the same call (same tool, same "
        "arguments) this many times, this one included. Empty: never.")
    loop_repeat_action = models.CharField(
        "repeated calls: action", max_length=16, choices=LoopAction.choices,
        default=LoopAction.TELL_MODEL, help_text=LOOP_ACTION_HELP)
    loop_repeat_stop_at = models.PositiveSmallIntegerField(
        "repeated calls: stop at", null=True, blank=True, default=5,
        validators=[MinValueValidator(2), MaxValueValidator(100)], help_text=LOOP_STOP_HELP)
    loop_ping_pong_at = models.PositiveSmallIntegerField(
        "ping-pong: flag at", null=True, blank=True, default=4,
        validators=[MinValueValidator(3), MaxValueValidator(100)],
        help_text="Flag a round when this many rounds running alternate between the same "
        "two sets of calls (A, B, A, B, ...). Empty: never.")
    loop_ping_pong_action = models.CharField(
        "ping-pong: action", max_length=16, choices=LoopAction.choices,
        default=LoopAction.TELL_MODEL, help_text=LOOP_ACTION_HELP)
    loop_ping_pong_stop_at = models.PositiveSmallIntegerField(
        "ping-pong: stop at", null=True, blank=True, default=8,
        validators=[MinValueValidator(3), MaxValueValidator(100)], help_text=LOOP_STOP_HELP)
    loop_no_progress_at = models.PositiveSmallIntegerField(
        "no progress: flag at", null=True, blank=True, default=3,
        validators=[MinValueValidator(2), MaxValueValidator(100)],
        help_text="Flag a round when the rounds before it got the same results this many "
        "rounds running and the model calls tools again. Empty: never. A tool whose "
        "result never changes (an acknowledgement such as \"Success\") repeats it "
        "legitimately, so by default this is only noted.")
    loop_no_progress_action = models.CharField(
        "no progress: action", max_length=16, choices=LoopAction.choices,
        default=LoopAction.NOTE, help_text=LOOP_ACTION_HELP)
    loop_no_progress_stop_at = models.PositiveSmallIntegerField(
        "no progress: stop at", null=True, blank=True, default=None,
        validators=[MinValueValidator(2), MaxValueValidator(100)], help_text=LOOP_STOP_HELP)
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
