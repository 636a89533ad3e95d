"""The JSON API of "Try it" (bearer token, like the rest of the API):

POST /api/tools/<name>/try  {"arguments": {...}}  -> 201 {"id", "status", "url"}

One call of the tool with these arguments, as a try-it run of the token's user
(runs/debugger/tryit.py); follow it with GET /api/runs/<id>. Arguments that do not match the
tool's schema are a 400 listing each problem with its JSON pointer; a disabled tool is
a 409, an unknown one a 404.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from tools_app.models import ToolRegistration
from tools_app.runs.debugger.tryit import TryItError, tryit_create
from tools_app.web.api.base import ApiError, parse_body, token_required
from tools_app.web.api.docs import Operation, documented
from tools_app.web.api.schemas import Created, TryBody


@documented(post=Operation("Try the tool once with these arguments", body=TryBody,
                           responses={201: (Created, "The try-it run")},
                           errors=(400, 404, 409, 413)))
@csrf_exempt  # token-authenticated: no cookies involved, so no CSRF exposure
@require_POST
@token_required
def tool_try(request: HttpRequest, name: str) -> JsonResponse:
    tool = ToolRegistration.objects.filter(name=name).first()
    if tool is None:
        raise ApiError(404, "not_found", f"No tool named {name!r}")
    body = parse_body(request, TryBody)
    try:
        run = tryit_create(user=request.user, tool=tool, arguments=body.arguments)
    except TryItError as exc:
        code = "invalid_arguments" if exc.status == 400 else "conflict"
        raise ApiError(exc.status, code, str(exc), field="arguments",
                       problems=exc.problems) from exc
    return JsonResponse({"id": str(run.pk), "status": run.status,
                         "url": f"/runs/{run.pk}/"}, status=201)
