"""Set-up steps for the browser suite's server, run in a subprocess:

    python -m tests.browser.world setup      # endpoints and policies the tests use
    python -m tests.browser.world enable-xss # enable the XSS tools (kept off until then)
    python -m tests.browser.world mcp        # MCP servers (time, misbehaving), synced
    python -m tests.browser.world tamper RUN # change its first call's recorded result

The subprocess has the server's environment (its DATABASE_URL and tool modules).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import django

SLOW_ROUNDS = 8
SLOW_SECONDS = 0.4
SLOW_ENDPOINT = "Browser: slow rounds"
# Runs for 30 rounds of 0.4 s at least: still running while a test looks, until cancelled.
LONG_ENDPOINT = "Browser: long run"
LONG_ROUNDS = 30
# seed_demo's "Scripted: failing + slow tools", its slow call held until the test has
# seen it running (tests/browser/gate_tools.py): one endpoint per test, each its own key.
WATCHED_KEYS = ("live", "axis", "counts")


def watched_endpoint(key: str) -> str:
    return f"Browser: failing + watched tools ({key})"


def watched_script(key: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [
            {"name": "always_fails", "arguments": {"reason": "the demo service is down"}},
            {"name": "watched_nap", "arguments": {"seconds": 1.5, "key": key}},
            {"name": "calculator", "arguments": {"expression": "(2 + 3) * 7"}},
        ]},
        {"text": "One tool failed, the others answered:\n{last_results}"},
    ]
XSS_ENDPOINT = "Browser: XSS <img src=x onerror=alert(1)> {{7*7}}"
XSS_FAILING_ENDPOINT = "Browser: XSS stops <script>alert(1)</script>"
XSS_POLICY = "Browser: XSS <b>policy</b>"
XSS_TOOLS = ("xss_echo", "xss_fails")
KINDS_ENDPOINT = "Browser: mock and HTTP tools"
# Imported by tests/browser/test_tool_kinds.py through the admin's import page.
KINDS_TOOLS = ("kinds_forecast", "kinds_lookup", "kinds_metadata")
APPROVAL_ENDPOINT = "Browser: approvals"
APPROVAL_SCRIPT = [
    {"text": "Sending two emails.",
     "tool_calls": [{"name": "send_email", "arguments": {"to": "ann@example.com",
                                                        "subject": "Hello"}},
                    {"name": "send_email", "arguments": {"to": "eve@example.com",
                                                        "subject": "<b>Secrets</b>"}}]},
    {"text": "Done: {last_results}"},
]
# One call, then a final text echoing its result: a fork from round 2 whose edited
# result is what the new round answers with (tests/browser/test_fork_editor.py).
FORK_ENDPOINT = "Browser: fork"
FORK_SCRIPT = [
    {"tool_calls": [{"name": "convert_units",
                     "arguments": {"value": 1, "from_unit": "km", "to_unit": "m"}}]},
    {"text": "Final: {last_results}"},
]
# Many quick rounds, each streaming a long text and a tool call in small pieces: pieces
# come faster than the live batches that show each round (test_live_timeline.py).
FAST_STREAM_ENDPOINT = "Browser: fast streaming"
FAST_STREAM_ROUNDS = 16
MCP_ENDPOINT = "Browser: MCP time"
MCP_TOOLS = ("get_current_time", "bad_markup", "bad_crash")
# The same call six times: the default policy tells the model at the third and stops the
# run at the fifth (loop health, tests/browser/test_loop_health.py).
LOOP_ENDPOINT = "Browser: repeating model"
LOOP_SCRIPT = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}] * 6 + [
    {"text": "Done: {last_result}"}]


def slow_script(rounds: int = SLOW_ROUNDS) -> list[dict[str, Any]]:
    # Each round a slightly different call (a thousandth of a second more): the same
    # call every round would be a loop, which the default policy stops at its fifth.
    steps: list[dict[str, Any]] = [
        {"text": f"Step {i + 1}",
         "tool_calls": [{"name": "slow_tool",
                         "arguments": {"seconds": round(SLOW_SECONDS + i / 1000, 3)}}]}
        for i in range(rounds)
    ]
    return [*steps, {"text": "All done: {last_result}"}]


def fast_stream_script(rounds: int = FAST_STREAM_ROUNDS) -> list[dict[str, Any]]:
    words = " ".join(f"word{n}" for n in range(60))
    steps: list[dict[str, Any]] = [
        {"text": f"Round {i + 1}: {words}",
         "tool_calls": [{"name": "calculator",
                         "arguments": {"expression": " + ".join(["1"] * (20 + i))}}]}
        for i in range(rounds)
    ]
    return [*steps, {"text": "Streamed to the end: {last_result}"}]


def xss_script() -> list[dict[str, Any]]:
    from tests.browser.xss_tools import ALL_PAYLOADS

    return [
        {
            "text": f"Model text {ALL_PAYLOADS}",
            "tool_calls": [
                # Keeps the run going while the page connects, so the rest arrives live.
                {"name": "slow_tool", "arguments": {"seconds": 0.8}},
                {"name": "xss_echo", "arguments": {"text": f"argument {ALL_PAYLOADS}"}},
                {"name": "xss_fails", "arguments": {"text": "failure"}},
                {"name": "<img src=x onerror=alert(1)>",
                 "arguments": {"q": '<script>alert(1)</script>'}},
                # Wrong type: the arguments error quotes the input.
                {"name": "xss_echo", "arguments": {"text": {"bad": ALL_PAYLOADS}}},
            ],
        },
        {"text": "Final {last_results} " + ALL_PAYLOADS},
    ]


def xss_failing_script() -> list[dict[str, Any]]:
    """With the default policy a hallucinated tool stops the run: its name lands in the
    run's error message."""
    return [{"tool_calls": [{"name": "<img src=x onerror=alert(1)>", "arguments": {}}]}]


def kinds_script() -> list[dict[str, Any]]:
    """One call to each imported tool: a mock, an HTTP tool on a loopback server, and an
    HTTP tool aimed at the cloud metadata address (refused)."""
    return [
        {"tool_calls": [
            {"name": "kinds_forecast", "arguments": {"city": "Oslo"}},
            {"name": "kinds_lookup", "arguments": {"id": "42"}},
            {"name": "kinds_metadata", "arguments": {}},
        ]},
        {"text": "Results: {last_results}"},
    ]


def setup() -> None:
    from tools_app.models import ErrorPolicy, ModelEndpoint, ProviderKind, ToolRegistration

    endpoints = ((SLOW_ENDPOINT, slow_script()), (LONG_ENDPOINT, slow_script(LONG_ROUNDS)),
                 (XSS_ENDPOINT, xss_script()),
                 (XSS_FAILING_ENDPOINT, xss_failing_script()),
                 (KINDS_ENDPOINT, kinds_script()),
                 (APPROVAL_ENDPOINT, APPROVAL_SCRIPT),
                 (FORK_ENDPOINT, FORK_SCRIPT),
                 (FAST_STREAM_ENDPOINT, fast_stream_script()),
                 (LOOP_ENDPOINT, LOOP_SCRIPT))
    for name, script in endpoints:
        # Streamed: the timeline also gets the ephemeral text / tool-call fragments.
        ModelEndpoint.objects.update_or_create(
            name=name, defaults={"kind": ProviderKind.SCRIPTED, "model": "scripted",
                                 "script": script, "stream": True})
    for key in WATCHED_KEYS:  # as seed_demo's, not streamed
        ModelEndpoint.objects.update_or_create(
            name=watched_endpoint(key), defaults={
                "kind": ProviderKind.SCRIPTED, "model": "scripted",
                "script": watched_script(key)})
    ErrorPolicy.objects.update_or_create(
        name=XSS_POLICY,
        defaults={"hallucinated_tool": "tell_model", "arguments_error": "to_model",
                  "execution_error": "to_model",
                  "arguments_error_template": "Bad arguments for {tool}: {error} {arguments}",
                  "execution_error_template": "{tool} failed: {error}"})
    ToolRegistration.objects.filter(name__in=XSS_TOOLS).update(enabled=False)


def enable_xss() -> None:
    from tools_app.models import ToolRegistration

    ToolRegistration.objects.filter(name__in=XSS_TOOLS).update(enabled=True)


def mcp_script() -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]},
        # One at a time: a crash ends the session the calls in flight beside it share.
        {"tool_calls": [{"name": "bad_markup", "arguments": {}}]},
        {"tool_calls": [{"name": "bad_crash", "arguments": {}}]},
        {"text": "Checked the time: {last_results}"},
    ]


def mcp() -> None:
    """The real time server and the tests' misbehaving one, synced; an endpoint that
    calls the time, then a tool returning markup and one that crashes mid-call."""
    from tools_app.models import McpServer, ModelEndpoint, ProviderKind
    from tools_app.runs.snapshot.mcp import sync_server

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    time_server, _ = McpServer.objects.update_or_create(name="time", defaults={
        "command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]})
    bad_server, _ = McpServer.objects.update_or_create(name="bad", defaults={
        "command": sys.executable, "args": ["-m", "tests.mcp.misbehaving_server"],
        "env": {"PYTHONPATH": root}, "tool_prefix": "bad_"})
    sync_server(time_server)
    sync_server(bad_server)
    ModelEndpoint.objects.update_or_create(
        name=MCP_ENDPOINT, defaults={"kind": ProviderKind.SCRIPTED, "model": "scripted",
                                     "script": mcp_script()})


# Endpoints of a fake provider the test process serves (tests/browser/
# test_timeline_debugger.py): real event streams, for the raw stream view, for
# cancelling a run mid-stream, and for a round that can only arrive live (its first
# round's `watched_nap` held until the test lets it go), and a round re-shown live once
# a call is approved.
STREAMING_ENDPOINTS = {"Browser: streaming, slow": "slow-text",
                       "Browser: streaming, quick": "quick",
                       "Browser: streaming, held nap": "held-nap",
                       "Browser: streaming, an email to approve": "mail-to-approve"}


def streaming(base_url: str) -> None:
    from tools_app.models import ModelEndpoint

    for name, model in STREAMING_ENDPOINTS.items():
        ModelEndpoint.objects.update_or_create(
            name=name, defaults={"kind": "openai_compatible", "base_url": base_url,
                                 "model": model, "stream": True})


# What `tamper` records as a run's first result: a replay of the run that executes its
# tools live then leaves the recording at round 1, call 1 (test_debugloop.py).
TAMPERED_RESULT = "recorded <b>nap</b>"


def tamper(run_id: str) -> None:
    from tools_app.models import ToolCall

    changed = ToolCall.objects.filter(run_id=run_id, round__index=0, call_index=0).update(
        result_text=TAMPERED_RESULT)
    assert changed == 1, f"run {run_id} has no first call"


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentforge_web.settings")
    django.setup()
    commands: dict[str, Any] = {"setup": setup, "enable-xss": enable_xss, "mcp": mcp,
                                "streaming": streaming, "tamper": tamper}
    commands[argv[0]](*argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
