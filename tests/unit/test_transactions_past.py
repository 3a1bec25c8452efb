"""What an append newly recorded, in log order (`transactions._past`): the events past the
projection's position, once each, whatever order and repeats the append answered with."""

from __future__ import annotations

from rota.application.ports import RecordedEvent
from rota.application.transactions import _past
from rota.domain.events import WorkCancelled


def recorded(position: int) -> RecordedEvent:
    event = WorkCancelled(work_id="w", reason="test")
    return RecordedEvent(position, "work-w", position, None, "2026-12-01T00:00:00Z", event)


def positions(events: list[RecordedEvent]) -> list[int]:
    return [e.position for e in events]


def test_a_plain_append_is_returned_as_it_came() -> None:
    events = [recorded(p) for p in (4, 5, 6)]
    assert positions(_past(events, 3)) == [4, 5, 6]
    assert _past([], 3) == []


def test_earlier_events_and_repeats_are_left_out_and_the_rest_ordered() -> None:
    # A duplicate delivery answers with its original: before the position, or repeated.
    events = [recorded(p) for p in (2, 5, 4, 5, 6)]
    assert positions(_past(events, 3)) == [4, 5, 6]
    assert positions(_past([recorded(3), recorded(1)], 3)) == []


def test_a_gap_is_kept_for_the_caller_to_see() -> None:
    # Another writer came between: the caller catches up instead of applying.
    assert positions(_past([recorded(p) for p in (5, 6)], 3)) == [5, 6]


def test_a_repeat_of_an_original_past_the_position_is_left_out() -> None:
    # An identity given twice whose original another writer recorded after the projection's
    # position: the positions span as many values as there are events, yet repeat one.
    events = [recorded(p) for p in (4, 4, 6)]
    assert positions(_past(events, 3)) == [4, 6]
    assert positions(_past([recorded(p) for p in (4, 5, 5)], 3)) == [4, 5]
