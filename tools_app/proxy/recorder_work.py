"""The recorder process's work (`recorders.ProcessRecorder` starts the process,
`recorder_child.main` sets Django up and calls `serve`): each batch the server hands
over made into exchanges again and recorded as one `recording.Batch`, in order."""

from __future__ import annotations

import asyncio
import logging
from multiprocessing.connection import Connection
from typing import Any

from django.contrib.auth.models import User
from django.db import close_old_connections, connections

from tools_app.engine.providers.adapter import WireChatModel
from tools_app.engine.providers.http.endpoint import EndpointSettings
from tools_app.engine.providers.registry import build_chat_model
from tools_app.proxy.dialects import ANTHROPIC_MESSAGES, OPENAI_CHAT
from tools_app.proxy.exchanges import Handed
from tools_app.proxy.recording import Batch
from tools_app.proxy.upstream import Target
from tools_app.runs.store.eventlog import run_event_committed

logger = logging.getLogger(__name__)

DIALECTS = {d.name: d for d in (OPENAI_CHAT, ANTHROPIC_MESSAGES)}

# The receivers of `run_event_committed` that act for this process's viewers and
# exporter: in the recorder process, the runs it changed go back to the server instead.
SERVER_RECEIVERS = ("agentforge-broadcast-run-events", "agentforge-otlp-export")


def serve(connection: Connection, database: str) -> None:
    """The recorder process's loop: each batch recorded, in order, and answered with the
    runs it changed (id -> their last notice), until the server's end of the pipe
    closes or it says stop."""
    connections["default"].settings_dict["NAME"] = database  # a test database's name
    notices = _Notices()
    child = _ChildRecorder(asyncio.new_event_loop())
    while True:
        try:
            kind, payload = connection.recv()
            if kind == "record":
                close_old_connections()
                child.record(payload)
                connection.send(notices.taken())
            else:
                _close_connections()
                connection.send(None)
                if kind == "stop":
                    return
        except (EOFError, OSError):  # the server is gone (its end of the pipe closed)
            _close_connections()
            return


def _close_connections() -> None:
    """Every connection closed, pooled ones too (the pool would keep them open)."""
    for wrapper in connections.all():
        wrapper.close()
        close_pool = getattr(wrapper, "close_pool", None)
        if close_pool is not None:
            close_pool()


class _Notices:
    """What the run builder would tell this process's viewers, kept for the server."""

    def __init__(self) -> None:
        self.marks: dict[str, dict[str, Any]] = {}
        for uid in SERVER_RECEIVERS:
            run_event_committed.disconnect(dispatch_uid=uid)
        run_event_committed.connect(self.keep, dispatch_uid="agentforge-proxy-recorder")

    async def keep(self, sender: Any, run_id: str, message: dict[str, Any],
                   **kwargs: Any) -> None:
        self.marks[run_id] = message

    def taken(self) -> dict[str, dict[str, Any]]:
        marks, self.marks = self.marks, {}
        return marks


class _ChildRecorder:
    """Exchanges made again from what was handed over, recorded as one batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.batch = Batch(loop)
        self.readers: dict[str, WireChatModel] = {}

    def record(self, handed: list[Handed]) -> None:
        users = User.objects.in_bulk({h.user_id for h in handed})
        for one in handed:
            user = users.get(one.user_id)
            try:
                if user is None:
                    raise LookupError(f"user {one.user_id} no longer exists")
                target = Target(endpoint_id=one.endpoint_id, endpoint_name=one.endpoint_name,
                                kind=one.kind, adapter=self._reader(one.kind),
                                secrets=one.secrets)
                self.batch.add(one.exchange(user, target, DIALECTS[one.dialect]))
            except Exception:
                logger.exception("recording a proxied exchange failed (endpoint %s)",
                                 one.endpoint_name)
        try:
            self.batch.flush()
        except Exception:
            logger.exception("recording proxied exchanges failed")

    def _reader(self, kind: str) -> WireChatModel:
        """An adapter of the endpoint's kind for reading its answers (never for calling:
        no key, no client)."""
        found = self.readers.get(kind)
        if found is None:
            built = build_chat_model(kind, EndpointSettings(model="proxied", max_retries=0))
            if not isinstance(built, WireChatModel):
                raise TypeError(f"endpoint kind {kind!r} is not an HTTP provider")
            found = self.readers[kind] = built
        return found
