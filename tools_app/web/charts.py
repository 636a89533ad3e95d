"""Charts drawn on the server as SVG: coordinates are computed here, the template writes
them as attributes (no inline styles, no script, nothing the CSP must allow) and escapes
every label."""

from __future__ import annotations

from dataclasses import dataclass

from ..runs.tool_stats import Bucket

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28
LABEL_FORMATS = {"hour": "%Y-%m-%d %H:00", "day": "%Y-%m-%d", "week": "week of %Y-%m-%d"}


@dataclass(frozen=True)
class ChartPoint:
    label: str
    calls: int
    errors: int
    x: str
    calls_y: str
    errors_y: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    points: list[ChartPoint]
    calls_line: str  # polyline points
    errors_line: str
    y_max: int
    baseline: str
    left: int
    right_edge: int
    first_label: str
    last_label: str


def calls_chart(buckets: list[Bucket], unit: str) -> Chart | None:
    """Calls and errors per bucket as two lines over the same axes; None without data."""
    if not buckets:
        return None
    y_max = max(bucket.calls for bucket in buckets) or 1
    points = [_point(i, len(buckets), bucket, y_max, LABEL_FORMATS[unit])
              for i, bucket in enumerate(buckets)]
    return Chart(WIDTH, HEIGHT, points,
                 " ".join(f"{p.x},{p.calls_y}" for p in points),
                 " ".join(f"{p.x},{p.errors_y}" for p in points),
                 y_max, _num(HEIGHT - BOTTOM), LEFT, WIDTH - RIGHT,
                 points[0].label, points[-1].label)


def _point(index: int, count: int, bucket: Bucket, y_max: int, label_format: str) -> ChartPoint:
    # Evenly spaced buckets (empty ones are left out by the query), a lone one centred.
    inner = WIDTH - LEFT - RIGHT
    x = LEFT + (inner / 2 if count == 1 else inner * index / (count - 1))
    return ChartPoint(bucket.start.strftime(label_format), bucket.calls, bucket.errors,
                      _num(x), _y(bucket.calls, y_max), _y(bucket.errors, y_max))


def _y(value: int, y_max: int) -> str:
    inner = HEIGHT - TOP - BOTTOM
    return _num(HEIGHT - BOTTOM - inner * value / y_max)


def _num(value: float) -> str:
    """Coordinates as strings, so the template has nothing to localize."""
    return f"{value:.1f}"
