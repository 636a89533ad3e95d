"""sync_tools: @tool functions -> ToolRegistration rows, with version hashes."""

import hashlib
import importlib
import io
import json
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from pytest_django.fixtures import Settings

from tools_app.models import ToolKind, ToolRegistration
from tools_app.tools.registry import ToolSyncError, compute_version_hash, sync_tools

pytestmark = pytest.mark.django_db

WriteModule = Callable[[str], str]

TWO_TOOLS = '''
from typing import Annotated
from pydantic import Field
from tools_app.engine import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(timeout=3.5, requires_approval=True, idempotent=True, strict=True,
      return_behavior="immediate")
def shout(text: Annotated[str, Field(description="What to shout")]) -> str:
    """Shout the text."""
    return text.upper()
'''


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write (or rewrite) one uniquely named module; return its name."""
    name = f"synctest_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))
    # No .pyc: a rewrite within the same second could otherwise load stale bytecode.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)

    def write(source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return name

    yield write
    sys.modules.pop(name, None)


def test_it_creates_a_registration_per_tool(write_module: WriteModule) -> None:
    module = write_module(TWO_TOOLS)
    report = sync_tools([module])
    assert report.created == ["add", "shout"]
    assert report.updated == report.unchanged == report.disabled == []

    add = ToolRegistration.objects.get(name="add")
    assert add.kind == ToolKind.PYTHON
    assert add.python_path == f"{module}.add"
    assert add.description == "Add two numbers."
    assert add.json_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    assert (add.timeout_seconds, add.requires_approval, add.idempotent, add.strict) == (
        None, False, False, False)
    assert add.return_behavior == "to_llm"
    assert add.enabled is True
    assert add.version_hash == compute_version_hash(add)
    assert len(add.version_hash) == 64


def test_it_copies_the_tool_options(write_module: WriteModule) -> None:
    sync_tools([write_module(TWO_TOOLS)])
    shout = ToolRegistration.objects.get(name="shout")
    assert shout.timeout_seconds == 3.5
    assert shout.requires_approval is True
    assert shout.idempotent is True
    assert shout.strict is True
    assert shout.return_behavior == "immediate"
    assert shout.json_schema["additionalProperties"] is False
    assert shout.json_schema["properties"]["text"]["description"] == "What to shout"


def test_it_leaves_unchanged_tools_untouched(write_module: WriteModule) -> None:
    module = write_module(TWO_TOOLS)
    sync_tools([module])
    before = {t.name: (t.updated_at, t.version_hash) for t in ToolRegistration.objects.all()}

    report = sync_tools([module])

    assert report.unchanged == ["add", "shout"]
    assert report.created == report.updated == report.disabled == []
    after = {t.name: (t.updated_at, t.version_hash) for t in ToolRegistration.objects.all()}
    assert after == before


def test_it_updates_a_changed_tool_with_a_new_hash(write_module: WriteModule) -> None:
    module = write_module(TWO_TOOLS)
    sync_tools([module])
    old = ToolRegistration.objects.get(name="add")
    untouched = ToolRegistration.objects.get(name="shout")

    write_module(TWO_TOOLS.replace(
        'def add(a: int, b: int) -> int:\n    """Add two numbers."""',
        'def add(a: int, b: int, c: int = 0) -> int:\n    """Add up to three numbers."""',
    ))
    report = sync_tools([module])

    assert report.updated == ["add"]
    assert report.unchanged == ["shout"]
    new = ToolRegistration.objects.get(name="add")
    assert new.pk == old.pk
    assert new.description == "Add up to three numbers."
    assert "c" in new.json_schema["properties"]
    assert new.version_hash != old.version_hash
    assert new.version_hash == compute_version_hash(new)
    assert new.updated_at > old.updated_at
    assert ToolRegistration.objects.get(name="shout").updated_at == untouched.updated_at


def test_an_option_change_alone_is_a_new_version(write_module: WriteModule) -> None:
    module = write_module(TWO_TOOLS)
    sync_tools([module])
    old_hash = ToolRegistration.objects.get(name="shout").version_hash

    write_module(TWO_TOOLS.replace("timeout=3.5", "timeout=9"))
    assert sync_tools([module]).updated == ["shout"]
    shout = ToolRegistration.objects.get(name="shout")
    assert shout.timeout_seconds == 9
    assert shout.version_hash != old_hash


def test_it_repairs_a_row_edited_behind_its_back(write_module: WriteModule) -> None:
    module = write_module(TWO_TOOLS)
    sync_tools([module])
    ToolRegistration.objects.filter(name="add").update(description="edited in SQL")

    assert sync_tools([module]).updated == ["add"]
    assert ToolRegistration.objects.get(name="add").description == "Add two numbers."


def test_it_disables_a_removed_tool_and_re_enables_it_when_it_returns(
    write_module: WriteModule,
) -> None:
    module = write_module(TWO_TOOLS)
    sync_tools([module])

    write_module(TWO_TOOLS.split("@tool(timeout")[0])
    report = sync_tools([module])
    assert report.disabled == ["shout"]
    assert report.unchanged == ["add"]
    assert ToolRegistration.objects.get(name="shout").enabled is False

    assert sync_tools([module]).disabled == []  # already disabled: nothing to report

    write_module(TWO_TOOLS)
    report = sync_tools([module])
    assert report.updated == ["shout"]
    assert ToolRegistration.objects.get(name="shout").enabled is True


def test_it_disables_a_tool_whose_module_is_gone(write_module: WriteModule) -> None:
    ToolRegistration.objects.create(
        name="ghost", kind=ToolKind.PYTHON, python_path="no_such_module_xyz.ghost",
        json_schema={"type": "object"},
    )
    report = sync_tools([write_module(TWO_TOOLS)])
    assert report.disabled == ["ghost"]
    assert ToolRegistration.objects.get(name="ghost").enabled is False


def test_it_keeps_a_python_tool_from_another_module_that_still_exists(
    write_module: WriteModule,
) -> None:
    ToolRegistration.objects.create(
        name="weather", kind=ToolKind.PYTHON,
        python_path="tools_app.tools.example_tools.get_weather", json_schema={"type": "object"},
    )
    ToolRegistration.objects.create(name="mocked", kind=ToolKind.MOCK,
                                    json_schema={"type": "object"})
    report = sync_tools([write_module(TWO_TOOLS)])
    assert report.disabled == []
    assert ToolRegistration.objects.filter(enabled=True).count() == 4


@pytest.mark.parametrize(
    ("kind", "python_path"),
    [(ToolKind.HTTP, ""), (ToolKind.PYTHON, "tools_app.tools.example_tools.get_weather")],
)
def test_a_name_taken_by_another_tool_is_an_error_and_changes_nothing(
    write_module: WriteModule, kind: str, python_path: str
) -> None:
    ToolRegistration.objects.create(name="add", kind=kind, python_path=python_path,
                                    json_schema={"type": "object"})
    module = write_module(TWO_TOOLS)
    with pytest.raises(ToolSyncError, match=rf"tool name 'add' is already registered by .*"
                       rf"{module}\.add cannot use it"):
        sync_tools([module])
    assert list(ToolRegistration.objects.values_list("name", flat=True)) == ["add"]


def test_the_same_name_in_two_modules_is_an_error(
    write_module: WriteModule, tmp_path: Path
) -> None:
    first = write_module(TWO_TOOLS)
    (tmp_path / f"{first}_copy.py").write_text(textwrap.dedent(TWO_TOOLS))
    try:
        with pytest.raises(ToolSyncError, match="tool 'add' is declared twice"):
            sync_tools([first, f"{first}_copy"])
    finally:
        sys.modules.pop(f"{first}_copy", None)
    assert not ToolRegistration.objects.exists()


def test_the_version_hash_is_the_sha256_of_the_canonical_definition() -> None:
    tool = ToolRegistration(
        name="t", description="Ünïcode", json_schema={"type": "object", "properties": {}},
        kind=ToolKind.MOCK, config={"b": 1, "a": 2}, timeout_seconds=1.5,
    )
    definition = {
        "name": "t", "description": "Ünïcode",
        "schema": {"type": "object", "properties": {}}, "kind": "mock", "python_path": "",
        "config": {"a": 2, "b": 1}, "return_behavior": "to_llm", "strict": False,
        "timeout": 1.5, "requires_approval": False, "idempotent": False,
    }
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert compute_version_hash(tool) == hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "other"), ("description", "changed"), ("json_schema", {"type": "object"}),
        ("kind", ToolKind.HTTP), ("python_path", "m.f"), ("config", {"url": "x"}),
        ("return_behavior", "immediate"), ("strict", True), ("timeout_seconds", 2.0),
        ("requires_approval", True), ("idempotent", True),
    ],
)
def test_every_definition_field_changes_the_hash(field: str, value: object) -> None:
    tool = ToolRegistration(name="t", json_schema={"type": "object", "properties": {}})
    before = compute_version_hash(tool)
    setattr(tool, field, value)
    assert compute_version_hash(tool) != before


def test_enabling_or_disabling_is_not_a_new_version() -> None:
    tool = ToolRegistration(name="t", json_schema={"type": "object"})
    before = compute_version_hash(tool)
    tool.enabled = not tool.enabled
    assert compute_version_hash(tool) == before


def test_the_command_prints_the_counts(
    write_module: WriteModule, settings: Settings
) -> None:
    settings.AGENTFORGE_TOOL_MODULES = [write_module(TWO_TOOLS)]
    out = io.StringIO()
    call_command("sync_tools", stdout=out)
    assert out.getvalue() == "sync_tools: created 2, updated 0, unchanged 0, disabled 0\n"
    out = io.StringIO()
    call_command("sync_tools", stdout=out)
    assert out.getvalue() == "sync_tools: created 0, updated 0, unchanged 2, disabled 0\n"


def test_the_command_reports_a_conflict_as_a_command_error(
    write_module: WriteModule, settings: Settings
) -> None:
    settings.AGENTFORGE_TOOL_MODULES = [write_module(TWO_TOOLS)]
    ToolRegistration.objects.create(name="shout", kind=ToolKind.MOCK,
                                    json_schema={"type": "object"})
    with pytest.raises(CommandError, match="'shout' is already registered by a mock tool"):
        call_command("sync_tools", stdout=io.StringIO())


def test_the_default_modules_register_the_demo_tools() -> None:
    report = sync_tools()
    assert sorted(report.created) == ["always_fails", "calculator", "convert_units",
                                      "get_weather", "lookup_order", "slow_tool"]
    assert ToolRegistration.objects.get(name="lookup_order").idempotent is True
