"""The attempt timeline of the web view's Work page: each attempt's segments, launch phases,
gaps of lost lease and recovered/relaunched marks, laid out as bars on one time axis.

`timeline(view, events, now)` reads the Work's view (`rota work show --json`: its segments
and phases) and its own stream (for the lease each epoch held: the expiry its claim,
renewals or recovery gave it, and when it was released or lost). A gap is the time between
the moment an epoch stopped holding its lease (its expiry, or its release) and the moment
recovery began the next segment, or recorded the attempt lost: the time nobody held the
attempt. Nothing here reads a clock; `now` is handed in (open segments end there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rota.application.ports import RecordedEvent
from rota.application.timestamps import format_timestamp, parse_timestamp

WIDTH = 880.0  # the bars' area in the SVG, in px (labels sit left of it)
MIN_BAR = 3.0  # a bar of one instant still shows
ROW = 52  # px per attempt
LABEL_GAP = 70  # px: marks closer than this share one label
LEASED = ("core.execution.claimed", "core.execution.renewed", "core.execution.recovered")
LEASED_TOO = ("core.execution.resumed",)
RECOVERY_KINDS = ("recovered", "relaunched")


@dataclass(frozen=True)
class Bar:
    """A stretch of one attempt's row: `x`, `width` in px from the axis' left edge."""

    css: str  # segment, phase, gap, wait
    kind: str  # the segment's kind, the phase's name, or the gap's cause
    x: float
    width: float
    title: str
    epoch: int
    started_at: str
    ended_at: str
    seconds: float
    outcome: str = ""  # a phase's: ok, failed, cancelled, running


@dataclass(frozen=True)
class Mark:
    """An instant on a row: recovered, relaunched, or the attempt's outcome."""

    kind: str
    x: float
    title: str


@dataclass
class Row:
    """One attempt's bars and marks, and the words a screen reader (or no SVG) needs."""

    number: int
    outcome: str | None
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def labels(self) -> list[tuple[float, str]]:
        """The marks' words under the row, those closer than `LABEL_GAP` px joined."""
        found: list[tuple[float, list[str]]] = []
        for mark in sorted(self.marks, key=lambda m: m.x):
            if found and mark.x - found[-1][0] < LABEL_GAP:
                found[-1][1].append(mark.kind)
            else:
                found.append((mark.x, [mark.kind]))
        return [(x, " · ".join(kinds)) for x, kinds in found]

    @property
    def gaps(self) -> list[Bar]:
        return [b for b in self.bars if b.css == "gap"]


@dataclass(frozen=True)
class Timeline:
    """Every attempt's row over one axis from `start` to `end`."""

    rows: list[Row]
    start: str
    end: str
    seconds: float
    ticks: list[tuple[float, str]]

    @property
    def height(self) -> int:
        return 34 + ROW * len(self.rows)


class _Axis:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.seconds = max((end - start).total_seconds(), 1.0)

    def x(self, when: datetime) -> float:
        return round(WIDTH * (when - self.start).total_seconds() / self.seconds, 2)

    def width(self, start: datetime, end: datetime) -> float:
        return max(MIN_BAR, round(self.x(end) - self.x(start), 2))


@dataclass
class _Lease:
    """What one (attempt, epoch) held: the latest expiry, and when it let go early."""

    expires: datetime | None = None
    released: datetime | None = None
    lost: datetime | None = None

    def lapsed(self) -> datetime | None:
        ends = [t for t in (self.expires, self.released) if t is not None]
        return min(ends) if ends else None


def leases(events: Iterable[RecordedEvent]) -> dict[tuple[int, int], _Lease]:
    """Each (attempt, epoch)'s lease, from the Work's stream."""
    found: dict[tuple[int, int], _Lease] = {}
    for recorded in events:
        event: Any = recorded.event
        tag = recorded.type
        attempt, epoch = getattr(event, "attempt", None), getattr(event, "epoch", None)
        if not isinstance(attempt, int) or not isinstance(epoch, int):
            continue
        lease = found.setdefault((attempt, epoch), _Lease())
        if tag in LEASED or tag in LEASED_TOO:
            expires = getattr(event, "lease_expires_at", None)
            if isinstance(expires, datetime) and (lease.expires is None or expires > lease.expires):
                lease.expires = expires
        elif tag == "core.execution.released":
            lease.released = recorded.recorded_time
        elif tag == "core.execution.lost":
            lease.lost = recorded.recorded_time
    return found


def _time(text: str | None) -> datetime | None:
    return None if text is None else parse_timestamp(text)


def _span(segments: Sequence[Mapping[str, Any]], now: datetime) -> tuple[datetime, datetime]:
    starts = [parse_timestamp(s["started_at"]) for s in segments]
    ends = [_time(s["ended_at"]) or now for s in segments]
    return min(starts), max(ends)


def timeline(
    view: Mapping[str, Any], events: Iterable[RecordedEvent], now: datetime
) -> Timeline | None:
    """The Work's attempts as rows of bars, or None when no attempt has a segment yet."""
    attempts = [a for a in view.get("attempts", []) if a.get("segments")]
    if not attempts:
        return None
    held = leases(events)
    spans = [_span(a["segments"], now) for a in attempts]
    for lease in held.values():
        if lease.lost is not None:
            spans.append((lease.lost, lease.lost))
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    axis = _Axis(start, end)
    rows = [_row(attempt, held, axis, now) for attempt in attempts]
    ticks = [
        (
            round(WIDTH * i / 4, 2),
            (start + timedelta(seconds=axis.seconds * i / 4)).strftime("%H:%M:%S"),
        )
        for i in range(5)
    ]
    return Timeline(
        rows=rows,
        start=format_timestamp(start),
        end=format_timestamp(end),
        seconds=axis.seconds,
        ticks=ticks,
    )


def _row(
    attempt: Mapping[str, Any],
    held: Mapping[tuple[int, int], _Lease],
    axis: _Axis,
    now: datetime,
) -> Row:
    number = int(attempt["number"])
    row = Row(number=number, outcome=attempt.get("outcome"))
    segments = list(attempt["segments"])
    for i, segment in enumerate(segments):
        kind, epoch = str(segment["kind"]), int(segment["epoch"])
        began = parse_timestamp(segment["started_at"])
        ended = _time(segment["ended_at"]) or now
        following = segments[i + 1] if i + 1 < len(segments) else None
        lease = held.get((number, epoch), _Lease())
        lapsed = lease.lapsed()
        lost_here = following is None and lease.lost is not None
        gap_end: datetime | None = None
        cause = ""
        if following is not None and following["kind"] in RECOVERY_KINDS:
            gap_end, cause = parse_timestamp(following["started_at"]), str(following["kind"])
        elif lost_here:
            gap_end, cause = lease.lost, "lost"
        held_until = ended
        if gap_end is not None and lapsed is not None and lapsed < gap_end:
            held_until = max(began, min(ended, lapsed))
        if kind in RECOVERY_KINDS:
            row.marks.append(Mark(kind=kind, x=axis.x(began), title=f"{kind} at {_clock(began)}"))
        row.bars.append(_bar(axis, "segment", kind, epoch, began, held_until, "epoch"))
        for phase in segment.get("phases", []):
            p_began = parse_timestamp(phase["began_at"])
            p_ended = _time(phase.get("ended_at")) or held_until
            outcome = phase.get("outcome") or "running"
            bar = _bar(axis, "phase", str(phase["name"]), epoch, p_began, p_ended, outcome)
            row.bars.append(bar)
        if gap_end is not None and held_until < gap_end:
            row.bars.append(_gap(axis, epoch, held_until, gap_end, cause, lease))
        elif following is not None and following["kind"] == "resume":
            wake = parse_timestamp(following["started_at"])
            if ended < wake:
                row.bars.append(_bar(axis, "wait", "parked", epoch, ended, wake, "parked"))
    outcome = attempt.get("outcome")
    if outcome:
        last = segments[-1]
        when = _time(last["ended_at"]) or now
        lost = held.get((number, int(last["epoch"])), _Lease()).lost
        if outcome == "lost" and lost is not None:
            when = lost
        row.marks.append(
            Mark(kind=str(outcome), x=axis.x(when), title=f"{outcome} at {_clock(when)}")
        )
    return row


def _bar(
    axis: _Axis, css: str, kind: str, epoch: int, began: datetime, ended: datetime, note: str
) -> Bar:
    seconds = max(0.0, (ended - began).total_seconds())
    words = {
        "segment": f"{kind} segment, epoch {epoch}",
        "phase": f"launch phase {kind} ({note})",
        "wait": f"parked, waiting for input (epoch {epoch})",
    }[css]
    return Bar(
        css=css,
        kind=kind,
        x=axis.x(began),
        width=axis.width(began, ended),
        title=f"{words}: {_clock(began)} to {_clock(ended)} ({seconds:g} s)",
        epoch=epoch,
        started_at=format_timestamp(began),
        ended_at=format_timestamp(ended),
        seconds=seconds,
        outcome=note if css == "phase" else "",
    )


def _clock(when: datetime) -> str:
    return when.strftime("%H:%M:%S")


def _gap(
    axis: _Axis, epoch: int, began: datetime, ended: datetime, cause: str, lease: _Lease
) -> Bar:
    seconds = max(0.0, (ended - began).total_seconds())
    how = "released" if lease.released is not None and lease.released == began else "lapsed"
    then = {"lost": "recorded lost", "recovered": "recovered", "relaunched": "relaunched"}[cause]
    title = (
        f"no lease for {seconds:g} s: epoch {epoch}'s lease {how} at {_clock(began)}, "
        f"{then} at {_clock(ended)}"
    )
    return Bar(
        css="gap",
        kind=cause,
        x=axis.x(began),
        width=axis.width(began, ended),
        title=title,
        epoch=epoch,
        started_at=format_timestamp(began),
        ended_at=format_timestamp(ended),
        seconds=seconds,
    )
