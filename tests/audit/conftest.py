"""Fixtures of the audit-log tests (tools_app/audit): the web tests' runs world and their
guard against the in-process worker (tests/web/conftest.py), for the filters and the
search read through the API and the pages."""

from __future__ import annotations

from tests.web.conftest import enqueued, filter_world

__all__ = ["enqueued", "filter_world"]
