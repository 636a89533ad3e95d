"""django-tasks-db's `db_worker`, plus what it lacks for runs: the reaper and a
graceful SIGTERM that checkpoints the current run instead of running it to the end."""

from __future__ import annotations

import threading
from types import FrameType
from typing import Any

from django_tasks_db.management.commands import db_worker

from tools_app import runner
from tools_app.worker import reap_and_enqueue, start_reaper_thread


class Command(db_worker.Command):
    help = db_worker.Command.help + " Also reaps and resumes runs whose worker was lost."

    def handle(self, *args: Any, **options: Any) -> None:
        _checkpoint_on_shutdown()
        reap_and_enqueue()
        stop = threading.Event()
        start_reaper_thread(stop)
        try:
            super().handle(*args, **options)
        finally:
            stop.set()


def _checkpoint_on_shutdown() -> None:
    """The first SIGTERM/SIGINT also asks the running run to stop at its next step."""
    original = db_worker.Worker.shutdown

    def shutdown(self: db_worker.Worker, signum: int, frame: FrameType | None) -> None:
        runner.shutdown_requested.set()
        original(self, signum, frame)

    db_worker.Worker.shutdown = shutdown  # type: ignore[method-assign]
