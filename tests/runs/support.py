"""Helpers of the run-lifecycle tests: start a run, execute it, read what it stored."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from tools_app.fake_llm import BackgroundServer
from tools_app.fake_llm.app import FakeLLMApp
from tools_app.fake_llm.script import ScriptSet
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    RunEvent,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs import tasks
from tools_app.runs.services import conversation, run_create
from tools_app.tools.registry import compute_version_hash

# A run whose one tool call waits 30 s: it stays in flight while a test acts on it.
WAIT_SCRIPT = [
    {"tool_calls": [{"name": "wait_here", "arguments": {"seconds": 30}}]},
    {"text": "model saw: {last_result}"},
]


def start(
    endpoint: ModelEndpoint,
    tools: Sequence[ToolRegistration],
    policy: ErrorPolicy,
    text: str = "Please help",
    **kwargs: Any,
) -> Run:
    return run_create(user=None, endpoint=endpoint, tools=list(tools), policy=policy,
                      messages=conversation(user_message=text), **kwargs)


def execute(run: Run | str) -> str | None:
    """The execute_run task's body in a fresh event loop, as a worker calls it (a run
    handed back is enqueued again); refreshes `run` when given the row (not its id)."""
    if not isinstance(run, Run):
        return async_to_sync(tasks.execute_run.acall)(str(run))
    status = async_to_sync(tasks.execute_run.acall)(str(run.pk))
    run.refresh_from_db()
    return status


def events(run: Run) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run).order_by("seq"))


def kinds(run: Run) -> list[str]:
    return [e.kind for e in events(run)]


def statuses(run: Run) -> list[str]:
    return [e.payload["status"] for e in events(run) if e.kind == "run_status"]


def assert_seqs_gapless(run: Run) -> None:
    seqs = [e.seq for e in events(run)]
    run.refresh_from_db()
    assert seqs == list(range(1, len(seqs) + 1))
    assert run.last_seq == len(seqs)


def calls(run: Run) -> list[ToolCall]:
    return list(ToolCall.objects.filter(run=run).order_by("round__index", "call_index"))


def rounds(run: Run) -> list[Round]:
    return list(Round.objects.filter(run=run).order_by("index"))


def expire_lease(run: Run) -> None:
    """What time does to the lease of a worker that died: it runs out."""
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=60))


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a value read from the database (dict keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, datetime):
        return


def stored_strings(run: Run) -> list[str]:
    """Every string the database holds about a run: its row, rounds, calls and events."""
    rows: list[Any] = [
        *Run.objects.filter(pk=run.pk).values(),
        *Round.objects.filter(run=run).values(),
        *ToolCall.objects.filter(run=run).values(),
        *RunEvent.objects.filter(run=run).values(),
    ]
    return list(strings_in(rows))


def overlaps(call_rows: Sequence[ToolCall]) -> int:
    """The largest number of calls whose [started_at, finished_at] intervals overlap."""
    points: list[tuple[datetime, int]] = []
    for call in call_rows:
        assert call.started_at is not None
        assert call.finished_at is not None
        points += [(call.started_at, 1), (call.finished_at, -1)]
    # At equal instants a finish sorts before a start: touching intervals do not overlap.
    points.sort(key=lambda point: (point[0], point[1]))
    current = peak = 0
    for _, delta in points:
        current += delta
        peak = max(peak, current)
    return peak


class ModelSpy:
    """Which script steps the scripted model was asked for, in order (across workers)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.crash_once_at: set[int] = set()

    def take(self) -> list[int]:
        steps, self.steps = self.steps, []
        return steps


def wait_until(condition: Callable[[], bool], *, timeout: float = 60.0) -> bool:
    """Poll `condition` until it holds or the deadline passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def json_service(answer: Callable[[BaseHTTPRequestHandler], tuple[int, Any]],
                 ) -> type[BaseHTTPRequestHandler]:
    """A GET handler answering `answer(request) -> (status, JSON body)`: the stand-in for a
    service an HTTP tool calls (hostile or careless ones included)."""

    class JsonService(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, payload = answer(self)
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return JsonService


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler], path: str = "/v1") -> Iterator[str]:
    """A threaded loopback HTTP server running `handler`; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def fake_llm_server(scripts: dict[str, Any]) -> Iterator[BackgroundServer]:
    """The fake provider server on a loopback port, playing `scripts`."""
    server = BackgroundServer(FakeLLMApp(ScriptSet.model_validate(scripts))).start()
    try:
        yield server
    finally:
        server.stop()


CANARY = "tok-canary-5d1e9a7c3b2f4860"


CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
               "required": ["city"], "additionalProperties": False}


def registration(name: str, kind: str, config: dict[str, Any],
                 schema: dict[str, Any] | None = None) -> ToolRegistration:
    tool = ToolRegistration(name=name, kind=kind, config=config,
                            json_schema=schema or CITY_SCHEMA, description=f"{kind} tool")
    tool.version_hash = compute_version_hash(tool)
    tool.save()
    return tool


def calling(tool: str, *arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """A script that calls `tool` once per arguments object, then reports the results."""
    return [*({"tool_calls": [{"name": tool, "arguments": a}]} for a in arguments),
            {"text": "model saw: {last_result}"}]


# Answers with the request's path and headers (the credential included), as a careless or
# hostile service might.
EchoHeaders = json_service(lambda request: (
    403 if request.path.startswith("/deny") else 200,
    {"path": request.path, "headers": dict(request.headers)}))


class QuietHandler(BaseHTTPRequestHandler):
    """Answers with `answer()`; logs nothing."""

    def answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class EchoingModel(QuietHandler):
    """A hostile model that answers 200: its tool call's arguments and its final text
    carry the credentials it was sent, streamed or not."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        echo = f"{self.headers.get('authorization', '')} {self.headers.get('x-api-key', '')}"
        answered = any(m.get("role") == "tool" for m in request["messages"])
        message: dict[str, Any] = (
            {"role": "assistant", "content": f"done, your keys: {echo}"} if answered else
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function", "function": {
                    "name": "calculator", "arguments": json.dumps({"expression": echo})}}]})
        finish = "stop" if answered else "tool_calls"
        if request.get("stream"):
            self._stream(message, finish)
        else:
            self.answer(200, "application/json", json.dumps({
                "id": "c1", "object": "chat.completion", "model": "fake-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }).encode())

    def _stream(self, message: dict[str, Any], finish: str) -> None:
        # In pieces of 5 characters, so every secret is split across fragments.
        deltas: list[dict[str, Any]] = []
        if message["content"]:
            deltas += [{"content": message["content"][i:i + 5]}
                       for i in range(0, len(message["content"]), 5)]
        for call in message.get("tool_calls") or ():
            arguments = call["function"]["arguments"]
            deltas.append({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                           "function": {"name": call["function"]["name"],
                                                        "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": arguments[i:i + 5]}}]}
                       for i in range(0, len(arguments), 5)]
        chunks = [*({"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas),
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
        body = "".join(f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'model': 'fake-model', **chunk})}\n\n"  # noqa: E501
                       for chunk in chunks) + "data: [DONE]\n\n"
        self.answer(200, "text/event-stream", body.encode())
