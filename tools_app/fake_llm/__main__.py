"""`python -m tools_app.fake_llm --port N [--host 127.0.0.1] [--script FILE] [--lenient]`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .server import LOOPBACK, serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools_app.fake_llm",
        description="A fake OpenAI / Anthropic / Gemini server for tests, benchmarks and "
                    "rehearsals without an API key.",
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Shared with the `fake_llm_server` management command."""
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--host", default=LOOPBACK,
                        help="interface to bind (default: loopback only)")
    parser.add_argument("--script", default=None, metavar="FILE",
                        help="JSON script file loaded at start-up")
    parser.add_argument("--record-limit", type=int, default=10_000,
                        help="requests kept for GET /_fake/requests (0 keeps none)")
    parser.add_argument("--lenient", action="store_true",
                        help="accept requests the real APIs refuse (unpaired tool calls and "
                             "results, unknown fields, empty content), for fault rehearsals; "
                             "strict is the default")
    parser.add_argument("--log-level", default="warning",
                        choices=["critical", "error", "warning", "info", "debug"])


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run_from_args(args)


def run_from_args(args: argparse.Namespace) -> None:
    serve(args.host, args.port, args.script, record_limit=args.record_limit,
          log_level=args.log_level, strict=not getattr(args, "lenient", False),
          announce=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
