"""Fixtures of the suites' tests (tests/suites/world.py)."""

from .world import endpoints, fake_models, suite_world

__all__ = ["endpoints", "fake_models", "suite_world"]
