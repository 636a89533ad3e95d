"""`manage.py create_api_token USERNAME [--name NAME]`: print a new API token once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools_app.web.api.tokens import create_token


class Command(BaseCommand):
    help = "Create an API token for a user and print it (it cannot be shown again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="A label to recognise the token by.")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get_by_natural_key(options["username"])
        except user_model.DoesNotExist:
            raise CommandError(f"No user named {options['username']!r}") from None
        name = options["name"].strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1-100 characters")
        token, plaintext = create_token(user, name)
        self.stdout.write(f"Token {token.name!r} for {user.get_username()} (shown only once):")
        self.stdout.write(plaintext)
