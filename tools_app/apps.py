from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "AgentForge tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .live import notify, sessions  # noqa: F401  (connects the receivers)
