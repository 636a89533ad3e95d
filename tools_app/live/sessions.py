"""Signal receivers, connected in ToolsAppConfig.ready()."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

from .consumers import session_group
from .notify import send_to_group


@receiver(user_logged_out, dispatch_uid="agentforge-close-the-sessions-sockets")
def close_the_sessions_sockets(sender: Any, request: Any, **kwargs: Any) -> None:
    """A logout ends the session's live sockets at once, wherever they are open (other
    tabs, other daphne processes): they would otherwise stream until closed."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        async_to_sync(send_to_group)(session_group(session_key), {"type": "session.ended"})
