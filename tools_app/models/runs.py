"""Runs and what they record: rounds, tool calls and the numbered event log."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from .endpoints import ModelEndpoint
from .policies import ErrorPolicy
from .sort_keys import DurationKey, moment_key


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"


TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs"
    )
    endpoint = models.ForeignKey(
        ModelEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    policy = models.ForeignKey(
        ErrorPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    snapshot = models.JSONField(help_text="Everything the run uses, frozen at start.")
    final_text = models.TextField(null=True, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    error_message = models.TextField(blank=True)
    rounds_count = models.PositiveIntegerField(default=0)
    tool_calls_count = models.PositiveIntegerField(default=0)
    errors_count = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # Dollars, the sum of its rounds' costs (kept by the recorder); None: the run has no
    # price (its snapshot's "price" section), shown as "no price", never $0.
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    wall_ms = models.FloatField(null=True, blank=True)
    # A try-it run (one call of a tool from its page, or a rerun of one), set when the
    # run is stored: the runs list hides these unless asked, by this column (a partial
    # index holds these runs), not by its snapshot's JSON.
    is_tryit = models.BooleanField(default=False)
    # LoopDetected events recorded (engine/loop/health.py), counted by the recorder:
    # the runs list's "loop detected" filter reads this column, not the events.
    loop_detections = models.PositiveIntegerField(default=0)
    # Crash safety: the lease holder is the only writer. Every write is fenced on
    # lease_token, so a worker that lost its lease changes nothing.
    last_seq = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.PositiveBigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    resume_count = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    # Set while the run waits for decisions (status waiting); AGENTFORGE_APPROVAL_TIMEOUT
    # counts from here.
    waiting_since = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The runs list's keyset order (created_at, id), under its most used
            # narrowing: an ordinary user's own runs, and a status.
            models.Index(fields=["created_by", "created_at", "id"], name="run_user_keyset"),
            models.Index(fields=["status", "created_at", "id"], name="run_status_keyset"),
            # The try-it runs, newest first: few, so the runs list leaves them out by
            # their ids (audit.run_filters) and each index it reads keeps serving it.
            models.Index(fields=["created_at", "id"], condition=models.Q(is_tryit=True),
                         name="run_tryit_keyset"),
            # The runs list's sorts by duration (no duration: -1) and by errors.
            models.Index(DurationKey("wall_ms"), F("id"), name="run_duration"),
            models.Index(fields=["errors_count", "id"], name="run_errors"),
            # The runs list filtered on "loop detected": the few flagged runs, in order.
            models.Index(fields=["created_at", "id"], condition=models.Q(loop_detections__gt=0),
                         name="run_loop_keyset"),
        ]

    def __str__(self) -> str:
        return f"{self.title or 'run'} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def open_pause(self) -> RunPause | None:
        """The breakpoint the run waits at, if it does (the timeline's header shows it)."""
        if self.status != RunStatus.WAITING:
            return None
        return self.pauses.filter(resolved_at__isnull=True).first()


class Round(models.Model):
    # Indexed by the unique constraint below (run, index): migration 0017.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rounds",
                            db_index=False)
    index = models.PositiveIntegerField()
    status = models.CharField(max_length=16, default="requested")
    request_json = models.JSONField(null=True, blank=True, help_text="Wire request, redacted.")
    response_json = models.JSONField(null=True, blank=True, help_text="Wire response.")
    raw_stream = models.TextField(
        null=True, blank=True,
        help_text="A streamed response's event-stream lines as they arrived (redacted, capped).")
    response = models.JSONField(
        null=True, blank=True, help_text="The parsed ChatResponse (used to resume)."
    )
    ai_text = models.TextField(null=True, blank=True)
    thinking = models.TextField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_input_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Dollars the model call cost (engine/pricing.py) at the price revision the run
    # froze; None: no price, or no usage reported.
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    # The price revision it was priced with (its values are in the run's snapshot too).
    # No constraint and no index: a round written while its endpoint (and so its prices)
    # is being deleted must still commit, and nothing looks rounds up by revision.
    price_revision = models.ForeignKey(
        "tools_app.PriceRevision", null=True, blank=True, on_delete=models.DO_NOTHING,
        db_constraint=False, db_index=False, related_name="+")
    latency_ms = models.FloatField(null=True, blank=True)
    first_token_ms = models.FloatField(null=True, blank=True)
    attempts = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="round_unique_index")
        ]

    def __str__(self) -> str:
        return f"round {self.index + 1} of {self.run_id}"


class ToolCallState(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    STARTED = "started", "Started"
    SUCCEEDED = "succeeded", "OK"
    ARGUMENTS_ERROR = "arguments_error", "Arguments error"
    EXECUTION_ERROR = "execution_error", "Execution error"
    HALLUCINATED = "hallucinated", "Hallucinated"
    TIMED_OUT = "timed_out", "Timed out"
    REJECTED = "rejected", "Rejected"
    UNKNOWN_OUTCOME = "unknown_outcome", "Unknown outcome"
    CANCELLED = "cancelled", "Cancelled"


# What the groups of call states mean, defined once.
# Not over yet: proposed, or started and still running.
IN_PROGRESS_CALL_STATES = frozenset({ToolCallState.PROPOSED, ToolCallState.STARTED})
# The run's execution of the call is over and produced what the model was told.
FINISHED_CALL_STATES = frozenset(
    {ToolCallState.SUCCEEDED, ToolCallState.ARGUMENTS_ERROR, ToolCallState.EXECUTION_ERROR,
     ToolCallState.HALLUCINATED, ToolCallState.TIMED_OUT, ToolCallState.REJECTED,
     ToolCallState.UNKNOWN_OUTCOME})
# Started and never finished, so it may have had its effect: a cancelled call too, since
# a sync tool keeps running in its thread after its task is cancelled.
IN_DOUBT_CALL_STATES = frozenset({ToolCallState.STARTED, ToolCallState.CANCELLED})
# The run's own execution of the call is over (or never happened): a person may execute
# it again without racing the run.
REEXECUTABLE_CALL_STATES = frozenset(ToolCallState) - IN_PROGRESS_CALL_STATES


class ToolCall(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    # Indexed by the unique constraint below (round, call_index): migration 0017.
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="tool_calls",
                              db_index=False)
    call_index = models.PositiveIntegerField()
    call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments_raw = models.TextField(blank=True)
    arguments = models.JSONField(null=True, blank=True)
    state = models.CharField(
        max_length=32, choices=ToolCallState.choices, default=ToolCallState.PROPOSED
    )
    result_text = models.TextField(null=True, blank=True)
    result_json = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    error_type = models.CharField(max_length=200, blank=True)
    error_message = models.TextField(blank=True)
    error_details = models.JSONField(null=True, blank=True)
    traceback = models.TextField(blank=True)
    handled_by = models.CharField(max_length=200, blank=True)
    stopped_run = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    # Its share of its round's cost (engine/pricing.call_shares: equal parts, the
    # remainder on the first call); None: no price.
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    # The run's created_at and created_by_id, copied by database triggers
    # (audit.triggers): the calls list's since / until, an ordinary user's calls and
    # a tool page's chart read them without a join.
    run_created_at = models.DateTimeField(null=True, blank=True, editable=False)
    run_owner_id = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["round__index", "call_index"]
        constraints = [
            models.UniqueConstraint(fields=["round", "call_index"], name="toolcall_unique_index")
        ]
        indexes = [
            # A tool's calls: its page's statistics (counts by state, duration
            # percentiles read in duration order) and the calls filter `tool`.
            models.Index(fields=["tool_name", "duration_ms"], name="toolcall_tool_duration"),
            models.Index(fields=["tool_name", "state", "is_error"], name="toolcall_tool_outcome"),
            # A tool's first and last moment (a chart's span): one index read each.
            models.Index(F("tool_name"), Coalesce("started_at", "run_created_at"),
                         name="toolcall_tool_moment"),
            # The handlers filter's choices: read one index seek per distinct name.
            models.Index(fields=["handled_by"], name="toolcall_handler"),
            # A tool's most recent calls (its page), newest first without a sort; the
            # calls list sorted by tool (A to Z, newest first within a tool).
            models.Index(fields=["tool_name", "-id"], name="toolcall_tool_newest"),
            # The calls list sorted by when a call started, or by its duration.
            models.Index(moment_key(), F("id"), name="toolcall_moment"),
            models.Index(DurationKey(), F("id"), name="toolcall_duration"),
            # The calls list's since / until (the run's creation, kept on the call).
            models.Index(fields=["run_created_at", "id"], name="toolcall_run_created"),
            # An ordinary user's calls (their runs', kept on the call): newest first, by
            # their runs' creation, and one tool's (its page's statistics).
            models.Index(fields=["run_owner_id", "id"], name="toolcall_owner_recent"),
            models.Index(fields=["run_owner_id", "run_created_at"],
                         name="toolcall_owner_created"),
            # (and what a user's tool page counts, so it reads the index alone)
            models.Index(fields=["tool_name", "run_owner_id", "duration_ms", "state",
                                 "is_error", "started_at", "run_created_at"],
                         name="toolcall_tool_owner_stats"),
            # Runs filtered on their calls (has_errors, error_type): one probe per run.
            models.Index(fields=["run"], condition=models.Q(is_error=True),
                         name="toolcall_run_erring"),
            models.Index(fields=["run", "error_type"], condition=~models.Q(error_type=""),
                         name="toolcall_run_error_type"),
            # Each tool's cost (the tools index, a tool's page): its priced calls only.
            models.Index(fields=["tool_name", "cost_usd"],
                         condition=models.Q(cost_usd__isnull=False), name="toolcall_tool_cost"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.state})"


class RunEvent(models.Model):
    # Indexed by the unique constraint below (run, seq): migration 0017.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events",
                            db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_unique_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind}"


class PauseResolution(models.TextChoices):
    RUN = "run", "Continued"
    CALL = "call", "Stepped one call"
    ROUND = "round", "Stepped one round"
    ABORT = "abort", "Aborted"


class RunPause(models.Model):
    """A run stopped at a breakpoint: before round `round_index`'s model call
    (`before` = "model") or before `call_ids` of that round ran ("calls"), and how a
    person let it go on. At most one is open (unresolved) per run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="pauses")
    round_index = models.PositiveIntegerField()
    before = models.CharField(max_length=8, choices=[("model", "model call"),
                                                     ("calls", "tool calls")])
    call_ids = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=8, choices=PauseResolution.choices, blank=True)
    released = models.JSONField(default=list, blank=True,
                                help_text="The held calls the resolution let run.")
    edited_arguments = models.JSONField(default=dict, blank=True,
                                        help_text="Call id -> the arguments it runs with.")
    message = models.TextField(blank=True, help_text="Added to the conversation before "
                               "the model call (a pause before one).")
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="run_pauses")
    resolved_by_label = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"paused: {self.reason}"
