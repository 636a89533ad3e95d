"""Writes. Keyword-only, typed, atomic; views and the API call these, never the ORM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

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
from .leases import cancel_now
from .lifecycle import create_queued
from .snapshot import build_snapshot
from .storage import NUL_REPLACEMENT
from .tasks import enqueue_run


class RunRequestError(ValueError):
    """The run cannot start as asked; the message says exactly why."""


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
) -> Run:
    """Freeze everything the run uses, store it queued, and enqueue it after commit.

    `policy_overrides` changes policy values for this run only (the playground's
    parallel switch and max rounds); unknown keys are refused.
    """
    _check_request(tools, messages)
    snapshot = build_snapshot(endpoint=endpoint, tools=tools, policy=policy,
                              messages=messages, parameters=parameters or ChatRequestParameters())
    snapshot["policy"] |= _checked_overrides(snapshot["policy"], policy_overrides or {})
    with transaction.atomic():
        run = create_queued(
            created_by=user if user is not None and user.is_authenticated else None,
            endpoint=endpoint, policy=policy, parent=parent,
            title=_title(messages), snapshot=snapshot,
        )
        transaction.on_commit(lambda: enqueue_run(str(run.pk)))
    return run


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


def _checked_overrides(policy: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - set(policy) - {"id"})
    if unknown:
        raise RunRequestError(f"Unknown policy fields: {', '.join(unknown)}")
    rounds = overrides.get("max_round_trips")
    if rounds is not None and not (isinstance(rounds, int) and 1 <= rounds <= 1000):
        raise RunRequestError("max_round_trips must be an integer from 1 to 1000")
    return {k: v for k, v in overrides.items() if v is not None}


def _title(messages: Sequence[ChatMessage]) -> str:
    first = next((m for m in messages if isinstance(m, UserMessage)), None)
    text = " ".join((first.text if first else "").split()).replace("\x00", NUL_REPLACEMENT)
    return text[:197] + "..." if len(text) > 200 else text


def conversation(*, system_prompt: str = "", user_message: str) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    if system_prompt.strip():
        messages.append(SystemMessage(text=system_prompt))
    messages.append(UserMessage(text=user_message))
    return messages


def run_cancel(*, run: Run) -> Run:
    """Queued runs stop at once; running ones are cancelled by their worker's heartbeat."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_terminal:
            return locked
        if locked.status in (RunStatus.QUEUED, RunStatus.INTERRUPTED):
            cancel_now(locked, "Cancelled by the user before it ran")
        else:
            Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    run.refresh_from_db()
    return run
