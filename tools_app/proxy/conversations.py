"""Which run a proxied request continues.

A client names its conversation with an `X-AgentForge-Run` header: every request of a
user with the same name is a round of the same run. Without it, a request continues
the run whose earlier exchange (its messages and the answer) is a prefix of this
request's messages, as a chat client's next request is: the longest such prefix wins,
and each prefix is continued once (two conversations that began alike and go on apart
become two runs). Anything else starts a run.

A run is found through its trace id (`IngestedRunKey` "trace:<id>", as
`tools_app.ingest` keeps it); prefixes are kept as "proxy-prefix:<digest>" keys of the
user, digests of the messages' roles, texts, call ids and result ids (what a client
sends back unchanged, whatever it re-serializes).
"""

from __future__ import annotations

import hashlib
import uuid

from tools_app.ingest.messages import Message
from tools_app.models import IngestedRunKey

PREFIX = "proxy-prefix:"
TRACE = "trace:"


def trace_for(user_id: int, run_header: str, messages: list[Message]) -> tuple[str, str]:
    """The trace id of the run the request belongs to, and the prefix key it continued
    ("" if none)."""
    if run_header:
        digest = hashlib.sha256(f"{user_id}\x00{run_header}".encode()).hexdigest()
        return digest[:32], ""
    candidates = {key: position for position, key in _prefix_keys(messages)}
    found = dict(IngestedRunKey.objects.filter(owner_id=user_id, key__in=list(candidates))
                 .values_list("key", "run_id"))
    if found:
        key = max(found, key=lambda k: candidates[k])
        trace = (IngestedRunKey.objects.filter(owner_id=user_id, run_id=found[key],
                                               key__startswith=TRACE)
                 .values_list("key", flat=True).first())
        if trace:
            return trace.removeprefix(TRACE), key
    return uuid.uuid4().hex, ""


def runs_of(user_id: int, traces: set[str]) -> dict[str, str]:
    """Trace id -> the id of the run it is, for those of `traces` that are runs."""
    keys = IngestedRunKey.objects.filter(owner_id=user_id,
                                         key__in=[TRACE + t for t in traces])
    return {key.removeprefix(TRACE): str(run_id)
            for key, run_id in keys.values_list("key", "run_id")}


def continued(user_id: int, key: str) -> None:
    """A prefix is continued once: the next request that shares it starts a run."""
    if key:
        IngestedRunKey.objects.filter(owner_id=user_id, key=key).delete()


def remember(user_id: int, run_id: str, messages: list[Message], answer: Message) -> None:
    """The conversation so far (the request's messages and the answer) as a prefix of
    the next request."""
    key = PREFIX + _digest([*messages, answer])
    IngestedRunKey.objects.bulk_create(
        [IngestedRunKey(owner_id=user_id, run_id=run_id, key=key)], ignore_conflicts=True)


def _prefix_keys(messages: list[Message]) -> list[tuple[int, str]]:
    """(position, key) for each prefix of the messages that ends with an answer."""
    running = hashlib.sha256()
    out = []
    for position, message in enumerate(messages, start=1):
        running.update(_canonical(message))
        if message.role == "assistant":
            out.append((position, PREFIX + running.copy().hexdigest()))
    return out


def _digest(messages: list[Message]) -> str:
    running = hashlib.sha256()
    for message in messages:
        running.update(_canonical(message))
    return running.hexdigest()


def _canonical(message: Message) -> bytes:
    calls = ",".join(call.call_id for call in message.calls)
    return "\x1e".join((message.role, message.text or "", calls,
                        message.tool_call_id or "")).encode() + b"\x1d"
