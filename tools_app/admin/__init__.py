"""The admin: endpoints, tools, error policies, model prices (`prices`, with their
revisions' history in `revisions`), MCP servers and API tokens are edited here; the audit
log is read.

Runs, rounds, tool calls, run events and policy revisions are read-only: they record
what happened, and only the engine (or a policy save) writes them. No page ever shows
an API key: endpoints store only the NAME of the environment variable holding it.

Django's admin autodiscovery imports this package; the MCP servers' admin and the
workers' heartbeats live in modules of their own (mcp.py, workers.py), imported below so
that they are registered too.
"""

from __future__ import annotations

from django.contrib import admin

# Each module registers its models' admin when imported.
from . import (
    mcp,  # noqa: F401
    prices,  # noqa: F401
    workers,  # noqa: F401
)
from .endpoints import ModelEndpointAdmin, ModelEndpointForm, script_problems
from .policies import POLICY_FIELDS, ErrorPolicyAdmin, ErrorPolicyForm
from .tokens import ApiTokenAdmin
from .tools import ToolRegistrationAdmin, ToolRegistrationForm, json_schema_problems

admin.site.site_header = "AgentForge admin"
admin.site.site_title = "AgentForge admin"



__all__ = [
    "POLICY_FIELDS",
    "ApiTokenAdmin",
    "ErrorPolicyAdmin",
    "ErrorPolicyForm",
    "ModelEndpointAdmin",
    "ModelEndpointForm",
    "ToolRegistrationAdmin",
    "ToolRegistrationForm",
    "json_schema_problems",
    "script_problems",
]
