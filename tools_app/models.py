"""What AgentForge stores: endpoints, tools, policies, and the audit log of runs.

A Run holds a frozen snapshot of everything it uses, so later edits to an endpoint,
a tool or a policy never change what a past (or resumed) run did. Round and ToolCall
rows are the current state; RunEvent is the append-only history the timeline replays,
ordered by a per-run `seq` that only the lease holder can advance.
"""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce
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
    timeout_seconds = models.FloatField(
        "timeout (seconds)", default=120.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Per model-call attempt: the longest wait to connect, for the first "
        "byte and between bytes (empty: 120). Each retry waits it again; the policy's run "
        "deadline bounds them all.",
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


class McpTransport(models.TextChoices):
    STDIO = "stdio", "stdio (a command this server starts)"
    HTTP = "http", "Streamable HTTP (a URL)"


mcp_server_name_validator = RegexValidator(
    r"^[a-zA-Z0-9_-]{1,64}$",
    "Server names are 1-64 characters from a-z, A-Z, 0-9, '_' and '-'.",
)


def _string_list_problem(value: object) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return 'Give a JSON list of strings, e.g. ["--local-timezone", "UTC"].'
    return None


def _string_map_problem(value: object, example: str) -> str | None:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f"Give a JSON object of strings, e.g. {example}."
    for key, item in value.items():
        if item.startswith("env:"):
            try:
                env_var_validator(item[4:])
            except ValidationError:
                return (f"{key}: env: must be followed by the NAME of an environment "
                        "variable, like env:MY_TOKEN.")
    return None


class McpServer(models.Model):
    """An MCP server whose tools can be registered (kind "mcp"): a command started as a
    child process (stdio) or a streamable-HTTP URL. Values written env:NAME (in `env`
    and `headers`) are read from the worker's environment when a session starts, never
    stored."""

    name = models.CharField(max_length=64, unique=True,
                            validators=[mcp_server_name_validator])
    transport = models.CharField(max_length=8, choices=McpTransport.choices,
                                 default=McpTransport.STDIO)
    command = models.CharField(max_length=500, blank=True,
                               help_text="stdio: the executable to start, e.g. uvx.")
    args = models.JSONField("arguments", default=list, blank=True,
                            help_text='stdio: its arguments, e.g. ["mcp-server-time"].')
    env = models.JSONField(
        "environment", default=dict, blank=True,
        help_text="stdio: the only variables the server gets besides HOME, LOGNAME, PATH, "
        "SHELL, TERM and USER (never this server's own, which hold provider keys). "
        'Values: text, or env:NAME to pass on a variable of the worker, e.g. '
        '{"TZ": "UTC", "GITHUB_TOKEN": "env:MCP_GITHUB_TOKEN"}.')
    url = models.CharField(
        "URL", max_length=500, blank=True,
        help_text="HTTP: the server's MCP endpoint, e.g. https://mcp.example.com/mcp. "
        "Subject to the outbound policy, like model endpoints.")
    headers = models.JSONField(
        default=dict, blank=True,
        help_text='HTTP: request headers; credentials as env:NAME, e.g. '
        '{"Authorization": "env:MCP_DOCS_AUTHORIZATION"}.')
    tool_prefix = models.CharField(
        max_length=32, blank=True, validators=[RegexValidator(r"^[a-zA-Z0-9_-]*$")],
        help_text="Put before the name of each tool sync registers (when two servers "
        "have tools of the same name).")
    startup_timeout = models.FloatField(
        default=30.0, validators=[MinValueValidator(0.1), MaxValueValidator(600)],
        help_text="Seconds a session may take to start (process start and handshake).")
    call_timeout = models.FloatField(
        default=60.0, validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Seconds a call may take; past it the call fails and the session is "
        "restarted. The tool's own timeout, if shorter, applies too.")
    enabled = models.BooleanField(default=True)
    last_synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.transport == McpTransport.STDIO:
            if not self.command.strip():
                errors["command"] = "A stdio server needs the command that starts it."
            if problem := _string_list_problem(self.args):
                errors["args"] = problem
            if problem := _string_map_problem(self.env, '{"TZ": "UTC"}'):
                errors["env"] = problem
            elif bad := [k for k in self.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]:
                errors["env"] = f"Not environment variable names: {', '.join(bad)}."
        else:
            if problem := mcp_url_problem(self.url):
                errors["url"] = problem
            if problem := _string_map_problem(self.headers, '{"X-Team": "docs"}'):
                errors["headers"] = problem
        if errors:
            raise ValidationError(errors)


def mcp_url_problem(url: str) -> str | None:
    """Why `url` cannot be an MCP server's endpoint (None if it can)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        return "Not a URL."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Give an http:// or https:// URL."
    if parts.username or parts.password:
        return ("Do not put credentials in the URL: send them as a header read from the "
                "environment (env:NAME).")
    return None


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
        help_text="Calls never run without a person's approval: the run waits on the "
        "timeline for an approve, edit or reject decision (see AGENTFORGE_APPROVAL_TIMEOUT).")
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
            # A tool's most recent calls (its page), newest first without a sort.
            models.Index(fields=["tool_name", "id"], name="toolcall_tool_recent"),
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
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.state})"


class ToolCallSlot(models.Model):
    """A tool's calls and errors per quarter hour (UTC) of their moment (the start, or the
    run's creation for a call that never started): what a tool page's chart draws for
    staff, without reading the tool's calls. Written only by database triggers on
    `ToolCall` (audit.triggers), so every insert, update and delete of a call, by
    whatever path, is counted; never edited here."""

    tool_name = models.CharField(max_length=200)
    slot = models.DateTimeField(help_text="The start of the quarter hour (UTC).")
    calls = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tool_name", "slot"],
                                               name="toolcallslot_unique")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.slot:%Y-%m-%d %H:%M}: {self.calls}"


class ToolErrorGroup(models.Model):
    """A tool's erring calls grouped as its page lists them (error type and the first 300
    characters of the message): how many, and the newest one's id. Written only by
    database triggers on `ToolCall` (audit.triggers), like `ToolCallSlot`."""

    tool_name = models.CharField(max_length=200)
    error_type = models.CharField(max_length=200)
    head = models.TextField(help_text="The first 300 characters of the message.")
    calls = models.BigIntegerField(default=0)
    last_call_id = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tool_name", "error_type", "head"],
                                               name="toolerrorgroup_unique")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.error_type}: {self.calls}"


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


class WorkerHeartbeat(models.Model):
    """A `db_worker` process's last sign of life, written by its claim loop every few
    seconds (runs.store.worker_beats): `manage.py worker_status` and the admin read it
    to tell a worker that stopped taking work from one that has nothing to take."""

    worker_id = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    running = models.PositiveIntegerField(default=0, help_text="tasks in progress")
    claimed = models.PositiveBigIntegerField(default=0, help_text="tasks claimed since start")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(db_index=True)
    last_claimed_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"worker {self.worker_id} ({self.hostname}:{self.pid})"
