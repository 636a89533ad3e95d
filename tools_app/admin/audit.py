"""The audit log in the admin: runs, rounds, tool calls, re-executions and events,
read-only, each row linking to its place on the run's timeline."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools_app.runs.debugger.durations import format_ms

from ..models import CallReexecution, Round, Run, RunEvent, ToolCall


class ReadOnlyAdmin[M: Model](admin.ModelAdmin[M]):
    """Viewable, never added, changed or deleted through the admin."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False


def timeline_link(run_id: object, anchor: str = "") -> SafeString:
    """A link to the run's timeline page (at one round or call with `anchor`)."""
    url = reverse("run_detail", args=[run_id]) + (f"#{anchor}" if anchor else "")
    return format_html('<a href="{}">timeline</a>', url)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin[Run]):
    list_display = ("id", "title", "status", "created_by", "rounds_count", "tool_calls_count",
                    "errors_count", "wall_time", "created_at", "timeline")
    list_filter = ("status", "endpoint", "policy", "created_by")
    search_fields = ("title", "error_type", "error_message")
    list_select_related = ("created_by",)
    date_hierarchy = "created_at"

    @admin.display(description="wall time", ordering="wall_ms")
    def wall_time(self, obj: Run) -> str:
        return format_ms(obj.wall_ms)

    @admin.display(description="timeline")
    def timeline(self, obj: Run) -> SafeString:
        return timeline_link(obj.pk)


@admin.register(Round)
class RoundAdmin(ReadOnlyAdmin[Round]):
    list_display = ("id", "run", "index", "status", "finish_reason", "input_tokens",
                    "output_tokens", "latency", "started_at", "timeline")
    list_filter = ("status", "finish_reason")
    search_fields = ("run__title",)
    list_select_related = ("run",)

    @admin.display(description="latency", ordering="latency_ms")
    def latency(self, obj: Round) -> str:
        return format_ms(obj.latency_ms)

    @admin.display(description="timeline")
    def timeline(self, obj: Round) -> SafeString:
        return timeline_link(obj.run_id, f"round-{obj.index}")


class CallColumns:
    """The duration and timeline columns of a list of tool calls or of their
    re-executions (a re-execution links to its call's place on the timeline)."""

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: ToolCall | CallReexecution) -> str:
        return format_ms(obj.duration_ms)

    @admin.display(description="timeline")
    def timeline(self, obj: ToolCall | CallReexecution) -> SafeString:
        call_id = obj.tool_call_id if isinstance(obj, CallReexecution) else obj.pk
        return timeline_link(obj.run_id, f"call-{call_id}")


@admin.register(ToolCall)
class ToolCallAdmin(CallColumns, ReadOnlyAdmin[ToolCall]):
    list_display = ("id", "run", "round_index", "call_index", "tool_name", "state", "is_error",
                    "duration", "started_at", "timeline")
    list_filter = ("state", "is_error", "stopped_run", "tool_name")
    search_fields = ("tool_name", "call_id", "error_type", "error_message")
    list_select_related = ("run", "round")

    @admin.display(description="round", ordering="round__index")
    def round_index(self, obj: ToolCall) -> int:
        return obj.round.index


@admin.register(CallReexecution)
class CallReexecutionAdmin(CallColumns, ReadOnlyAdmin[CallReexecution]):
    """Re-executions of tool calls by people (runs/debugger/reexecution.py): who ran what, how it
    ended."""

    list_display = ("id", "run", "tool_call", "number", "tool_name", "state", "approved",
                    "requested_by_label", "requested_at", "duration", "timeline")
    list_filter = ("state", "approved", "tool_name")
    search_fields = ("tool_name", "requested_by_label", "error_type", "error_message")
    list_select_related = ("run", "tool_call")


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin[RunEvent]):
    list_display = ("id", "run", "seq", "kind", "created_at")
    list_filter = ("kind",)
    search_fields = ("run__title", "kind")
    list_select_related = ("run",)
