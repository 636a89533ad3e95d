"""Development settings: agentforge_web.settings with DEBUG on unless the environment
says otherwise (so the dev SECRET_KEY stands in when none is set).

The test suite (pytest-django's DJANGO_SETTINGS_MODULE in pyproject.toml) and the type
checker (django-stubs) load these. DEBUG=1 is put in the environment, not only in the
settings, so the servers and workers the tests start inherit it.
"""

import os

os.environ.setdefault("DEBUG", "1")

from .settings import *  # noqa: F403
