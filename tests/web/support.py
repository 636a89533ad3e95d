"""Helpers of the web-layer tests: starting a run, a small HTML tree parser, the JSON API
client and its error shape, the playground form."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

from django.test import Client

from tools_app.engine import ChatRequestParameters
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration
from tools_app.runs import services


def start_run(
    user: Any,
    endpoint: ModelEndpoint,
    tools: list[ToolRegistration],
    policy: ErrorPolicy,
    text: str = "What's the weather in Hangzhou and in Paris?",
) -> Run:
    return services.run_create(
        user=user, endpoint=endpoint, tools=tools, policy=policy,
        messages=services.conversation(user_message=text),
        parameters=ChatRequestParameters(),
    )


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent

    def ancestors_or_self(self) -> list[Element]:
        chain: list[Element] = []
        node: Element | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Tree(HTMLParser):
    """A forgiving parse: every element with its attributes and parent, every text run
    with the element it sits in."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.texts: list[tuple[str, Element | None]] = []
        self._stack: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs), self._stack[-1] if self._stack else None)
        self.elements.append(element)
        if tag not in VOID:
            self._stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, dict(attrs), self._stack[-1] if self._stack else None))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append((data, self._stack[-1] if self._stack else None))

    def ids(self) -> list[str]:
        return [e.attrs["id"] or "" for e in self.elements if "id" in e.attrs]

    def by_id(self, element_id: str) -> Element:
        matches = [e for e in self.elements if e.attrs.get("id") == element_id]
        assert len(matches) == 1, f"{len(matches)} elements with id {element_id!r}"
        return matches[0]

    def tags(self, tag: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag]

    def texts_containing(self, needle: str) -> list[tuple[str, Element | None]]:
        return [(t, e) for t, e in self.texts if needle in t]


def inside_hx_disable(element: Element | None) -> bool:
    return element is not None and any("hx-disable" in e.attrs
                                       for e in element.ancestors_or_self())


def conversation_labels(page: str) -> tuple[list[str | None], list[str], dict[str, int]]:
    """A run page's starting conversation: each message's mark (data-fork-mark), the
    words of its fork tag, and the counts its summary (#fork-counts) gives, by words."""
    tree = Tree(page)
    messages = [e for e in tree.tags("li")
                if "message" in (e.attrs.get("class") or "").split()]
    tags = [text.strip() for text, e in tree.texts
            if e is not None and e.parent in messages and e.tag == "small"
            and any(c.startswith("fork-") for c in (e.attrs.get("class") or "").split())]
    summary = "".join(text for text, e in tree.texts
                      if e is not None and e.attrs.get("id") == "fork-counts")
    counts = {words: int(count) for count, words in
              (part.split(" ", 1) for part in summary.split(", ") if part)}
    return [e.attrs.get("data-fork-mark") for e in messages], tags, counts


HEADER_RE = re.compile(r'<section id="run-header".*?</section>', re.DOTALL)
ROUND_RE = re.compile(r'<section id="(round-\d+)".*?</section>', re.DOTALL)
SEQ_RE = re.compile(r'<span id="run-seq"[^>]*></span>')
# The run's controls that need its rounds ("Fork from a round"), outside the timeline.
FORK_FORM_RE = re.compile(r'<div id="fork-from-round".*?</div>', re.DOTALL)
OOB_TRUE = ' hx-swap-oob="true"'
# A round's time axis ends where its lanes begin (on the page and in a round), or where
# the lanes of a lane-only batch do.
AXIS_RE = re.compile(r'<div class="waterfall" id="(round-(\d+)-axis)".*?</div>'
                     r'(?=\s*<div (?:class="lanes"|hx-swap-oob="beforeend:#round-))', re.DOTALL)
LANES_RE = re.compile(r'<div hx-swap-oob="beforeend:#round-(\d+)-lanes">(.*?)</div>'
                      r'(?=<div hx-swap-oob|<span id="run-seq")', re.DOTALL)
LANE_RE = re.compile(r'<article id="(call-\d+)".*?</article>', re.DOTALL)


class Timeline:
    """What htmx plus static/js/timeline.js make of the page's timeline: the header, the
    fork form and the seq marker are replaced by id, a round is replaced if its id exists
    (data-upsert), else appended to #rounds; a lane-only update replaces a round's time
    axis by id and each lane it carries (data-upsert) inside its round."""

    def __init__(self, page: str) -> None:
        self.header = _one(HEADER_RE, page)
        self.fork_form = _one(FORK_FORM_RE, page)
        self.rounds = {m.group(1): m.group(0) for m in ROUND_RE.finditer(page)}
        self.seq = _one(SEQ_RE, page)

    def apply(self, batch: str) -> None:
        header = _one(HEADER_RE, batch)
        assert OOB_TRUE in header, "the header must be an out-of-band swap"
        self.header = header.replace(OOB_TRUE, "", 1)
        for fork_form in FORK_FORM_RE.findall(batch):
            assert OOB_TRUE in fork_form.split(">", 1)[0], "the fork form is swapped by id"
            self.fork_form = fork_form.replace(OOB_TRUE, "", 1)
        for match in ROUND_RE.finditer(batch):
            assert "data-upsert" in match.group(0).split(">", 1)[0]
            self.rounds[match.group(1)] = match.group(0)
        outside_rounds = ROUND_RE.sub("", batch)
        for match in AXIS_RE.finditer(outside_rounds):
            axis = match.group(0)
            assert OOB_TRUE in axis.split(">", 1)[0], "a lone axis must be swapped by id"
            self._replace(f"round-{match.group(2)}", AXIS_RE, match.group(1),
                          axis.replace(OOB_TRUE, "", 1))
        for match in LANES_RE.finditer(outside_rounds):
            for lane in LANE_RE.finditer(match.group(2)):
                assert "data-upsert" in lane.group(0).split(">", 1)[0]
                self._replace(f"round-{match.group(1)}", LANE_RE, lane.group(1), lane.group(0))
        seq = _one(SEQ_RE, batch)
        assert OOB_TRUE in seq
        self.seq = seq.replace(OOB_TRUE, "", 1)

    def _replace(self, round_id: str, pattern: re.Pattern[str], dom_id: str, html: str) -> None:
        """Replace the element `dom_id` (found by `pattern`) inside round `round_id`,
        which must hold it: a lane-only batch updates what the page already shows."""
        found = [m for m in pattern.finditer(self.rounds[round_id]) if m.group(1) == dom_id]
        assert len(found) == 1, f"{dom_id} is not in {round_id}"
        old = self.rounds[round_id]
        self.rounds[round_id] = old[:found[0].start()] + html + old[found[0].end():]

    def state(self) -> tuple[str, list[tuple[str, str]], str, str]:
        return self.header, list(self.rounds.items()), self.seq, self.fork_form


def _one(pattern: re.Pattern[str], html: str) -> str:
    found = pattern.findall(html) if pattern.groups == 0 else [
        m.group(0) for m in pattern.finditer(html)]
    assert len(found) == 1, f"{len(found)} matches of {pattern.pattern!r}"
    return str(found[0])


# -- hostile text --------------------------------------------------------------------

PAYLOAD = ('<script>alert("s")</script><img src=x onerror=alert("i")>'
           '<a href="javascript:alert(1)" hx-get="/admin/" hx-post="/runs/" hx-trigger="load">'
           "{{ request.user }}{% csrf_token %}</a>")
MARKERS = ("alert(", "javascript:", "request.user")
STATIC_SCRIPTS = 6  # htmx, its ws extension, timeline.js, approvals.js, reexec.js, waiting.js


# The htmx requests the product's own pages make (a round's wire panel, loaded when it is
# opened): the only htmx attributes allowed, on that element, with exactly these values.
PRODUCT_HTMX = {"hx-get": re.compile(r"/runs/[0-9a-f-]{36}/rounds/\d+/wire/"),
                "hx-trigger": re.compile(r"toggle once")}


def _products_own(element: Any, name: str, value: str | None) -> bool:
    pattern = PRODUCT_HTMX.get(name)
    return (pattern is not None and element.tag == "details"
            and element.attrs.get("class") == "wire"
            and pattern.fullmatch(value or "") is not None)


def assert_inert(html: str, *, scripts: int) -> None:
    tree = Tree(html)
    assert len(tree.tags("script")) == scripts
    assert html.count("<script") == scripts
    assert "<img" not in html
    assert "</script><img" not in html
    for element in tree.elements:
        for name, value in element.attrs.items():
            assert not name.startswith("on"), f"event handler attribute {name}"
            assert name not in ("hx-get", "hx-post", "hx-trigger") or _products_own(
                element, name, value), f"htmx attribute {name}"
            assert not (value or "").strip().lower().startswith("javascript:")
    hits = [(text, el) for text, el in tree.texts if any(m in text for m in MARKERS)]
    assert hits, "the payload is not shown at all"
    for text, element in hits:
        if element is not None and element.tag == "title":
            continue  # RCDATA in <head>: never parsed as markup, never seen by htmx
        assert inside_hx_disable(element), f"outside hx-disable: {text[:80]!r}"


# -- the JSON API ----------------------------------------------------------------------

MISSING_RUN = "00000000-0000-0000-0000-000000000000"


class Api:
    """A client that speaks JSON with a bearer token, with CSRF checks on."""

    def __init__(self, token: str | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, path: str, body: Any, **headers: str) -> Any:
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return self.client.post(path, data, content_type="application/json",
                                headers=self.headers | headers)

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers=self.headers | headers)


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"]
    assert error["message"]
    return error  # type: ignore[no-any-return]


# -- the playground --------------------------------------------------------------------


def playground_post(endpoint: ModelEndpoint, policy: ErrorPolicy, tools: list[ToolRegistration],
                    **fields: Any) -> dict[str, Any]:
    data = {"endpoint": str(endpoint.pk), "policy": str(policy.pk),
            "tools": [str(t.pk) for t in tools], "system_prompt": "Be brief.",
            "user_message": "Weather in Paris?", "tool_choice": "auto",
            "tool_choice_name": "", "parallel": "on", "max_round_trips": ""}
    return data | fields
