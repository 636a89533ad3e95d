"""The recorder process's entry (`recorders.ProcessRecorder` starts it): nothing here
imports Django before Django is set up on the server's settings."""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection


def main(connection: Connection, settings_module: str, database: str, nice: int) -> None:
    # Ctrl-C or a service stop signals the whole process group: the child finishes its
    # batch and exits when the server's end of the pipe closes (or the server says stop).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(nice)  # below the server's priority: its relayed requests go first
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ["AGENTFORGE_EMBEDDED_WORKER"] = "0"  # no worker, no sweeps here
    import django

    django.setup()
    from tools_app.proxy.recorder_work import serve
    from tools_app.runs.loops.process import freeze_startup_objects

    freeze_startup_objects()  # as the server does: its span cache is large and long-lived
    serve(connection, database)
