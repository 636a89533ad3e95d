"""Server time to render a finished run with 1,000 tool calls (target: < 300 ms).

Builds the run through the real recorder path (the engine driving 50 rounds of 20
parallel calls with the scripted model), then times full page renders with the test
client, after one warm-up render.
"""

from __future__ import annotations

import os
import time

from benchmarks.common import LOOP_CHECKS_UNFLAGGED, setup_django, summary, write_result

ROUNDS, CALLS_PER_ROUND, REPEATS = 50, 20, 15


def build_run() -> str:
    from django.contrib.auth import get_user_model

    from tools_app.models import ErrorPolicy, ModelEndpoint
    from tools_app.runs import services
    from tools_app.tools.registry import sync_tools

    sync_tools(["tools_app.tools.example_tools"])
    from tools_app.models import ToolRegistration

    calc = ToolRegistration.objects.get(name="calculator")
    step = {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}}
                           for i in range(CALLS_PER_ROUND)]}
    endpoint = ModelEndpoint.objects.create(
        name="bench", kind="scripted", script=[step] * ROUNDS + [{"text": "done"}])
    policy = ErrorPolicy.objects.create(name="bench", max_round_trips=ROUNDS + 1,
                                        **LOOP_CHECKS_UNFLAGGED)
    user = get_user_model().objects.create_user("bench", is_staff=True)
    run = services.run_create(user=user, endpoint=endpoint, tools=[calc], policy=policy,
                              messages=services.conversation(user_message="go"))
    # TASK_BACKEND=immediate (see main): the run executed on commit, inside run_create.
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, run.error_message)
    return str(run.pk)


def main() -> str:
    os.environ["TASK_BACKEND"] = "immediate"
    setup_django()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import override_settings

    run_id = build_run()
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    timings = []
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        assert client.get(f"/runs/{run_id}/").status_code == 200
        for _ in range(REPEATS):
            started = time.perf_counter()
            response = client.get(f"/runs/{run_id}/")
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
    stats = summary(timings)
    size_kb = len(response.content) / 1024
    verdict = "meets" if stats["p95"] < 300 else "MISSES"
    return write_result("render", f"""
## Render a finished run with 1,000 tool calls

{ROUNDS} rounds x {CALLS_PER_ROUND} parallel calls, full page through Django's test client
(middleware, template partials, SQLite), {REPEATS} renders after a warm-up.

| p50 | p95 | max | page size |
|---|---|---|---|
| {stats['p50']:.1f} ms | {stats['p95']:.1f} ms | {stats['max']:.1f} ms | {size_kb:.0f} KiB |

Target < 300 ms: {verdict} the target.
""").read_text()


if __name__ == "__main__":
    print(main())
