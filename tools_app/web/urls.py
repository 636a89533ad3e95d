from django.urls import path, re_path

from tools_app.web.api import app as api
from tools_app.web.pages import audit, fork, reexecution, tryit, views

urlpatterns = [
    path("", views.home, name="home"),
    path("playground/", views.playground, name="playground"),
    path("runs/", views.run_list, name="run_list"),
    re_path(r"^runs/export\.(?P<fmt>csv|jsonl)$", views.runs_export, name="runs_export"),
    path("runs/compare", views.run_compare, name="run_compare"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/row/", views.run_row, name="run_row"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("runs/<uuid:run_id>/export.json", views.run_export, name="run_export"),
    path("runs/<uuid:run_id>/fork/", fork.run_fork, name="run_fork"),
    path("runs/<uuid:run_id>/decide/", views.run_decide, name="run_decide"),
    path("runs/<uuid:run_id>/continue/", views.run_continue, name="run_continue"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/check-arguments", views.call_check_arguments,
         name="call_check_arguments"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/result.txt", views.call_result,
         name="call_result"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/reexecute/", reexecution.call_reexecute,
         name="call_reexecute"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/reexecute/check",
         reexecution.call_reexecute_check, name="call_reexecute_check"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/executions/<int:number>/",
         reexecution.call_execution, name="call_execution"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/executions/<int:number>/splice/",
         reexecution.call_splice, name="call_splice"),
    path("runs/<uuid:run_id>/rounds/<int:index>/<str:which>.json", views.round_wire,
         name="round_wire"),
    path("calls/", audit.call_list, name="call_list"),
    re_path(r"^calls/export\.(?P<fmt>csv|jsonl)$", audit.calls_export, name="calls_export"),
    path("tools/", audit.tools_index, name="tool_index"),
    # A path converter: names models called (hallucinated ones) may hold any character.
    path("tools/<path:name>/try/", tryit.tool_try, name="tool_try"),
    path("tools/<path:name>/check-arguments/", tryit.tool_check_arguments,
         name="tool_check_arguments"),
    path("tools/<path:name>/try/<uuid:run_id>/", tryit.tool_try_result,
         name="tool_try_result"),
    path("tools/<path:name>/diff/", audit.tool_diff, name="tool_diff"),
    path("tools/<path:name>/", audit.tool_detail, name="tool_detail"),
    path("endpoints/", views.endpoint_list, name="endpoint_list"),
    path("endpoints/<uuid:endpoint_id>/probe/", views.endpoint_probe, name="endpoint_probe"),
    # The JSON API (django-ninja): its routes, /api/openapi.json, /api/docs, JSON 404s.
    *api.urlpatterns,
]
