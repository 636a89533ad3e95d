"""seed_demo: what `make run` does on every start, so it must be idempotent."""

import io
import json

import pytest
from django.core.management import call_command

from tools_app.admin import script_problems
from tools_app.engine import ScriptedChatModel, ScriptStep, ToolService, UserMessage
from tools_app.management.commands.seed_demo import DEMO_SCRIPTS, HALLUCINATED_TOOL
from tools_app.models import ErrorPolicy, ModelEndpoint, ToolRegistration
from tools_app.tools import example_tools

pytestmark = pytest.mark.django_db


def seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_a_first_seed_creates_tools_policy_and_endpoints() -> None:
    output = seed()
    assert output == (
        "seed_demo: tools created 6, updated 0, unchanged 0, disabled 0; "
        "default policy created; 4 of 4 demo endpoints created\n"
    )
    assert ToolRegistration.objects.count() == 6
    [policy] = ErrorPolicy.objects.all()
    assert (policy.name, policy.is_default) == ("Default", True)
    assert set(ModelEndpoint.objects.values_list("name", flat=True)) == set(DEMO_SCRIPTS)
    assert set(ModelEndpoint.objects.values_list("kind", flat=True)) == {"scripted"}


def test_seeding_twice_creates_nothing_new() -> None:
    seed()
    rows = {
        model: sorted((str(r.pk), r.updated_at) for r in model.objects.all())
        for model in (ToolRegistration, ErrorPolicy, ModelEndpoint)
    }

    output = seed()

    assert output == (
        "seed_demo: tools created 0, updated 0, unchanged 6, disabled 0; "
        "default policy kept; 0 of 4 demo endpoints created\n"
    )
    for model, before in rows.items():
        assert sorted((str(r.pk), r.updated_at) for r in model.objects.all()) == before


def test_a_user_edited_endpoint_is_not_overwritten() -> None:
    seed()
    endpoint = ModelEndpoint.objects.get(name="Scripted: weather in parallel")
    endpoint.script = [{"text": "my own script"}]
    endpoint.stream = True
    endpoint.save()

    seed()

    endpoint.refresh_from_db()
    assert endpoint.script == [{"text": "my own script"}]
    assert endpoint.stream is True


def test_a_deleted_demo_endpoint_comes_back() -> None:
    seed()
    ModelEndpoint.objects.filter(name="Scripted: hallucinated tool").delete()
    assert seed().endswith("1 of 4 demo endpoints created\n")
    assert ModelEndpoint.objects.filter(name="Scripted: hallucinated tool").exists()


def test_no_default_policy_is_added_when_the_user_has_policies() -> None:
    ErrorPolicy.objects.create(name="Mine")
    assert "default policy kept" in seed()
    assert list(ErrorPolicy.objects.values_list("name", "is_default")) == [("Mine", False)]


def test_every_seeded_script_validates_and_calls_only_registered_tools() -> None:
    seed()
    registered = set(ToolRegistration.objects.values_list("name", flat=True))
    assert HALLUCINATED_TOOL not in registered
    for endpoint in ModelEndpoint.objects.all():
        assert script_problems(endpoint.script) == [], endpoint.name
        steps = [ScriptStep.model_validate(step) for step in endpoint.script]
        assert steps[-1].text, "a run must end with text"
        assert not steps[-1].tool_calls, "a run must end with text"
        called = {call.name for step in steps for call in step.tool_calls}
        assert called <= registered | {HALLUCINATED_TOOL}, endpoint.name


def test_the_demo_scripts_show_what_they_are_named_after() -> None:
    weather = DEMO_SCRIPTS["Scripted: weather in parallel"]
    assert [c["name"] for c in weather[0]["tool_calls"]] == ["get_weather", "get_weather"]
    assert "{last_results}" in weather[1]["text"]

    failing = DEMO_SCRIPTS["Scripted: failing + slow tools"]
    assert [(c["name"], c["arguments"]) for c in failing[0]["tool_calls"]][1] == (
        "slow_tool", {"seconds": 1.5})
    assert {c["name"] for c in failing[0]["tool_calls"]} == {
        "always_fails", "slow_tool", "calculator"}

    bad = DEMO_SCRIPTS["Scripted: bad arguments"]
    raw = bad[0]["tool_calls"][0]["arguments"]
    assert isinstance(raw, str)
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert bad[1]["tool_calls"][0] == {"name": "calculator", "arguments": {"expression": "2 + 2"}}

    hallucinated = DEMO_SCRIPTS["Scripted: hallucinated tool"]
    assert hallucinated[0]["tool_calls"][0]["name"] == HALLUCINATED_TOOL


async def test_the_weather_script_runs_against_the_demo_tools() -> None:
    service = ToolService().tools(example_tools)
    model = ScriptedChatModel(DEMO_SCRIPTS["Scripted: weather in parallel"])

    result = await service.chat(model, [UserMessage(text="Weather in Hangzhou and London?")])

    text = result.final_response.ai_message.text or ""
    assert text.startswith("Here is the weather:\n")
    assert '"city": "Hangzhou"' in text
    assert '"city": "London"' in text
    assert [e.request.name for e in result.tool_executions] == ["get_weather", "get_weather"]
