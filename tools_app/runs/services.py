"""Writes. Keyword-only, typed, atomic; views and the API call these, never the ORM."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from tools_app.runs.debugger.breakpoints import BreakpointError, cancel_paused, checked_breakpoints
from tools_app.runs.snapshot.frozen import build_snapshot, run_title
from tools_app.runs.snapshot.model import PolicySnapshot, ReplaySection
from tools_app.runs.snapshot.parameters import ParameterError, check_parameters
from tools_app.runs.snapshot.policy import PolicyOverrideError, checked_overrides
from tools_app.runs.store.leases import cancel_now
from tools_app.runs.tasks import queue_run, queue_runs

from ..engine import (
    ChatMessage,
    ChatRequestParameters,
    SystemMessage,
    UserMessage,
    validate_specifications,
)
from ..engine.spec import ToolSpecification
from ..models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunStatus,
    ToolRegistration,
)


class RunRequestError(ValueError):
    """The run cannot start as asked; the message says exactly why, `field` names the
    request field at fault (when one is) and `problems` its sub-fields' problems."""

    def __init__(self, message: str, *, field: str | None = None,
                 problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.problems = problems or {}
        self.index: int | None = None
        """In `run_create_many`, the position of the request at fault."""


def run_create(
    *,
    user: AbstractBaseUser | AnonymousUser | None,
    endpoint: ModelEndpoint,
    tools: Sequence[ToolRegistration],
    policy: ErrorPolicy,
    messages: Sequence[ChatMessage],
    parameters: ChatRequestParameters | None = None,
    parent: Run | None = None,
    policy_overrides: dict[str, Any] | None = None,
    breakpoints: Any = None,
    replay: ReplaySection | None = None,
) -> Run:
    """Freeze everything the run uses, store it queued, and enqueue it after commit.

    `policy_overrides` changes policy values for this run only (the playground's
    parallel switch and max rounds), validated as the admin validates a policy; fields
    a run may not override are refused. `parameters` are checked against the endpoint's
    provider (snapshot/parameters.py); only staff may change its model. `replay` says
    which tools answer from a recording or a mock instead of live (a suite run's cases).
    """
    request = RunRequest(endpoint=endpoint, tools=tools, policy=policy, messages=messages,
                         parameters=parameters, parent=parent,
                         policy_overrides=policy_overrides, breakpoints=breakpoints,
                         replay=replay)
    return queue_run(**_queued_fields(user, request))


@dataclass(frozen=True)
class RunRequest:
    """One run to start, as `run_create` takes it (for `run_create_many`)."""

    endpoint: ModelEndpoint
    tools: Sequence[ToolRegistration]
    policy: ErrorPolicy
    messages: Sequence[ChatMessage]
    parameters: ChatRequestParameters | None = None
    parent: Run | None = None
    policy_overrides: dict[str, Any] | None = None
    breakpoints: Any = None
    replay: ReplaySection | None = None


def run_create_many(*, user: AbstractBaseUser | AnonymousUser | None,
                    requests: Sequence[RunRequest]) -> list[Run]:
    """`run_create` for several runs in one transaction: every request is checked
    first, then all are stored queued and enqueued after the commit, or none. A request
    that cannot start raises `RunRequestError` with `index` its position."""
    fields: list[dict[str, Any]] = []
    for index, request in enumerate(requests):
        try:
            fields.append(_queued_fields(user, request))
        except RunRequestError as exc:
            exc.index = index
            raise
    return queue_runs(fields)


def _queued_fields(user: AbstractBaseUser | AnonymousUser | None,
                   request: RunRequest) -> dict[str, Any]:
    """The checked request frozen: the stored run's fields (`queue_run`'s)."""
    endpoint, tools, messages = request.endpoint, request.tools, request.messages
    _check_request(tools, messages)
    parameters = request.parameters or ChatRequestParameters()
    try:
        check_parameters(parameters, endpoint_kind=endpoint.kind,
                         endpoint_model=endpoint.model, user=user)
    except ParameterError as exc:
        raise RunRequestError(str(exc), field="parameters", problems=exc.problems) from exc
    snapshot = build_snapshot(endpoint=endpoint, tools=tools, policy=request.policy,
                              messages=messages, parameters=parameters)
    frozen_policy = snapshot.policy.model_dump()
    try:
        overrides = checked_overrides(frozen_policy, request.policy_overrides or {})
    except PolicyOverrideError as exc:
        raise RunRequestError(str(exc), field="policy_overrides",
                              problems=exc.problems) from exc
    # Which values this run changed from its policy: the run header marks them.
    snapshot.policy_changed = sorted(
        name for name, value in overrides.items() if frozen_policy.get(name) != value)
    snapshot.policy = PolicySnapshot.model_validate(frozen_policy | overrides)
    try:  # where the run will pause (runs.debugger.breakpoints); frozen with the rest
        snapshot.breakpoints = checked_breakpoints(request.breakpoints, [t.name for t in tools])
    except BreakpointError as exc:
        raise RunRequestError(str(exc), field="breakpoints") from exc
    snapshot.replay = request.replay
    return {"created_by": user if user is not None and user.is_authenticated else None,
            "endpoint": endpoint, "policy": request.policy, "parent": request.parent,
            "title": run_title(messages), "snapshot": snapshot.stored()}


def _check_request(tools: Sequence[ToolRegistration], messages: Sequence[ChatMessage]) -> None:
    if not any(isinstance(m, UserMessage) for m in messages):
        raise RunRequestError("A run needs at least one user message")
    disabled = [t.name for t in tools if not t.enabled]
    if disabled:
        raise RunRequestError(f"Disabled tools cannot be used: {', '.join(disabled)}")
    try:
        validate_specifications(
            ToolSpecification(name=t.name, description=t.description, parameters=t.json_schema)
            for t in tools
        )
    except ValueError as exc:
        raise RunRequestError(str(exc)) from exc


def conversation(*, system_prompt: str = "", user_message: str) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    if system_prompt.strip():
        messages.append(SystemMessage(text=system_prompt))
    messages.append(UserMessage(text=user_message))
    return messages


def run_cancel(*, run: Run, user: AbstractBaseUser | AnonymousUser | None = None) -> Run:
    """Queued runs stop at once; running ones are cancelled by their worker's heartbeat.
    A run paused at a breakpoint is cancelled as its Abort would: the pause resolved by
    `user`."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_terminal:
            return locked
        if locked.status in (RunStatus.QUEUED, RunStatus.INTERRUPTED):
            cancel_now(locked, "Cancelled by the user before it ran")
        elif locked.status == RunStatus.WAITING:  # no worker holds it: end it here
            pause = locked.open_pause
            if pause is not None:
                cancel_paused(locked, pause, user)
            else:
                cancel_now(locked, "Cancelled by the user while it waited for a decision")
        else:
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    run.refresh_from_db()
    return run
