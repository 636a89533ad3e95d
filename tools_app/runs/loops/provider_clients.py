"""This process's provider HTTP clients: one per endpoint configuration and event loop,
shared by every run (and probe) that calls the endpoint from that loop.

The embedded worker and a `db_worker` drive their runs as tasks of one long-lived loop
(`task_backend`'s), so their runs share one pool per endpoint, closed when the process
stops (`close_at_exit`). A run driven on a loop of its own (a test calling the task
through `async_to_sync`, the immediate backend) has its own client, closed as that loop
ends (`close_if_the_loop_ends`).
"""

from __future__ import annotations

import logging

from tools_app.engine.providers.http.clients import SharedHttpClients
from tools_app.runs.loops import task_backend

logger = logging.getLogger(__name__)

PROVIDER_CLIENTS = SharedHttpClients()


async def close_if_the_loop_ends() -> None:
    """After a task: close the clients of a loop that ends with the task; the embedded
    worker's loop keeps them for the next runs."""
    if not task_backend.on_worker_loop():
        await PROVIDER_CLIENTS.aclose_this_loop()


def close_at_exit() -> None:
    """The server is stopping: close the embedded worker loop's clients."""
    loop = task_backend.current_worker_loop()
    if loop is None or not loop.is_running():
        return
    try:
        PROVIDER_CLIENTS.close_for_loop(loop)
    except Exception:  # at exit, a connection that fails to close is gone anyway
        logger.warning("closing the provider clients failed", exc_info=True)
