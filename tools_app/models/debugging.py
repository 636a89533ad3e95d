"""A person's part in a run: decisions on calls, re-executions, breakpoint pauses."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .runs import Run, ToolCall


class DecisionKind(models.TextChoices):
    APPROVE = "approve", "Approved"
    REJECT = "reject", "Rejected"
    EDIT = "edit", "Approved with edited arguments"


class CallDecision(models.Model):
    """A person's (or the approval timeout's) decision on a call that needed approval.
    One per call: deciding again changes nothing."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="decisions")
    tool_call = models.OneToOneField(ToolCall, on_delete=models.CASCADE,
                                     related_name="decision")
    decision = models.CharField(max_length=16, choices=DecisionKind.choices)
    arguments = models.JSONField(null=True, blank=True,
                                 help_text="The edited arguments the call ran with (edit).")
    message = models.TextField(blank=True, help_text="Why it was rejected (the model sees it).")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="call_decisions")
    decided_by_label = models.CharField(
        max_length=200, help_text="Who decided, kept if the user is deleted: a username, "
        "or 'approval timeout'.")
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["decided_at"]

    def __str__(self) -> str:
        return f"{self.decision} by {self.decided_by_label}"


class ReexecutionState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "OK"
    ARGUMENTS_ERROR = "arguments_error", "Arguments error"
    EXECUTION_ERROR = "execution_error", "Execution error"
    TIMED_OUT = "timed_out", "Timed out"


REEXECUTION_FINISHED = frozenset({ReexecutionState.SUCCEEDED, ReexecutionState.ARGUMENTS_ERROR,
                                  ReexecutionState.EXECUTION_ERROR, ReexecutionState.TIMED_OUT})


class CallReexecution(models.Model):
    """One tool call of a run executed again by a person, with the arguments they gave,
    outside the run (the run's own rounds never change): the tool as frozen in the run's
    snapshot (`tool_version_hash`), by its executor of that kind. Numbered per call."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="reexecutions")
    tool_call = models.ForeignKey(ToolCall, on_delete=models.CASCADE,
                                  related_name="reexecutions")
    number = models.PositiveIntegerField(help_text="1, 2, ... per call.")
    tool_name = models.CharField(max_length=200)
    tool_kind = models.CharField(max_length=16)
    tool_version_hash = models.CharField(max_length=64, blank=True,
                                         help_text="The definition that ran (the snapshot's).")
    arguments = models.JSONField(help_text="The arguments it ran with.")
    approved = models.BooleanField(
        default=False, help_text="The tool requires approval: the person who re-executed it "
        "approved it explicitly by doing so.")
    state = models.CharField(max_length=32, choices=ReexecutionState.choices,
                             default=ReexecutionState.PENDING)
    result_text = models.TextField(null=True, blank=True)
    result_json = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    error_type = models.CharField(max_length=200, blank=True)
    error_message = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.SET_NULL, related_name="reexecutions")
    requested_by_label = models.CharField(max_length=200,
                                          help_text="Who, kept if the user is deleted.")
    requested_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["tool_call", "-number"]
        constraints = [models.UniqueConstraint(fields=["tool_call", "number"],
                                               name="reexecution_unique_number")]

    def __str__(self) -> str:
        return f"re-execution {self.number} of call {self.tool_call_id} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in REEXECUTION_FINISHED
