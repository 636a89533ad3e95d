"""`manage.py first_login_hint`: tell a new user how to log in (run by `make run`).

It never creates a user and never suggests a password: a default password in a demo
tends to survive into real deployments.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

# DEBUG=1 as `make run` has it: without it (and a SECRET_KEY) settings refuse to load.
CREATE_COMMAND = "DEBUG=1 .venv/bin/python manage.py createsuperuser"


class Command(BaseCommand):
    help = "Print how to log in for the first time and where the app is served."

    def handle(self, *args: Any, **options: Any) -> None:
        url = f"http://127.0.0.1:{os.environ.get('PORT') or '8000'}/"
        if settings.DEBUG:
            self.stdout.write(self.style.WARNING(
                "DEBUG is on (`make run` turns it on, for local use on this machine): error pages "
                "show details. Anything others can reach needs DEBUG=0 and a SECRET_KEY "
                "(README, Configuration)."))
        if get_user_model().objects.filter(is_superuser=True).exists():
            self.stdout.write(f"Log in at {url} (admin: {url}admin/).")
            return
        self.stdout.write(
            "No superuser yet. Create one (it asks for a password):\n"
            f"    {CREATE_COMMAND}\n"
            # Quoted placeholders: pasted unedited, '<name>' is an invalid username, so
            # nothing gets created with a password someone else could guess.
            "or without prompts, putting in your own values:\n"
            "    DJANGO_SUPERUSER_USERNAME='<name>' DJANGO_SUPERUSER_EMAIL='<email>' "
            f"DJANGO_SUPERUSER_PASSWORD='<password>' {CREATE_COMMAND} --noinput\n"
            f"Then log in at {url} (admin: {url}admin/)."
        )
