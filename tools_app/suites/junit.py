"""A suite run as JUnit XML, the report CI systems read: one <testsuite> per endpoint,
one <testcase> per cell (a case on that endpoint), failed when the cell is below its
pass-rate bar, with each failing run's failed assertions in the failure's text."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tools_app.models import SuiteCellRun

from .matrix import MatrixCell, SuiteMatrix, percent


def junit_xml(matrix: SuiteMatrix) -> bytes:
    root = ET.Element("testsuites", name=matrix.suite_run.suite.name)
    for endpoint in matrix.endpoint_names:
        cells = [c for c in matrix.cells.values() if c.endpoint_name == endpoint]
        suite = ET.SubElement(root, "testsuite", name=f"{matrix.suite_run.suite.name} on "
                              f"{endpoint}", tests=str(len(cells)),
                              failures=str(sum(not c.meets_bar for c in cells)), errors="0",
                              skipped="0")
        for cell in cells:
            _testcase(suite, matrix, cell)
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml


def _testcase(parent: ET.Element, matrix: SuiteMatrix, cell: MatrixCell) -> None:
    seconds = ((cell.mean_latency_ms or 0) * cell.evaluated) / 1000
    case = ET.SubElement(parent, "testcase", name=cell.case_name,
                         classname=f"{matrix.suite_run.suite.name}.{cell.endpoint_name}",
                         time=f"{seconds:.3f}")
    properties = ET.SubElement(case, "properties")
    for name, value in (("pass_rate", percent(cell.pass_rate)),
                        ("passed", f"{cell.passed}/{cell.evaluated}"),
                        ("min_pass_rate", percent(cell.min_pass_rate))):
        ET.SubElement(properties, "property", name=name, value=value)
    if cell.meets_bar:
        return
    failure = ET.SubElement(case, "failure", type="PassRateBelowBar",
                            message=f"{cell.passed}/{cell.evaluated} runs passed "
                            f"({percent(cell.pass_rate)}), the bar is "
                            f"{percent(cell.min_pass_rate)}")
    failure.text = "\n".join(_failure_lines(cell))


def _failure_lines(cell: MatrixCell) -> list[str]:
    lines = []
    for cell_run in SuiteCellRun.objects.filter(cell_id=cell.pk, passed=False).order_by(
            "repetition"):
        for failure in cell_run.failures:
            lines.append(f"run {cell_run.repetition} ({cell_run.run_id}): "
                         f"{failure['sentence']} {failure['reason']}")
    return lines


def write_junit(matrix: SuiteMatrix, path: str | Path) -> None:
    Path(path).write_bytes(junit_xml(matrix))
