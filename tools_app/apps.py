from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "AgentForge tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .live import notify, sessions  # noqa: F401  (connects the receivers)
        from .otlp_export import exporter  # noqa: F401  (connects its receiver)

        _register_suite_recovery()
        _register_idle_received_runs()
        post_migrate.connect(_ensure_search_index, sender=self)
        post_migrate.connect(_ensure_audit_triggers, sender=self)


def _register_suite_recovery() -> None:
    """Suite runs whose driver was lost are driven again by the workers' start and
    sweeps (`suites.recovery`); runs, below suites, takes them as recovery steps."""
    from .runs.sweeps import add_recovery_step
    from .suites.recovery import drive_again_at_start, drive_lost_suite_runs

    add_recovery_step("start", "driving the active suite runs again", drive_again_at_start)
    add_recovery_step("sweep", "driving suite runs whose driver was lost",
                      drive_lost_suite_runs)


def _register_idle_received_runs() -> None:
    """Received runs whose spans stopped before their root span came are ended as
    incomplete by the workers' sweeps (`ingest.idle`)."""
    from .ingest.idle import end_idle_runs
    from .runs.sweeps import add_recovery_step

    add_recovery_step("sweep", "ending received runs whose spans stopped coming",
                      end_idle_runs)


def _ensure_search_index(using: str = "default", **kwargs: Any) -> None:
    """A table rebuild by a later migration drops SQLite's search triggers: put them back
    (`audit.search_index`)."""
    from tools_app.audit.search_index import ensure_search_index

    ensure_search_index(connections[using])


def _ensure_audit_triggers(using: str = "default", **kwargs: Any) -> None:
    """The same for the triggers that keep the audit log's copied columns
    (`audit.triggers`)."""
    from tools_app.audit.triggers import ensure_audit_triggers

    ensure_audit_triggers(connections[using])
