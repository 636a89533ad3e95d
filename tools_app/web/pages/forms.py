"""Forms: the playground's inputs, validated into what services.run_create needs."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from tools_app.engine import ChatMessage, json_nesting
from tools_app.engine.conversation import ConversationError, parse_conversation
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration

INPUT_MODES = [("simple", "System prompt + user message"),
               ("conversation", "Conversation (JSON)")]
CONVERSATION_HELP = (
    "A JSON list of messages in the OpenAI Chat Completions format: role system or user "
    "with content; role assistant with content and/or tool_calls (id, type \"function\", "
    "function name and arguments as JSON text); role tool with tool_call_id and content.")
TOOL_CHOICE_MODES = [("auto", "auto"), ("required", "required"), ("none", "none"),
                     ("named", "a named tool")]


class PlaygroundForm(forms.Form):
    endpoint = forms.ModelChoiceField(queryset=ModelEndpoint.objects.order_by("kind", "name"),
                                      empty_label=None)
    tools = forms.ModelMultipleChoiceField(
        queryset=ToolRegistration.objects.filter(enabled=True).order_by("name"),
        widget=forms.CheckboxSelectMultiple, required=False,
    )
    policy = forms.ModelChoiceField(queryset=ErrorPolicy.objects.order_by("-is_default", "name"),
                                    empty_label=None)
    system_prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False,
                                    max_length=20_000)
    # Not required: a form posted by an older page (or a script) means the simple mode.
    input_mode = forms.ChoiceField(choices=INPUT_MODES, initial="simple", required=False,
                                   widget=forms.RadioSelect)
    user_message = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=50_000,
                                   required=False)
    conversation_json = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}), required=False,
        max_length=500_000, help_text=CONVERSATION_HELP)
    tool_choice = forms.ChoiceField(choices=TOOL_CHOICE_MODES, initial="auto")
    # A list of the ticked tools (static/js/playground.js keeps it so as boxes change).
    tool_choice_name = forms.CharField(required=False, max_length=64, widget=forms.Select,
                                       help_text="The tool to force when tool choice is named.")
    parallel = forms.BooleanField(required=False, initial=True,
                                  help_text="Run one round's calls concurrently.")
    max_round_trips = forms.IntegerField(min_value=1, max_value=1000, required=False,
                                         help_text="Empty: the policy's value.")
    cost_cap_usd = forms.DecimalField(
        min_value=Decimal("0.0001"), max_digits=12, decimal_places=4, required=False,
        help_text="Dollars: the run stops before a model call that would pass it (it needs "
        "a price for the model). Empty: the policy's cap.")
    # Breakpoints (runs.debugger.breakpoints): where the run pauses for a person.
    break_before_round = forms.IntegerField(min_value=1, max_value=10_000, required=False)
    break_before_tool = forms.CharField(required=False, max_length=200)
    break_on_tool_error = forms.BooleanField(required=False)
    break_if_tool = forms.CharField(required=False, max_length=200)
    break_if_pointer = forms.CharField(required=False, max_length=500)
    break_if_value = forms.CharField(required=False, max_length=5_000,
                                     help_text="A JSON value, e.g. \"Paris\" or 3.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool_choice_name"].widget.choices = [
            ("", "(a ticked tool)"), *((name, name) for name in self._ticked_names())]

    def _ticked_names(self) -> list[str]:
        """The names of the tools ticked as the form is shown (posted or prefilled)."""
        if self.is_bound:
            ticked: Any = self.data.getlist("tools") if hasattr(self.data, "getlist") \
                else self.data.get("tools")
        else:
            ticked = self.initial.get("tools")
        if isinstance(ticked, str | uuid.UUID):
            ticked = [ticked]
        ids = [str(t) for t in ticked or () if isinstance(t, str | uuid.UUID)]
        try:
            return list(ToolRegistration.objects.filter(enabled=True, pk__in=ids)
                        .order_by("name").values_list("name", flat=True))
        except ValidationError:  # not tool ids: the field's own check says so
            return []

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["input_mode"] = data.get("input_mode") or "simple"
        if data["input_mode"] == "conversation":
            data["messages"] = self._conversation(data.get("conversation_json") or "")
        elif not (data.get("user_message") or "").strip() and "user_message" not in self.errors:
            self.add_error("user_message", "This field is required.")
        if data.get("tool_choice") == "named":
            name = (data.get("tool_choice_name") or "").strip()
            chosen = {t.name for t in data.get("tools") or []}
            if not name:
                self.add_error("tool_choice_name", "Name the tool the model must call.")
            elif name not in chosen:
                self.add_error("tool_choice_name", f"'{name}' is not among the selected tools.")
        self._clean_condition(data)
        return data

    @property
    def breakpoint_errors(self) -> bool:
        """Whether a breakpoint field has an error (the page opens their section)."""
        return any(name.startswith("break_") for name in self.errors)

    def _conversation(self, text: str) -> list[ChatMessage] | None:
        """The pasted conversation as engine messages; None (and a field error) if it
        is not usable."""
        if not text.strip():
            self.add_error("conversation_json", "Paste the conversation as a JSON list.")
            return None
        try:
            return parse_conversation(json_nesting.loads(text))
        except ValueError as exc:  # ConversationError, or JSON that does not parse
            prefix = "" if isinstance(exc, ConversationError) else "Not valid JSON: "
            self.add_error("conversation_json", f"{prefix}{exc}")
            return None
    def _clean_condition(self, data: dict[str, Any]) -> None:
        """The condition breakpoint needs all three parts, the value as JSON."""
        parts = [data.get(f"break_if_{p}") or "" for p in ("tool", "pointer", "value")]
        if not any(parts):
            data["break_if"] = None
            return
        if not all(parts):
            self.add_error("break_if_value", "A condition needs a tool, a JSON pointer and "
                           "a value.")
            return
        try:
            value = json_nesting.loads(parts[2])
        except ValueError:
            self.add_error("break_if_value", 'The value must be JSON (a string in quotes: '
                           '"Paris").')
            return
        data["break_if"] = {"kind": "condition", "tool": parts[0].strip(),
                            "pointer": parts[1].strip(), "value": value}

    def breakpoints(self) -> list[dict[str, Any]]:
        """The breakpoints as runs.debugger.breakpoints takes them (it checks them)."""
        data = self.cleaned_data
        found: list[dict[str, Any]] = []
        if data.get("break_before_round"):
            found.append({"kind": "before_round", "round": data["break_before_round"]})
        if (data.get("break_before_tool") or "").strip():
            found.append({"kind": "before_tool", "tool": data["break_before_tool"].strip()})
        if data.get("break_on_tool_error"):
            found.append({"kind": "tool_error"})
        if data.get("break_if"):
            found.append(data["break_if"])
        return found

    def remembered(self) -> dict[str, Any]:
        """What to pre-fill next time (ids and plain values only)."""
        data = self.cleaned_data
        return {
            "endpoint": str(data["endpoint"].pk), "policy": data["policy"].pk,
            "tools": [str(t.pk) for t in data["tools"]],
            "system_prompt": data["system_prompt"], "user_message": data["user_message"],
            "input_mode": data["input_mode"], "conversation_json": data["conversation_json"],
            "tool_choice": data["tool_choice"], "tool_choice_name": data["tool_choice_name"],
            "parallel": data["parallel"], "max_round_trips": data["max_round_trips"],
            "cost_cap_usd": None if data["cost_cap_usd"] is None else str(data["cost_cap_usd"]),
        }  # not the breakpoints: a forgotten one would pause the next run by surprise
