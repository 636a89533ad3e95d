"""Tools: registrations of every kind, their definition versions, and MCP servers."""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from pydantic import ValidationError as PydanticValidationError

from ..engine.sources.mock import MockConfig, template_problems
from .validators import env_var_validator, tool_name_validator


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
    # The last sync's record, failed or not (runs/snapshot/mcp.py): when, whether it
    # worked and why not, the server's name and protocol, its resources and prompts,
    # and the JSON-RPC messages of the sync's session (secrets redacted).
    last_sync = models.JSONField(default=dict, blank=True, editable=False)
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
    isolated = models.BooleanField(
        default=False,
        help_text="Python tools: run each call in a separate worker process, stopped when "
        "its timeout passes, with a memory limit and only the allowed environment variables "
        "(AGENTFORGE_ISOLATED_TOOL_*).")
    enabled = models.BooleanField(default=True)
    # The fields a person set in the admin (of PERSON_FIELDS): sync leaves them as set.
    edited_fields = models.JSONField(default=list, blank=True, editable=False)
    version_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A mock tool's template may name only the tool's arguments (whatever form
        saves it: the admin's checks its configuration's fields itself)."""
        if self.kind != ToolKind.MOCK or not isinstance(self.json_schema, dict):
            return
        try:
            config = MockConfig.model_validate(self.config)
        except PydanticValidationError:
            return  # not a configuration at all: the form's check says why
        if problems := template_problems(config, self.json_schema):
            raise ValidationError({"config": problems})


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
