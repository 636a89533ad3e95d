"""The fake provider as a plain ASGI application (no web framework).

Routes
    POST /v1/chat/completions                        OpenAI Chat Completions
    POST /v1/responses                               OpenAI Responses API
    POST /v1/messages                                Anthropic Messages
    POST /v1beta/models/{model}:generateContent      Gemini (also :streamGenerateContent)
    GET  /v1/models                                  OpenAI-style model list
    GET  /_fake/health                               liveness and a few counters
    GET  /_fake/script, POST /_fake/script           read / replace every script
    PUT  /_fake/scripts/{name}, DELETE ...           set / remove one model's script
    POST /_fake/reset                                start-up scripts and settings back, log
                                                     and counters cleared
    GET  /_fake/requests, DELETE /_fake/requests     the request log (secrets redacted)
    GET  /_fake/settings, POST /_fake/settings       {"strict": bool}: read / change

Strict (the default): a request the real API refuses gets that provider's 400 with the
real message, logged as "rejected"; lenient (`--lenient`, or `{"strict": false}`) lets it
through. All state is touched only from the serving event loop, so there are no locks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import deque
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError

from .auto import auto_reply, options_from_model
from .conversation import Conversation, finish_reply
from .replies import (
    REDACTED,
    SECRET_HEADERS,
    Plan,
    Receive,
    Route,
    Scope,
    Send,
    header_map,
    lifespan,
    play_fault,
    provider_route,
    read_body,
    redact_query,
    send_json,
    send_reply,
    step_at,
    step_reply,
)
from .script import (
    MISSED_TEXT,
    AutoOptions,
    CutFault,
    FakeScript,
    FakeStep,
    ScriptSet,
    StreamErrorFault,
    draw,
)
from .wires import WireError

MISSED_STEP = FakeStep(text=MISSED_TEXT)


class FakeLLMApp:
    """ASGI callable. `scripts` is the start-up script set (what /_fake/reset restores)."""

    def __init__(self, scripts: ScriptSet | None = None, *, strict: bool = True,
                 record_limit: int = 10_000, attempt_memory: int = 100_000) -> None:
        self.initial_scripts = scripts or ScriptSet()
        self.scripts = self.initial_scripts
        self.initial_strict = strict
        self.strict = strict
        self.requests: deque[dict[str, Any]] = deque(maxlen=record_limit)
        self.attempt_memory = attempt_memory
        self._attempts: dict[tuple[str, str, int], int] = {}
        self._draws: dict[tuple[str, int, int, str], int] = {}
        self._seq = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path.startswith("/_fake/"):
            await self._control(method, path, scope, receive, send)
            return
        route = provider_route(path, scope.get("query_string", b""))
        if route is None:
            await self._not_provider(method, path, send)
        elif method != "POST":
            await send_json(send, 405, {"error": {"message": f"use POST for {path}"}})
        else:
            await self._provider(route, scope, receive, send)

    # -- provider requests -----------------------------------------------------------

    async def _provider(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        wire = route.wire
        headers = header_map(scope)
        body = await read_body(receive)
        record = self._record(scope, headers, body, wire.name)
        data: Any = None
        try:
            data = json.loads(body)
            if not isinstance(data, dict):
                raise WireError("the request body must be a JSON object")
            if self.strict:
                wire.check(data)
            conversation = wire.parse(data, route.path_model, route.stream)
        except (ValueError, WireError) as exc:
            if isinstance(data, dict):
                model = data.get("model") if route.path_model is None else route.path_model
                record.update(body=data, model=model if isinstance(model, str) else None,
                              stream=route.stream or data.get("stream") is True)
            record.update(outcome="rejected", error=str(exc))
            if isinstance(exc, WireError):
                status, error_body = exc.status, wire.refusal_body(exc)
            else:
                status, error_body = 400, wire.error_body(400, str(exc), None)
            await send_json(send, status, error_body, wire.response_headers())
            return
        plan = self._plan(conversation, headers, body)
        record.update(body=data, model=conversation.model, stream=conversation.stream,
                      script=plan.script, step=plan.step, attempt=plan.attempt,
                      outcome=plan.outcome)
        if plan.latency_s > 0:
            await asyncio.sleep(plan.latency_s)
        if plan.error is not None:
            await send_json(send, 400, wire.error_body(400, plan.error, None),
                             wire.response_headers())
        elif plan.fault is not None:
            await play_fault(plan.fault, plan, conversation, route, receive, send)
        else:
            await send_reply(plan.reply, plan, conversation, route, send)

    def _plan(self, conversation: Conversation, headers: dict[str, str], body: bytes) -> Plan:
        index = conversation.assistant_turns
        selected = self.scripts.for_model(conversation.model, headers.get("x-fake-script"))
        if selected is None:
            options, latency_ms = options_from_model(conversation.model) or (AutoOptions(), 0.0)
            reply = finish_reply(auto_reply(conversation, options), conversation)
            return Plan(script=None, step=index, reply=reply, latency_s=latency_ms / 1000)
        name, script = selected
        plan = Plan(script=name, step=index, chunk_size=script.chunk_size,
                     chunk_delay_s=script.chunk_delay_ms / 1000)
        step = step_at(script, index)
        if step is None:
            plan.error = (f"The fake script '{name}' has {len(script.steps)} steps and was "
                          f"asked for step {index + 1}: add a final text step to end the run")
            return plan
        if step.probability < 1 and not self._plays(name, script.seed, index,
                                                    conversation, step.probability):
            step = step.otherwise or MISSED_STEP
        if step.faults:
            plan.attempt = self._attempt(headers, name, index, body)
            plan.fault = step.fault_for_attempt(plan.attempt)
        if plan.fault is None or isinstance(plan.fault, (CutFault, StreamErrorFault)):
            plan.reply = step_reply(step, conversation, script.auto)
        latency_ms = step.latency_ms if step.latency_ms is not None else script.latency_ms
        plan.latency_s = latency_ms / 1000
        return plan

    def _plays(self, name: str, seed: int, index: int, conversation: Conversation,
               probability: float) -> bool:
        """Whether a step with a probability is played this time (FakeScript.seed says
        how the draws are made)."""
        key = (name, seed, index, conversation.last_user_text)
        n = self._draws.get(key, 0)
        self._draws[key] = n + 1
        return draw(seed, name, index, conversation.last_user_text, n) < probability

    def _attempt(self, headers: dict[str, str], script: str, index: int, body: bytes) -> int:
        """Which attempt at this step this request is (1 = first), for fail-then-succeed.

        A retry resends the same body, so the body's hash identifies the conversation;
        identical concurrent conversations should send X-Fake-Conversation to be counted
        apart. X-Fake-Attempt states the attempt outright (stateless).
        """
        explicit = headers.get("x-fake-attempt", "")
        if explicit.isdigit():
            return max(1, int(explicit))
        conversation = (headers.get("x-fake-conversation")
                        or hashlib.blake2b(body, digest_size=16).hexdigest())
        key = (script, conversation, index)
        count = self._attempts.pop(key, 0) + 1
        self._attempts[key] = count
        if len(self._attempts) > self.attempt_memory:
            # Forget the least recently used conversation (dicts keep insertion order).
            del self._attempts[next(iter(self._attempts))]
        return count

    def _record(self, scope: Scope, headers: dict[str, str], body: bytes,
                provider: str) -> dict[str, Any]:
        self._seq += 1
        record: dict[str, Any] = {
            "seq": self._seq,
            "received_at": time.time(),
            "method": scope["method"],
            "path": scope["path"],
            "query": redact_query(scope.get("query_string", b"").decode("latin-1")),
            # Which connection carried it: requests on one kept-alive connection share
            # the client's address and port.
            "client": list(scope["client"]) if scope.get("client") else None,
            "headers": {k: (REDACTED if k in SECRET_HEADERS else v) for k, v in headers.items()},
            "body": body.decode("utf-8", errors="replace"),
            "provider": provider,
            "model": None,
            "stream": None,
            "script": None,
            "step": None,
            "attempt": None,
            "outcome": None,
            "error": None,
        }
        self.requests.append(record)
        return record

    async def _not_provider(self, method: str, path: str, send: Send) -> None:
        if method == "GET" and path in ("/v1/models", "/models"):
            names = [n for n in self.scripts.scripts if n != "*"] or ["fake-k1-p1"]
            await send_json(send, 200, {"object": "list", "data": [
                {"id": n, "object": "model", "created": 0, "owned_by": "fake-llm"}
                for n in names]})
            return
        await send_json(send, 404, {"error": {"message": f"no route for {method} {path}",
                                               "type": "not_found"}})

    # -- control endpoints -----------------------------------------------------------

    async def _control(self, method: str, path: str, scope: Scope, receive: Receive,
                       send: Send) -> None:
        body = await read_body(receive)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        try:
            status, value = self._control_action(method, path, body, query)
        except ValidationError as exc:
            status, value = 422, {"error": "invalid script",
                                  "details": json.loads(exc.json(include_url=False))}
        except ValueError as exc:
            status, value = 400, {"error": str(exc)}
        await send_json(send, status, value)

    def _control_action(self, method: str, path: str, body: bytes,
                        query: dict[str, str]) -> tuple[int, Any]:
        action = (method, path)
        if action == ("GET", "/_fake/health"):
            return 200, {"ok": True, "scripts": sorted(self.scripts.scripts),
                         "requests": self._seq, "strict": self.strict}
        if action == ("GET", "/_fake/settings"):
            return 200, self._settings()
        if action == ("POST", "/_fake/settings"):
            self._change_settings(body)
            return 200, self._settings()
        if action == ("GET", "/_fake/script"):
            return 200, self.scripts.model_dump(mode="json")
        if action == ("POST", "/_fake/script"):
            self.scripts = ScriptSet.model_validate_json(body)
            return 200, {"scripts": sorted(self.scripts.scripts)}
        if action == ("POST", "/_fake/reset"):
            self.reset()
            return 200, {"scripts": sorted(self.scripts.scripts)}
        if action == ("GET", "/_fake/requests"):
            return 200, self._request_log(query)
        if action == ("DELETE", "/_fake/requests"):
            self.requests.clear()
            return 200, {"cleared": True}
        if path.startswith("/_fake/scripts/") and method in ("PUT", "DELETE"):
            return self._one_script(method, path.removeprefix("/_fake/scripts/"), body)
        return 404, {"error": f"no control route for {method} {path}"}

    def _one_script(self, method: str, name: str, body: bytes) -> tuple[int, Any]:
        if not name:
            raise ValueError("the script name is missing from the path")
        scripts = dict(self.scripts.scripts)
        if method == "PUT":
            scripts[name] = FakeScript.model_validate_json(body)
        elif scripts.pop(name, None) is None:
            return 404, {"error": f"no script named {name!r}"}
        self.scripts = ScriptSet(scripts=scripts)
        return 200, {"scripts": sorted(scripts)}

    def _request_log(self, query: dict[str, str]) -> dict[str, Any]:
        since = int(query["since"]) if query.get("since", "").isdigit() else 0
        model = query.get("model")
        items = [r for r in self.requests
                 if r["seq"] > since and (model is None or r["model"] == model)]
        return {"count": len(items), "requests": items}

    def _settings(self) -> dict[str, Any]:
        return {"strict": self.strict}

    def _change_settings(self, body: bytes) -> None:
        try:
            settings = json.loads(body or b"{}")
        except ValueError:
            raise ValueError("the settings must be a JSON object") from None
        if not isinstance(settings, dict):
            raise ValueError("the settings must be a JSON object")
        unknown = sorted(set(settings) - {"strict"})
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(unknown)} (known: strict)")
        if "strict" in settings:
            if not isinstance(settings["strict"], bool):
                raise ValueError("strict must be true or false")
            self.strict = settings["strict"]

    def reset(self) -> None:
        """Back to the start-up scripts and settings; forget the request log and attempt
        counters."""
        self.scripts = self.initial_scripts
        self.strict = self.initial_strict
        self.requests.clear()
        self._attempts.clear()
        self._draws.clear()
        self._seq = 0


# -- routing and plans -----------------------------------------------------------------


