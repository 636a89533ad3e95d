"""django-tasks-db's `db_worker`, plus what it lacks for runs: the reaper and a
graceful SIGTERM that checkpoints the current run instead of running it to the end."""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import FrameType
from typing import Any

from django_tasks_db.management.commands import db_worker

from tools_app import runner
from tools_app.process import freeze_startup_objects
from tools_app.worker import reap_and_enqueue, start_reaper_thread

logger = logging.getLogger(__name__)


class Command(db_worker.Command):
    help = db_worker.Command.help + " Also reaps and resumes runs whose worker was lost."

    def handle(self, *args: Any, **options: Any) -> None:
        freeze_startup_objects()
        _checkpoint_on_shutdown()
        reap_and_enqueue()
        stop = threading.Event()
        start_reaper_thread(stop)
        try:
            super().handle(*args, **options)
        finally:
            stop.set()


def _checkpoint_on_shutdown() -> None:
    """The first SIGTERM/SIGINT also asks the running run to stop at its next step.

    A second one while a task runs stops the process at once, as a crash would: the
    run's lease runs out and another worker's reaper resumes it. (django-tasks-db would
    raise SystemExit in the task instead, but a run is an async task: its event loop
    thread then waits forever for this main thread, and the process never exits.)
    """
    original = db_worker.Worker.shutdown

    def shutdown(self: db_worker.Worker, signum: int, frame: FrameType | None) -> None:
        if not self.running and self.running_task:
            logger.warning("Received a second stop signal: exiting now; the run in progress "
                           "will be resumed by another worker when its lease expires")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        runner.shutdown_requested.set()
        original(self, signum, frame)

    db_worker.Worker.shutdown = shutdown  # type: ignore[method-assign]
