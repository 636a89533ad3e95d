"""The tools router of the JSON API: "Try it" (bearer token, like the rest):

POST /api/tools/<name>/try  {"arguments": {...}}  -> 201 {"id", "status", "url"}

One call of the tool with these arguments, as a try-it run of the token's user
(runs/debugger/tryit.py); follow it with GET /api/runs/<id>. Arguments that do not match the
tool's schema are a 400 listing each problem with its JSON pointer; a disabled tool is
a 409, an unknown one a 404.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from ninja import Router

from tools_app.models import ToolRegistration
from tools_app.runs.debugger.tryit import TryItError, tryit_create
from tools_app.web.api.base import ApiError, answers
from tools_app.web.api.schemas import Created, TryBody

router = Router(tags=["tools"])


@router.post("/{name}/try", url_name="api_tool_try",
             response=answers({201: Created}, 400, 404, 409, 413),
             summary="Try the tool once with these arguments")
def try_tool(request: HttpRequest, name: str, body: TryBody) -> JsonResponse:
    tool = ToolRegistration.objects.filter(name=name).first()
    if tool is None:
        raise ApiError(404, "not_found", f"No tool named {name!r}")
    try:
        run = tryit_create(user=request.user, tool=tool, arguments=body.arguments)
    except TryItError as exc:
        code = "invalid_arguments" if exc.status == 400 else "conflict"
        raise ApiError(exc.status, code, str(exc), field="arguments",
                       problems=exc.problems) from exc
    return JsonResponse({"id": str(run.pk), "status": run.status,
                         "url": f"/runs/{run.pk}/"}, status=201)
