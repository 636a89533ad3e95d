"""The app's modules moved into packages (tools_app.tools, tools_app.runs): point stored
paths at their new homes, so an existing database keeps working: the example tools'
registrations (else `seed_demo` would refuse the new path as a conflict), the tools
frozen in run snapshots (resumed or rerun as they were) and tasks queued but not yet
run."""

from django.db import migrations

MOVES = (
    ("tools_app.example_tools.", "tools_app.tools.example_tools."),
)
TASK_MOVES = (
    ("tools_app.tasks.", "tools_app.runs.tasks."),
)


def forwards(apps, schema_editor):
    registration = apps.get_model("tools_app", "ToolRegistration")
    for old, new in MOVES:
        for row in registration.objects.filter(python_path__startswith=old):
            row.python_path = new + row.python_path.removeprefix(old)
            row.save(update_fields=["python_path"])
    run = apps.get_model("tools_app", "Run")
    for old, new in MOVES:
        for row in run.objects.filter(snapshot__icontains=old).iterator(chunk_size=500):
            for tool in row.snapshot.get("tools", []):
                path = tool.get("python_path") or ""
                if path.startswith(old):
                    tool["python_path"] = new + path.removeprefix(old)
            row.save(update_fields=["snapshot"])
    try:
        task = apps.get_model("django_tasks_database", "DBTaskResult")
    except LookupError:
        return
    for old, new in TASK_MOVES:
        for row in task.objects.filter(task_path__startswith=old):
            row.task_path = new + row.task_path.removeprefix(old)
            row.save(update_fields=["task_path"])


def backwards(apps, schema_editor):
    registration = apps.get_model("tools_app", "ToolRegistration")
    for old, new in MOVES:
        for row in registration.objects.filter(python_path__startswith=new):
            row.python_path = old + row.python_path.removeprefix(new)
            row.save(update_fields=["python_path"])


class Migration(migrations.Migration):
    dependencies = [
        ("tools_app", "0004_tool_requires_approval_help"),
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
