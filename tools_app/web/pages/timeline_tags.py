"""Template helpers for the timeline and the audit pages (`{% load timeline %}`,
registered in settings' TEMPLATES libraries). Everything they return is plain text: the
template's autoescaping still applies (nothing here marks anything safe), but for
`{% memo %}`, which returns its own block's rendering, escaped as the block escapes it."""

from __future__ import annotations

from functools import lru_cache

from django import template
from django.template.base import FilterExpression, NodeList, Parser, Token
from django.template.context import Context
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone, translation

from tools_app.models.prices import format_delta_usd, format_usd
from tools_app.runs.debugger.durations import format_ms
from tools_app.runs.debugger.kept_renderings import KeptRenderings
from tools_app.runs.debugger.lineage import Badge, badges

register = template.Library()
register.filter("ms", format_ms)
register.filter("usd", format_usd)  # dollars, or "no price"
register.filter("usd_delta", format_delta_usd)


@register.filter
def lineage_badges(stored_snapshot: object) -> list[Badge]:
    """A run's lineage badges from its stored snapshot (`run.snapshot|lineage_badges`):
    rerun, replay, fork, splice, import, try-it."""
    return badges(stored_snapshot)


@register.filter
def percent(value: float) -> str:
    """A share from 0 to 1 as people read it: "0 %", "12.5 %", "100 %"."""
    share = float(value) * 100
    return f"{share:.0f} %" if share in (0, 100) or share >= 10 else f"{share:.1f} %"


@register.filter
def words(value: str) -> list[str]:
    """A string's words: `"a b c"|words` is ["a", "b", "c"] (a list an include's `with`
    can pass, as in _filters.html)."""
    return value.split()


# A call id no call has: where it lands in a reversed URL marks where any call's id goes.
_CALL_MARKER = 987_654_321_987


@register.simple_tag
def call_url(name: str, run_pk: object, call_pk: int) -> str:
    """`{% url name run_pk call_pk %}` for a URL of one call of a run (`<uuid:run_id>`,
    then `<int:call_id>`), from one `reverse` per run and URL name: a page of a run with
    1,000 calls reversed the re-execute URL 1,000 times, a tenth of its rendering
    (docs/benchmarks/render.md). The int converter writes the id as its digits, so the
    URL is the reversed one with the marker's digits replaced."""
    head, tail = _call_url_parts(name, str(run_pk), get_script_prefix(), get_urlconf())
    return f"{head}{int(call_pk)}{tail}"


@lru_cache(maxsize=1024)
def _call_url_parts(name: str, run_pk: str, script_prefix: str,
                    urlconf: object) -> tuple[str, str]:
    # script_prefix, urlconf: parts of the key only (reverse reads the current ones).
    url = reverse(name, args=[run_pk, _CALL_MARKER])
    head, marker, tail = url.partition(f"/{_CALL_MARKER}/")
    if not marker or str(_CALL_MARKER) in tail:
        raise ValueError(f"{name} does not take a call id as one path segment: {url}")
    return head + "/", "/" + tail


# -- {% memo %} --------------------------------------------------------------------------

MEMO_SLOTS = 1024  # a memo block's renderings kept (one per slot: a run)


@register.tag
def memo(parser: Parser, token: Token) -> MemoNode:
    """`{% memo slot input... %}...{% endmemo %}`: the block rendered again only when one
    of its inputs differs (by value) from its last rendering for `slot`, else that
    rendering. The inputs must be everything the block reads (tests/live/test_live_header.py
    checks the run header's blocks); the time zone, language and localization are added."""
    bits = token.split_contents()
    if len(bits) < 3:
        raise template.TemplateSyntaxError("memo takes a slot and at least one input")
    nodelist = parser.parse(("endmemo",))
    parser.delete_first_token()
    return MemoNode(parser.compile_filter(bits[1]),
                    [parser.compile_filter(bit) for bit in bits[2:]], nodelist)


class MemoNode(template.Node):
    def __init__(self, slot: FilterExpression, inputs: list[FilterExpression],
                 nodelist: NodeList) -> None:
        self.slot, self.inputs, self.nodelist = slot, inputs, nodelist
        self.kept: KeptRenderings[str] = KeptRenderings(MEMO_SLOTS)

    def render(self, context: Context) -> str:
        slot = self.slot.resolve(context)
        inputs = (tuple(value.resolve(context) for value in self.inputs),
                  timezone.get_current_timezone_name(), translation.get_language(),
                  context.autoescape, context.use_l10n, context.use_tz)
        return self.kept.get(slot, inputs, lambda: self.nodelist.render(context))
