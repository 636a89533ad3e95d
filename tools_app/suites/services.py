"""Writes on suites and cases, keyword-only and atomic: a suite created, a case saved
from a run ("Save as a test case": its conversation and its calls, the calls as editable
expectations) or edited, with errors that name the field at fault (`CaseError`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from tools_app.engine.conversation import to_openai_messages
from tools_app.models import Run, Suite, SuiteCase, ToolCall
from tools_app.runs.snapshot.model import snapshot_of

from .argument_checks import Equals
from .assertions import (
    ArgumentsMatch,
    Assertion,
    CallSequence,
    NoError,
    NoToolCalled,
    dump_assertions,
)
from .files import CaseFile, describe_errors

User = AbstractBaseUser | AnonymousUser | None


class CaseError(ValueError):
    """A case or suite that cannot be saved as given; `field` names the part at fault."""

    def __init__(self, message: str, *, field: str | None = None,
                 conflict: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.conflict = conflict
        """A name already taken (the API's 409)."""


def suite_create(*, name: str, description: str = "", user: User = None) -> Suite:
    name = name.strip()
    if not name:
        raise CaseError("A suite needs a name", field="name")
    if len(name) > 100:
        raise CaseError("A suite's name has at most 100 characters", field="name")
    if Suite.objects.filter(name=name).exists():
        raise CaseError(f"A suite named {name!r} already exists", field="name", conflict=True)
    owner: Any = user if user is not None and user.is_authenticated else None
    return Suite.objects.create(name=name, description=description, created_by=owner)


def expectations_of(run: Run, calls: list[ToolCall] | None = None) -> list[Assertion]:
    """A run's calls as assertions: the same calls in the same order, each call's
    arguments as they were, and no error if the run had none. Given some of its calls
    (a selection in /calls/), those in that order, others allowed between them."""
    every = list(ToolCall.objects.filter(run=run).select_related("round").order_by(
        "round__index", "call_index"))
    chosen = every if calls is None else [c for c in every if c.pk in {x.pk for x in calls}]
    if not chosen:
        expected: list[Assertion] = [NoToolCalled()]
    else:
        expected = [CallSequence(tools=tuple(c.tool_name for c in chosen),
                                 match="exact" if len(chosen) == len(every) else "in_order")]
        expected += [ArgumentsMatch(tool=c.tool_name, pointer="", check=Equals(value=c.arguments))
                     for c in chosen if c.arguments is not None]
    if run.status == "succeeded" and not run.errors_count:
        expected.append(NoError())
    return expected


def case_from_run(run: Run, *, name: str, calls: list[ToolCall] | None = None) -> CaseFile:
    snapshot = snapshot_of(run)
    return CaseFile(name=name, messages=to_openai_messages(snapshot.chat_messages()),
                    tools=snapshot.tool_names(), assertions=expectations_of(run, calls))


def case_save_from_run(*, run: Run, suite: Suite, name: str,
                       calls: list[ToolCall] | None = None) -> SuiteCase:
    name = name.strip() or (run.title or "case")[:100]
    try:
        draft = case_from_run(run, name=name, calls=calls)
    except ValidationError as exc:
        raise CaseError(f"This run cannot become a case: {exc.errors()[0]['msg']}") from exc
    return _store(suite, draft, source_run=run)


def cases_save_from_calls(*, calls: list[ToolCall], suite: Suite,
                          name: str) -> list[SuiteCase]:
    """"Save as a test case" on calls ticked in /calls/: one case per run they belong
    to (its conversation, the ticked calls as its expectations), the runs in the order
    of their first ticked call; with several runs the cases are named "NAME 1",
    "NAME 2", ... All are saved or none."""
    if not calls:
        raise CaseError("Tick the calls to save as a test case", field="call")
    by_run: dict[Any, list[ToolCall]] = {}
    for call in calls:
        by_run.setdefault(call.run_id, []).append(call)
    runs = Run.objects.in_bulk(list(by_run))
    name = name.strip()
    with transaction.atomic():
        return [case_save_from_run(
            run=runs[run_id], suite=suite, calls=chosen,
            name=f"{name or (runs[run_id].title or 'case')[:90]} {number}"
            if len(by_run) > 1 else name)
            for number, (run_id, chosen) in enumerate(by_run.items(), start=1)]


def case_create(*, suite: Suite, data: dict[str, Any]) -> SuiteCase:
    return _store(suite, _checked(data))


def case_update(*, case: SuiteCase, data: dict[str, Any]) -> SuiteCase:
    """Replace a case's name, messages, tools, tool modes and assertions."""
    checked = _checked(data)
    case.name, case.messages, case.tools = checked.name, checked.messages, checked.tools
    case.tool_modes = checked.tool_modes
    case.assertions = dump_assertions(checked.assertions)
    try:
        with transaction.atomic():
            case.save()
    except IntegrityError as exc:
        raise CaseError(f"The suite already has a case named {checked.name!r}",
                        field="name", conflict=True) from exc
    return case


def _checked(data: dict[str, Any]) -> CaseFile:
    try:
        return CaseFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        raise CaseError(describe_errors(exc, {}).removeprefix("field "),
                        field=str(first["loc"][0]) if first["loc"] else None) from exc


def _store(suite: Suite, case: CaseFile, *, source_run: Run | None = None) -> SuiteCase:
    position = suite.cases.count()
    try:
        with transaction.atomic():
            return SuiteCase.objects.create(
                suite=suite, name=case.name, position=position, messages=case.messages,
                tools=case.tools, tool_modes=case.tool_modes,
                assertions=dump_assertions(case.assertions), source_run=source_run)
    except IntegrityError as exc:
        raise CaseError(f"The suite {suite.name!r} already has a case named {case.name!r}",
                        field="name", conflict=True) from exc
