"""Run the capability probe against a stored endpoint and keep the report on it."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from tools_app.engine.probe import probe_capabilities, unstarted_report
from tools_app.models import ModelEndpoint
from tools_app.runs.snapshot.engine import chat_model_for
from tools_app.runs.snapshot.frozen import endpoint_section

logger = logging.getLogger(__name__)


def may_probe(user: Any) -> bool:
    """A probe calls the endpoint with the server's credentials: staff may, other users
    only where the operator allows it."""
    return bool(user.is_authenticated and user.is_active
                and (user.is_staff or settings.AGENTFORGE_PROBE_NON_STAFF))


async def probe_and_store(endpoint_id: str) -> str:
    """Probe the endpoint and store the report; a probe that cannot even start stores
    why as its report too, so the pages waiting for it learn that it ended."""
    endpoint = await ModelEndpoint.objects.aget(pk=endpoint_id)
    name = endpoint.model or endpoint.name
    try:
        frozen = endpoint_section(endpoint)
        model, _ = chat_model_for(frozen.model_copy(update={"stream": False}), max_retries=1)
        streaming, _ = chat_model_for(frozen.model_copy(update={"stream": True}),
                                      max_retries=1)
    except Exception as exc:  # its configuration, not a check: no model to ask
        logger.warning("probe of endpoint %s could not start: %s", endpoint_id, exc)
        report = unstarted_report(name, exc)
    else:
        report = await probe_capabilities(model, streaming_model=streaming, model_name=name)
    endpoint.capability_report = report.model_dump(mode="json")
    endpoint.capability_checked_at = timezone.now()
    await sync_to_async(endpoint.save)(
        update_fields=["capability_report", "capability_checked_at", "updated_at"])
    return "probed"
