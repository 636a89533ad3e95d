"""What a run stores is always storable: NULs escaped, big values capped, secrets redacted."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import pytest

from tests.runs.support import calls, execute, rounds, start, stored_strings
from tests.runs.tools_for_tests import STATE
from tools_app.engine import ChatRequest, ChatResponse, ScriptedChatModel
from tools_app.models import ErrorPolicy, RunEvent, ToolRegistration
from tools_app.runs.store.sanitize import NUL_REPLACEMENT, REDACTED, clean_json, clean_text, redact

NUL = "\x00"


# -- NUL characters, through the whole path --------------------------------------------


@pytest.fixture
def model_sends_nul(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted model turns "<NUL>" in its tool-call arguments into a real NUL, as a
    provider's decoded arguments can contain one (a script cannot: PostgreSQL jsonb would
    refuse to store the endpoint)."""
    original = ScriptedChatModel.chat

    async def chat(self: ScriptedChatModel, request: ChatRequest) -> ChatResponse:
        response = await original(self, request)
        ai_message = response.ai_message
        requests = tuple(
            r.model_copy(update={"arguments": r.arguments.replace("<NUL>", NUL)})
            for r in ai_message.tool_execution_requests)
        return response.model_copy(update={
            "ai_message": ai_message.model_copy(update={"tool_execution_requests": requests})})

    monkeypatch.setattr(ScriptedChatModel, "chat", chat)


@pytest.mark.both
def test_nul_in_tool_arguments_and_output_is_stored_escaped(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    # The JSON escape in the raw arguments decodes to a real NUL for the tool.
    script = [{"tool_calls": [{"name": "nul_echo", "arguments": '{"text": "a\\u0000b"}'}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["nul_echo"]], policy)

    assert execute(run) == "succeeded"

    assert STATE.calls == [("nul_echo", f"a{NUL}b")]  # the tool got the real character
    [call] = calls(run)
    assert call.arguments == {"text": "a\\u0000b"}
    assert call.result_text == "echo:\\u0000a\\u0000b\\u0000"
    assert call.result_json == call.result_text
    assert run.final_text == f"model saw: {call.result_text}"
    finished = RunEvent.objects.get(run=run, kind="tool_call_finished")
    assert finished.payload["text"] == call.result_text
    assert not [s for s in stored_strings(run) if NUL in s]


@pytest.mark.both
def test_nul_in_raw_arguments_is_stored_escaped(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    model_sends_nul: None,
) -> None:
    policy.arguments_error = "to_model"
    policy.arguments_error_template = "bad: {arguments}"
    policy.save()
    script = [{"tool_calls": [{"name": "nul_echo", "arguments": '{"text": "x"}<NUL>'}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["nul_echo"]], policy)

    assert execute(run) == "succeeded"

    [call] = calls(run)
    assert call.state == "arguments_error"
    assert call.arguments_raw == '{"text": "x"}\\u0000'
    assert call.arguments is None
    assert call.result_text == 'bad: {"text": "x"}\\u0000'
    [first, _] = rounds(run)
    [requested] = first.response["ai_message"]["tool_execution_requests"]
    assert requested["arguments"] == call.arguments_raw
    assert not [s for s in stored_strings(run) if NUL in s]


@pytest.mark.both
def test_nul_in_the_users_message_is_stored_escaped(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy
) -> None:
    run = start(make_endpoint([{"text": "ok"}]), [tools["nul_echo"]], policy,
                f"pasted{NUL}text")

    assert execute(run) == "succeeded"

    assert run.title == "pasted\\u0000text"
    assert run.snapshot["messages"] == [{"type": "user", "text": "pasted\\u0000text"}]
    assert not [s for s in stored_strings(run) if NUL in s]


# -- size caps -------------------------------------------------------------------------


@pytest.mark.both
def test_a_value_over_the_size_cap_is_truncated_with_an_exact_marker(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy, settings: Any
) -> None:
    settings.AGENTFORGE_MAX_VALUE_BYTES = 1024
    script = [{"tool_calls": [{"name": "big_output", "arguments": {"size": 5000}}]},
              {"text": "{last_result}"}]
    run = start(make_endpoint(script), [tools["big_output"]], policy)

    assert execute(run) == "succeeded"

    expected = "x" * 1024 + "[truncated 3976 bytes]"
    [call] = calls(run)
    assert call.result_text == expected
    assert call.result_json == expected
    assert run.final_text == expected
    finished = RunEvent.objects.get(run=run, kind="tool_call_finished")
    assert finished.payload["text"] == expected


@pytest.mark.both
def test_a_value_at_the_size_cap_is_kept_whole(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy, settings: Any
) -> None:
    settings.AGENTFORGE_MAX_VALUE_BYTES = 1024
    script = [{"tool_calls": [{"name": "big_output", "arguments": {"size": 1024}}]},
              {"text": "done"}]
    run = start(make_endpoint(script), [tools["big_output"]], policy)

    execute(run)

    [call] = calls(run)
    assert call.result_text == "x" * 1024


def test_clean_text_counts_the_cap_in_utf8_bytes(settings: Any) -> None:
    settings.AGENTFORGE_MAX_VALUE_BYTES = 1024
    text = "é" * 600  # 1200 bytes

    cleaned = clean_text(text)

    assert cleaned == "é" * 512 + "[truncated 176 bytes]"
    assert clean_text("abcdef", limit=4) == "abcd[truncated 2 bytes]"
    assert clean_text(None) is None


def test_clean_json_escapes_keys_and_nested_values() -> None:
    value = {f"k{NUL}": [f"v{NUL}", {"deep": (f"t{NUL}", 1, None, True)}]}

    assert clean_json(value) == {
        f"k{NUL_REPLACEMENT}": [f"v{NUL_REPLACEMENT}",
                                {"deep": [f"t{NUL_REPLACEMENT}", 1, None, True]}]}


# -- redaction -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    {"plain": ["ascii", 1, 2.5, True, None, {"k": "v"}]},
    {"nul": "a\x00b", "list": ["x\x00"]},
    {"k\x00ey": "value"},
    {"lone": "half a pair: \ud800 end"},
    {"emoji": "\U0001f600 fine", "accents": "d\u00e9j\u00e0"},
    {"x": float("nan"), "y": [float("inf"), -float("inf")]},
    {"big": "x" * 3000},
    {"big_unicode": "\u00e9" * 1500},
    ["a", "b" * 2100],
])
def test_clean_json_data_cleans_exactly_as_clean_json(value: Any, settings: Any) -> None:
    """The fast path (the value checked as one serialised text) never skips a value the
    string-by-string walk would change: NULs, lone surrogates, non-finite numbers,
    anything over the cap."""
    from tools_app.runs.store.sanitize import clean_json_data

    settings.AGENTFORGE_MAX_VALUE_BYTES = 2048
    assert clean_json_data(value) == clean_json(value)


def test_redact_removes_secrets_from_nested_json() -> None:
    secret = "sk-canary-1234567890"
    value = {
        "headers": {"authorization": f"Bearer {secret}"},
        "attempts": [{"error": f"401 for key {secret}"}, ("tuple", secret)],
        "count": 3,
        "flag": None,
        "untouched": "nothing to hide",
    }

    cleaned = redact(value, [secret])

    assert cleaned == {
        "headers": {"authorization": f"Bearer {REDACTED}"},
        "attempts": [{"error": f"401 for key {REDACTED}"}, ["tuple", REDACTED]],
        "count": 3,
        "flag": None,
        "untouched": "nothing to hide",
    }
    assert secret not in repr(cleaned)


def test_redact_removes_secrets_from_keys_too() -> None:
    secret = "sk-canary-1234567890"

    cleaned = redact({f"token {secret}": {secret: "x"}}, [secret])

    assert secret not in repr(cleaned)
    assert cleaned == {f"token {REDACTED}": {REDACTED: "x"}}


def test_redact_with_no_usable_secrets_returns_the_value_unchanged() -> None:
    value = {"a": "abc"}

    assert redact(value, []) is value
    assert redact(value, ["", "ab"]) is value  # too short to be a credential


def test_the_truncation_marker_counts_every_dropped_byte_of_a_split_character(
    settings: object,
) -> None:
    from tools_app.runs.store.sanitize import clean_text

    text = "ab" + "é" * 10  # é is two bytes: a cap of 3 splits the first one
    cleaned = clean_text(text, limit=3)
    assert cleaned == "ab[truncated 20 bytes]"


# -- values JSON or UTF-8 cannot hold as they are ------------------------------------------


@pytest.mark.both
@pytest.mark.parametrize("kind", ["surrogate", "nan", "deep"])
def test_a_tool_result_no_database_can_hold_as_it_is_is_stored_and_the_run_goes_on(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy, kind: str,
) -> None:
    script = [{"tool_calls": [{"name": "hostile_output", "arguments": {"kind": kind}}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["hostile_output"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    [call] = calls(run)
    assert call.result_text is not None
    call.result_text.encode("utf-8")  # storable as UTF-8: nothing unpaired left
    assert run.final_text == f"model saw: {call.result_text}"
    if kind == "surrogate":
        assert call.state == "succeeded"
        assert call.result_text == "half a pair: \\ud800 end"
    if kind == "nan":
        assert call.state == "succeeded"
        assert call.result_text == '{"x": NaN, "y": Infinity, "z": -Infinity}'  # as sent
        assert call.result_json == {"x": None, "y": None, "z": None}  # JSON's own form


def test_clean_json_writes_non_finite_floats_as_strings() -> None:
    nan, inf = float("nan"), float("inf")
    assert clean_json({"a": [nan, inf, -inf, 1.5]}) == {"a": ["NaN", "Infinity", "-Infinity",
                                                              1.5]}


@pytest.mark.both
@pytest.mark.parametrize(("raw", "why"), [
    ('{"text": NaN}', "NaN"),
    ('{"text": Infinity}', "Infinity"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_arguments_json_does_not_allow_are_an_arguments_error(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    raw: str, why: str,
) -> None:
    policy.arguments_error = "to_model"
    policy.save()
    script = [{"tool_calls": [{"name": "nul_echo", "arguments": raw}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["nul_echo"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    [call] = calls(run)
    assert call.state == "arguments_error"
    assert why in call.error_message
    assert call.arguments is None
    assert STATE.calls == []  # the tool never ran


@pytest.mark.both
def test_a_lone_surrogate_in_the_arguments_reaches_the_tool_and_is_stored_escaped(
    make_endpoint: Any, tools: dict[str, ToolRegistration], policy: ErrorPolicy,
) -> None:
    script = [{"tool_calls": [{"name": "nul_echo", "arguments": '{"text": "\\ud800"}'}]},
              {"text": "model saw: {last_result}"}]
    run = start(make_endpoint(script), [tools["nul_echo"]], policy)

    assert execute(run) == "succeeded", (run.error_type, run.error_message)

    assert STATE.calls == [("nul_echo", "\ud800")]
    [call] = calls(run)
    assert call.arguments == {"text": "\\ud800"}
    assert "\\ud800" in (call.result_text or "")
    for text in stored_strings(run):
        text.encode("utf-8")


SECRET = "sk-split-secret-0123456789"


@pytest.mark.parametrize("cut", [1, 5, 12, len(SECRET) - 1])
def test_a_secret_split_across_streamed_pieces_is_never_shown(cut: int) -> None:
    from tools_app.runs.store.sanitize import StreamRedactor

    streams = StreamRedactor([SECRET])
    text = f"the key is {SECRET} and more"
    at = len("the key is ") + cut  # the key is cut after its first `cut` characters
    pieces = [text[:at], text[at:at + 3], text[at + 3:]]

    shown = [streams.feed("answer", piece) for piece in pieces]

    assert shown[0] == "the key is "  # the key's beginning is held back
    assert all(SECRET[cut:] not in piece and SECRET not in piece for piece in shown)
    assert "".join(shown) + streams.feed("answer", "") == "the key is [redacted] and more"


def test_streams_are_redacted_apart_and_plain_text_flows_at_once() -> None:
    from tools_app.runs.store.sanitize import StreamRedactor

    streams = StreamRedactor([SECRET])
    assert streams.feed("a", "hello ") == "hello "  # nothing that starts a secret: no wait
    assert streams.feed("a", "sk-sp") == ""  # could be the key: held back
    assert streams.feed("b", "lit ") == "lit "  # another stream is not affected
    assert streams.feed("a", "ace") == "sk-space"  # it was not the key after all
    assert StreamRedactor([]).feed("a", SECRET) == SECRET  # no secrets: nothing to do


# -- payloads stored from the text the recorder already wrote ----------------------------

PAYLOAD_VALUES = [
    {"plain": ["ascii", 1, 2.5, True, None, {"k": "v"}]},
    {"nul": "a\x00b", "list": ["x\x00"]},
    {"lone": "half a pair: \ud800 end"},
    {"emoji": "\U0001f600 fine", "accents": "d\u00e9j\u00e0", "quote": 'say "hi" \\ \n'},
    {"x": float("nan"), "y": [float("inf"), 1.0]},
    {"big": "x" * 3000, "small": "kept"},
    {},
]


@pytest.mark.parametrize("data", PAYLOAD_VALUES)
def test_a_clean_payload_holds_what_clean_json_gives_and_the_text_json_dumps_writes(
        data: dict[str, Any], settings: Any) -> None:
    """Each value is cleaned exactly as before (clean_json); where nothing needed it,
    the value's text and the whole payload's are what json.dumps (a JSONField's own
    encoding) writes, so storing them changes nothing but the work."""
    import json

    from tools_app.runs.store.sanitize import CleanPayload, Encoded

    settings.AGENTFORGE_MAX_VALUE_BYTES = 2048
    payload = CleanPayload.of(data)
    assert dict(payload) == clean_json(data)
    for key, text in payload.texts.items():
        assert text == json.dumps(payload[key])
    stored = payload.stored()
    if len(payload.texts) == len(data):  # nothing needed cleaning
        assert isinstance(stored, Encoded)
        assert stored.text == json.dumps(clean_json(data))
    else:  # the database layer encodes the cleaned value, as it always did
        assert stored == clean_json(data)
        assert not isinstance(stored, Encoded)


class _Level(IntEnum):
    HIGH = 3


class _Name(str):
    def __str__(self) -> str:
        return "not what json writes"


@pytest.mark.parametrize("value", [
    0, -5, 10**40, 1.5, -0.0, 1e300, 1e-7, 0.1 + 0.2, True, False, None, "",
    "plain", 'quote " backslash \\ newline \n tab \t', "d\u00e9j\u00e0",
    _Level.HIGH, _Name("sub"), [1, "a"], {"k": 2.5},
])
def test_a_values_text_is_what_json_dumps_writes(value: Any) -> None:
    """Scalars take a short path to their text (no encoder built for each): it writes
    exactly what json.dumps does, subclasses (an IntEnum, a str subclass) included."""
    import json

    from tools_app.runs.store.sanitize import clean_json_encoded

    cleaned, text = clean_json_encoded(value)
    assert cleaned == value
    assert text == json.dumps(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_number_alone_is_cleaned_and_has_no_text(value: float) -> None:
    from tools_app.runs.store.sanitize import clean_json_encoded

    assert clean_json_encoded(value) == (clean_json(value), None)
    assert isinstance(clean_json(value), str)


def test_a_value_that_is_not_json_data_is_stored_as_pydantics_json_mode_gives_it() -> None:
    from datetime import UTC, datetime

    from tools_app.runs.store.sanitize import CleanPayload

    payload = CleanPayload.of({"body": {"when": datetime(2026, 1, 2, tzinfo=UTC),
                                        "pair": ("a", "b")}})
    assert payload == {"body": {"when": "2026-01-02T00:00:00Z", "pair": ["a", "b"]}}


@pytest.mark.both
@pytest.mark.parametrize("data", PAYLOAD_VALUES)
def test_a_payload_stored_from_its_text_reads_back_as_the_orm_stores_it(
        data: dict[str, Any], settings: Any, tools: dict[str, ToolRegistration],
        policy: ErrorPolicy, make_endpoint: Any) -> None:
    """On both databases: an event row and a JSON column written from the payload's
    texts read back as the same rows written by the ORM from the plain values."""
    from django.utils import timezone

    from tools_app.runs.store.sanitize import CleanPayload
    from tools_app.runs.store.sql import rowsql

    settings.AGENTFORGE_MAX_VALUE_BYTES = 2048
    run = start(make_endpoint([{"text": "done"}]), [tools["lookup"]], policy)
    payload = CleanPayload.of({"body": data, **data})
    now = timezone.now()
    rowsql.insert(RunEvent, [{"run": run.pk, "seq": 900, "kind": "fast", "created_at": now,
                              "payload": payload.stored()}], fill_defaults=False)
    RunEvent.objects.create(run=run, seq=901, kind="orm", created_at=now,
                            payload=dict(payload))
    fast, orm = (RunEvent.objects.get(run=run, seq=seq).payload for seq in (900, 901))
    assert fast == orm == clean_json({"body": data, **data})
    round_ = run.rounds.create(index=0)
    rowsql.update(type(round_), {"id": round_.pk}, {"request_json": payload.column("body")})
    round_.refresh_from_db()
    assert round_.request_json == clean_json(data)


def test_a_wire_events_payload_is_its_json_mode_dump_with_the_body_as_it_is() -> None:
    """The recorder does not have pydantic walk a wire body (the whole conversation):
    the payload is still exactly the event's JSON-mode dump, in its fields' order."""
    from tools_app.engine.events import ProviderWireRequest, ProviderWireResponse
    from tools_app.runs.worker.recorder import RunRecorder

    body = {"model": "m", "messages": [{"role": "user", "content": "d\u00e9j\u00e0 \x00"}],
            "temperature": 0.5, "tools": [{"type": "function", "function": {"name": "f"}}]}
    recorder = RunRecorder("00000000-0000-0000-0000-000000000001", 1)
    for event in (ProviderWireRequest(round_index=2, provider="openai",
                                      url="http://127.0.0.1/v1", body=body, stream=True),
                  ProviderWireResponse(round_index=2, provider="openai", status=200,
                                       body=[body, 1, "x"], raw_stream="data: {}")):
        payload = recorder._payload(event)
        dumped = event.model_dump(mode="json")
        assert list(payload) == list(dumped)
        assert dict(payload) == clean_json(dumped)


@pytest.mark.parametrize(("content", "secrets", "expected"), [
    (b'{"messages":[{"content":"d\xc3\xa9j\xc3\xa0 vu"}]}', (), True),
    (b'{"a":"x\\u0000y"}', (), False),  # a NUL: cleaning escapes it
    (b'{"a":"\\ud800"}', (), False),  # a lone surrogate: the engine wrote ASCII escapes
    (b'{"a":"' + b"x" * 3000 + b'"}', (), False),  # over the cap
    (b'{"a":"key sk-live-1234 in a result"}', ("sk-live-1234",), False),  # redacted
    (b'{"a":"no key here"}', ("sk-live-1234",), True),
    (b'{"a":"no key here"}', ('sk"quoted', "back\\slash", "new\nline"), False),
    (b'{"a":"abc"}', ("abc",), True),  # too short to be redacted
])
def test_a_wire_body_is_stored_as_sent_only_when_cleaning_and_redacting_keep_it(
        content: bytes, secrets: tuple[str, ...], expected: bool, settings: Any) -> None:
    from tools_app.runs.store.sanitize import stored_as_sent

    settings.AGENTFORGE_MAX_VALUE_BYTES = 2048
    assert stored_as_sent(content, secrets) is expected


@pytest.mark.parametrize("secrets", [(), ("sk-live-1234",)])
def test_a_wire_requests_body_is_stored_as_the_engine_sent_it_when_nothing_changes_it(
        secrets: tuple[str, ...]) -> None:
    """The payload's body text is the engine's own bytes (not encoded again), and
    reads back as the payload; with a secret in the body, the body is redacted and
    its text written from the redacted value."""
    import json

    from tools_app.engine.events import ProviderWireRequest
    from tools_app.engine.providers.http.jsoncodec import encode_json
    from tools_app.runs.worker.recorder import RunRecorder

    for body in ({"messages": [{"role": "tool", "content": "d\u00e9j\u00e0, 20 \u00b0C"}]},
                 {"messages": [{"role": "tool", "content": "leaked: sk-live-1234"}]}):
        content = encode_json(body)
        # A secret outside the body is still redacted (the body's walk is what the
        # engine's bytes spare).
        event = ProviderWireRequest(provider="openai", url="http://127.0.0.1/v1?k="
                                    + "".join(secrets), body=body, content=content)
        recorder = RunRecorder("00000000-0000-0000-0000-000000000001", 1, secrets)
        payload = recorder._payload(event)
        stored = payload.stored()
        assert json.loads(stored.text) == dict(payload)
        assert payload["url"] == redact(event.url, secrets)
        assert ("sk-live" in payload["url"]) is False
        leaked = "sk-live-1234" in json.dumps(body)
        if secrets and leaked:
            assert payload["body"] == redact(body, secrets)
            assert payload.texts["body"] == json.dumps(redact(body, secrets))
        else:
            assert payload["body"] == body
            assert payload.texts["body"] == content.decode()
