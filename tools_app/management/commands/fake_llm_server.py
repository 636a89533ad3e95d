"""`python manage.py fake_llm_server --port N --script FILE`: the fake LLM provider.

Same code and options as `python -m tools_app.fake_llm`; this is only a second door.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tools_app.fake_llm.__main__ import add_arguments, run_from_args


class Command(BaseCommand):
    help = "Serve a fake OpenAI / Anthropic / Gemini API for tests, benchmarks and rehearsals."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        names = ("host", "port", "script", "record_limit", "log_level", "lenient")
        run_from_args(argparse.Namespace(**{name: options[name] for name in names}))
