"""The charts' SVG (`rota.http.web.charts`): bars to scale on a round axis, a line per
binding, every value escaped, and nothing a Content-Security-Policy without scripts or
inline style would block."""

from __future__ import annotations

import re

from rota.application.queries.series import Bucket, Series
from rota.http.web.charts import HEIGHT, _nice, charts, svg


def _series(latency: dict[str, float] | None = None) -> Series:
    buckets = tuple(
        Bucket(
            start=f"2026-11-03T{9 + i:02d}:00:00.000000Z",
            completed=c,
            failed=f,
            latency=(latency or {}) if i == 1 else {},
        )
        for i, (c, f) in enumerate(((2, 0), (7, 1), (0, 3), (4, 0)))
    )
    return Series(
        start=buckets[0].start,
        end="2026-11-03T13:00:00.000000Z",
        bucket_seconds=3600,
        buckets=buckets,
        bindings=tuple(sorted(latency or {})),
        truncated=False,
    )


def test_a_round_top_of_the_axis() -> None:
    assert [_nice(v) for v in (0, 1, 3, 7, 10, 11, 180, 0.3)] == [1, 1, 5, 10, 10, 20, 200, 0.5]


def test_bars_are_to_scale() -> None:
    throughput, failures, latency = charts(_series())
    assert (throughput.name, failures.name, latency.name) == ("throughput", "failures", "latency")
    assert throughput.top == 10 and failures.top == 5
    heights = [float(dict(s.attrs)["height"]) for s in throughput.shapes if s.kind == "rect"]
    assert heights == [HEIGHT * v / 10 for v in (2, 7, 0, 4)]
    values = [dict(s.attrs)["data-value"] for s in failures.shapes if s.kind == "rect"]
    assert values == ["0", "1", "3", "0"]


def test_a_line_per_binding_and_everything_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    latency = charts(_series({hostile: 12.5, "build": 4.0}))[2]
    assert [label for _, label in latency.legend] == sorted([hostile, "build"])
    drawn = str(svg(latency))
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
    assert 'data-value="12.500"' in drawn
    assert " style=" not in drawn and "<style" not in drawn and " on" not in drawn.lower()
    assert re.match(r'<svg class="chart" data-chart="latency" ', drawn)
    assert drawn.endswith("</svg>")
