import pytest
from asgiref.sync import async_to_sync
from tools_app.runner import execute_run
from tools_app.models import Run, Round, ToolCall, RunEvent
from .support import start_run

pytestmark = pytest.mark.django_db

P = '<script>alert(1)</script><img src=x onerror=alert(2)><a href="javascript:alert(3)" hx-get="/x">{{ run.pk }}</a>'

def test_dbg(bob, make_endpoint, demo_tools, policy):
    policy.hallucinated_tool = "tell_model"; policy.save()
    ep = make_endpoint([{"tool_calls": [{"name": "get_weather", "arguments": {"city": P}},
                                        {"name": "always_fails", "arguments": {"reason": P}},
                                        {"name": P, "arguments": {"q": P}},
                                        {"name": "calculator", "arguments": '{"expression": ' }]},
                        {"text": "Model: " + P + " {last_results}"}])
    run = start_run(bob, ep, [demo_tools[n] for n in ("get_weather", "always_fails", "calculator")], policy, text=P)
    print(async_to_sync(execute_run)(str(run.pk)))
    run.refresh_from_db()
    print(run.status, run.error_type, run.error_message, run.final_text)
    for c in ToolCall.objects.filter(run=run):
        print(c.tool_name, c.state, repr(c.result_text)[:200], c.error_type, c.error_message[:100], c.traceback[:100], c.error_details)
