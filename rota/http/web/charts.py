"""The web view's charts, drawn on the server as SVG (no script, no chart library): bars of
attempts completed and failed per time bucket, and lines of mean latency by binding.

`charts(series)` lays a `Series` (`rota.application.queries.series`) out as plain shapes;
`svg(chart)` writes one chart's markup (escaped: binding names are the user's). Colours
come from the stylesheet by class (`bar-completed`, `bar-failed`, `line-<n>`): the page's
Content-Security-Policy forbids inline style.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from markupsafe import Markup, escape

from rota.application.queries.series import Series
from rota.application.timestamps import parse_timestamp

WIDTH, HEIGHT = 900.0, 200.0  # the plot area, px
LEFT, TOP, BOTTOM = 60.0, 12.0, 28.0  # margins for the axis labels
COLOURS = 6  # line-0 .. line-5 in web.css


@dataclass(frozen=True)
class Shape:
    kind: str  # rect, line, polyline, text
    css: str
    attrs: tuple[tuple[str, str], ...]
    title: str = ""
    text: str = ""


@dataclass
class Chart:
    name: str  # throughput, failures, latency
    caption: str
    top: float  # the value at the top of the axis
    unit: str
    shapes: list[Shape] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css, label)


def _nice(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at least `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= value:
        scale *= 10
    while scale > value:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def _f(value: float) -> str:
    return f"{value:.1f}"


def _axis(chart: Chart, series: Series) -> None:
    """The value axis (0, half, top) and the time labels under the plot."""
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + HEIGHT * (1 - fraction)
        chart.shapes.append(
            Shape(
                "line",
                "grid",
                (("x1", _f(LEFT)), ("y1", _f(y)), ("x2", _f(LEFT + WIDTH)), ("y2", _f(y))),
            )
        )
        label = f"{chart.top * fraction:g}"
        chart.shapes.append(
            Shape(
                "text",
                "axis-label",
                (("x", _f(LEFT - 6)), ("y", _f(y + 4)), ("text-anchor", "end")),
                text=label,
            )
        )
    count = len(series.buckets)
    for i, bucket in enumerate(series.buckets):
        if i % max(1, count // 6):
            continue
        x = LEFT + WIDTH * i / count
        stamp = parse_timestamp(bucket.start).strftime("%m-%d %H:%M")
        chart.shapes.append(
            Shape("text", "axis-label", (("x", _f(x)), ("y", _f(TOP + HEIGHT + 18))), text=stamp)
        )


def _bars(name: str, caption: str, series: Series, pick: str) -> Chart:
    values = [getattr(b, pick) for b in series.buckets]
    chart = Chart(name, caption, _nice(max(values, default=0)), "attempts")
    _axis(chart, series)
    count = len(values)
    slot = WIDTH / max(1, count)
    for i, (bucket, value) in enumerate(zip(series.buckets, values, strict=True)):
        height = HEIGHT * value / chart.top
        attrs = (
            ("x", _f(LEFT + slot * i + 1)),
            ("y", _f(TOP + HEIGHT - height)),
            ("width", _f(max(1.0, slot - 2))),
            ("height", _f(height)),
            ("data-start", bucket.start),
            ("data-value", str(value)),
        )
        when = parse_timestamp(bucket.start).strftime("%Y-%m-%d %H:%M")
        chart.shapes.append(
            Shape("rect", f"bar bar-{pick}", attrs, title=f"{when}: {value} {pick}")
        )
    chart.legend.append((f"bar-{pick}", f"attempts {pick} per {_span(series.bucket_seconds)}"))
    return chart


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _latency(series: Series) -> Chart:
    peak = max((v for b in series.buckets for v in b.latency.values()), default=0.0)
    chart = Chart("latency", "Mean latency by binding", _nice(peak), "seconds")
    _axis(chart, series)
    count = len(series.buckets)
    slot = WIDTH / max(1, count)
    for n, binding in enumerate(series.bindings):
        css = f"line-{n % COLOURS}"
        points = []
        for i, bucket in enumerate(series.buckets):
            if binding not in bucket.latency:
                continue
            value = bucket.latency[binding]
            x, y = LEFT + slot * (i + 0.5), TOP + HEIGHT * (1 - value / chart.top)
            points.append(f"{_f(x)},{_f(y)}")
            when = parse_timestamp(bucket.start).strftime("%Y-%m-%d %H:%M")
            chart.shapes.append(
                Shape(
                    "circle",
                    f"point {css}",
                    (
                        ("cx", _f(x)),
                        ("cy", _f(y)),
                        ("r", "3"),
                        ("data-binding", binding),
                        ("data-value", f"{value:.3f}"),
                    ),
                    title=f"{binding}, {when}: {value:.1f} s mean",
                )
            )
        if len(points) > 1:
            chart.shapes.append(
                Shape(
                    "polyline",
                    f"line {css}",
                    (("points", " ".join(points)), ("data-binding", binding)),
                )
            )
        chart.legend.append((css, binding))
    return chart


def charts(series: Series) -> list[Chart]:
    """Throughput, failures and latency by binding, over the series' window."""
    return [
        _bars("throughput", "Throughput: attempts completed", series, "completed"),
        _bars("failures", "Failures: attempts failed, timed out or lost", series, "failed"),
        _latency(series),
    ]


def svg(chart: Chart) -> Markup:
    """The chart as an `<svg>` element (every value escaped)."""
    width, height = LEFT + WIDTH + 10, TOP + HEIGHT + BOTTOM
    parts = [
        f'<svg class="chart" data-chart="{escape(chart.name)}" width="{_f(width)}" '
        f'height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}" role="img" '
        f'aria-label="{escape(chart.caption)}">'
    ]
    for shape in chart.shapes:
        attrs = "".join(f' {k}="{escape(v)}"' for k, v in shape.attrs)
        inner = f"<title>{escape(shape.title)}</title>" if shape.title else ""
        body = f"{inner}{escape(shape.text)}"
        parts.append(f'<{shape.kind} class="{escape(shape.css)}"{attrs}>{body}</{shape.kind}>')
    parts.append("</svg>")
    return Markup("".join(parts))


__all__ = ["Chart", "Shape", "charts", "svg"]
