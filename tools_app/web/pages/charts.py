"""Charts drawn on the server as SVG: coordinates are computed here, the template writes
them as attributes (no inline styles, no script, nothing the CSP must allow) and escapes
every label."""

from __future__ import annotations

from dataclasses import dataclass

from tools_app.audit.tool_stats import Bucket
from tools_app.audit.tools_overview import Hour

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
