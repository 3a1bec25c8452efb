"""The timeline's layout from a Work's view and stream, without a browser: where a gap
begins (a lapsed or a released lease), a parked wait is no gap, open segments end now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rota.application.timestamps import format_timestamp
from rota.http.web.timeline import WIDTH, timeline

T0 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float | None) -> str | None:
    return None if seconds is None else format_timestamp(at(seconds))


@dataclass
class Event:
    attempt: int
    epoch: int
    lease_expires_at: datetime | None = None


@dataclass
class Recorded:
    """What the timeline reads of a RecordedEvent: its type, event and time."""

    type: str
    event: Any
    recorded_time: datetime


def segment(kind: str, epoch: int, start: float, end: float | None, **more: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "epoch": epoch,
        "started_at": stamp(start),
        "ended_at": stamp(end),
        "phases": more.get("phases", []),
    }


def view(*segments: dict[str, Any], outcome: str | None = None) -> dict[str, Any]:
    return {"attempts": [{"number": 1, "outcome": outcome, "segments": list(segments)}]}


def test_no_attempt_no_timeline() -> None:
    assert timeline({"attempts": []}, [], T0) is None


def test_a_lapsed_lease_leaves_a_gap_until_recovery() -> None:
    events = [
        Recorded("core.execution.claimed", Event(1, 1, at(60)), at(0)),
        Recorded("core.execution.renewed", Event(1, 1, at(90)), at(30)),
        Recorded("core.execution.recovered", Event(1, 2, at(190)), at(130)),
    ]
    drawn = timeline(
        view(segment("start", 1, 0, 130), segment("recovered", 2, 130, 200), outcome="completed"),
        events,
        at(300),
    )
    assert drawn is not None
    (row,) = drawn.rows
    (gap,) = row.gaps
    assert (gap.kind, gap.epoch, gap.seconds) == ("recovered", 1, 40.0)  # 90 s .. 130 s
    assert gap.started_at == stamp(90) and gap.ended_at == stamp(130)
    assert "lapsed at 09:01:30" in gap.title
    start = next(b for b in row.bars if b.css == "segment" and b.kind == "start")
    assert start.seconds == 90.0 and start.x == 0.0
    assert gap.x == start.x + start.width
    assert drawn.seconds == 200.0 and gap.width == WIDTH * 40 / 200
    assert [m.kind for m in row.marks] == ["recovered", "completed"]
    assert row.labels == [(WIDTH * 130 / 200, "recovered"), (WIDTH, "completed")]


def test_a_released_lease_begins_its_gap_at_the_release() -> None:
    events = [
        Recorded("core.execution.claimed", Event(1, 1, at(60)), at(0)),
        Recorded("core.execution.released", Event(1, 1), at(20)),
        Recorded("core.execution.recovered", Event(1, 2, at(110)), at(50)),
    ]
    drawn = timeline(
        view(segment("start", 1, 0, 50), segment("relaunched", 2, 50, None)), events, at(80)
    )
    assert drawn is not None
    (gap,) = drawn.rows[0].gaps
    assert (gap.kind, gap.seconds) == ("relaunched", 30.0)
    assert "released at 09:00:20" in gap.title
    assert drawn.end == stamp(80)  # the open segment ends now


def test_a_parked_wait_is_no_gap() -> None:
    events = [Recorded("core.execution.claimed", Event(1, 1, at(60)), at(0))]
    drawn = timeline(
        view(segment("start", 1, 0, 10), segment("resume", 2, 500, 520)), events, at(600)
    )
    assert drawn is not None
    row = drawn.rows[0]
    assert row.gaps == []
    (wait,) = [b for b in row.bars if b.css == "wait"]
    assert wait.seconds == 490.0


def test_a_recovery_within_the_lease_has_no_gap() -> None:
    # recovered before the old lease expired (a timeout recovery): nothing went unheld
    events = [Recorded("core.execution.claimed", Event(1, 1, at(600)), at(0))]
    drawn = timeline(
        view(segment("start", 1, 0, 100), segment("recovered", 2, 100, 120)), events, at(200)
    )
    assert drawn is not None
    assert drawn.rows[0].gaps == []
