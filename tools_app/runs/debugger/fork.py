"""Forking a run at round N: a new run whose starting conversation is the original's
conversation as the model saw it at round N (its starting messages and the rounds
before N, inherited), possibly edited, plus messages appended for the fork, then goes
on live, with the original's endpoint, tools, policy and parameters or others chosen.

`messages` (optional) is the WHOLE conversation before round N as the person wants it,
in the OpenAI format of `engine.conversation` (tool results may carry `"is_error"`);
left out, the inherited one is used unchanged. `append` (optional) is added after it.
Both are validated as one conversation; problems name the request field at fault
("messages[3]: ...", "append[0]: ..."). The fork's snapshot records where it came from
("fork": of, round, inherited message and round counts, and per prefix message whether
it is inherited unchanged, edited or added), so its page marks them and a scripted
model plays on from round N. A fork whose person edited or added a user message is
titled by it (the last such one); otherwise it keeps the original's title.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tools_app.engine import (
    AiMessage,
    ChatMessage,
    ChatRequestParameters,
    ChatResponse,
    ToolExecutionResultMessage,
    UserMessage,
)
from tools_app.engine.conversation import ConversationError, parse_conversation, to_openai_messages
from tools_app.models import (
    FINISHED_CALL_STATES,
    ErrorPolicy,
    ModelEndpoint,
    Round,
    Run,
    ToolCall,
    ToolRegistration,
)
from tools_app.runs.debugger.rerun import LIVE, RerunError, RerunMode, run_rerun
from tools_app.runs.snapshot.frozen import (
    dump_messages,
    endpoint_section,
    parameters_section,
    policy_section,
    price_section,
    run_title,
    tools_section,
)
from tools_app.runs.snapshot.model import (
    ForkSection,
    PolicySnapshot,
    SpliceSection,
    ToolSnapshot,
    snapshot_of,
)
from tools_app.runs.snapshot.parameters import ParameterError, check_parameters
from tools_app.runs.snapshot.policy import PolicyOverrideError, checked_overrides


class ForkError(ValueError):
    """The fork cannot be made as asked; `field` is the request field at fault."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ForkConfig:
    """What the fork runs with instead of the original's; None keeps the original's."""

    endpoint: ModelEndpoint | None = None
    tools: Sequence[ToolRegistration] | None = None
    policy: ErrorPolicy | None = None
    parameters: ChatRequestParameters | None = None
    policy_overrides: dict[str, Any] | None = None


KEEP = ForkConfig()


def run_fork(*, run: Run, user: AbstractBaseUser | AnonymousUser | None, round_number: int,
             messages: Any = None, append: Any = None, mode: RerunMode = "as_it_was",
             config: ForkConfig = KEEP) -> Run:
    """A new queued run forked from `run` at `round_number` (1-based)."""
    original = inherited_prefix(run, round_number)
    prefix, marks = _edited_prefix(original, messages, append)
    appended = _appended(prefix, messages, append)
    combined = prefix + appended
    if not any(isinstance(m, UserMessage) for m in combined):
        raise ForkError("the conversation needs at least one user message", field="messages")
    changes = _config_changes(run, config)
    _check_parameters(run, config, user)
    own = [m for m, mark in zip(combined, marks + ["added"] * len(appended), strict=True)
           if mark != "inherited"]
    try:
        return run_rerun(run=run, user=user, mode=mode, replay=LIVE, snapshot_changes={
            "messages": dump_messages(combined),
            "fork": ForkSection(
                of=str(run.pk), round=round_number, inherited=len(prefix),
                inherited_rounds=round_number - 1, marks=marks,
                removed=_removed(marks, len(original)), changes=changes["words"],
                **({"own_rounds": 0} if "endpoint" in changes["sections"] else {})),
            **changes["sections"],
        }, endpoint=config.endpoint, policy=config.policy, title=run_title(own) or None)
    except RerunError as exc:
        raise ForkError(str(exc)) from exc


def inherited_prefix(run: Run, round_number: int) -> list[ChatMessage]:
    """The conversation as the model saw it at `round_number`: the starting messages and
    the rounds before it (the fork editor shows it; `run_fork` compares edits with it)."""
    return snapshot_of(run).chat_messages() + _rounds_before(run, round_number)


def editable_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The OpenAI form the fork editor and `messages` use (with tool error flags)."""
    return to_openai_messages(messages, error_flags=True)


def run_splice(*, run: Run, user: AbstractBaseUser | AnonymousUser | None, call: ToolCall,
               result: ToolExecutionResultMessage, splice: dict[str, Any]) -> Run:
    """A new queued run (parent: `run`) whose starting conversation is `run`'s through
    the round of `call`, with `result` in place of that call's result; the loop goes on
    from the next model call (a scripted model plays on, as in a fork). `splice` (which
    call, old and new result, who) is kept in the snapshot for the new run's page."""
    through = call.round.index
    inherited: list[ChatMessage] = []
    rounds = Round.objects.filter(run=run, index__lte=through).order_by("index")
    for round_ in rounds.prefetch_related("tool_calls"):
        inherited.extend(_round_messages(
            round_, {call.pk: result} if round_.index == through else None))
    prefix = snapshot_of(run).chat_messages() + inherited
    marks = ["spliced" if m is result else "inherited" for m in prefix]
    try:
        return run_rerun(run=run, user=user, mode="as_it_was", replay=LIVE, snapshot_changes={
            "messages": dump_messages(prefix),
            "fork": ForkSection(of=str(run.pk), round=through + 2, inherited=len(prefix),
                                inherited_rounds=through + 1, marks=marks),
            "splice": SpliceSection.model_validate(splice),
        })
    except RerunError as exc:
        raise ForkError(str(exc)) from exc


# What each message of a fork's (or a splice's) starting conversation is, in words.
MARK_WORDS = {"inherited": "inherited unchanged", "edited": "edited in the fork",
              "spliced": "spliced result", "added": "added in the fork"}


@dataclass(frozen=True)
class ConversationLabels:
    """Per message of a fork's starting conversation its mark (a MARK_WORDS key), and how
    many of each, in MARK_WORDS' order: what the run page says above and beside them."""

    marks: list[str]
    counts: list[tuple[int, str]]


def conversation_labels(fork: ForkSection, splice: SpliceSection | None,
                        conversation: Sequence[Mapping[str, Any]]) -> ConversationLabels:
    """The marks of `conversation` (a fork's starting conversation, in the OpenAI form):
    the prefix's as the fork recorded them, then "added" for what was appended after it.
    Forks recorded no marks at first: their prefix was inherited unchanged; nor did
    splices: theirs was too, but for the spliced result (the last answer to the spliced
    call before the run's own rounds)."""
    marks = [m if m in MARK_WORDS else "inherited" for m in fork.marks[:fork.inherited]]
    marks += ["inherited"] * (fork.inherited - len(marks))
    if splice is not None and "spliced" not in marks:
        answers = [i for i, m in enumerate(conversation[:len(marks)])
                   if m.get("role") == "tool" and m.get("tool_call_id") == splice.call_id]
        if answers:
            marks[answers[-1]] = "spliced"
    marks = (marks + ["added"] * len(conversation))[:len(conversation)]
    counts = [(marks.count(mark), words) for mark, words in MARK_WORDS.items()
              if mark in marks]
    return ConversationLabels(marks, counts)


def _rounds_before(run: Run, round_number: int) -> list[ChatMessage]:
    """The assistant messages and tool results of the rounds before `round_number`, each
    of which must have finished (an answer, and every call's result)."""
    if not isinstance(round_number, int) or isinstance(round_number, bool) or \
            not 1 <= round_number <= max(run.rounds_count, 1):
        raise ForkError(f"round must be a round of the run: 1 to {max(run.rounds_count, 1)}",
                        field="round")
    messages: list[ChatMessage] = []
    rounds = Round.objects.filter(run=run, index__lt=round_number - 1).order_by("index")
    for round_ in rounds.prefetch_related("tool_calls"):
        messages.extend(_round_messages(round_))
    return messages


def _round_messages(round_: Round,
                    replaced: dict[int, ToolExecutionResultMessage] | None = None,
                    ) -> list[ChatMessage]:
    """The round's assistant message and its calls' results; `replaced`: call pk -> the
    result to put in that call's place (a splice)."""
    if round_.status != "responded" or not round_.response:
        raise ForkError(f"round {round_.index + 1} has no answer: fork at or before it",
                        field="round")
    ai_message = ChatResponse.model_validate(round_.response).ai_message
    calls = {c.call_index: c for c in round_.tool_calls.all()}
    results: list[ChatMessage] = []
    for index, request in enumerate(ai_message.tool_execution_requests):
        call = calls.get(index)
        if call is not None and call.pk in (replaced or {}):
            results.append((replaced or {})[call.pk])
            continue
        if call is None or call.state not in FINISHED_CALL_STATES or call.result_text is None:
            raise ForkError(f"round {round_.index + 1}, call {index + 1} has no result: fork "
                            "at or before that round", field="round")
        results.append(ToolExecutionResultMessage(id=request.id, tool_name=request.name,
                                                  text=call.result_text,
                                                  is_error=call.is_error))
    return [AiMessage(text=ai_message.text,
                      tool_execution_requests=ai_message.tool_execution_requests,
                      thinking=ai_message.thinking,
                      provider_blocks=ai_message.provider_blocks), *results]


_AT = re.compile(r"messages\[(\d+)\]")


def _edited_prefix(original: list[ChatMessage], messages: Any,
                   append: Any) -> tuple[list[ChatMessage], list[str]]:
    """The prefix the fork starts from and, per message, "inherited" (the same as the
    original's), "edited" (in place of an original one) or "added"."""
    if messages is None:
        return original, ["inherited"] * len(original)
    if not isinstance(messages, list):
        raise ForkError("messages must be a list of message objects (the whole "
                        "conversation before the round)", field="messages")
    parsed = _parse(messages, append)[:len(messages)]
    marks = _marks(editable_messages(original), editable_messages(parsed))
    # An unchanged message is the stored one, not its OpenAI form read back: that form
    # has no place for thinking or provider blocks (an Anthropic thinking signature
    # must go back as it was).
    kept = _unchanged_sources(editable_messages(original), editable_messages(parsed))
    return [original[kept[i]] if i in kept else m for i, m in enumerate(parsed)], marks


def _appended(prefix: list[ChatMessage], messages: Any, append: Any) -> list[ChatMessage]:
    if append is None:
        return []
    if messages is None:  # validate after the stored prefix, in its OpenAI form
        head = editable_messages(prefix)
        return _parse(head, append, inherited=True)[len(head):]
    return _parse(messages, append)[len(messages):]


def _parse(head: list[Any], append: Any, *, inherited: bool = False) -> list[ChatMessage]:
    """`head` + `append` as one conversation; an error names the request field."""
    if append is not None and not isinstance(append, list):
        raise ForkError("append must be a list of message objects", field="append")
    try:
        return parse_conversation(head + (append or []))
    except ConversationError as exc:
        raise ForkError(_relative(str(exc), len(head), inherited),
                        field=_relative(exc.field, len(head), inherited)) from exc


def _relative(text: str, offset: int, inherited: bool) -> str:
    def shift(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= offset:
            return f"append[{index - offset}]"
        return f"the inherited message {index}" if inherited else match.group(0)

    return _AT.sub(shift, text)


def _key(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True)


def _marks(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Per message of `after`: inherited, edited (replaces one of `before`) or added."""
    marks: list[str] = []
    matcher = difflib.SequenceMatcher(a=[_key(m) for m in before],
                                      b=[_key(m) for m in after], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            marks += ["inherited"] * (j2 - j1)
        elif tag == "replace":  # the first ones take the replaced places: edited
            replaced = min(i2 - i1, j2 - j1)
            marks += ["edited"] * replaced + ["added"] * (j2 - j1 - replaced)
        elif tag == "insert":
            marks += ["added"] * (j2 - j1)
    return marks


def _unchanged_sources(before: list[dict[str, Any]],
                       after: list[dict[str, Any]]) -> dict[int, int]:
    """Index in `after` -> index in `before`, for the messages left unchanged."""
    matcher = difflib.SequenceMatcher(a=[_key(m) for m in before],
                                      b=[_key(m) for m in after], autojunk=False)
    return {j1 + k: i1 + k for tag, i1, _i2, j1, j2 in matcher.get_opcodes()
            if tag == "equal" for k in range(j2 - j1)}


def _removed(marks: list[str], original_count: int) -> int:
    """How many original messages the person deleted (not edited in place)."""
    return max(0, original_count - sum(1 for m in marks if m != "added"))


def _check_parameters(run: Run, config: ForkConfig, user: Any) -> None:
    """The fork's parameters, given or inherited, checked against its endpoint as a new
    run's are (custom keys, ranges, the model staff only), when either changes."""
    if config.parameters is None and config.endpoint is None:
        return
    snapshot = snapshot_of(run)
    parameters = config.parameters or ChatRequestParameters.model_validate(
        snapshot.parameters)
    kind, model = ((config.endpoint.kind, config.endpoint.model) if config.endpoint
                   else (snapshot.endpoint.kind, snapshot.endpoint.model))
    try:
        check_parameters(parameters, endpoint_kind=kind, endpoint_model=model, user=user)
    except ParameterError as exc:
        raise ForkError(str(exc), field="parameters") from exc


def _config_changes(run: Run, config: ForkConfig) -> dict[str, Any]:
    """The snapshot sections the fork replaces and, in words, what changed."""
    old = snapshot_of(run)
    sections: dict[str, Any] = {}
    words: list[str] = []
    # The same endpoint as frozen is no change (its script still plays on from round N).
    if config.endpoint is not None:
        endpoint = endpoint_section(config.endpoint)
        if endpoint.model_dump() != old.endpoint.model_dump():
            sections["endpoint"] = endpoint
            # Priced as that endpoint's model is now (a run on it started now would be).
            model_name = (config.parameters.model_name if config.parameters is not None
                          else old.parameters.get("model_name"))
            sections["price"] = price_section(config.endpoint, model_name)
            words.append(f"endpoint: {old.endpoint.name} → {config.endpoint.name}")
    if config.tools is not None:
        sections["tools"] = _tools(config.tools)
        words += _tool_words(old.tool_names(), [t.name for t in config.tools])
    if config.parameters is not None:
        sections["parameters"] = parameters_section(config.parameters)
        if sections["parameters"] != old.parameters:
            words.append(f"parameters: {json.dumps(old.parameters, sort_keys=True)} → "
                         f"{json.dumps(sections['parameters'], sort_keys=True)}")
    policy = policy_section(config.policy) if config.policy is not None else old.policy
    if config.policy is not None:
        sections |= {"policy": policy, "policy_changed": []}
        if policy.id != old.policy.id:
            words.append(f"policy: {old.policy.name} → {policy.name}")
    if config.policy_overrides:
        sections |= _overrides(policy, config.policy_overrides, words)
    return {"sections": sections, "words": words}


def _tools(tools: Sequence[ToolRegistration]) -> list[ToolSnapshot]:
    disabled = [t.name for t in tools if not t.enabled]
    if disabled:
        raise ForkError(f"disabled tools cannot be used: {', '.join(disabled)}", field="tools")
    return tools_section(tools)


def _tool_words(before: list[str], after: list[str]) -> list[str]:
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    return ([f"tools added: {', '.join(added)}"] if added else []) + (
        [f"tools removed: {', '.join(removed)}"] if removed else [])


def _overrides(policy: PolicySnapshot, overrides: dict[str, Any],
               words: list[str]) -> dict[str, Any]:
    """This fork's own policy values (as a new run's policy_overrides)."""
    values = policy.model_dump()
    try:
        checked = checked_overrides(values, overrides)
    except PolicyOverrideError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.problems.items())
        raise ForkError(f"policy_overrides: {problems}", field="policy_overrides") from exc
    changed = sorted(name for name, value in checked.items() if values.get(name) != value)
    words += [f"policy {name}: {values.get(name)!r} → {checked[name]!r}" for name in changed]
    return {"policy": PolicySnapshot.model_validate(values | checked), "policy_changed": changed}
