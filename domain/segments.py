"""Small helpers the folds share: replace the current attempt, close or add segments."""

from __future__ import annotations

from datetime import datetime

from msgspec.structs import replace

from rota.domain.state import AttemptState, PendingInput, Segment, WorkState


def with_current(work: WorkState, attempt: AttemptState) -> WorkState:
    return replace(work, attempts=(*work.attempts[:-1], attempt))


def swap_open(attempt: AttemptState, segment: Segment) -> tuple[Segment, ...]:
    return (*attempt.segments[:-1], segment)


def take(
    pending: tuple[PendingInput, ...], positions: list[int]
) -> tuple[tuple[PendingInput, ...], tuple[PendingInput, ...]]:
    wanted = set(positions)
    taken = tuple(p for p in pending if p.position in wanted)
    left = tuple(p for p in pending if p.position not in wanted)
    return taken, left


def append_segment(attempt: AttemptState, segment: Segment, limit: int) -> AttemptState:
    segments = (*attempt.segments, segment)
    dropped, dropped_seconds = attempt.dropped_segments, attempt.dropped_active_seconds
    while len(segments) > limit:
        dropped += 1
        dropped_seconds += segments[0].active_seconds()
        segments = segments[1:]
    return replace(
        attempt, segments=segments, dropped_segments=dropped, dropped_active_seconds=dropped_seconds
    )


def close_segment(attempt: AttemptState, at: datetime) -> AttemptState:
    segment = attempt.open_segment
    if segment is None:
        return attempt
    return replace(attempt, segments=swap_open(attempt, replace(segment, ended_at=at)))
