from django.urls import path, re_path

from tools_app.web import proxy_urls
from tools_app.web.api import app as api
from tools_app.web.api import otlp
from tools_app.web.pages import playground, suites
from tools_app.web.pages.audit import calls, tools, tryit
from tools_app.web.pages.registry import endpoints, probes, registry
from tools_app.web.pages.runs import compare, fork, reexecution, run_list, run_page, waiting

urlpatterns = [
    path("", playground.home, name="home"),
    path("playground/", playground.playground, name="playground"),
    path("runs/", run_list.run_list, name="run_list"),
    re_path(r"^runs/export\.(?P<fmt>csv|jsonl)$", run_list.runs_export, name="runs_export"),
    path("runs/waiting.json", waiting.waiting, name="runs_waiting"),
    path("runs/compare", compare.run_compare, name="run_compare"),
    path("runs/<uuid:run_id>/", run_page.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/row/", run_list.run_row, name="run_row"),
    path("runs/<uuid:run_id>/cancel/", run_page.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/rerun/", run_page.run_rerun, name="run_rerun"),
    path("runs/<uuid:run_id>/export.json", run_page.run_export, name="run_export"),
    path("runs/<uuid:run_id>/fork/", fork.run_fork, name="run_fork"),
    path("runs/<uuid:run_id>/decide/", run_page.run_decide, name="run_decide"),
    path("runs/<uuid:run_id>/continue/", run_page.run_continue, name="run_continue"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/check-arguments", run_page.call_check_arguments,
         name="call_check_arguments"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/result.txt", run_page.call_result,
         name="call_result"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/reexecute/", reexecution.call_reexecute,
         name="call_reexecute"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/reexecute/check",
         reexecution.call_reexecute_check, name="call_reexecute_check"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/executions/<int:number>/",
         reexecution.call_execution, name="call_execution"),
    path("runs/<uuid:run_id>/calls/<int:call_id>/executions/<int:number>/splice/",
         reexecution.call_splice, name="call_splice"),
    path("runs/<uuid:run_id>/rounds/<int:index>/wire/", run_page.round_wire_panel,
         name="round_wire_panel"),
    path("runs/<uuid:run_id>/rounds/<int:index>/<str:which>.json", run_page.round_wire,
         name="round_wire"),
    path("runs/<uuid:run_id>/save-case/", suites.run_save_case, name="run_save_case"),
    # Test suites (web/pages/suites.py).
    path("suites/", suites.suite_list, name="suite_list"),
    path("suites/names/", suites.suite_names, name="suite_names"),
    path("suites/<int:suite_id>/", suites.suite_detail, name="suite_detail"),
    path("suites/<int:suite_id>/cases/<int:case_id>/", suites.suite_case_edit,
         name="suite_case_edit"),
    path("suites/<int:suite_id>/runs/", suites.suite_run_create, name="suite_run_create"),
    path("suite-runs/<uuid:suite_run_id>/", suites.suite_run_detail, name="suite_run_detail"),
    path("suite-runs/<uuid:suite_run_id>/resume/", suites.suite_run_resume,
         name="suite_run_resume"),
    path("suite-runs/<uuid:suite_run_id>/cells/<int:cell_id>/", suites.suite_cell_detail,
         name="suite_cell_detail"),
    path("suite-runs/<uuid:suite_run_id>/compare/", suites.suite_run_compare,
         name="suite_run_compare"),
    path("calls/", calls.call_list, name="call_list"),
    path("calls/totals/", calls.call_list_totals, name="call_totals"),
    path("calls/save-case/", suites.calls_save_case, name="calls_save_case"),
    re_path(r"^calls/export\.(?P<fmt>csv|jsonl)$", calls.calls_export, name="calls_export"),
    path("tools/", tools.tools_index, name="tool_index"),
    # A path converter: names models called (hallucinated ones) may hold any character.
    path("tools/<path:name>/try/", tryit.tool_try, name="tool_try"),
    path("tools/<path:name>/check-arguments/", tryit.tool_check_arguments,
         name="tool_check_arguments"),
    path("tools/<path:name>/try/<uuid:run_id>/", tryit.tool_try_result,
         name="tool_try_result"),
    path("tools/<path:name>/diff/", tools.tool_diff, name="tool_diff"),
    path("tools/<path:name>/figures/", tools.tool_figures, name="tool_figures"),
    path("tools/<path:name>/", tools.tool_detail, name="tool_detail"),
    # The registry outside the admin (web/pages/registry/).
    path("registry/", registry.registry_home, name="registry"),
    path("registry/tools/new/", registry.tool_add, name="registry_tool_add"),
    path("registry/tools/import/", registry.tools_import, name="registry_tools_import"),
    path("registry/tools/<uuid:tool_id>/edit/", registry.tool_edit,
         name="registry_tool_edit"),
    path("registry/mcp/new/", registry.mcp_server_add, name="mcp_server_add"),
    path("registry/mcp/<int:server_id>/", registry.mcp_server_detail,
         name="mcp_server_detail"),
    path("registry/mcp/<int:server_id>/edit/", registry.mcp_server_edit,
         name="mcp_server_edit"),
    path("registry/mcp/<int:server_id>/sync/", registry.mcp_server_sync,
         name="mcp_server_sync"),
    path("endpoints/", endpoints.endpoint_list, name="endpoint_list"),
    path("endpoints/<uuid:endpoint_id>/probe/", endpoints.endpoint_probe, name="endpoint_probe"),
    path("endpoints/<uuid:endpoint_id>/probe/report/", probes.endpoint_probe_report,
         name="endpoint_probe_report"),
    # OTLP/HTTP traces in (tools_app/ingest), where OTLP exporters send them.
    path("v1/traces", otlp.receive_traces, name="otlp_traces"),
    # The recording proxy (tools_app/proxy): OpenAI and Anthropic clients' base URLs.
    *proxy_urls.urlpatterns,
    # The JSON API (django-ninja): its routes, /api/openapi.json, /api/docs, JSON 404s.
    *api.urlpatterns,
]
