"""The recorder process's entry (`recorders.ProcessRecorder` starts it): nothing here
imports Django before Django is set up on the server's settings."""

from __future__ import annotations

import os
from multiprocessing.connection import Connection


def main(connection: Connection, settings_module: str, database: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ["AGENTFORGE_EMBEDDED_WORKER"] = "0"  # no worker, no sweeps here
    import django

    django.setup()
    from tools_app.proxy.recorder_work import serve

    serve(connection, database)
