"""Signal receivers, connected in ToolsAppConfig.ready()."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .consumers import session_group, user_group
from .notify import send_to_group


@receiver(user_logged_out, dispatch_uid="agentforge-close-the-sessions-sockets")
def close_the_sessions_sockets(sender: Any, request: Any, **kwargs: Any) -> None:
    """A logout ends the session's live sockets at once, wherever they are open (other
    tabs, other daphne processes): they would otherwise stream until closed."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        async_to_sync(send_to_group)(session_group(session_key), {"type": "session.ended"})


RIGHTS_FIELDS = frozenset({"password", "is_active", "is_staff", "is_superuser"})


@receiver(post_save, sender=settings.AUTH_USER_MODEL,
          dispatch_uid="agentforge-recheck-the-users-sockets")
def recheck_the_users_sockets(sender: Any, instance: Any, created: bool,
                              update_fields: frozenset[str] | None = None,
                              **kwargs: Any) -> None:
    """A user deactivated, given a new password (in the admin, by a password change or
    reset) or no longer staff loses the live sockets their sessions no longer
    authenticate or that show runs they may no longer see, at once and in every daphne
    process; a save that cannot change their rights (a login's last_login) tells nobody.
    (A bulk QuerySet.update() sends no signal: deactivate users one by one, as the admin
    does.)"""
    if created or (update_fields is not None and not RIGHTS_FIELDS & set(update_fields)):
        return
    _tell_the_users_sockets(instance.pk)


@receiver(post_delete, sender=settings.AUTH_USER_MODEL,
          dispatch_uid="agentforge-close-a-deleted-users-sockets")
def close_a_deleted_users_sockets(sender: Any, instance: Any, **kwargs: Any) -> None:
    _tell_the_users_sockets(instance.pk)


def _tell_the_users_sockets(user_pk: Any) -> None:
    # After the commit: the sockets check the stored user and session.
    transaction.on_commit(
        lambda: async_to_sync(send_to_group)(user_group(user_pk), {"type": "user.changed"}))
