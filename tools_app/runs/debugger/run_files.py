"""Runs as regression fixtures: export a run to a versioned JSON file, read one back
(validated: the file is untrusted), and import it as a finished run to inspect.

The format is documented in docs/run-fixtures.md. Exports hold no secret: the snapshot
never held a key (only the NAME of its environment variable), literal header values
and credentials inside URLs are replaced, and the rounds were redacted when recorded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tools_app.engine import ChatResponse
from tools_app.engine.providers.recorded import RecordedCall, RecordedRound
from tools_app.models import (
    TERMINAL_STATUSES,
    Round,
    Run,
    RunStatus,
    ToolCall,
    ToolKind,
    ToolRegistration,
)
from tools_app.runs.snapshot.frozen import POLICY_FIELDS, TOOL_FIELDS
from tools_app.runs.snapshot.model import ImportedSection, RunSnapshot, snapshot_of
from tools_app.runs.store.lifecycle import create_finished
from tools_app.runs.store.sanitize import clean_json, clean_text, fit_column
from tools_app.tools.registry import public_config

FORMAT = "agentforge-run"
VERSION = 1
REDACTED = "[redacted]"


class FixtureError(ValueError):
    """The file is not a usable run fixture; the message says why."""


# -- export ------------------------------------------------------------------------------


def export_run(run: Run) -> dict[str, Any]:
    """The run as a fixture: see docs/run-fixtures.md."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "run": _run_summary(run),
        "snapshot": exportable_snapshot(snapshot_of(run)),
        "rounds": [_round(r) for r in Round.objects.filter(run=run).order_by("index")
                   .prefetch_related("tool_calls")],
    }


def exportable_snapshot(snapshot: RunSnapshot) -> dict[str, Any]:
    """The snapshot without anything secret, and without a replay's recording (the
    fixture's own rounds are the recording)."""
    out = snapshot.copy_deep()
    out.replay = None
    endpoint = out.endpoint
    endpoint.extra_headers = {
        name: value if isinstance(value, str) and value.startswith("env:") else REDACTED
        for name, value in endpoint.extra_headers.items()}
    endpoint.base_url = _without_password(endpoint.base_url) if endpoint.base_url else ""
    endpoint.proxy_url = _without_password(endpoint.proxy_url) if endpoint.proxy_url else ""
    for tool in out.tools:
        # An HTTP tool's literal header values (a bearer token) stay here.
        tool.config = public_config(tool.config)
    return out.stored()


def _without_password(url: str) -> str:
    """A URL's user:password@ part, password replaced (env: references stay)."""
    if url.startswith("env:"):
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    # Not REDACTED: square brackets in a netloc read as an IPv6 address.
    netloc = f"{parts.username or ''}:redacted@{host}{port}"
    return urlunsplit(parts._replace(netloc=netloc))


RUN_FIELDS = ("title", "status", "final_text", "error_type", "error_message", "rounds_count",
              "tool_calls_count", "errors_count", "input_tokens", "output_tokens",
              "total_tokens", "wall_ms")
ROUND_FIELDS = ("index", "status", "ai_text", "thinking", "finish_reason", "input_tokens",
                "output_tokens", "latency_ms", "first_token_ms", "attempts")
CALL_FIELDS = ("call_index", "call_id", "tool_name", "state", "result_text", "result_json",
               "is_error", "error_type", "error_message", "error_details", "handled_by",
               "stopped_run", "attempts", "duration_ms")


def _run_summary(run: Run) -> dict[str, Any]:
    return {"id": str(run.pk), "parent": str(run.parent_id) if run.parent_id else None,
            "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at)} | {f: getattr(run, f) for f in RUN_FIELDS}


def _round(round_: Round) -> dict[str, Any]:
    calls = sorted(round_.tool_calls.all(), key=lambda c: c.call_index)
    return {f: getattr(round_, f) for f in ROUND_FIELDS} | {
        "request": round_.request_json, "wire_response": round_.response_json,
        "response": round_.response,
        "started_at": _iso(round_.started_at), "finished_at": _iso(round_.finished_at),
        "calls": [_call(c) for c in calls],
    }


def _call(call: ToolCall) -> dict[str, Any]:
    return {f: getattr(call, f) for f in CALL_FIELDS} | {
        "arguments": call.arguments_raw, "arguments_parsed": call.arguments,
        "error_type": call.error_type or None, "error_message": call.error_message or None,
        "handled_by": call.handled_by or None,
        "started_at": _iso(call.started_at), "finished_at": _iso(call.finished_at),
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def recording_of(run: Run) -> list[RecordedRound]:
    """The run's rounds as a replay reads them (a snapshot's "replay" rounds)."""
    return _recording.validate_python(export_run(run)["rounds"])


_recording: TypeAdapter[list[RecordedRound]] = TypeAdapter(list[RecordedRound])


def export_filename(run: Run) -> str:
    return f"run-{run.pk}.agentforge.json"


# -- reading a fixture (untrusted) -------------------------------------------------------


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FixtureCall(RecordedCall):
    """A call as a run file holds it: what a replay serves (`RecordedCall`) and its audit
    record (how it was handled, how long it took, when)."""

    model_config = ConfigDict(extra="ignore")

    call_index: int = Field(ge=0)
    state: str
    arguments_parsed: Any = None
    handled_by: str | None = None
    stopped_run: bool = False
    attempts: int = Field(default=0, ge=0)
    duration_ms: float | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class FixtureRound(RecordedRound):
    """A round as a run file holds it: what a replay reads (`RecordedRound`) and its
    record (the wire request and response, tokens, timings)."""

    model_config = ConfigDict(extra="ignore")

    index: int = Field(ge=0)
    response: ChatResponse | None = None
    calls: tuple[FixtureCall, ...] = ()
    status: str
    request: Any = None
    wire_response: Any = None
    ai_text: str | None = None
    thinking: str | None = None
    finish_reason: str = ""
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    latency_ms: float | None = None
    first_token_ms: float | None = None
    attempts: list[Any] = Field(default_factory=list)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class FixtureRun(_Loose):
    id: str | None = None
    title: str = ""
    status: str
    final_text: str | None = None
    error_type: str = ""
    error_message: str = ""
    wall_ms: float | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RunFixture(_Loose):
    format: Literal["agentforge-run"]
    version: Literal[1]
    exported_at: str | None = None
    run: FixtureRun
    snapshot: dict[str, Any]
    rounds: list[FixtureRound]

    def run_snapshot(self) -> RunSnapshot:
        """The file's snapshot as the model (checked by `load_fixture`)."""
        return RunSnapshot.load(self.snapshot)

    def recording(self) -> list[RecordedRound]:
        """The rounds as a replay reads them (a replay section's rounds)."""
        return list(self.rounds)


def load_fixture(raw: bytes | str) -> RunFixture:
    """The fixture in `raw`, checked through; FixtureError says what is wrong."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise FixtureError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FixtureError(f'not a run fixture: "format" must be "{FORMAT}"')
    if data.get("version") != VERSION:
        raise FixtureError(f"fixture version {data.get('version')!r} is not supported "
                           f"(this server reads version {VERSION})")
    try:
        fixture = RunFixture.model_validate(data)
    except ValidationError as exc:
        raise FixtureError(_first_problem(exc)) from exc
    _check_snapshot(fixture)
    return fixture


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


SNAPSHOT_KEYS = ("endpoint", "tools", "policy", "messages", "parameters")
# What rebuilding the engine reads (older snapshots may lack the other fields).
ENDPOINT_KEYS = ("name", "kind", "model", "default_parameters", "api_key_env", "stream",
                 "extra_headers", "script")


def _check_snapshot(fixture: RunFixture) -> None:
    snapshot = fixture.snapshot
    missing = [k for k in SNAPSHOT_KEYS if k not in snapshot]
    if missing:
        raise FixtureError(f"snapshot: missing {', '.join(missing)}")
    _check_keys("snapshot.endpoint", snapshot["endpoint"], ENDPOINT_KEYS)
    _check_keys("snapshot.policy", snapshot["policy"], POLICY_FIELDS)
    if not isinstance(snapshot["tools"], list):
        raise FixtureError("snapshot.tools: must be a list")
    for index, tool in enumerate(snapshot["tools"]):
        _check_keys(f"snapshot.tools[{index}]", tool, TOOL_FIELDS)
    if not isinstance(snapshot["parameters"], dict):
        raise FixtureError("snapshot.parameters: must be an object")
    if not _valid_fork(snapshot.get("fork")):
        snapshot.pop("fork", None)  # the run page and the scripted model read its numbers
    try:
        loaded = fixture.run_snapshot()
        loaded.chat_messages()
        loaded.request_parameters()
    except (ValueError, TypeError, KeyError) as exc:  # pydantic's ValidationError included
        raise FixtureError(f"snapshot: {exc}") from exc
    indexes = [r.index for r in fixture.rounds]
    if indexes != list(range(len(indexes))):
        raise FixtureError(f"rounds: the indexes must be 0, 1, 2, ... in order, not {indexes}")


TEXT_KEYS = ("name", "kind", "python_path", "model", "api_key_env")


def _check_keys(where: str, value: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(value, dict):
        raise FixtureError(f"{where}: must be an object")
    missing = [k for k in keys if k not in value]
    if missing:
        raise FixtureError(f"{where}: missing {', '.join(missing)}")
    for key in TEXT_KEYS:
        if key in value and not isinstance(value[key], str):
            raise FixtureError(f"{where}.{key}: must be a string")


def unregistered_tool_code(snapshot: RunSnapshot) -> list[str]:
    """The snapshot's tools that are not a tool registered here: a Python tool with the
    same name and python path, any other kind with the same name and definition hash (its
    config says where an HTTP call goes and which variables its headers read). Such
    tools must never run: a fixture names any import path, URL or header it likes."""
    python = set(ToolRegistration.objects.filter(kind=ToolKind.PYTHON)
                 .values_list("name", "python_path"))
    other = set(ToolRegistration.objects.exclude(kind=ToolKind.PYTHON)
                .values_list("name", "version_hash"))
    return [t.name for t in snapshot.tools
            if ((t.name, t.python_path) not in python if t.kind == ToolKind.PYTHON
                else (t.name, t.version_hash) not in other)]


# -- import ------------------------------------------------------------------------------


def import_fixture(fixture: RunFixture, *,
                   user: AbstractBaseUser | AnonymousUser | None,
                   via: str = "manage.py import_run") -> Run:
    """A new finished run holding the fixture's snapshot, rounds and calls, so the
    timeline shows it. Its events: the import and its final status. `user` imported it
    and owns it (None: no one, only staff see it), `via` says how it was imported. The
    run is created now; it started and finished when the original did (the file's
    times; unknown when the file has none)."""
    status = (RunStatus(fixture.run.status) if fixture.run.status in TERMINAL_STATUSES
              else RunStatus.FAILED)
    snapshot = RunSnapshot.load(clean_json(exportable_snapshot(fixture.run_snapshot())))
    snapshot.rerun = None  # the imported run has no parent here
    owner: Any = user if user is not None and user.is_authenticated else None
    snapshot.imported = ImportedSection(source_run=clean_text(fixture.run.id),
                                        exported_at=clean_text(fixture.exported_at),
                                        imported_by=owner.get_username() if owner else None,
                                        via=via)
    with transaction.atomic():
        run = create_finished(
            status=status,
            origin={"kind": "run_imported",
                    "payload": clean_json({"from": fixture.run.id,
                                           "exported_at": fixture.exported_at})},
            created_by=owner,
            title=fit_column(Run, "title", fixture.run.title) or "",
            snapshot=snapshot.stored(),
            final_text=clean_text(fixture.run.final_text),
            error_type=fit_column(Run, "error_type", fixture.run.error_type) or "",
            error_message=clean_text(fixture.run.error_message) or "",
            wall_ms=fixture.run.wall_ms, started_at=_aware(fixture.run.started_at),
            finished_at=_aware(fixture.run.finished_at))
        for round_ in fixture.rounds:
            _import_round(run, round_)
        _totals(run)
    return run


def _aware(moment: datetime | None) -> datetime | None:
    """A file's time without a zone is read as UTC (exports always carry one)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def import_record(run: Run) -> dict[str, Any] | None:
    """Where an imported run came from, for the API (None for any other run): the
    original's id, when it was exported, who imported it (None: no user was given),
    when (the run's creation) and how. Read from the stored snapshot as it is, without
    loading it: lists show it for many runs."""
    section = run.snapshot.get("imported") if isinstance(run.snapshot, dict) else None
    if not isinstance(section, dict):
        return None
    return {"from": section.get("from"), "exported_at": section.get("exported_at"),
            "imported_by": section.get("imported_by"),
            "imported_at": run.created_at.isoformat(), "via": section.get("via")}


class _Fork(BaseModel):
    model_config = ConfigDict(strict=True)

    of: str
    round: int = Field(ge=1)
    inherited: int = Field(ge=0)
    inherited_rounds: int = Field(ge=0)


def _valid_fork(value: Any) -> bool:
    """Whether a fixture's "fork" section is one this app wrote (the run page and the
    scripted model read its numbers)."""
    try:
        _Fork.model_validate(value)
    except ValidationError:
        return False
    return True




def _import_round(run: Run, data: FixtureRound) -> None:
    round_ = Round.objects.create(
        run=run, index=data.index, status=fit_column(Round, "status", data.status) or "",
        request_json=clean_json(data.request), response_json=clean_json(data.wire_response),
        response=clean_json(data.response.model_dump(mode="json")) if data.response else None,
        ai_text=clean_text(data.ai_text), thinking=clean_text(data.thinking),
        finish_reason=fit_column(Round, "finish_reason", data.finish_reason) or "",
        input_tokens=data.input_tokens, output_tokens=data.output_tokens,
        latency_ms=data.latency_ms, first_token_ms=data.first_token_ms,
        attempts=clean_json(data.attempts), started_at=data.started_at,
        finished_at=data.finished_at)
    ToolCall.objects.bulk_create([_import_call(run, round_, c) for c in data.calls])


def _import_call(run: Run, round_: Round, data: FixtureCall) -> ToolCall:
    return ToolCall(
        run=run, round=round_, call_index=data.call_index,
        call_id=fit_column(ToolCall, "call_id", data.call_id) or "",
        tool_name=fit_column(ToolCall, "tool_name", data.tool_name) or "",
        arguments_raw=clean_text(data.arguments) or "",
        arguments=clean_json(data.arguments_parsed),
        state=fit_column(ToolCall, "state", data.state) or "",
        result_text=clean_text(data.result_text), result_json=clean_json(data.result_json),
        is_error=data.is_error,
        error_type=fit_column(ToolCall, "error_type", data.error_type) or "",
        error_message=clean_text(data.error_message) or "",
        error_details=clean_json(data.error_details),
        handled_by=fit_column(ToolCall, "handled_by", data.handled_by) or "",
        stopped_run=data.stopped_run, attempts=data.attempts,
        started_at=data.started_at, finished_at=data.finished_at,
        duration_ms=data.duration_ms)


def _totals(run: Run) -> None:
    rounds = Round.objects.filter(run=run)
    calls = ToolCall.objects.filter(run=run)
    run.rounds_count = rounds.count()
    run.tool_calls_count = calls.count()
    run.errors_count = calls.filter(is_error=True).count()
    run.input_tokens = sum(r.input_tokens or 0 for r in rounds)
    run.output_tokens = sum(r.output_tokens or 0 for r in rounds)
    run.total_tokens = run.input_tokens + run.output_tokens
    run.save(update_fields=["rounds_count", "tool_calls_count", "errors_count",
                            "input_tokens", "output_tokens", "total_tokens"])


