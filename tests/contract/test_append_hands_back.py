"""Store contract: an append hands back the events it was given when they are canonical
(exactly what a read decodes, `Codec.canonical`), and the others decoded, as a read sees
them: an `int` given for a `float` field comes back a `float`, a payload dict the caller
holds comes back a copy of its own."""

from __future__ import annotations

from rota.application.ports import EventStore, NewEvent
from rota.domain.events import AttemptParked, InputAccepted, WorkSubmitted


def test_an_append_hands_back_a_canonical_event_and_decodes_the_others(
    store: EventStore,
) -> None:
    kept = WorkSubmitted(work_id="a", scope="root", binding="b")
    float_given_an_int = AttemptParked(work_id="a", attempt=1, epoch=1, remaining_seconds=30)
    payload = {"n": [1, 2]}
    held = InputAccepted(work_id="a", key="k", payload=payload)
    result = store.append(
        [
            NewEvent("work/a", kept),
            NewEvent("work/a", float_given_an_int),
            NewEvent("work/a", held, "input/a/k"),
        ]
    )
    recorded = [r.event for r in result.recorded]
    assert recorded[0] is kept  # not decoded again
    assert isinstance(recorded[1], AttemptParked)
    assert type(recorded[1].remaining_seconds) is float  # as a read decodes it
    assert recorded[2] == held and recorded[2] is not held
    assert isinstance(recorded[2], InputAccepted) and recorded[2].payload is not payload
    assert [r.event for r in store.read(0)] == recorded


def test_a_one_event_append_does_the_same(store: EventStore) -> None:
    one = WorkSubmitted(work_id="b", scope="root", binding="b")
    assert store.append([NewEvent("work/b", one)], {"work/b": 0}).recorded[0].event is one
    parked = AttemptParked(work_id="b", attempt=1, epoch=1, remaining_seconds=5)
    again = store.append([NewEvent("work/b", parked)]).recorded[0].event
    assert isinstance(again, AttemptParked) and type(again.remaining_seconds) is float
    assert store.read(0)[1].event == again


def test_duplicates_canonical_and_decoded_events_keep_their_places(store: EventStore) -> None:
    first = InputAccepted(work_id="c", key="k", payload={"n": 1})
    original = store.append([NewEvent("work/c", first, "input/c/k")]).recorded[0]
    kept = WorkSubmitted(work_id="d", scope="root", binding="b")
    parked = AttemptParked(work_id="c", attempt=1, epoch=1, remaining_seconds=2)
    again = InputAccepted(work_id="c", key="k", payload={"n": 1})
    result = store.append(
        [
            NewEvent("work/c", parked),
            NewEvent("work/c", again, "input/c/k"),
            NewEvent("work/d", kept),
        ]
    )
    assert result.written == 2
    recorded = result.recorded
    assert recorded[1] == original  # the duplicate answers with the original
    assert isinstance(recorded[0].event, AttemptParked)
    assert type(recorded[0].event.remaining_seconds) is float
    assert recorded[2].event is kept
    assert [r.position for r in recorded] == [2, 1, 3]
    assert store.read(0)[1:] == [recorded[0], recorded[2]]
