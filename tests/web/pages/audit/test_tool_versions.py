"""Tool definition versions: kept by sync and by the admin whenever a registration is
created or its hash changes (never twice, never with a secret), listed on the tool page
with the runs that used each (linked by the hash frozen in their snapshots), and two
versions compared as an escaped, readable diff."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.test import Client

from tests.admin.support import form_errors, tool_data, url
from tests.web.support import PAYLOAD, Api, Tree, error_of, inside_hx_disable, start_run
from tools_app.models import ErrorPolicy, ModelEndpoint, Run, ToolRegistration, ToolVersion
from tools_app.runs import tasks
from tools_app.tools.registry import (
    REDACTED,
    compute_version_hash,
    public_config,
    record_version,
    sync_tools,
    version_definition,
)
from tools_app.web.api.tokens import create_token

pytestmark = pytest.mark.django_db

MODULE = "tools_app.tools.example_tools"


def hashes(tool: ToolRegistration) -> list[str]:
    return list(tool.versions.order_by("created_at", "id").values_list("version_hash",
                                                                       flat=True))


def edit(client: Client, tool: ToolRegistration, **changes: str) -> ToolRegistration:
    """Save the tool through the admin's change form."""
    response = client.post(url(ToolRegistration, "change", tool.pk), tool_data(
        name=tool.name, python_path=tool.python_path, description=tool.description,
        json_schema=json.dumps(tool.json_schema)) | changes)
    assert response.status_code == 302, form_errors(response)
    tool.refresh_from_db()
    return tool


def test_sync_keeps_one_version_per_definition(demo_tools: dict[str, ToolRegistration]) -> None:
    weather = demo_tools["get_weather"]
    assert hashes(weather) == [weather.version_hash]
    assert weather.versions.get().definition == version_definition(weather)
    assert set(weather.versions.get().definition) == {
        "name", "description", "json_schema", "kind", "python_path", "config",
        "return_behavior", "strict", "timeout_seconds", "requires_approval", "idempotent",
        "isolated"}
    sync_tools([MODULE])  # unchanged: nothing new
    assert ToolVersion.objects.filter(registration=weather).count() == 1


def test_sync_of_a_changed_definition_keeps_a_new_version(
    demo_tools: dict[str, ToolRegistration],
) -> None:
    weather = demo_tools["get_weather"]
    ToolRegistration.objects.filter(pk=weather.pk).update(description="stale", version_hash="x")
    sync_tools([MODULE])  # brings it back to the code's definition: the same hash as before
    assert hashes(weather) == [weather.version_hash]


def test_admin_saves_keep_a_version_when_the_hash_changes(alice_client: Client) -> None:
    response = alice_client.post(url(ToolRegistration, "add"), tool_data())
    assert response.status_code == 302, form_errors(response)
    tool = ToolRegistration.objects.get()
    first = tool.version_hash
    assert hashes(tool) == [first]

    tool = edit(alice_client, tool, description="Adds and multiplies")
    assert hashes(tool) == [first, tool.version_hash]
    assert tool.versions.get(version_hash=tool.version_hash).definition["description"] == (
        "Adds and multiplies")

    edit(alice_client, tool, description="Adds and multiplies", enabled="")  # not a version
    edit(alice_client, tool, description="Calculator")  # back to the first definition
    assert hashes(tool) == [first, tool.versions.order_by("id")[1].version_hash]


def test_a_version_never_keeps_a_secret() -> None:
    config = {"url": "https://api.example.com", "headers": {
        "Authorization": "Bearer sk-live-123", "X-Trace": "1", "X-Api-Key": "env:SERVICE_KEY"},
        "client_secret": {"value": "s3cr3t"}, "token": 42, "servers": [{"password": "pw"}]}
    assert public_config(config) == {"url": "https://api.example.com", "headers": {
        "Authorization": REDACTED, "X-Trace": "1", "X-Api-Key": "env:SERVICE_KEY"},
        "client_secret": REDACTED, "token": REDACTED, "servers": [{"password": REDACTED}]}
    kept = json.dumps(version_definition(ToolRegistration(name="mocked", kind="mock",
                                                          config=config)))
    for secret in ("sk-live-123", "s3cr3t", '"pw"', "42"):
        assert secret not in kept


def two_versions(client: Client) -> tuple[ToolRegistration, str, str]:
    response = client.post(url(ToolRegistration, "add"), tool_data())
    assert response.status_code == 302, form_errors(response)
    tool = ToolRegistration.objects.get()
    old = tool.version_hash
    tool = edit(client, tool, description=PAYLOAD, timeout_seconds="2.5")
    return tool, old, tool.version_hash


def test_two_versions_compared(alice_client: Client) -> None:
    _tool, old, new = two_versions(alice_client)
    response = alice_client.get(f"/tools/calc/diff/?old={old}&new={new}")
    assert response.status_code == 200
    html = response.content.decode()
    lines = re.findall(r'<span class="diff-(\w+)">([^<]*)</span>', html)
    assert ("del", '-  &quot;description&quot;: &quot;Calculator&quot;,') in lines
    assert ("del", '-  &quot;timeout_seconds&quot;: null') in lines
    assert ("add", '+  &quot;timeout_seconds&quot;: 2.5') in lines
    added = [text for kind, text in lines if kind == "add"]
    assert any("&lt;script&gt;alert" in text for text in added)  # escaped, never markup
    assert "<script>alert" not in html
    for _text, element in Tree(html).texts_containing("alert("):
        assert inside_hx_disable(element)
    same = alice_client.get(f"/tools/calc/diff/?old={old}&new={old}").content.decode()
    assert 'id="diff-same"' in same


@pytest.mark.parametrize(("query", "words"), [
    ("old=abc&new={new}", "old: old must be the hash of one of calc&#x27;s versions"),
    ("old={old}", "new: new must be the hash"),
    ("old={old}&new={new}&colour=red", "colour: unknown parameter colour"),
])
def test_a_diff_of_unknown_versions_says_which(alice_client: Client, query: str,
                                               words: str) -> None:
    _tool, old, new = two_versions(alice_client)
    response = alice_client.get("/tools/calc/diff/?" + query.format(old=old, new=new))
    assert response.status_code == 400
    assert words in response.content.decode()
    assert alice_client.get("/tools/nope/diff/").status_code == 404


@pytest.mark.both
def test_runs_point_at_the_version_they_used(
    alice: AbstractUser, alice_client: Client, bob: AbstractUser, bob_client: Client,
    demo_tools: dict[str, ToolRegistration], weather_endpoint: ModelEndpoint,
    policy: ErrorPolicy,
) -> None:
    weather = demo_tools["get_weather"]
    before = start_run(bob, weather_endpoint, [weather], policy, "Before the edit")
    async_to_sync(tasks.execute_run.acall)(str(before.pk))
    old = weather.version_hash
    ToolRegistration.objects.filter(pk=weather.pk).update(description="Edited")
    weather.refresh_from_db()
    weather.description = "Edited"
    weather.version_hash = compute_version_hash(weather)
    weather.save()
    record_version(weather)
    after = start_run(bob, weather_endpoint, [weather], policy, "After the edit")
    # A message quoting the key and the hash is not a use of that version.
    start_run(alice, weather_endpoint, [demo_tools["calculator"]], policy,
              f'Quoting "version_hash": "{old}"')

    page = alice_client.get("/tools/get_weather/").content.decode()
    assert f'href="/runs/?tool_version={old}"' in page
    assert f'href="/runs/?tool_version={weather.version_hash}"' in page
    titles = re.findall(r'<a href="/runs/[0-9a-f-]{36}/">([^<]+)</a>',
                        alice_client.get(f"/runs/?tool_version={old}").content.decode())
    assert titles == ["Before the edit"]
    api = Api(create_token(alice, "ops")[1])
    found = api.get(f"/api/runs?tool_version={weather.version_hash}").json()["runs"]
    assert [r["id"] for r in found] == [str(after.pk)]
    error = error_of(api.get("/api/runs?tool_version=abc"), 400)
    assert (error["field"], error["code"]) == ("tool_version", "invalid_filter")
    # The filter stays in the runs form, so changing another filter keeps it.
    assert f'name="tool_version" value="{old}"' in bob_client.get(
        f"/runs/?tool_version={old}").content.decode()
    assert Run.objects.count() == 3


def test_the_admin_links_a_tool_to_its_versions(alice_client: Client,
                                                demo_tools: dict[str, ToolRegistration]) -> None:
    weather = demo_tools["get_weather"]
    html = alice_client.get(url(ToolRegistration, "change", weather.pk)).content.decode()
    assert '<a href="/tools/get_weather/#versions">1 version on the tool page</a>' in html
