"""Test suites: named sets of cases (a starting conversation, the tools offered, the
assertions on what happens), and suite runs: every case on every endpoint, repeated, each
execution an ordinary run linked to its cell (tools_app/suites/)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from .endpoints import ModelEndpoint
from .runs import Run


class Suite(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="suites")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SuiteCase(models.Model):
    """One case. `messages` are in OpenAI's chat format (as the playground takes them),
    `tools` registered tool names, `assertions` the suites' assertion union as JSON,
    `tool_modes` a mode per tool (live, recorded, mock) where the default is not wanted."""

    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="cases")
    name = models.CharField(max_length=100)
    position = models.PositiveIntegerField(default=0)
    messages = models.JSONField(default=list)
    tools = models.JSONField(default=list)
    assertions = models.JSONField(default=list)
    tool_modes = models.JSONField(default=dict, blank=True)
    source_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+",
                                   help_text="The run the case was saved from: its "
                                   "recording answers recorded tools.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["suite", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["suite", "name"],
                                               name="suite_case_name_unique")]

    def __str__(self) -> str:
        return f"{self.suite.name} / {self.name}"


class SuiteRunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed"


class SuiteRun(models.Model):
    """One execution of a suite. `config` holds what it was asked (endpoints, repeat,
    tool modes, concurrency, the pass-rate bar) as the suite runner's settings model."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="runs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="suite_runs")
    status = models.CharField(max_length=16, choices=SuiteRunStatus.choices,
                              default=SuiteRunStatus.RUNNING)
    config = models.JSONField(default=dict)
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.suite.name} run of {self.created_at:%Y-%m-%d %H:%M}"

    @property
    def is_active(self) -> bool:
        return self.status == SuiteRunStatus.RUNNING


class SuiteCell(models.Model):
    """A case on an endpoint: `repeat` runs; `passed` of the `evaluated` ones passed.
    Names are kept so the matrix still reads after a case or endpoint is deleted."""

    suite_run = models.ForeignKey(SuiteRun, on_delete=models.CASCADE, related_name="cells")
    case = models.ForeignKey(SuiteCase, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    case_name = models.CharField(max_length=100)
    endpoint = models.ForeignKey(ModelEndpoint, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    endpoint_name = models.CharField(max_length=100)
    repeat = models.PositiveIntegerField(default=1)
    assertions = models.JSONField(default=list, blank=True,
                                  help_text="The case's assertions when the suite run started.")
    evaluated = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["suite_run", "case_name",
                                                       "endpoint_name"],
                                               name="suite_cell_unique")]

    def __str__(self) -> str:
        return f"{self.case_name} on {self.endpoint_name}"

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.evaluated if self.evaluated else None

    @property
    def is_flaky(self) -> bool:
        return 0 < self.passed < self.evaluated


class SuiteCellRun(models.Model):
    """One execution of a cell: its run, and the verdict once the run finished
    (`failures`: each failing assertion's sentence and reason)."""

    cell = models.ForeignKey(SuiteCell, on_delete=models.CASCADE, related_name="cell_runs")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="suite_cell_run")
    repetition = models.PositiveIntegerField()
    passed = models.BooleanField(null=True, blank=True)
    failures = models.JSONField(default=list, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cell", "repetition"]

    def __str__(self) -> str:
        return f"{self.cell} #{self.repetition}"
