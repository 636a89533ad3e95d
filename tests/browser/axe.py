"""The accessibility scan of the browser tests: axe-core (the npm package pinned in
.ci/assets/package.json, installed by .ci/vendor-assets into .ci/assets/node_modules and
never served by the app) evaluated in a page, its violations of the impacts that count.

The script is evaluated through the DevTools protocol, as a test's own code is, so the
page's strict CSP (no inline scripts) neither blocks it nor has to be loosened."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

AXE = Path(__file__).resolve().parents[2] / ".ci/assets/node_modules/axe-core/axe.min.js"
# Issue 43 asks for no moderate finding or worse (heading order, unique landmarks); the
# pages are free of minor ones too (empty table headers), so every impact counts.
IMPACTS = ("minor", "moderate", "serious", "critical")

RUN_AXE = """async (impacts) => {
  const results = await axe.run(document, {resultTypes: ['violations']});
  return results.violations.filter(v => impacts.includes(v.impact)).map(v => ({
    rule: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 200),
                              summary: (n.failureSummary || '').slice(0, 400)})),
  }));
}"""


@cache
def axe_source() -> str:
    if not AXE.exists():
        raise FileNotFoundError(f"{AXE} is missing: run .ci/vendor-assets (make install)")
    return AXE.read_text()


async def violations(page: Any) -> list[dict[str, Any]]:
    """The page's violations of IMPACTS as it is now: rule, impact, help and each
    offending element (its CSS path, its markup's start, what to fix)."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(axe_source())
    found: list[dict[str, Any]] = await page.evaluate(RUN_AXE, list(IMPACTS))
    return found


def described(page_name: str, found: list[dict[str, Any]]) -> str:
    """A failure's text: the page, then each rule and the elements that break it."""
    lines = [f"{page_name}:"]
    for violation in found:
        lines.append(f"  [{violation['impact']}] {violation['rule']}: {violation['help']}")
        for node in violation["nodes"]:
            lines.append(f"    at {node['target']}: {node['html']}")
            lines.append(f"      {' '.join(node['summary'].split())}")
    return "\n".join(lines)
