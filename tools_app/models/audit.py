"""Rows the audit log keeps by database triggers: tool slots and error groups."""

from __future__ import annotations

from django.db import models


class ToolCallSlot(models.Model):
    """A tool's calls and errors per quarter hour (UTC) of their moment (the start, or the
    run's creation for a call that never started): what a tool page's chart draws for
    staff, without reading the tool's calls. Written only by database triggers on
    `ToolCall` (audit.triggers), so every insert, update and delete of a call, by
    whatever path, is counted; never edited here."""

    tool_name = models.CharField(max_length=200)
    slot = models.DateTimeField(help_text="The start of the quarter hour (UTC).")
    calls = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tool_name", "slot"],
                                               name="toolcallslot_unique")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.slot:%Y-%m-%d %H:%M}: {self.calls}"


class ToolErrorGroup(models.Model):
    """A tool's erring calls grouped as its page lists them (error type and the first 300
    characters of the message): how many, and the newest one's id. Written only by
    database triggers on `ToolCall` (audit.triggers), like `ToolCallSlot`."""

    tool_name = models.CharField(max_length=200)
    error_type = models.CharField(max_length=200)
    head = models.TextField(help_text="The first 300 characters of the message.")
    calls = models.BigIntegerField(default=0)
    last_call_id = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tool_name", "error_type", "head"],
                                               name="toolerrorgroup_unique")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.error_type}: {self.calls}"
