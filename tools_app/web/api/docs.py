"""What each API view takes and answers, kept on the view itself.

`@documented(post=Operation(...))` sets `view.api_operations`; `GET /api/openapi.json`
(web/api/openapi.py) walks the URLconf and reads it from each `/api/` URL's view, so the
document's paths are the routed ones; and `api_base.parse_body` validates a body with
the model its URL's view documents (it refuses any other), so the documented body is
the one the view reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tools_app.web.api.schemas import Body

ResponseSpec = tuple[type[Any] | None, str]


@dataclass(frozen=True)
class Operation:
    summary: str
    body: type[Body] | None = None
    # Query parameters the view reads, all strings; `required_query` must be given.
    query: tuple[str, ...] = ()
    required_query: tuple[str, ...] = ()
    # status -> (schema of the JSON answer or None, description); errors get ErrorResponse.
    responses: Mapping[int, ResponseSpec] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    # Content types of a streamed (non-JSON) success answer.
    streams: tuple[str, ...] = ()
    auth: bool = True


def documented[V: Callable[..., Any]](**operations: Operation) -> Callable[[V], V]:
    """Keep each HTTP method's Operation (by lower-case method name) on the view."""
    def decorate(view: V) -> V:
        view.api_operations = operations  # type: ignore[attr-defined]
        return view

    return decorate


def operations_of(view: Any) -> Mapping[str, Operation]:
    return getattr(view, "api_operations", {})
