"""Breakpoints in the pages: set in the playground, the paused run's panel and held
calls on the timeline, and the continue form (owner or staff, CSRF, clear refusals)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.runs.support import execute
from tests.web.support import playground_post
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, RunPause, ToolRegistration
from tools_app.runs import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def weather(demo_tools: dict[str, ToolRegistration]) -> ToolRegistration:
    return demo_tools["get_weather"]


def paused(bob: AbstractUser, endpoint: ModelEndpoint, tool: ToolRegistration,
           policy: ErrorPolicy, breakpoints: list[dict[str, object]]) -> Run:
    run = services.run_create(user=bob, endpoint=endpoint, tools=[tool], policy=policy,
                              messages=services.conversation(user_message="Weather?"),
                              breakpoints=breakpoints)
    assert execute(str(run.pk)) == "waiting"
    return run


def test_the_playground_sets_breakpoints_for_one_run_only(
    bob_client: Client, weather_endpoint: ModelEndpoint, weather: ToolRegistration,
    policy: ErrorPolicy,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [weather], break_before_round="2",
        break_before_tool="get_weather", break_on_tool_error="on",
        break_if_tool="get_weather", break_if_pointer="/city", break_if_value='"Paris"'))

    assert response.status_code == 302
    assert Run.objects.get().snapshot["breakpoints"] == [
        {"kind": "before_round", "round": 2}, {"kind": "before_tool", "tool": "get_weather"},
        {"kind": "tool_error"},
        {"kind": "condition", "tool": "get_weather", "pointer": "/city", "value": "Paris"}]
    page = bob_client.get("/playground/").content.decode()
    assert 'name="break_if_pointer"' in page
    assert "/city" not in page  # the next run does not pause by surprise


@pytest.mark.parametrize(("fields", "error"), [
    ({"break_if_tool": "get_weather", "break_if_pointer": "/city"}, "needs a tool, a JSON "
                                                                     "pointer and a value"),
    ({"break_if_tool": "get_weather", "break_if_pointer": "/city", "break_if_value": "Paris"},
     "The value must be JSON"),
    ({"break_before_tool": "calculator"}, "tool must be one of the run&#x27;s tools"),
])
def test_bad_breakpoints_in_the_playground_are_form_errors(
    bob_client: Client, weather_endpoint: ModelEndpoint, weather: ToolRegistration,
    policy: ErrorPolicy, fields: dict[str, str], error: str,
) -> None:
    response = bob_client.post("/playground/", playground_post(
        weather_endpoint, policy, [weather], **fields))

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Run.objects.exists()


def test_a_paused_run_shows_its_panel_and_held_calls_and_continues_with_edits(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    weather: ToolRegistration, policy: ErrorPolicy,
) -> None:
    run = paused(bob, weather_endpoint, weather, policy,
                 [{"kind": "before_tool", "tool": "get_weather"}])
    first, second = run.tool_calls.order_by("call_index")

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="paused"' in page
    assert "Paused <span hx-disable>before a call of get_weather</span>" in page
    assert f'action="/runs/{run.pk}/continue/"' in page
    assert f'name="arguments-{first.pk}"' in page
    assert page.count("Held at a breakpoint") == 4  # two badges, two notes

    response = bob_client.post(f"/runs/{run.pk}/continue/", {
        "step": "run", f"arguments-{first.pk}": '{"city": "Lyon"}',
        f"arguments-{second.pk}": '{\n  "city": "Paris"\n}'})

    assert response.status_code == 302
    pause = RunPause.objects.get()
    assert (pause.resolution, pause.edited_arguments) == ("run", {first.call_id: {"city": "Lyon"}})
    assert execute(str(run.pk)) == "succeeded"
    assert "Lyon" in (run.tool_calls.get(pk=first.pk).result_text or "")
    # The edited call's lane: the arguments it ran with beside the model's.
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    lane = page.split(f'id="call-{first.pk}"')[1].split("</article>")[0]
    assert "<summary>Arguments the model sent</summary>" in lane
    assert "&quot;city&quot;: &quot;Hangzhou&quot;" in lane
    assert "<strong>Arguments edited at a breakpoint</strong> by bob" in lane
    ran_with = lane.split("<summary>Ran with the arguments</summary>")[1].split("</pre>")[0]
    assert "&quot;city&quot;: &quot;Lyon&quot;" in ran_with
    other = page.split(f'id="call-{second.pk}"')[1].split("</article>")[0]
    assert "breakpoint-edit" not in other
    assert "<summary>Arguments</summary>" in other


def test_a_message_before_the_model_call_is_shown_escaped_on_its_round(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    weather: ToolRegistration, policy: ErrorPolicy,
) -> None:
    run = paused(bob, weather_endpoint, weather, policy, [{"kind": "before_round", "round": 2}])
    assert "<textarea form=\"breakpoint-form\" name=\"message\"" in bob_client.get(
        f"/runs/{run.pk}/").content.decode()

    bob_client.post(f"/runs/{run.pk}/continue/", {"step": "run",
                                                  "message": "<b>Only</b> Celsius"})
    assert execute(str(run.pk)) == "succeeded"

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Message added at a breakpoint by bob</strong>: &lt;b&gt;Only&lt;/b&gt; Celsius" \
        in page
    assert 'id="paused"' not in page


def test_the_continue_form_needs_csrf_the_owner_and_says_why_it_refuses(
    bob: AbstractUser, charlie: AbstractUser, weather_endpoint: ModelEndpoint,
    weather: ToolRegistration, policy: ErrorPolicy,
) -> None:
    run = paused(bob, weather_endpoint, weather, policy,
                 [{"kind": "before_tool", "tool": "get_weather"}])
    url = f"/runs/{run.pk}/continue/"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(bob)
    stranger = Client()
    stranger.force_login(charlie)
    owner = Client()
    owner.force_login(bob)

    assert strict.post(url, {"step": "run"}).status_code == 403
    assert stranger.post(url, {"step": "run"}).status_code == 404
    refused = owner.post(url, {"step": "run", "message": "hi"}, follow=True).content.decode()
    bad_json = owner.post(url, {"step": "run", f"arguments-{run.tool_calls.first().pk}": "{"},
                          follow=True).content.decode()
    assert "Could not continue: a message can be added only at a pause before a model " \
           "call" in refused
    assert bad_json.count("not valid JSON") == 1  # said once, not again as its problem
    assert Run.objects.get(pk=run.pk).status == "waiting"
    owner.post(url, {"step": "abort"})
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_the_paused_panel_says_what_each_button_does_and_cancelling_is_its_only_stop(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    weather: ToolRegistration, policy: ErrorPolicy,
) -> None:
    run = paused(bob, weather_endpoint, weather, policy,
                 [{"kind": "before_tool", "tool": "get_weather"}])

    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    panel = page.split('id="paused"')[1].split("</section>")[0]
    assert 'value="abort"' not in page  # one way to stop: Cancel run
    assert page.count(">Cancel run</button>") == 1
    assert 'form="cancel-form" class="danger cancel-run"' in panel
    assert "End the run here, as cancelled: the held calls never run." in panel
    assert "Run the first held call only, then pause before the next call or model " \
           "call." in panel
    assert "Run the held calls, then pause before the next model call." in panel
    assert "Run on to the next breakpoint, or to the end." in panel
    for what in ("step-run-what", "step-call-what", "step-round-what", "cancel-what"):
        assert f'aria-describedby="{what}"' in panel
        assert f'id="{what}"' in panel

    bob_client.post(f"/runs/{run.pk}/cancel/")

    run.refresh_from_db()
    pause = RunPause.objects.get()
    assert (run.status, run.error_message) == ("cancelled", "Cancelled at a breakpoint by bob")
    assert (pause.resolution, pause.resolved_by_label) == ("abort", "bob")
    page = bob_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="paused"' not in page
    assert "Cancel run" not in page


def test_a_pause_before_a_model_call_says_what_stepping_from_it_does(
    bob: AbstractUser, bob_client: Client, weather_endpoint: ModelEndpoint,
    weather: ToolRegistration, policy: ErrorPolicy,
) -> None:
    run = paused(bob, weather_endpoint, weather, policy, [{"kind": "before_round", "round": 2}])

    panel = bob_client.get(f"/runs/{run.pk}/").content.decode().split('id="paused"')[1]
    assert "Make the model call, then pause before its first tool call." in panel
    assert "End the run here, as cancelled: the model call is not made." in panel
