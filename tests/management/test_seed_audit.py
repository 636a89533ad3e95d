"""seed_audit fills a database with varied, consistent runs for the audit log, the same
rows for the same --seed (and nothing twice), searchable at once, on both databases."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count, Max, Min
from django.utils.html import escape

from tools_app.audit.search import search_calls
from tools_app.models import Round, Run, ToolCall

pytestmark = [pytest.mark.django_db, pytest.mark.both]


def seed(*args: str) -> str:
    out = io.StringIO()
    call_command("seed_audit", *args, stdout=out)
    return out.getvalue()


def content() -> list[tuple[Any, ...]]:
    """What the seed chose, without the dates (they follow the clock)."""
    return list(ToolCall.objects.order_by("run__created_at", "round__index", "call_index")
                .values_list("run__title", "run__status", "tool_name", "arguments_raw",
                             "state", "result_text"))


def test_it_seeds_varied_consistent_runs() -> None:
    assert seed("--runs", "60", "--calls-per-run", "5", "--seed", "7") == (
        "seed_audit: 60 runs, 300 tool calls (seed 7)\n")
    assert Run.objects.count() == 60
    assert ToolCall.objects.count() == 300
    runs = Run.objects.aggregate(first=Min("created_at"), last=Max("created_at"),
                                 users=Count("created_by", distinct=True),
                                 endpoints=Count("endpoint", distinct=True))
    assert (runs["last"] - runs["first"]).days > 150  # spread over six months
    assert runs["users"] > 5
    assert runs["endpoints"] == 4
    assert ToolCall.objects.values("state").distinct().count() >= 4
    assert ToolCall.objects.values("tool_name").distinct().count() >= 6
    for run in Run.objects.select_related("policy"):
        assert run.tool_calls_count == 5 == ToolCall.objects.filter(run=run).count()
        assert run.rounds_count == Round.objects.filter(run=run).count()
        assert run.errors_count == ToolCall.objects.filter(run=run, is_error=True).count()
        assert run.snapshot["policy"]["name"] == run.policy.name
    call = ToolCall.objects.order_by("pk").last()
    assert call is not None
    assert call.round.run_id == call.run_id


def test_the_same_seed_gives_the_same_rows_once() -> None:
    seed("--runs", "20", "--calls-per-run", "3", "--seed", "5")
    first = content()
    assert seed("--runs", "20", "--calls-per-run", "3", "--seed", "5") == (
        "seed_audit: seed 5 is already here; nothing added\n")
    assert content() == first
    Run.objects.all().delete()
    seed("--runs", "20", "--calls-per-run", "3", "--seed", "5")
    assert content() == first
    seed("--runs", "20", "--calls-per-run", "3", "--seed", "6")  # another set
    assert Run.objects.count() == 40


def test_seeded_rows_are_searchable_and_new_rows_still_get_ids() -> None:
    seed("--runs", "30", "--calls-per-run", "4")
    call = ToolCall.objects.filter(tool_name="get_weather").first()
    assert call is not None
    assert call.arguments is not None
    found = search_calls(ToolCall.objects.all(), call.arguments["city"])
    assert call.pk in set(found.values_list("pk", flat=True))
    assert found.count() < ToolCall.objects.count()
    run = Run.objects.first()
    assert run is not None
    # the id sequences continue after the ids the seed gave (PostgreSQL)
    round_ = Round.objects.create(run=run, index=99)
    ToolCall.objects.create(run=run, round=round_, call_index=0, call_id="new", tool_name="t")


@pytest.mark.parametrize("args", [
    ("--runs", "0", "--calls-per-run", "1"),
    ("--runs", "1", "--calls-per-run", "1001"),
    ("--runs", "1", "--calls-per-run", "1", "--months", "0"),
])
def test_bad_sizes_are_refused(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError):
        seed(*args)


def test_a_seeded_run_opens_with_its_question(admin_client: Any) -> None:
    seed("--runs", "3", "--calls-per-run", "2", "--seed", "5")
    for run in Run.objects.all():
        response = admin_client.get(f"/runs/{run.pk}/")
        assert response.status_code == 200
        question = run.snapshot["messages"][0]["text"]
        assert escape(question) in response.content.decode()


def test_a_run_whose_stored_messages_are_not_the_engines_still_opens(admin_client: Any) -> None:
    seed("--runs", "1", "--calls-per-run", "1", "--seed", "5")
    run = Run.objects.get()
    run.snapshot["messages"] = [{"role": "user", "content": "an older shape"}]
    run.save(update_fields=["snapshot"])

    assert admin_client.get(f"/runs/{run.pk}/").status_code == 200
    assert admin_client.get(f"/api/runs/{run.pk}").status_code in (200, 401, 403)
