"""Stored module paths follow the modules' move into packages (migration 0005): an
existing database keeps its example tools (seed_demo does not refuse them) and its
queued tasks."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django_tasks_db.models import DBTaskResult

from tests.migration_support import migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("tools_app", "0004_tool_requires_approval_help")]
AFTER = [("tools_app", "0005_moved_modules")]


def test_old_module_paths_are_moved_to_the_packages() -> None:
    old_state = migrate(BEFORE).loader.project_state(BEFORE)
    registration = old_state.apps.get_model("tools_app", "ToolRegistration")
    registration.objects.create(name="get_weather",
                                python_path="tools_app.example_tools.get_weather",
                                json_schema={"type": "object"}, version_hash="x")
    registration.objects.create(name="mine", python_path="myproject.tools.mine",
                                json_schema={"type": "object"}, version_hash="y")
    old_state.apps.get_model("tools_app", "Run").objects.create(
        title="old", status="succeeded", snapshot={"tools": [
            {"name": "get_weather", "python_path": "tools_app.example_tools.get_weather"},
            {"name": "mine", "python_path": "myproject.tools.mine"}]})
    DBTaskResult.objects.create(task_path="tools_app.tasks.execute_run", args_kwargs={},
                        backend_name="default", queue_name="default")
    try:
        new_state = migrate(AFTER).loader.project_state(AFTER)
        moved = new_state.apps.get_model("tools_app", "ToolRegistration")
        assert dict(moved.objects.values_list("name", "python_path")) == {
            "get_weather": "tools_app.tools.example_tools.get_weather",
            "mine": "myproject.tools.mine",
        }
        snapshot = new_state.apps.get_model("tools_app", "Run").objects.get().snapshot
        assert [t["python_path"] for t in snapshot["tools"]] == [
            "tools_app.tools.example_tools.get_weather", "myproject.tools.mine"]
        assert list(DBTaskResult.objects.values_list("task_path", flat=True)) == [
            "tools_app.runs.tasks.execute_run"]
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
