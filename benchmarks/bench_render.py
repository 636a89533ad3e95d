"""Server time to render a run's page: a finished run with 1,000 tool calls (target:
< 300 ms), and a long conversation with a real provider's wire bodies.

The first is built through the real recorder path (the engine driving 50 rounds of 20
parallel calls with the scripted model). The second is an agent of 100 tool rounds
against the fake provider over HTTP (one call a round, each result sent back), so each
round stores its wire request, which repeats the conversation so far: what its page and
each live batch of one of its rounds weigh. Full page renders with the test client,
after one warm-up render.
"""

from __future__ import annotations

import os
import time
from typing import Any

from benchmarks.common import LOOP_CHECKS_UNFLAGGED, setup_django, summary, write_result

ROUNDS, CALLS_PER_ROUND, REPEATS = 50, 20, 15
LONG_ROUNDS = 100  # tool rounds of the long conversation


def build_run() -> str:
    from django.contrib.auth import get_user_model

    from tools_app.models import ErrorPolicy, ModelEndpoint
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
    return _executed(user, endpoint, [calc], policy)


def build_long_conversation(fake_url: str) -> str:
    """An agent of LONG_ROUNDS tool rounds against the fake provider (`fake_url`)."""
    from django.contrib.auth import get_user_model

    from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration

    weather = ToolRegistration.objects.get(name="get_weather")
    endpoint = ModelEndpoint.objects.create(name="bench-long", kind="openai",
                                            base_url=fake_url, model=f"fake-k{LONG_ROUNDS}-p1")
    policy = ErrorPolicy.objects.create(name="bench-long", max_round_trips=LONG_ROUNDS + 1,
                                        **LOOP_CHECKS_UNFLAGGED)
    user = get_user_model().objects.get(username="bench")
    return _executed(user, endpoint, [weather], policy)


def _executed(user: Any, endpoint: Any, tools: list[Any], policy: Any) -> str:
    from tools_app.runs import services

    run = services.run_create(user=user, endpoint=endpoint, tools=tools, policy=policy,
                              messages=services.conversation(user_message="go"))
    # TASK_BACKEND=immediate (see main): the run executed on commit, inside run_create.
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, run.error_message)
    return str(run.pk)


def time_page(client: Any, run_id: str) -> tuple[dict[str, float], int]:
    """Render timings (ms) of the run's page, and its size in bytes."""
    from django.test.utils import override_settings

    timings = []
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        assert client.get(f"/runs/{run_id}/").status_code == 200
        for _ in range(REPEATS):
            started = time.perf_counter()
            response = client.get(f"/runs/{run_id}/")
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
    return summary(timings), len(response.content)


def last_round_batch(run_id: str) -> int:
    """The bytes of the live batch that brought the run's last tool round (its events,
    rendered as a viewer's socket gets them)."""
    from tools_app.live.fragments import render_updates
    from tools_app.runs.store.selectors import event_marks_after

    events = event_marks_after(run_id, 0, limit=100_000)
    last = max(e.round_index for e in events if type(e.round_index) is int) - 1
    return len(render_updates(run_id, [e for e in events if e.round_index == last]))


def main() -> str:
    os.environ["TASK_BACKEND"] = "immediate"
    os.environ["AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK"] = "1"  # the fake provider's address
    from benchmarks.processes import FakeLLM, stop

    fake = FakeLLM()
    try:
        setup_django()
        from django.contrib.auth import get_user_model
        from django.test import Client

        run_id = build_run()
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        stats, size = time_page(client, run_id)
        long_id = build_long_conversation(fake.url)
        long_stats, long_size = time_page(client, long_id)
        batch = last_round_batch(long_id)
    finally:
        stop(fake.process)
    verdict = "meets" if stats["p95"] < 300 else "MISSES"
    return write_result("render", f"""
## Render a finished run with 1,000 tool calls

{ROUNDS} rounds x {CALLS_PER_ROUND} parallel calls, full page through Django's test client
(middleware, template partials, SQLite), {REPEATS} renders after a warm-up.

| p50 | p95 | max | page size |
|---|---|---|---|
| {stats['p50']:.1f} ms | {stats['p95']:.1f} ms | {stats['max']:.1f} ms | {size / 1024:.0f} KiB |

Target < 300 ms: {verdict} the target.

## Render a long conversation with its wire bodies

An agent of {LONG_ROUNDS} tool rounds against the fake provider over HTTP (OpenAI Chat
Completions, one `get_weather` call a round), so each round stores the wire request it
sent: the conversation so far. The page, {REPEATS} renders after a warm-up, and the live
batch that brought its last tool round (what each viewer's socket is sent for it).

| p50 | p95 | max | page size | live batch of one round |
|---|---|---|---|---|
| {long_stats['p50']:.1f} ms | {long_stats['p95']:.1f} ms | {long_stats['max']:.1f} ms \
| {long_size / 1024:.0f} KiB | {batch / 1024:.1f} KiB |
""").read_text()


if __name__ == "__main__":
    print(main())
