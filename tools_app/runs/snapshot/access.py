"""What runs may read and reach: the environment variables credentials may come from,
and where outbound calls may connect (model endpoints, MCP servers). Shared by the
snapshot (endpoints) and the MCP tools, which must not import each other."""

from __future__ import annotations

import fnmatch

from django.conf import settings

from tools_app.engine.outbound import OutboundPolicy


def outbound_policy() -> OutboundPolicy:
    """Where this server's provider calls may connect (settings AGENTFORGE_OUTBOUND_*)."""
    return OutboundPolicy(allow=tuple(settings.AGENTFORGE_OUTBOUND_ALLOW),
                          allow_loopback=settings.AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK)


def secret_variable_problem(name: str) -> str | None:
    """Why an endpoint may not read a credential from the environment variable `name`
    (None if it may): only names AGENTFORGE_SECRET_ENV_ALLOW matches."""
    patterns = settings.AGENTFORGE_SECRET_ENV_ALLOW
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
        return None
    return (f"the environment variable {name} is not one endpoints may read credentials "
            f"from: AGENTFORGE_SECRET_ENV_ALLOW allows {', '.join(patterns) or 'none'}")
