"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentforge_web.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from agentforge_web.handler import http_application  # noqa: E402

# Django's ASGI handler, its middleware and views run in one trip to a thread
# (OneHopASGIHandler; the proxy's routes on the event loop, handler.py says how);
# AGENTFORGE_ASGI_HANDLER=django serves with Django's own instead.
django_asgi_app = http_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from agentforge_web.origin import SameOriginValidator  # noqa: E402
from tools_app.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # The app serves its own few static files (htmx, CSS, one JS file): the
        # embedded default needs no other web server. SERVE_STATIC=0 leaves it to one.
        "http": ASGIStaticFilesHandler(django_asgi_app) if settings.SERVE_STATIC
        else django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            SameOriginValidator(AuthMiddlewareStack(
                # URLRouter's stubs take a list of Channels' own pattern type (lists are
                # invariant): path() builds those, but its stubs say URLPattern.
                URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]
            ))
        ),
    }
)

if settings.TASK_BACKEND == "inprocess" and os.environ.get("AGENTFORGE_EMBEDDED_WORKER") != "0":
    # The embedded default: this server process is also the worker. Resume what a
    # previous process left behind, then reap lost leases periodically.
    from tools_app.runs.sweeps import start_embedded_worker

    start_embedded_worker()

from tools_app.runs.loops.process import freeze_startup_objects  # noqa: E402

freeze_startup_objects()  # last: after everything the server imports at start
