"""What a suite run shows: the matrix of cases by endpoints (`SuiteMatrix`: each cell's
pass rate, flaky mark, mean tokens and latency, whether it meets the bar), a cell's runs
with their failing assertions, the failures as a readable report (`failure_report`, what
run_suite prints), and two suite runs compared (`compare_suite_runs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Avg, Q

from tools_app.models import SuiteCell, SuiteCellRun, SuiteRun

from .runner import SuiteRunConfig


@dataclass(frozen=True)
class MatrixCell:
    pk: int
    case_name: str
    endpoint_name: str
    repeat: int
    evaluated: int
    passed: int
    mean_tokens: float | None
    mean_latency_ms: float | None
    mean_cost_usd: Decimal | None
    min_pass_rate: float

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.evaluated if self.evaluated else None

    @property
    def flaky(self) -> bool:
        return 0 < self.passed < self.evaluated

    @property
    def done(self) -> bool:
        return self.evaluated >= self.repeat

    @property
    def meets_bar(self) -> bool:
        rate = self.pass_rate
        return self.done and rate is not None and rate >= self.min_pass_rate


@dataclass(frozen=True)
class SuiteMatrix:
    suite_run: SuiteRun
    config: SuiteRunConfig
    case_names: list[str]
    endpoint_names: list[str]
    cells: dict[tuple[str, str], MatrixCell] = field(default_factory=dict)

    def rows(self) -> list[tuple[str, list[MatrixCell | None]]]:
        return [(case, [self.cells.get((case, endpoint)) for endpoint in self.endpoint_names])
                for case in self.case_names]

    def failing(self) -> list[MatrixCell]:
        return [c for c in self.cells.values() if not c.meets_bar]

    @property
    def passed(self) -> bool:
        return not self.suite_run.error_message and not self.failing()


def suite_matrix(suite_run: SuiteRun) -> SuiteMatrix:
    config = SuiteRunConfig.model_validate(suite_run.config)
    evaluated = Q(cell_runs__passed__isnull=False)
    cells = suite_run.cells.annotate(
        mean_tokens=Avg("cell_runs__run__total_tokens", filter=evaluated),
        mean_latency=Avg("cell_runs__run__wall_ms", filter=evaluated),
        mean_cost=Avg("cell_runs__run__cost_usd", filter=evaluated)).order_by("pk")
    matrix = SuiteMatrix(suite_run=suite_run, config=config, case_names=[],
                         endpoint_names=[])
    for cell in cells:
        if cell.case_name not in matrix.case_names:
            matrix.case_names.append(cell.case_name)
        if cell.endpoint_name not in matrix.endpoint_names:
            matrix.endpoint_names.append(cell.endpoint_name)
        matrix.cells[(cell.case_name, cell.endpoint_name)] = _matrix_cell(
            cell, config.min_pass_rate)
    return matrix


def _matrix_cell(cell: SuiteCell, bar: float) -> MatrixCell:
    return MatrixCell(pk=cell.pk, case_name=cell.case_name, endpoint_name=cell.endpoint_name,
                      repeat=cell.repeat, evaluated=cell.evaluated, passed=cell.passed,
                      mean_tokens=getattr(cell, "mean_tokens", None),
                      mean_latency_ms=getattr(cell, "mean_latency", None),
                      mean_cost_usd=getattr(cell, "mean_cost", None), min_pass_rate=bar)


def cell_runs(cell: SuiteCell) -> list[SuiteCellRun]:
    return list(cell.cell_runs.select_related("run").order_by("repetition"))


def percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}%"


def failure_report(matrix: SuiteMatrix) -> list[str]:
    """Each cell below its bar, and each of its failing runs' failed assertions:
    the sentence, then expected against actual."""
    lines: list[str] = []
    if matrix.suite_run.error_message:
        lines.append(f"The suite run failed: {matrix.suite_run.error_message}")
    for cell in matrix.failing():
        lines.append(f"FAIL {cell.case_name} on {cell.endpoint_name}: {cell.passed}/"
                     f"{cell.evaluated} passed ({percent(cell.pass_rate)}, needs "
                     f"{percent(cell.min_pass_rate)})")
        runs = SuiteCellRun.objects.filter(cell_id=cell.pk, passed=False).order_by("repetition")
        for cell_run in runs:
            for failure in cell_run.failures:
                lines.append(f"  run {cell_run.repetition} ({cell_run.run_id}): "
                             f"{failure['sentence']}")
                lines.append(f"    {failure['reason']}")
    return lines


@dataclass(frozen=True)
class CellChange:
    case_name: str
    endpoint_name: str
    before: float | None
    after: float | None


@dataclass(frozen=True)
class SuiteComparison:
    regressed: list[CellChange]
    fixed: list[CellChange]
    unchanged: int


def compare_suite_runs(before: SuiteRun, after: SuiteRun) -> SuiteComparison:
    """Cells of the same case and endpoint in both runs: a lower pass rate regressed,
    a higher one was fixed."""
    old, new = suite_matrix(before).cells, suite_matrix(after).cells
    regressed, fixed, unchanged = [], [], 0
    for key in [k for k in new if k in old]:
        a, b = old[key].pass_rate, new[key].pass_rate
        change = CellChange(case_name=key[0], endpoint_name=key[1], before=a, after=b)
        if a is not None and b is not None and b < a:
            regressed.append(change)
        elif a is not None and b is not None and b > a:
            fixed.append(change)
        else:
            unchanged += 1
    return SuiteComparison(regressed=regressed, fixed=fixed, unchanged=unchanged)
