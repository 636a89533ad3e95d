"""The JSON API under `/api/` as one django-ninja `NinjaAPI`: a router per resource, the
bearer token on every operation, bodies read by `bodies.JsonObjectParser` and validated
with their models, and one error shape for every refusal (the handlers below map ninja's
errors and the app's own to `{"error": {"code", "message", "field"?, ...}}`).

`GET /api/openapi.json` is ninja's document (public: it names routes and shapes, no
data); `/api/docs` is ninja's Swagger UI for logged-in users, its assets served from
the project's static files (ninja's own, "ninja" being an installed app). Any other
`/api/` path is a JSON 404, never Django's HTML page.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, include, path, re_path, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from ninja import NinjaAPI, Swagger
from ninja.errors import (
    AuthenticationError,
    HttpError,
    ValidationError,
    ValidationErrorContext,
)
from ninja.openapi.views import openapi_json
from ninja.operation import Operation
from pydantic_core import ErrorDetails

from tools_app.audit.run_filters import FilterError
from tools_app.runs.debugger.approvals import DecisionError
from tools_app.runs.debugger.reexecution import ReexecutionError
from tools_app.web.api import approvals, calls, reexecution, registry, runs, suites, tryit
from tools_app.web.api.base import ApiError, BearerToken
from tools_app.web.api.bodies import JsonObjectParser, json_path, refusal, too_large
from tools_app.web.api.schemas import Body

logger = logging.getLogger(__name__)

DESCRIPTION = ('Bearer-token JSON API; every error is {"error": {"code", "message", '
               '"field"?, "problems"?}}.')


class LocalSwagger(Swagger):
    """Ninja's Swagger UI page (its assets are the "ninja" app's static files)."""

    def get_openapi_url(self, api: NinjaAPI, path_params: dict[str, Any]) -> str:
        return reverse("api_openapi", kwargs=path_params)


class Refused(ValidationError):
    """A request parameter (the body, mostly) that does not fit: its refusal, worded."""

    def __init__(self, error: ApiError) -> None:
        super().__init__([])
        self.error = error


class JsonApi(NinjaAPI):
    """Mounted without a URL namespace, so the routes keep their project-wide names
    (`api_run_detail`, ...); ninja's own lookups of its root and document follow."""

    def get_root_path(self, path_params: dict[str, Any]) -> str:
        return reverse("api-root", kwargs=path_params)

    def get_openapi_operation_id(self, operation: Operation) -> str:
        # The view's name: unique across the routers (a test checks it).
        return operation.view_func.__name__

    def validation_error_from_error_contexts(
            self, error_contexts: list[ValidationErrorContext[Any]]) -> ValidationError:
        # The first problem, worded from pydantic's own error (which still holds the input
        # ninja's ValidationError drops, needed to tell null from a wrong type).
        return Refused(_refusal(error_contexts[0]))


def _refusal(context: ValidationErrorContext[Any]) -> ApiError:
    error = context.pydantic_validation_error.errors(include_url=False)[0]
    if context.model.__ninja_param_source__ != "body":  # a path parameter
        name = json_path(error["loc"])
        return ApiError(400, "invalid_field", f"{name} {error['msg']}", field=name)
    param, *inside = error["loc"]
    if not inside and error["type"] == "missing":  # no body at all, where one is needed
        return ApiError(400, "invalid_json", "The body is not valid JSON: it is empty")
    model = cast(type[Body], context.model.model_fields[str(param)].annotation)
    return refusal(model, cast(ErrorDetails, {**error, "loc": tuple(inside)}))


api = JsonApi(title="AgentForge Web API", version="1", description=DESCRIPTION,
              auth=BearerToken(), parser=JsonObjectParser(),
              # Both routed below: the document GET only, the page behind login (ninja's
              # docs_decorator would wrap the document too). No validator badge: it loads
              # from another host.
              openapi_url=None, docs_url=None, docs=LocalSwagger(settings={"validatorUrl": None}))
api.add_router("runs", runs.router)
api.add_router("runs", approvals.router)
api.add_router("runs", reexecution.router)
api.add_router("calls", calls.router)
api.add_router("tools", tryit.router)
api.add_router("tools", registry.tools_router)
api.add_router("endpoints", registry.endpoints_router)
api.add_router("mcp-servers", registry.mcp_router)
api.add_router("policies", registry.policies_router)
api.add_router("suites", suites.router)
api.add_router("suite-runs", suites.runs_router)


# -- every error in the API's shape --------------------------------------------------------


@api.exception_handler(ApiError)
def _answer(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return exc.response()


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    if isinstance(exc, Refused):
        return exc.error.response()
    return ApiError(400, "invalid_request", "The request is not valid").response()


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = ApiError(401, "unauthorized",
                        "Send a valid API token: Authorization: Bearer <token>").response()
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # The body parser's refusals reach here as the cause of ninja's "cannot parse" 400.
    if isinstance(exc.__cause__, ApiError):
        return exc.__cause__.response()
    return ApiError(exc.status_code, "invalid_request", exc.message).response()


@api.exception_handler(RequestDataTooBig)
def _too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return too_large().response()  # over DATA_UPLOAD_MAX_MEMORY_SIZE: Django refuses to read it


@api.exception_handler(FilterError)
def _bad_filter(request: HttpRequest, exc: FilterError) -> HttpResponse:
    return ApiError(400, "invalid_filter", str(exc), field=exc.field).response()


# The debugger's refusals carry their own status, code and per-argument problems.
@api.exception_handler(DecisionError)
@api.exception_handler(ReexecutionError)
def _refused(request: HttpRequest, exc: DecisionError | ReexecutionError) -> HttpResponse:
    extra = {"problems": exc.problems} if exc.problems else {}
    return ApiError(exc.status, exc.code, str(exc), **extra).response()


@api.exception_handler(Http404)
def _missing(request: HttpRequest, exc: Http404) -> HttpResponse:
    return ApiError(404, "not_found", "Not found").response()


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_gone(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Not the API's to answer: the project's middleware turns the database's absence
    # into a 503 with Retry-After, for the API and the pages alike.
    raise exc


@api.exception_handler(Exception)
def _failed(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Never Django's (or ninja's) debug page: it shows the stack frames' locals, the
    # caller's token among them. The error is logged with its traceback for the operator.
    logger.error("API request %s %s failed", request.method, request.path, exc_info=exc)
    return ApiError(500, "internal_error",
                    "The server failed to answer; the error is logged").response()


# -- the docs page and the URLs ----------------------------------------------------------


@require_GET
def openapi(request: HttpRequest) -> HttpResponse:
    """Ninja's document. Public: it names routes and shapes, no data; a client reads it
    before it has a token."""
    return openapi_json(request, api=api)


@login_required
def docs(request: HttpRequest) -> HttpResponse:
    """Ninja's Swagger UI on `GET /api/openapi.json`."""
    return api.docs.render_page(request, api)


@csrf_exempt  # a POST to no endpoint gets the JSON 404 too, not a CSRF page
def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return ApiError(404, "not_found",
                    "No such API endpoint (GET /api/openapi.json lists them)").response()


urlpatterns: list[URLPattern | URLResolver] = [
    path("api/", not_found),  # before ninja's root view, which raises an HTML 404
    path("api/openapi.json", openapi, name="api_openapi"),
    path("api/docs", docs, name="api_docs"),
    path("api/", include(api.urls[0])),
    # Any character, a newline (%0A) included: `.` would leave such a path to Django's
    # HTML 404.
    re_path(r"^api/(?P<rest>[\s\S]*)\Z", not_found),
]
