"""Charts drawn on the server as SVG: coordinates are computed here, the template writes
them as attributes (no inline styles, no script, nothing the CSP must allow) and escapes
every label."""

from __future__ import annotations

from dataclasses import dataclass

from tools_app.audit.tool_stats import Bucket
from tools_app.audit.tools_overview import Hour
from tools_app.suites.history import RatePoint

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28
MAX_BAR = 48
LABEL_FORMATS = {"hour": "%Y-%m-%d %H:00", "day": "%Y-%m-%d", "week": "week of %Y-%m-%d"}


@dataclass(frozen=True)
class ChartPoint:
    """One bucket: a bar of its calls with the bar of its errors drawn over it (errors
    never outnumber calls, so the red part reads as the failing share)."""

    label: str
    calls: int
    errors: int
    x: str
    width: str
    calls_y: str
    calls_height: str
    errors_y: str
    errors_height: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    points: list[ChartPoint]
    y_max: int
    baseline: str
    left: int
    right_edge: int
    first_label: str
    last_label: str


def calls_chart(buckets: list[Bucket], unit: str) -> Chart | None:
    """Calls and errors per bucket as bars over the same axes; None without data."""
    if not buckets:
        return None
    y_max = max(bucket.calls for bucket in buckets) or 1
    points = [_point(i, len(buckets), bucket, y_max, LABEL_FORMATS[unit])
              for i, bucket in enumerate(buckets)]
    return Chart(WIDTH, HEIGHT, points, y_max, _num(HEIGHT - BOTTOM), LEFT, WIDTH - RIGHT,
                 points[0].label, points[-1].label)


def _point(index: int, count: int, bucket: Bucket, y_max: int, label_format: str) -> ChartPoint:
    # Evenly spaced slots (empty buckets are left out by the query), the bar in the middle
    # of its slot, never wider than MAX_BAR.
    slot = (WIDTH - LEFT - RIGHT) / count
    width = min(slot * 0.7, MAX_BAR)
    x = LEFT + slot * index + (slot - width) / 2
    calls_height, errors_height = _height(bucket.calls, y_max), _height(bucket.errors, y_max)
    return ChartPoint(bucket.start.strftime(label_format), bucket.calls, bucket.errors,
                      _num(x), _num(width), _num(HEIGHT - BOTTOM - calls_height),
                      _num(calls_height), _num(HEIGHT - BOTTOM - errors_height),
                      _num(errors_height))


def _height(value: int, y_max: int) -> float:
    return (HEIGHT - TOP - BOTTOM) * value / y_max


def _num(value: float) -> str:
    """Coordinates as strings, so the template has nothing to localize."""
    return f"{value:.1f}"


# -- a tool's last day, as a sparkline (the tools index) -------------------------------

SPARK_WIDTH, SPARK_HEIGHT, SPARK_GAP = 120, 24, 1


@dataclass(frozen=True)
class SparkBar:
    """One hour: its calls as a bar, its errors as a bar over it (as `ChartPoint`), and
    the whole hour's height to hover for its numbers."""

    label: str
    calls: int
    errors: int
    x: str
    width: str
    calls_y: str
    calls_height: str
    errors_y: str
    errors_height: str


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    bars: list[SparkBar]
    calls: int
    errors: int
    peak: int
    first_label: str


def sparkline(hours: list[Hour]) -> Sparkline | None:
    """Calls and errors per hour, one bar each, scaled to the busiest hour; None without
    hours (a tool no visible call used)."""
    if not hours:
        return None
    peak = max(hour.calls for hour in hours)
    slot = SPARK_WIDTH / len(hours)
    bars = []
    for index, hour in enumerate(hours):
        calls_height = SPARK_HEIGHT * hour.calls / peak if peak else 0.0
        errors_height = SPARK_HEIGHT * hour.errors / peak if peak else 0.0
        bars.append(SparkBar(
            f"{hour.start:%H}:00 to {(hour.start.hour + 1) % 24:02d}:00", hour.calls,
            hour.errors, _num(slot * index), _num(slot - SPARK_GAP),
            _num(SPARK_HEIGHT - calls_height), _num(calls_height),
            _num(SPARK_HEIGHT - errors_height), _num(errors_height)))
    return Sparkline(SPARK_WIDTH, SPARK_HEIGHT, bars, sum(h.calls for h in hours),
                     sum(h.errors for h in hours), peak, f"{hours[0].start:%H}:00")


# -- a suite's history: each endpoint's pass rate per suite run (the suite page) -------

RATE_SERIES_CLASSES = 6
"""Series are coloured by class (series-0 .. series-5, suites.css), in turn."""


@dataclass(frozen=True)
class RateDot:
    label: str
    suite_run_id: str
    passed: int
    evaluated: int
    percent: int
    x: str
    y: str


@dataclass(frozen=True)
class RateSeries:
    endpoint_name: str
    css_class: str
    points: str
    """The polyline's "x,y x,y ..." attribute."""
    dots: list[RateDot]


@dataclass(frozen=True)
class RateChart:
    width: int
    height: int
    series: list[RateSeries]
    left: int
    right_edge: int
    top: int
    baseline: str
    first_label: str
    last_label: str
    suite_runs: int


def pass_rate_chart(history: list[RatePoint]) -> RateChart | None:
    """One line per endpoint over the suite runs, oldest left, the pass rate from 0% at
    the baseline to 100% at the top; each suite run has its own evenly spaced slot
    (an endpoint not in a suite run has no dot there). None without history."""
    if not history:
        return None
    runs = list(dict.fromkeys((p.suite_run_id, p.started_at) for p in history))
    slot = {run_id: index for index, (run_id, _) in enumerate(runs)}
    step = (WIDTH - LEFT - RIGHT) / max(len(runs) - 1, 1)
    by_endpoint: dict[str, list[RateDot]] = {}
    for point in history:
        x = LEFT + step * slot[point.suite_run_id] if len(runs) > 1 else (WIDTH + LEFT) / 2
        y = HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * point.rate
        by_endpoint.setdefault(point.endpoint_name, []).append(RateDot(
            f"{point.started_at:%Y-%m-%d %H:%M}", point.suite_run_id, point.passed,
            point.evaluated, round(point.rate * 100), _num(x), _num(y)))
    series = [RateSeries(name, f"series-{index % RATE_SERIES_CLASSES}",
                         " ".join(f"{dot.x},{dot.y}" for dot in dots), dots)
              for index, (name, dots) in enumerate(sorted(by_endpoint.items()))]
    return RateChart(WIDTH, HEIGHT, series, LEFT, WIDTH - RIGHT, TOP, _num(HEIGHT - BOTTOM),
                     f"{runs[0][1]:%Y-%m-%d %H:%M}", f"{runs[-1][1]:%Y-%m-%d %H:%M}",
                     len(runs))
