"""Try it (#12) in a real browser: a tool page's form drawn from the tool's schema
(nested objects, arrays, enums, booleans, defaults, required marks), kept in sync with
the raw JSON both ways, problems shown at their fields, the call run and its result
shown when the run finishes, for a mock, a Python and an HTTP tool (on a loopback
server), with the run in the audit log and recent inputs refilling the form."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.support import http_server, json_service

from .checks import SCREENSHOTS, Problems, screenshot_path
from .support import Server
from .tool_forms import control, field, import_tools, run_and_wait

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="package")]

HOSTILE = "<img src=x onerror=alert(1)>"
FORECAST = "tryit_forecast"
RECORDS = "tryit_records"
FORECAST_SCHEMA = {
    "type": "object", "required": ["city", "where"],
    "properties": {
        "city": {"type": "string", "description": "City name " + HOSTILE},
        "units": {"enum": ["metric", "imperial"], "default": "metric"},
        "days": {"type": "integer", "default": 3, "description": "How many days"},
        "detailed": {"type": "boolean"},
        "where": {"type": "object", "required": ["lat"], "description": "Coordinates",
                  "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


_Records = json_service(lambda request: (200, {"record": {"path": request.path,
                                                           "note": HOSTILE}}))


@pytest.fixture
def records_url() -> Iterator[str]:
    with http_server(_Records, path="") as url:
        yield url


async def arguments(page: Any) -> Any:
    return json.loads(await page.input_value("#tryit-json"))


async def test_a_mock_tool_is_tried_from_its_form(open_page: Any, server: Server) -> None:
    admin = await open_page(user="alice")
    await import_tools(admin, [{"name": FORECAST, "description": "Forecast",
                                "input_schema": FORECAST_SCHEMA}], "mock",
                       json.dumps({"template": True,
                                   "result": "Forecast for {city}: " + HOSTILE}))

    page = await open_page(user="bob")  # a plain user may try a tool
    problems = Problems(page)
    await page.goto(f"/tools/{FORECAST}/")
    # The form, with defaults prefilled, required marks and descriptions as text.
    await field(page, "/city").wait_for()
    assert await page.is_hidden("#tryit-json")
    assert await control(page, "/units").input_value() == '"metric"'
    assert await control(page, "/days").input_value() == "3"
    assert await field(page, "/city").locator(".tf-required").count() == 1
    assert await field(page, "/days").locator(".tf-required").count() == 0
    assert await field(page, "/where/lat").locator(".tf-required").count() == 1
    assert await field(page, "/city").locator(".tf-help").inner_text() == "City name " + HOSTILE
    assert await arguments(page) == {"units": "metric", "days": 3, "where": {}}

    # Submitted as it is: the problems are shown at their fields.
    await control(page, "/where/lat").fill("north")
    await page.click("#tryit-submit")
    city_error = field(page, "/city").locator(":scope > .tf-error")
    await city_error.wait_for()
    assert await city_error.inner_text() == "'city' is a required property"
    assert "is not of type 'number'" in await field(page, "/where/lat").locator(
        ":scope > .tf-error").inner_text()
    if SCREENSHOTS:
        await page.locator("#tryit").screenshot(path=screenshot_path(server, "tryit_problems.png"))

    # Form -> JSON: every change is in the JSON at once.
    await control(page, "/city").fill("Oslo")
    assert await city_error.is_hidden()  # the field's problem goes as it is edited
    await control(page, "/where/lat").fill("59.9")
    # Checked as the user types: an edited field shows its problem before any submit.
    await control(page, "/days").fill("many")
    days_error = field(page, "/days").locator(":scope > .tf-error")
    await days_error.wait_for()
    assert await days_error.inner_text() == "'many' is not of type 'integer'"
    await control(page, "/days").fill("3")
    await days_error.wait_for(state="hidden")
    await control(page, "/units").select_option('"imperial"')
    await control(page, "/detailed").check()
    await field(page, "/tags").locator("button.tf-add").click()
    await field(page, "/tags").locator("button.tf-add").click()
    await control(page, "/tags/0").fill("rain")
    await control(page, "/tags/1").fill("wind")
    await field(page, "/tags").locator("button.tf-remove").first.click()
    assert await arguments(page) == {"city": "Oslo", "units": "imperial", "days": 3,
                                     "detailed": True, "where": {"lat": 59.9},
                                     "tags": ["wind"]}

    # JSON -> form: an edit of the JSON is in the form when it switches back.
    await page.click('#tryit-modes button[data-mode="json"]')
    await page.fill("#tryit-json", json.dumps({"city": "Bergen", "where": {"lat": 60.4,
                                                                          "lon": 5.3},
                                              "tags": ["fog", "rain"]}))
    await page.click('#tryit-modes button[data-mode="form"]')
    assert await control(page, "/city").input_value() == "Bergen"
    assert await control(page, "/where/lon").input_value() == "5.3"
    assert await control(page, "/tags/1").input_value() == "rain"
    assert await control(page, "/units").input_value() == ""  # not given
    # Arguments the form cannot hold keep the JSON editor, saying why.
    await page.click('#tryit-modes button[data-mode="json"]')
    # The JSON is checked as the user types too, every problem listed.
    await page.fill("#tryit-json", '{"where": {"lat": 1}}')
    missing = page.locator("#tryit-live li[data-pointer='/city']")
    await missing.wait_for()
    assert await missing.inner_text() == "/city: 'city' is a required property"
    await page.fill("#tryit-json", '{"city": "Bergen", "where": {"lat": 1}, "extra": 1}')
    await missing.wait_for(state="detached")
    assert "cannot show these arguments" in await page.inner_text("#tryit-sync")
    assert await page.is_disabled('#tryit-modes button[data-mode="form"]')
    await page.fill("#tryit-json", json.dumps({"city": "Bergen", "where": {"lat": 60.4}}))
    assert await page.is_enabled('#tryit-modes button[data-mode="form"]')
    await page.click('#tryit-modes button[data-mode="form"]')

    run_id = await run_and_wait(page)
    output = page.locator("#tryit-output")
    assert await output.inner_text() == "Forecast for Bergen: " + HOSTILE  # text only
    assert await page.locator("#tryit img, #tryit [onerror]").count() == 0
    assert await page.inner_text("#tryit-state") == "OK"
    assert (await page.inner_text("#tryit-duration")).strip() not in ("", "-")
    # The recent inputs now offer these arguments.
    refill = page.locator("#tryit-recent button.tryit-refill").first
    assert json.loads(str(await refill.get_attribute("data-arguments"))) == {
        "city": "Bergen", "where": {"lat": 60.4}}
    if SCREENSHOTS:
        await page.locator("#tryit").screenshot(path=screenshot_path(server, "tryit.png"))

    # One click refills the form.
    await control(page, "/city").fill("Somewhere else")
    await refill.click()
    assert await control(page, "/city").input_value() == "Bergen"
    assert await arguments(page) == {"city": "Bergen", "where": {"lat": 60.4}}

    # The run is in the audit log and on its timeline.
    await page.goto(f"/calls/?tool={FORECAST}")
    assert await page.locator(f'#call-results a[href^="/runs/{run_id}/#call-"]').count() == 1
    await page.goto(f"/runs/{run_id}/")
    lane = page.locator("#round-0 article.lane")
    await lane.wait_for()
    assert await lane.get_attribute("data-state") == "succeeded"
    assert problems.seen == []


async def test_a_python_tool_is_tried_and_its_page_remembers_the_input(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    problems = Problems(page)
    await page.goto("/tools/convert_units/")
    await control(page, "/value").fill("2")
    await control(page, "/from_unit").fill("km")
    await control(page, "/to_unit").fill("m")
    await run_and_wait(page)
    assert json.loads(await page.inner_text("#tryit-output")) == {"value": 2000.0, "unit": "m"}

    await page.reload()
    await control(page, "/value").wait_for()
    recent = page.locator("#tryit-recent button.tryit-refill")
    assert await recent.count() >= 1
    await recent.first.click()
    assert await control(page, "/from_unit").input_value() == "km"
    assert problems.seen == []


async def test_an_http_tool_is_tried_against_a_loopback_service(
        open_page: Any, server: Server, records_url: str) -> None:
    admin = await open_page(user="alice")
    await import_tools(admin, [{
        "name": RECORDS, "description": "Records", "inputSchema": {
            "type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
        "x-agentforge-config": {"url": records_url + "/records/{id}", "response": "/record"},
    }], "http")
    page = await open_page(user="bob")
    problems = Problems(page)
    await page.goto(f"/tools/{RECORDS}/")
    await control(page, "/id").fill("42")
    await run_and_wait(page)
    result = json.loads(await page.inner_text("#tryit-output"))
    assert result == {"path": "/records/42", "note": HOSTILE}
    assert await page.locator("#tryit img").count() == 0
    assert problems.seen == []


async def test_a_tool_that_requires_approval_waits_for_it(
        open_page: Any, server: Server) -> None:
    page = await open_page(user="bob")
    await page.goto("/tools/send_email/")
    assert "requires approval" in await page.inner_text("#tryit-approval")
    await control(page, "/to").fill("ann@example.com")
    await control(page, "/subject").fill("Hello")
    run_id = await run_and_wait(page, "waiting")
    assert "Waiting for approval" in await page.inner_text("#tryit-waiting")
    assert await page.inner_text("#tryit-state") == "Proposed"

    # Approved on the run's timeline (here by its owner), the tool page shows the result.
    timeline = await open_page(user="bob")
    await timeline.goto(str(await page.get_attribute("#tryit-waiting a", "href")))
    assert timeline.url.endswith(f"/runs/{run_id}/")
    await timeline.locator("#round-0 article.lane button.approve").click()
    await page.locator('#tryit-run[data-status="succeeded"]').wait_for()
    assert await page.inner_text("#tryit-output") == "sent 'Hello' to ann@example.com"


async def test_a_schema_the_form_cannot_express_is_tried_as_json(
        open_page: Any, server: Server) -> None:
    admin = await open_page(user="alice")
    await import_tools(admin, [{"name": "tryit_either", "description": "Either", "input_schema": {
        "type": "object", "required": ["value"],
        "properties": {"value": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}}],
        "mock", json.dumps({"template": True, "result": "Got {value}"}))
    page = await open_page(user="bob")
    problems = Problems(page)
    await page.goto("/tools/tryit_either/")
    assert await page.inner_text("#tryit-no-form") == (
        "The form cannot show this tool's schema (/properties/value: oneOf has no form): "
        "edit the arguments as JSON.")
    assert await page.is_hidden("#tryit-modes")
    assert await page.is_visible("#tryit-json")
    await page.fill("#tryit-json", '{"value": true}')
    await page.locator("#tryit-live li[data-pointer='/value']").wait_for()
    await page.fill("#tryit-json", '{"value": 7}')
    await run_and_wait(page)
    assert await page.inner_text("#tryit-output") == "Got 7"

    # Disabled by staff meanwhile: the next try is refused, saying why.
    await admin.goto("/admin/tools_app/toolregistration/?q=tryit_either")
    await admin.click("#result_list a:text-is('tryit_either')")
    await admin.uncheck("input[name=enabled]")
    await admin.click("input[name=_save]")
    await admin.wait_for_selector(".messagelist .success")
    await page.click("#tryit-submit")
    refused = page.locator("#tryit-problems")
    await refused.wait_for()
    assert "The tool tryit_either is disabled: it cannot be tried" in await refused.inner_text()
    assert problems.seen == []
