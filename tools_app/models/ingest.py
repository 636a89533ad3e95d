"""Spans received over OTLP (tools_app/ingest): each stored once, and which run a trace
or a conversation became."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .runs import Run


class IngestedSpan(models.Model):
    """One received span, as the receiver read it (`data`: name, times, status,
    attributes, events, resource; untrusted text cleaned). The run's rounds and calls
    are rebuilt from its spans whenever one arrives, so a late span fills its place."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ingested_spans")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    start_ns = models.BigIntegerField(default=0)
    data = models.JSONField(default=dict)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # The same span sent twice is stored once.
            models.UniqueConstraint(fields=["trace_id", "span_id"], name="ingestedspan_unique"),
        ]
        indexes = [
            # A run's spans in time order; and the columns a rebuild reads of each
            # (receive._spans_of), from the index alone: SQLite keeps them after `data`
            # in the row, so reading them there would read all of its JSON too.
            models.Index(fields=["run", "start_ns", "trace_id", "span_id", "received_at",
                                 "id"], name="ingestedspan_run_rows"),
        ]

    def __str__(self) -> str:
        return f"span {self.span_id} of trace {self.trace_id}"


class IngestedRunKey(models.Model):
    """What made a run of a user's spans: `trace:<trace id>` or `conversation:<id>`
    (`gen_ai.conversation.id`, OpenInference's `session.id`)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="ingested_run_keys")
    key = models.CharField(max_length=300)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ingest_keys")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="ingestedrunkey_unique"),
        ]

    def __str__(self) -> str:
        return self.key


class IngestedLayout(models.Model):
    """How a received run's rows were last built from its spans (tools_app/ingest/rows):
    each round's key and its calls' keys, in the rows' order, with a digest of the
    fields each row was last written with; and the digest of what its snapshot was
    last built from (an unchanged one is not built or written again)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True,
                               related_name="ingested_layout")
    rows = models.JSONField(default=list)
    snapshot_digest = models.CharField(max_length=32, blank=True, default="")

    def __str__(self) -> str:
        return f"layout of run {self.run_id}"
