"""Fixtures of the live-timeline tests (tools_app/live): the web tests' own, since the
socket and its fragments are served through the same stack (tests/web/conftest.py)."""

from __future__ import annotations

from tests.web.conftest import enqueued

__all__ = ["enqueued"]
