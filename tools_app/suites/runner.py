"""A suite run: every case on every endpoint, each cell repeated, each execution an
ordinary run started through `runs.services.run_create_many` (the due runs of a step
together) and linked to its cell.

`suite_run_start` checks the request and stores the suite run and its cells; `advance`
evaluates the runs that finished (`evaluation`) and starts more, never more than the
run's concurrency at once, and finishes the suite run once every cell is evaluated.
`drive` repeats `advance` until then (the `run_suite` command, and the
`drive_suite_run` task a page or the API enqueues), waiting between steps with `wait`:
by default until one of its runs ends (the task backend's workers execute them).

Tools are live, recorded (answered from the recording of the run the case was saved
from) or mocked, per tool: the case's choice, else the tool's own default (read-only or
idempotent tools live, others mocked); `tools` in the configuration overrides both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from time import monotonic, sleep
from typing import Any

from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools_app.engine.conversation import ConversationError, parse_conversation
from tools_app.models import (
    TERMINAL_STATUSES,
    ErrorPolicy,
    ModelEndpoint,
    Run,
    Suite,
    SuiteCase,
    SuiteCell,
    SuiteCellRun,
    SuiteRun,
    SuiteRunStatus,
    ToolKind,
    ToolRegistration,
)
from tools_app.runs.debugger.run_files import recording_of
from tools_app.runs.services import RunRequest, RunRequestError, run_create_many
from tools_app.runs.snapshot.model import ReplaySection, ToolsMode
from tools_app.runs.store.selectors import default_policy, run_get_for_user

from .assertions import Assertion, load_assertions
from .evaluation import RunVerdict, run_records, verdict_of

POLL_SECONDS = 0.025
"""How often a driver looks for a finished run (`a_run_has_ended`, one small query)."""


class SuiteConfigError(ValueError):
    """A suite run that cannot start as asked; `field` names the setting at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SuiteRunConfig(BaseModel):
    """What a suite run was asked: stored on it (`SuiteRun.config`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoints: list[str] = Field(min_length=1)
    """Endpoint names."""
    repeat: int = Field(default=1, ge=1, le=100)
    tools: ToolsMode | None = None
    """One mode for every tool, overriding the cases' and the defaults."""
    concurrency: int = Field(default=4, ge=1, le=64)
    min_pass_rate: float = Field(default=1.0, ge=0, le=1)


def default_tool_mode(tool: ToolRegistration) -> ToolsMode:
    """Read-only tools run live, destructive ones are mocked: an MCP tool's hints say
    which, any other tool's idempotency flag; mock tools are harmless, so live."""
    hints = tool.config.get("annotations") if isinstance(tool.config, dict) else None
    if isinstance(hints, dict):
        if hints.get("readOnlyHint") is True:
            return "live"
        if hints.get("destructiveHint") is True:
            return "mock"
    if tool.kind == ToolKind.MOCK or tool.idempotent:
        return "live"
    return "mock"


def tool_modes_for(case: SuiteCase, tools: Sequence[ToolRegistration],
                   override: ToolsMode | None) -> dict[str, ToolsMode]:
    modes: dict[str, ToolsMode] = {}
    for tool in tools:
        modes[tool.name] = override or case.tool_modes.get(tool.name) or default_tool_mode(tool)
    return modes


# -- starting ----------------------------------------------------------------------------


def suite_run_start(*, suite: Suite, config: SuiteRunConfig | dict[str, Any],
                    user: Any = None) -> SuiteRun:
    """Check the suite and the configuration, then store the suite run and its cells.
    Nothing runs yet: `advance` (through `drive` or the task) starts the runs."""
    config = _checked_config(config)
    cases = list(suite.cases.all())
    if not cases:
        raise SuiteConfigError(f"the suite {suite.name!r} has no cases", field="cases")
    endpoints = _endpoints(config.endpoints)
    for case in cases:
        _check_case(case, config, user)
    if _policy() is None:
        raise SuiteConfigError("there is no default error policy for the suite's runs")
    with transaction.atomic():
        suite_run = SuiteRun.objects.create(
            suite=suite, config=config.model_dump(mode="json"),
            created_by=user if getattr(user, "is_authenticated", False) else None)
        SuiteCell.objects.bulk_create(
            SuiteCell(suite_run=suite_run, case=case, case_name=case.name, endpoint=endpoint,
                      endpoint_name=endpoint.name, repeat=config.repeat,
                      assertions=case.assertions)
            for case in cases for endpoint in endpoints)
    return suite_run


def _checked_config(config: SuiteRunConfig | dict[str, Any]) -> SuiteRunConfig:
    if isinstance(config, SuiteRunConfig):
        return config
    try:
        return SuiteRunConfig.model_validate(config)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in first["loc"])
        raise SuiteConfigError(f"{field}: {first['msg']}", field=field) from exc


def _endpoints(names: list[str]) -> list[ModelEndpoint]:
    found = {e.name: e for e in ModelEndpoint.objects.filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise SuiteConfigError(f"no endpoint named {', '.join(map(repr, missing))}",
                               field="endpoints")
    return [found[n] for n in dict.fromkeys(names)]


def _check_case(case: SuiteCase, config: SuiteRunConfig, user: Any) -> None:
    where = f"case {case.name!r}"
    try:
        parse_conversation(case.messages)
    except ConversationError as exc:
        raise SuiteConfigError(f"{where}: {exc}", field="messages") from exc
    try:
        load_assertions(case.assertions)
    except ValidationError as exc:
        raise SuiteConfigError(f"{where}: its assertions are not valid: {exc}",
                               field="assertions") from exc
    tools = _case_tools(case)
    modes = tool_modes_for(case, tools, config.tools)
    waiting = [t.name for t in tools if t.requires_approval and modes[t.name] == "live"]
    if waiting:
        raise SuiteConfigError(f"{where}: {', '.join(waiting)} need a person's approval, "
                               "which a suite run cannot wait for: mock or record them",
                               field="tools")
    if "recorded" in modes.values() and case.source_run_id is None:
        raise SuiteConfigError(f"{where}: recorded tools need the run the case was saved "
                               "from, and it has none (use live or mock)", field="tools")
    if "recorded" in modes.values() and not _may_replay(case, user):
        # The recording holds that run's tool results: only for those who may see it.
        raise SuiteConfigError(f"{where}: recorded tools answer from the run the case was "
                               "saved from, which is not yours (use live or mock)",
                               field="tools")


def _may_replay(case: SuiteCase, user: Any) -> bool:
    """A person may replay the recording of a run they may see; `run_suite` (no user)
    is the operator's."""
    if user is None or not getattr(user, "is_authenticated", False):
        return user is None
    return run_get_for_user(str(case.source_run_id), user) is not None


def _tools_named(names: Iterable[str]) -> dict[str, ToolRegistration]:
    return {t.name: t for t in ToolRegistration.objects.filter(name__in=list(names))}


def _case_tools(case: SuiteCase,
                found: dict[str, ToolRegistration] | None = None) -> list[ToolRegistration]:
    """The case's tools, from `found` (the tools of several cases read at once) or read."""
    found = _tools_named(case.tools) if found is None else found
    missing = [n for n in case.tools if n not in found]
    if missing:
        raise SuiteConfigError(f"case {case.name!r}: no registered tool named "
                               f"{', '.join(map(repr, missing))}", field="tools")
    disabled = [n for n in case.tools if not found[n].enabled]
    if disabled:
        raise SuiteConfigError(f"case {case.name!r}: disabled tools {', '.join(disabled)}",
                               field="tools")
    return [found[n] for n in case.tools]


def _policy() -> ErrorPolicy | None:
    return default_policy() or ErrorPolicy.objects.order_by("pk").first()


# -- advancing ---------------------------------------------------------------------------


def advance(suite_run: SuiteRun) -> list[Run]:
    """Start the due ones in the room the runs that ended left, then evaluate those,
    then fill the room runs that ended meanwhile left: the runs started now. (Starting
    first keeps the evaluations off a free slot's wait.)"""
    started = start_due_runs(suite_run)
    if evaluate_finished(suite_run) and _has_ended_unevaluated(suite_run.pk):
        started += start_due_runs(suite_run)  # the room runs left while it evaluated
    _finish_if_done(suite_run)
    return started


def evaluate_finished(suite_run: SuiteRun) -> int:
    """Evaluate every ended run not yet evaluated: their rows read in a few queries
    (`run_records`), the verdicts stored in one transaction. Returns how many."""
    pending = list(SuiteCellRun.objects.filter(
        cell__suite_run=suite_run, passed__isnull=True,
        run__status__in=TERMINAL_STATUSES).select_related("cell", "run"))
    if not pending:
        return 0
    records = run_records([cell_run.run for cell_run in pending])
    assertions: dict[int, list[Assertion]] = {}
    verdicts: list[tuple[SuiteCellRun, RunVerdict]] = []
    for cell_run in pending:
        if cell_run.cell_id not in assertions:
            assertions[cell_run.cell_id] = load_assertions(cell_run.cell.assertions)
        verdicts.append((cell_run, verdict_of(cell_run.run, assertions[cell_run.cell_id],
                                              records[cell_run.run_id])))
    return _store_verdicts(verdicts)


def _store_verdicts(verdicts: Sequence[tuple[SuiteCellRun, RunVerdict]]) -> int:
    """Each verdict claimed (another driver may have stored it first), then each cell's
    counts raised by the ones claimed; all in one transaction."""
    evaluated: Counter[int] = Counter()
    passed: Counter[int] = Counter()
    now = timezone.now()
    with transaction.atomic():
        for cell_run, verdict in verdicts:
            claimed = SuiteCellRun.objects.filter(pk=cell_run.pk, passed__isnull=True).update(
                passed=verdict.passed, failures=verdict.failures, evaluated_at=now)
            if claimed:
                evaluated[cell_run.cell_id] += 1
                passed[cell_run.cell_id] += int(verdict.passed)
        for cell_id, count in evaluated.items():
            SuiteCell.objects.filter(pk=cell_id).update(
                evaluated=F("evaluated") + count, passed=F("passed") + passed[cell_id])
    return sum(evaluated.values())


def start_due_runs(suite_run: SuiteRun) -> list[Run]:
    """Start runs up to the concurrency, all in one transaction (`run_create_many`).
    The suite run's row is locked meanwhile, so two drivers (a driver enqueued again
    after a restart) never start more than that. A run that cannot start fails the
    suite run, and none of that step's runs start."""
    with transaction.atomic():
        locked = SuiteRun.objects.select_for_update().filter(
            pk=suite_run.pk, status=SuiteRunStatus.RUNNING).first()
        if locked is None:
            return []
        config = SuiteRunConfig.model_validate(locked.config)
        in_flight = SuiteCellRun.objects.filter(cell__suite_run=locked, passed__isnull=True
                                                ).exclude(run__status__in=TERMINAL_STATUSES).count()
        due = _due(locked, config.concurrency - in_flight)
        started: list[Run] = []
        if due:
            try:
                started = _start_many(locked, due, config)
            except SuiteConfigError as exc:
                _fail(locked, str(exc))
    suite_run.refresh_from_db()
    return started


def _due(suite_run: SuiteRun, room: int) -> list[tuple[SuiteCell, int]]:
    """Up to `room` runs still to start, by repetition first so that every cell fills
    evenly: only the `room` cells with the fewest runs started are read."""
    if room <= 0:
        return []
    cells = list(suite_run.cells.select_related("case", "endpoint")
                 .annotate(started=Count("cell_runs")).filter(started__lt=F("repeat"))
                 .order_by("started", "pk")[:room])
    cells.sort(key=lambda cell: cell.pk)
    most = max((c.repeat for c in cells), default=0)
    due: list[tuple[SuiteCell, int]] = [(cell, rep) for rep in range(most) for cell in cells
                                        if cell.started <= rep < cell.repeat]
    return due[:room]


def _start_many(suite_run: SuiteRun, due: Sequence[tuple[SuiteCell, int]],
                config: SuiteRunConfig) -> list[Run]:
    """The due runs created and enqueued together, each linked to its cell. Raises
    `SuiteConfigError` naming the cell of the first that cannot start."""
    policy = _policy()
    found = _tools_named({name for cell, _ in due if cell.case for name in cell.case.tools})
    requests = [_request_for(cell, policy, found, config) for cell, _ in due]
    try:
        runs = run_create_many(user=suite_run.created_by, requests=requests)
    except RunRequestError as exc:
        raise SuiteConfigError(f"{_cell_label(due[exc.index or 0][0])}: {exc}") from exc
    SuiteCellRun.objects.bulk_create(
        SuiteCellRun(cell=cell, run=run, repetition=repetition + 1)
        for (cell, repetition), run in zip(due, runs, strict=True))
    return runs


def _request_for(cell: SuiteCell, policy: ErrorPolicy | None,
                 found: dict[str, ToolRegistration], config: SuiteRunConfig) -> RunRequest:
    case, endpoint = cell.case, cell.endpoint
    try:
        if case is None or endpoint is None:
            raise SuiteConfigError("its case or endpoint was deleted during the suite run")
        if policy is None:
            raise SuiteConfigError("there is no default error policy")
        tools = _case_tools(case, found)
    except SuiteConfigError as exc:
        raise SuiteConfigError(f"{_cell_label(cell)}: {exc}") from exc
    return RunRequest(endpoint=endpoint, tools=tools, policy=policy,
                      messages=parse_conversation(case.messages),
                      replay=_replay_for(case, tool_modes_for(case, tools, config.tools)))


def _cell_label(cell: SuiteCell) -> str:
    return f"{cell.case_name} on {cell.endpoint_name}"


def _replay_for(case: SuiteCase, modes: dict[str, ToolsMode]) -> ReplaySection | None:
    """Live model, tools per mode; None (an ordinary live run) when every tool is live."""
    if all(mode == "live" for mode in modes.values()):
        return None
    recorded = "recorded" in modes.values() and case.source_run is not None
    return ReplaySection(model="live", tools="live", on_divergence="stop",
                         source=str(case.source_run_id) if case.source_run_id else None,
                         rounds=recording_of(case.source_run) if recorded and case.source_run
                         else [], tool_modes=modes)


def _finish_if_done(suite_run: SuiteRun) -> None:
    if not suite_run.is_active:
        return
    if suite_run.cells.filter(evaluated__lt=F("repeat")).exists():
        return
    SuiteRun.objects.filter(pk=suite_run.pk, status=SuiteRunStatus.RUNNING).update(
        status=SuiteRunStatus.FINISHED, finished_at=timezone.now())
    suite_run.refresh_from_db()


def _fail(suite_run: SuiteRun, message: str) -> None:
    SuiteRun.objects.filter(pk=suite_run.pk).update(
        status=SuiteRunStatus.FAILED, error_message=message, finished_at=timezone.now())
    suite_run.refresh_from_db()


# -- driving -----------------------------------------------------------------------------

Wait = Callable[[SuiteRun, list[Run]], None]


def _has_ended_unevaluated(suite_run_id: Any) -> bool:
    return SuiteCellRun.objects.filter(cell__suite_run_id=suite_run_id, passed__isnull=True,
                                       run__status__in=TERMINAL_STATUSES).exists()


def a_run_has_ended(suite_run_id: Any) -> bool:
    """Whether advancing the suite run has work: one of its runs in flight has ended,
    or none is in flight. One small query: what a driver asks between its steps."""
    unevaluated = SuiteCellRun.objects.filter(cell__suite_run_id=suite_run_id,
                                              passed__isnull=True)
    return (unevaluated.filter(run__status__in=TERMINAL_STATUSES).exists()
            or not unevaluated.exists())


def wait_for_a_finished_run(suite_run: SuiteRun, started: list[Run],
                            timeout: float = 600.0) -> None:
    """Until one of the suite run's runs in flight has ended (the workers run them)."""
    deadline = monotonic() + timeout
    while monotonic() < deadline:
        if a_run_has_ended(suite_run.pk):
            return
        sleep(POLL_SECONDS)


def drive(suite_run: SuiteRun, *, wait: Wait | None = None) -> SuiteRun:
    """Advance the suite run until it has ended; returns it refreshed."""
    wait = wait or wait_for_a_finished_run
    while True:
        started = advance(suite_run)
        suite_run.refresh_from_db()
        if not suite_run.is_active:
            return suite_run
        wait(suite_run, started)
