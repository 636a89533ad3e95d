"""Suites as files (YAML or JSON, docs/suites.md): the file's shape (`SuiteFile`,
`CaseFile`), reading one with errors that name the case and the field at fault
(`SuiteFileError`), writing one back (`dump_suite_file`; `load(dump(x)) == x`), and the
conversion to and from the stored suite (`suite_file_of`, `save_suite_file`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tools_app.engine import json_nesting
from tools_app.engine.conversation import ConversationError, parse_conversation
from tools_app.models import Suite, SuiteCase
from tools_app.runs.snapshot.model import ToolsMode

from .assertions import KINDS, Assertion, dump_assertions, load_assertions

FileFormat = Literal["yaml", "json"]


class SuiteFileError(ValueError):
    """A suite file that cannot be used; the message names the case and the field."""


class CaseFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    messages: list[dict[str, Any]] = Field(min_length=1)
    """The starting conversation in OpenAI's chat format, as the playground takes it."""
    tools: list[str] = Field(default_factory=list)
    tool_modes: dict[str, ToolsMode] = Field(default_factory=dict)
    assertions: list[Assertion] = Field(default_factory=list)

    @field_validator("messages")
    @classmethod
    def _a_conversation(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            parse_conversation(messages)
        except ConversationError as exc:
            raise ValueError(str(exc)) from exc
        return messages


class SuiteFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    description: str = ""
    cases: list[CaseFile] = Field(default_factory=list)

    @field_validator("cases")
    @classmethod
    def _unique_names(cls, cases: list[CaseFile]) -> list[CaseFile]:
        seen: set[str] = set()
        for case in cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}: case names must differ")
            seen.add(case.name)
        return cases


def load_suite_file(path: str | Path) -> SuiteFile:
    """Read a suite file (.yaml, .yml or .json); SuiteFileError if it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteFileError(f"cannot read the suite file {path}: {exc.strerror}") from exc
    return parse_suite_text(text, "json" if str(path).endswith(".json") else "yaml")


def parse_suite_text(text: str, fmt: FileFormat) -> SuiteFile:
    try:
        data = json_nesting.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise SuiteFileError(f"the suite file is not valid {fmt.upper()}: {exc}") from exc
    except RecursionError:  # YAML nested deeper than its parser follows
        raise SuiteFileError(f"the suite file is not valid {fmt.upper()}: nested too deeply"
                             ) from None
    if not isinstance(data, dict):
        raise SuiteFileError("the suite file must hold one object with name and cases")
    try:
        return SuiteFile.model_validate(data)
    except ValidationError as exc:
        raise SuiteFileError(describe_errors(exc, data)) from exc


def describe_errors(exc: ValidationError, data: dict[str, Any]) -> str:
    """Each problem as 'case NAME (cases[i]), field PATH: message'."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = list(error["loc"])
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
            where = f"{_case_label(data, loc[1])}, field {_path(loc[2:]) or '(the case)'}"
        else:
            where = f"field {_path(loc) or 'the file'}"
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


def _case_label(data: dict[str, Any], index: int) -> str:
    cases = data.get("cases")
    name = None
    if isinstance(cases, list) and index < len(cases) and isinstance(cases[index], dict):
        name = cases[index].get("name")
    return f"case {name!r} (cases[{index}])" if name else f"cases[{index}]"


def _path(loc: list[Any]) -> str:
    # The union's tag (an assertion's or a check's kind, right after the list index or
    # "check") is a step pydantic adds: leave it out.
    parts = [p for i, p in enumerate(loc)
             if not (p in KINDS and i and (isinstance(loc[i - 1], int) or loc[i - 1] == "check"))]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text


def suite_file_data(suite_file: SuiteFile) -> dict[str, Any]:
    return suite_file.model_dump(mode="json", by_alias=True)


def dump_suite_file(suite_file: SuiteFile, fmt: FileFormat = "yaml") -> str:
    data = suite_file_data(suite_file)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# -- stored suites -----------------------------------------------------------------------


def case_file_of(case: SuiteCase) -> CaseFile:
    return CaseFile(name=case.name, messages=case.messages, tools=case.tools,
                    tool_modes=case.tool_modes, assertions=load_assertions(case.assertions))


def suite_file_of(suite: Suite) -> SuiteFile:
    return SuiteFile(name=suite.name, description=suite.description,
                     cases=[case_file_of(c) for c in suite.cases.all()])


def save_suite_file(suite_file: SuiteFile, *, user: Any = None) -> Suite:
    """Store the file as the suite of its name: created, or its cases replaced."""
    with transaction.atomic():
        suite, created = Suite.objects.get_or_create(
            name=suite_file.name,
            defaults={"description": suite_file.description,
                      "created_by": user if getattr(user, "is_authenticated", False) else None})
        if not created:
            suite.description = suite_file.description
            suite.save(update_fields=["description", "updated_at"])
            suite.cases.all().delete()
        SuiteCase.objects.bulk_create(
            SuiteCase(suite=suite, name=c.name, position=i, messages=c.messages,
                      tools=c.tools, tool_modes=c.tool_modes,
                      assertions=dump_assertions(c.assertions))
            for i, c in enumerate(suite_file.cases))
    return suite
