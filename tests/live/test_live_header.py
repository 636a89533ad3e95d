"""The header of a live batch is rendered again only when what it shows changed.

Every batch carries the header (so a viewer that connects or resumes later gets a right
one); a batch whose header inputs equal the run's previous batch's reuses that
rendering, and one after the status, tokens, cost, counts or breakpoint changed carries
a header equal to a fresh page's. The header's parts that stay for a run's life are
`{% memo %}` blocks: each reads only the inputs it is keyed on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.web.support import HEADER_RE, OOB_TRUE
from tests.web.support import start_run as _start_run
from tools_app.live import fragments
from tools_app.live.fragments import HEADER_COLUMNS, render_updates
from tools_app.models import (
    ErrorPolicy,
    ModelEndpoint,
    Run,
    RunPause,
    ToolCall,
    ToolCallState,
    ToolRegistration,
)
from tools_app.runs.store.selectors import event_marks_after
from tools_app.runs.worker.runner import execute_run

pytestmark = pytest.mark.django_db


def finished(run: Run) -> Run:
    async_to_sync(execute_run)(str(run.pk))
    run.refresh_from_db()
    return run


@pytest.fixture
def header_renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids whose header was rendered (not reused), in order."""
    rendered: list[str] = []
    render = fragments.render_header

    def counted(run: Run, header: Any) -> Any:
        rendered.append(str(run.pk))
        return render(run, header)

    monkeypatch.setattr(fragments, "render_header", counted)
    return rendered


@pytest.fixture
def run(bob: AbstractUser, weather_endpoint: ModelEndpoint,
        demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy) -> Run:
    return finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))


def batch_header(run: Run, after: int = 0, count: int = 3) -> str:
    batch = render_updates(run.pk, event_marks_after(run.pk, after)[:count])
    found = HEADER_RE.search(batch)
    assert found is not None
    return found.group(0)


def page_header(client: Client, run: Run) -> str:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    found = HEADER_RE.search(response.content.decode())
    assert found is not None
    return found.group(0)


def test_a_batch_whose_header_inputs_did_not_change_reuses_the_last_rendering(
    run: Run, bob_client: Client, header_renders: list[str],
) -> None:
    first = batch_header(run)
    later = batch_header(run, after=3)  # other events, the same run state

    assert header_renders == [str(run.pk)]
    assert later == first
    assert later.replace(OOB_TRUE, "", 1) == page_header(bob_client, run)


def _status(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(status="failed", error_type="Boom",
                                         error_message="<b>it broke</b>")


def _tokens(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(input_tokens=9000, output_tokens=345,
                                         total_tokens=9345)


def _cost(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(cost_usd=Decimal("1.23456"))


def _running_call(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(status="running", final_text=None)
    ToolCall.objects.filter(run=run).update(state=ToolCallState.STARTED)


def _pause(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(status="waiting", final_text=None)
    RunPause.objects.create(run=run, round_index=1, before="model", reason="<before> round 2")


def _title(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(title="<i>renamed</i>")


def _endpoint(run: Run) -> None:  # a received run's snapshot is rebuilt (ingest)
    snapshot = dict(run.snapshot)
    snapshot["endpoint"] = dict(snapshot["endpoint"], name="<another endpoint>")
    Run.objects.filter(pk=run.pk).update(snapshot=snapshot)


@pytest.mark.parametrize("change", [_status, _tokens, _cost, _running_call, _pause, _title,
                                    _endpoint])
def test_a_batch_after_what_the_header_shows_changed_carries_the_new_header(
    run: Run, bob_client: Client, header_renders: list[str], change: Callable[[Run], None],
) -> None:
    before = batch_header(run)
    change(run)

    after = batch_header(run, after=3)

    assert header_renders == [str(run.pk)] * 2
    assert after != before
    assert after.replace(OOB_TRUE, "", 1) == page_header(bob_client, run)


def test_another_breakpoint_with_the_status_unchanged_renders_the_header_again(
    run: Run, header_renders: list[str],
) -> None:
    _pause(run)
    batch_header(run)
    RunPause.objects.filter(run=run).update(reason="a second breakpoint")

    assert "a second breakpoint" in batch_header(run, after=3)
    assert len(header_renders) == 2


def test_each_run_keeps_its_own_header(
    run: Run, bob: AbstractUser, weather_endpoint: ModelEndpoint,
    demo_tools: dict[str, ToolRegistration], policy: ErrorPolicy,
    header_renders: list[str],
) -> None:
    other = finished(_start_run(bob, weather_endpoint, [demo_tools["get_weather"]], policy))
    Run.objects.filter(pk=other.pk).update(title="the other run")

    assert "the other run" not in batch_header(run)
    assert "the other run" in batch_header(other)
    assert "the other run" not in batch_header(run, after=3)
    assert header_renders == [str(run.pk), str(other.pk)]


# -- what the header reads is what is compared ----------------------------------------

TEMPLATE = Path(settings.BASE_DIR) / "templates" / "tools_app" / "run_detail.html"
# Run attributes the header reads that are not columns: each follows from `status`.
STATUS_PROPERTIES = {"is_terminal", "get_status_display"}
# The snapshot's sections `fragments.header_inputs` compares.
SNAPSHOT_SECTIONS = {"endpoint", "policy", "imported"}


MEMO_RE = re.compile(r"{% memo (\S+) ([^%]+?) %}(.*?){% endmemo %}", re.DOTALL)


def header_partial() -> str:
    source = TEMPLATE.read_text()
    found = re.search(r"{% partialdef header inline %}(.*?){% endpartialdef %}", source,
                      re.DOTALL)
    assert found is not None
    return found.group(1)


def test_every_run_attribute_the_header_reads_is_among_its_compared_inputs() -> None:
    partial = header_partial()
    read = set(re.findall(r"\brun\.(\w+)", partial))
    snapshot = set(re.findall(r"\brun\.snapshot\.(\w+)", partial))

    columns = {"pk" if name == "id" else name for name in HEADER_COLUMNS}
    assert read - {"snapshot"} <= columns | STATUS_PROPERTIES
    assert snapshot <= SNAPSHOT_SECTIONS
    assert "imported=run.snapshot.imported" in partial  # _imported_by.html's one input
    assert "open_pause" not in partial  # a query: header_view's `pause` holds its values


def bound_names(text: str) -> set[str]:
    return set(re.findall(r"{% for (\w+) in ", text)) | set(re.findall(r"\bwith (\w+)=", text))


def root_names(text: str) -> set[str]:
    """The context variables a template text reads (the first name of each lookup)."""
    code = re.sub(r'"[^"]*"', '""', text)
    return (set(re.findall(r"(?<![\w.])([a-z_]+)\.\w", code))
            | set(re.findall(r"{{ ?([a-z_]+)", code))
            | set(re.findall(r"{% for \w+ in (\w+)", code)))


def included(text: str) -> list[str]:
    """The text of each template (or partial) a text includes."""
    texts = []
    for name in re.findall(r'{% include "([^"#]+)(?:#(\w+))?"', text):
        source = (TEMPLATE.parent / Path(name[0]).name).read_text()
        if name[1]:
            found = re.search(rf"{{% partialdef {name[1]} %}}(.*?){{% endpartialdef %}}", source,
                              re.DOTALL)
            assert found is not None
            source = found.group(1)
        texts.append(re.sub(r"{% comment %}.*?{% endcomment %}", "", source, flags=re.DOTALL))
    return texts


def test_each_memo_block_of_the_header_reads_only_its_inputs() -> None:
    blocks = MEMO_RE.findall(header_partial())
    assert len(blocks) == 4  # title and badges, model and policy, origin, settings

    for slot, inputs, body in blocks:
        assert slot == "run.pk"
        keyed = inputs.split()
        read = re.findall(r"\b((?:run|header)(?:\.\w+)+)", body)
        assert read
        for path in read:  # the names a block binds are bound to these paths too
            assert any(path == key or path.startswith(key + ".") for key in keyed), (path, keyed)
        bound = bound_names(body)
        assert root_names(body) <= {"run", "header"} | bound, body
        for text in included(body):  # an include sees the block's context
            assert root_names(text) <= bound | bound_names(text) | {"forloop"}, text
