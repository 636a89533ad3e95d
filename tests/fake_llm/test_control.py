"""The control endpoints, script selection, recording and per-conversation progression."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools_app.fake_llm import BackgroundServer, ScriptSet, build_app

from .support import anthropic_body, gemini_body, openai_body, recorded, set_script

SECRET = "sk-live-canary-0123456789"


def test_requests_are_recorded_with_secrets_redacted(fake: httpx.Client) -> None:
    fake.post("/v1/chat/completions", json=openai_body(),
              headers={"Authorization": f"Bearer {SECRET}", "X-Trace": "visible"})
    fake.post("/v1/messages", json=anthropic_body(),
              headers={"x-api-key": SECRET, "anthropic-version": "2023-06-01"})
    fake.post("/v1beta/models/gemini-fake:generateContent", params={"key": SECRET},
              json=gemini_body(), headers={"x-goog-api-key": SECRET})

    response = fake.get("/_fake/requests")

    assert SECRET not in response.text
    openai, anthropic, gemini = response.json()["requests"]
    assert openai["headers"]["authorization"] == "[redacted]"
    assert openai["headers"]["x-trace"] == "visible"
    assert anthropic["headers"]["x-api-key"] == "[redacted]"
    assert anthropic["headers"]["anthropic-version"] == "2023-06-01"
    assert gemini["headers"]["x-goog-api-key"] == "[redacted]"
    assert gemini["query"] == "key=[redacted]"
    assert [r["provider"] for r in (openai, anthropic, gemini)] == [
        "openai", "anthropic", "gemini"]
    assert [r["model"] for r in (openai, anthropic, gemini)] == [
        "gpt-fake", "claude-fake", "gemini-fake"]
    assert openai["body"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert openai["path"] == "/v1/chat/completions"
    assert (openai["seq"], openai["step"], openai["outcome"]) == (1, 0, "reply")


def test_request_log_filters_and_clearing(fake: httpx.Client) -> None:
    for model in ("a", "b", "a"):
        fake.post("/v1/chat/completions", json=openai_body(model=model))

    assert [r["seq"] for r in recorded(fake, model="a")] == [1, 3]
    assert [r["seq"] for r in recorded(fake, since=2)] == [3]
    fake.delete("/_fake/requests").raise_for_status()
    assert recorded(fake) == []


def test_invalid_json_is_rejected_and_recorded(fake: httpx.Client) -> None:
    response = fake.post("/v1/chat/completions", content=b"{not json",
                         headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    (record,) = recorded(fake)
    assert (record["outcome"], record["body"]) == ("rejected", "{not json")


def test_invalid_scripts_are_refused_with_details(fake: httpx.Client) -> None:
    unknown_fault = fake.post("/_fake/script", json={"steps": [
        {"faults": [{"kind": "explode"}]}]})
    hidden_fault = fake.post("/_fake/script", json={"steps": [
        {"faults": [{"kind": "reset", "times": None}, {"kind": "garbage"}]}]})

    assert unknown_fault.status_code == 422
    assert unknown_fault.json()["details"]
    assert hidden_fault.status_code == 422
    assert "times: null" in hidden_fault.text


def test_scripts_are_selected_by_model_then_header_then_fallback(fake: httpx.Client) -> None:
    set_script(fake, {"scripts": {
        "*": {"steps": [{"text": "fallback"}]},
        "model-x": {"steps": [{"text": "for model-x"}]},
        "by-header": {"steps": [{"text": "chosen by header"}]},
    }})

    def answer(model: str, headers: dict[str, str] | None = None) -> str:
        body = fake.post("/v1/chat/completions", json=openai_body(model=model),
                         headers=headers or {}).json()
        text: str = body["choices"][0]["message"]["content"]
        return text

    assert answer("model-x") == "for model-x"
    assert answer("model-y") == "fallback"
    assert answer("model-x", {"x-fake-script": "by-header"}) == "chosen by header"


def test_put_and_delete_one_script(fake: httpx.Client) -> None:
    put = fake.put("/_fake/scripts/bench-1", json={"steps": [{"text": "bench"}]})
    answered = fake.post("/v1/messages", json=anthropic_body(model="bench-1")).json()
    deleted = fake.delete("/_fake/scripts/bench-1")
    missing = fake.delete("/_fake/scripts/bench-1")
    after = fake.post("/v1/messages", json=anthropic_body(model="bench-1")).json()

    assert put.json() == {"scripts": ["bench-1"]}
    assert answered["content"] == [{"type": "text", "text": "bench"}]
    assert deleted.status_code == 200
    assert missing.status_code == 404
    assert after["content"][0]["type"] == "tool_use"


def test_script_past_its_end(fake: httpx.Client) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "once"},
                {"role": "user", "content": "again"}]
    set_script(fake, {"steps": [{"text": "once"}]})
    exhausted = fake.post("/v1/chat/completions", json=openai_body(messages))
    set_script(fake, {"steps": [{"text": "once"}], "when_exhausted": "repeat_last"})
    repeated = fake.post("/v1/chat/completions", json=openai_body(messages))

    assert exhausted.status_code == 400
    assert "has 1 steps and was asked for step 2" in exhausted.json()["error"]["message"]
    assert repeated.json()["choices"][0]["message"]["content"] == "once"


def test_get_script_returns_the_current_set(fake: httpx.Client) -> None:
    set_script(fake, {"steps": [{"text": "hello"}], "latency_ms": 3})

    current = fake.get("/_fake/script").json()

    assert current["scripts"]["*"]["steps"][0]["text"] == "hello"
    assert current["scripts"]["*"]["latency_ms"] == 3


def test_unknown_routes_and_methods(fake: httpx.Client) -> None:
    assert fake.post("/v2/whatever", json={}).status_code == 404
    assert fake.get("/v1/chat/completions").status_code == 405
    assert fake.get("/_fake/nothing").status_code == 404
    assert fake.get("/v1/models").json()["object"] == "list"


def test_script_file_is_loaded_at_start_and_restored_by_reset(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"scripts": {"from-file": {"steps": [{"text": "from file"}]}}}))

    with BackgroundServer(build_app(path)) as server, httpx.Client(base_url=server.url) as client:
        first = client.post("/v1/chat/completions", json=openai_body(model="from-file")).json()
        client.post("/_fake/script", json={"steps": [{"text": "replaced"}]}).raise_for_status()
        replaced = client.post("/v1/chat/completions", json=openai_body(model="from-file"))
        client.post("/_fake/reset").raise_for_status()
        health = client.get("/_fake/health").json()

    assert first["choices"][0]["message"]["content"] == "from file"
    assert replaced.json()["choices"][0]["message"]["content"] == "replaced"
    assert health == {"ok": True, "scripts": ["from-file"], "requests": 0, "strict": True}


def test_invalid_script_file_fails_at_start(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"steps": [{"tool_calls": [{"arguments": {}}]}]}))

    with pytest.raises(ValueError, match="name"):
        build_app(path)


async def test_concurrent_conversations_share_one_script(shared_server: BackgroundServer) -> None:
    script = {"steps": [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_time", "arguments": {"zone": "CET"}}]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Lima"}}],
         "faults": [{"kind": "status", "status": 429, "retry_after": 0}]},
        {"text": "done: {last_result}"},
    ]}
    async with httpx.AsyncClient(base_url=shared_server.url, timeout=30) as client:
        (await client.post("/_fake/reset")).raise_for_status()
        (await client.put("/_fake/scripts/concurrent", json=script)).raise_for_status()
        transcripts = await asyncio.gather(*(_converse(client, n) for n in range(50)))
        log = (await client.get("/_fake/requests", params={"model": "concurrent"})).json()

    for n, transcript in enumerate(transcripts):
        assert transcript == [["get_weather", "get_time"], [429], ["get_weather"],
                              f"done: ok {n}"]
    assert log["count"] == 50 * 4


async def _converse(client: httpx.AsyncClient, n: int) -> list[Any]:
    """One conversation: every reply is recorded, tools answer "ok <n>", 429s retried."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {n}"}]
    transcript: list[Any] = []
    while True:
        response = await client.post("/v1/chat/completions",
                                     json=openai_body(messages, model="concurrent"))
        if response.status_code == 429:
            transcript.append([429])
            continue
        message = response.json()["choices"][0]["message"]
        calls = message.get("tool_calls")
        if not calls:
            transcript.append(message["content"])
            return transcript
        transcript.append([c["function"]["name"] for c in calls])
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"ok {n}"}
                     for c in calls]


def test_the_readme_example_script_is_valid() -> None:
    readme = Path(__file__).resolve().parents[2] / "tools_app" / "fake_llm" / "README.md"
    example = readme.read_text(encoding="utf-8").split("```json\n", 1)[1].split("```", 1)[0]

    scripts = ScriptSet.model_validate_json(example)

    assert sorted(scripts.scripts) == ["*", "weather-bench"]
    assert scripts.scripts["weather-bench"].steps[0].fault_for_attempt(3) is None
