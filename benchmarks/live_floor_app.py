"""The product's server with its live batches read but not rendered, for bench_live's
floor: everything a WebSocket viewer's update goes through (the worker's notification,
the consumer, the batch's read of the run's new events, the send) but the template
rendering, which stands in as the seq the batch reaches and the run's status (what the
benchmark's clients read from a batch). What the live path costs before any rendering,
on the same machine with the same runs.

Run: daphne benchmarks.live_floor_app:application
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from agentforge_web.asgi import application
from tools_app.live import fragments, reads
from tools_app.models import Run
from tools_app.runs.store.selectors import EventMark

__all__ = ["application"]


def unrendered_batch(run_id: uuid.UUID | str, events: Sequence[EventMark]) -> fragments.LiveBatch:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return fragments.LiveBatch(f'<span id="run-seq" data-seq="{events[-1].seq}" hidden></span>'
                               f'<span data-status="{status}" hidden></span>', {})


reads.render_batch = unrendered_batch  # type: ignore[attr-defined]  # imported there
