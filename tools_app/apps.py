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

        post_migrate.connect(_ensure_search_index, sender=self)
        post_migrate.connect(_ensure_audit_triggers, sender=self)


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
