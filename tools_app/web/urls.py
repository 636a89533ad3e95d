from django.urls import path, re_path

from . import api, views

urlpatterns = [
    path("", views.home, name="home"),
    path("playground/", views.playground, name="playground"),
    path("runs/", views.run_list, name="run_list"),
    re_path(r"^runs/export\.(?P<fmt>csv|jsonl)$", views.runs_export, name="runs_export"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/rerun/", views.run_rerun, name="run_rerun"),
    path("runs/<uuid:run_id>/decide/", views.run_decide, name="run_decide"),
    path("runs/<uuid:run_id>/continue/", views.run_continue, name="run_continue"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/check-arguments", views.call_check_arguments,
         name="call_check_arguments"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/result.txt", views.call_result,
         name="call_result"),
    path("runs/<uuid:run_id>/rounds/<int:index>/<str:which>.json", views.round_wire,
         name="round_wire"),
    path("endpoints/", views.endpoint_list, name="endpoint_list"),
    path("endpoints/<uuid:endpoint_id>/probe/", views.endpoint_probe, name="endpoint_probe"),
    path("api/runs", api.runs, name="api_runs"),
    re_path(r"^api/runs/export\.(?P<fmt>csv|jsonl)$", api.runs_export, name="api_runs_export"),
    path("api/runs/<uuid:run_id>", api.run_detail, name="api_run_detail"),
    path("api/runs/<uuid:run_id>/events", api.run_events, name="api_run_events"),
    path("api/runs/<uuid:run_id>/rerun", api.run_rerun, name="api_run_rerun"),
    path("api/runs/<uuid:run_id>/decisions", api.run_decisions, name="api_run_decisions"),
    path("api/runs/<uuid:run_id>/continue", api.run_continue, name="api_run_continue"),
]
