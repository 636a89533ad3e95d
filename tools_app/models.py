"""What AgentForge stores: endpoints, tools, policies, and the audit log of runs.

A Run holds a frozen snapshot of everything it uses, so later edits to an endpoint,
a tool or a policy never change what a past (or resumed) run did. Round and ToolCall
rows are the current state; RunEvent is the append-only history the timeline replays,
ordered by a per-run `seq` that only the lease holder can advance.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

tool_name_validator = RegexValidator(
    r"^[a-zA-Z0-9_-]{1,64}$",
    "Tool names must be 1-64 characters from a-z, A-Z, 0-9, '_' and '-' "
    "(providers reject others).",
)
env_var_validator = RegexValidator(
    r"^[A-Z_][A-Z0-9_]*$",
    "Give the NAME of an environment variable (like OPENAI_API_KEY), never the key itself.",
)


def proxy_url_validator(value: str) -> None:
    """A proxy as `http(s)://host:port`, or `env:NAME` to read it from the worker's
    environment. Credentials never go in the stored URL: they would show in the admin,
    the run snapshots and exports; a proxy that needs them is given as env:NAME."""
    if value.startswith("env:"):
        env_var_validator(value[4:])
        return
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Give the proxy as http://host:port or https://host:port "
                              "(or env:NAME to read it from the environment).")
    if parts.username or parts.password:
        raise ValidationError("Do not store proxy credentials here: put the whole proxy URL "
                              "in an environment variable and give env:NAME.")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValidationError("A proxy URL has only a scheme, a host and a port.")


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI Chat Completions"
    ANTHROPIC = "anthropic", "Anthropic Messages"
    GEMINI = "gemini", "Google Gemini"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible (Ollama, vLLM, ...)"
    SCRIPTED = "scripted", "Offline scripted model"


class ModelEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=ProviderKind.choices)
    base_url = models.CharField(
        max_length=500, blank=True, help_text="Empty means the provider's public API."
    )
    model = models.CharField(max_length=200, blank=True)
    default_parameters = models.JSONField(
        default=dict, blank=True,
        help_text='Request defaults, e.g. {"temperature": 0, "max_output_tokens": 1024}.',
    )
    api_key_env = models.CharField(
        "API key environment variable", max_length=100, blank=True,
        validators=[env_var_validator],
        help_text="The name of the environment variable holding the key. The key itself "
        "is never stored, shown or exported.",
    )
    stream = models.BooleanField(default=False, help_text="Stream responses (SSE).")
    extra_headers = models.JSONField(default=dict, blank=True)
    proxy_url = models.CharField(
        "proxy", max_length=500, blank=True, validators=[proxy_url_validator],
        help_text="Empty: the worker's HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY "
        "variables decide. Otherwise http://host:port, or env:NAME to read the URL "
        "(with any credentials) from the worker's environment.",
    )
    script = models.JSONField(
        default=list, blank=True, help_text="Scripted endpoints: the list of steps to play."
    )
    capability_report = models.JSONField(null=True, blank=True, editable=False)
    capability_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ToolKind(models.TextChoices):
    PYTHON = "python", "Python function"
    HTTP = "http", "HTTP endpoint"
    MCP = "mcp", "MCP server tool"
    MOCK = "mock", "Mock"


class ReturnBehaviorChoice(models.TextChoices):
    TO_LLM = "to_llm", "Result goes to the model"
    IMMEDIATE = "immediate", "Return immediately"
    IMMEDIATE_IF_LAST = "immediate_if_last", "Return immediately if last in the round"


class ToolRegistration(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64, unique=True, validators=[tool_name_validator])
    description = models.TextField(blank=True)
    json_schema = models.JSONField(default=dict)
    kind = models.CharField(max_length=16, choices=ToolKind.choices, default=ToolKind.PYTHON)
    python_path = models.CharField(
        max_length=300, blank=True, help_text="module.function for Python tools."
    )
    config = models.JSONField(default=dict, blank=True, help_text="Settings of non-Python kinds.")
    return_behavior = models.CharField(
        max_length=32, choices=ReturnBehaviorChoice.choices, default=ReturnBehaviorChoice.TO_LLM
    )
    strict = models.BooleanField(default=False)
    timeout_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="Empty: the policy's default timeout.",
    )
    requires_approval = models.BooleanField(
        default=False,
        help_text="Calls never run without a person's approval. Runs cannot ask for one "
        "yet, so such calls are refused (recorded as rejected; the model is told).")
    idempotent = models.BooleanField(
        default=False, help_text="Safe to run again if a worker died while it ran."
    )
    enabled = models.BooleanField(default=True)
    version_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ToolVersion(models.Model):
    """One definition a registration has had, kept when it is first seen (a new
    registration, or a save that changed its version hash). Runs point at a version by
    the hash frozen in their snapshot. The definition never holds a secret: config values
    under secret-looking keys are replaced (`tools.versions.public_config`)."""

    registration = models.ForeignKey(ToolRegistration, on_delete=models.CASCADE,
                                     related_name="versions")
    version_hash = models.CharField(max_length=64, db_index=True)
    definition = models.JSONField()
    # A default, not auto_now_add: the backfill dates versions found in old runs by the
    # first run that used them.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["registration", "version_hash"],
                                               name="toolversion_unique_hash")]

    def __str__(self) -> str:
        return f"{self.registration_id} {self.version_hash[:12]}"


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
    wall_ms = models.FloatField(null=True, blank=True)
    # Crash safety: the lease holder is the only writer. Every write is fenced on
    # lease_token, so a worker that lost its lease changes nothing.
    last_seq = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_token = models.PositiveBigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    resume_count = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
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
        ]

    def __str__(self) -> str:
        return f"{self.title or 'run'} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Round(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rounds")
    index = models.PositiveIntegerField()
    status = models.CharField(max_length=16, default="requested")
    request_json = models.JSONField(null=True, blank=True, help_text="Wire request, redacted.")
    response_json = models.JSONField(null=True, blank=True, help_text="Wire response.")
    response = models.JSONField(
        null=True, blank=True, help_text="The parsed ChatResponse (used to resume)."
    )
    ai_text = models.TextField(null=True, blank=True)
    thinking = models.TextField(null=True, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
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


class ToolCall(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    round = models.ForeignKey(Round, on_delete=models.CASCADE, related_name="tool_calls")
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

    class Meta:
        ordering = ["round__index", "call_index"]
        constraints = [
            models.UniqueConstraint(fields=["round", "call_index"], name="toolcall_unique_index")
        ]
        indexes = [
            # A tool's calls: its page's statistics (counts by state, duration
            # percentiles read in duration order) and the calls filter `tool`.
            models.Index(fields=["tool_name", "duration_ms"], name="toolcall_tool_duration"),
            models.Index(fields=["tool_name", "state"], name="toolcall_tool_state"),
            # The handlers filter's choices: read one index seek per distinct name.
            models.Index(fields=["handled_by"], name="toolcall_handler"),
            # A tool's most recent calls (its page), newest first without a sort.
            models.Index(fields=["tool_name", "id"], name="toolcall_tool_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.state})"


class RunEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_unique_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind}"


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class PlaygroundState(models.Model):
    """The playground form's last inputs, per user."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="playground_state")
    data = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"playground of {self.user}"
