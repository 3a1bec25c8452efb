"""Store contract: append, read, atomicity, fencing, idempotent delivery, ordering."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from rota.application.errors import ConcurrencyConflict, DeliveryConflict
from rota.application.ports import EventStore, NewEvent
from rota.domain.events import CarriedInput, InputAccepted, WorkSubmitted
from rota.infrastructure.clock import ManualClock
from rota.replay.audit import verify_chain

from .conftest import OpenStore
from .helpers import accepted, submitted


def test_round_trip_keeps_every_field(open_store: OpenStore) -> None:
    clock = ManualClock(datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC))
    store = open_store(clock)
    result = store.append([submitted("a"), accepted("a", 1, {"n": [1, 2.5, "x"]}, "input/a/1")])
    assert result.written == 2
    events = store.read()
    assert [(e.position, e.stream, e.version) for e in events] == [
        (1, "work/a", 1),
        (2, "work/a", 2),
    ]
    assert events[0].event == WorkSubmitted(work_id="a", scope="root", binding="b")
    assert events[1].event == InputAccepted(work_id="a", key="k1", payload={"n": [1, 2.5, "x"]})
    assert events[1].delivery_id == "input/a/1"
    assert events[0].recorded_at == "2026-03-04T05:06:07.890123Z"
    assert events[0].recorded_time == clock.now()
    assert events[1].type == "core.input.accepted"
    assert result.recorded == events


def test_empty_store_reads_nothing(store: EventStore) -> None:
    assert store.read() == []
    assert store.read_stream("work/none") == []
    assert store.stream_version("work/none") == 0
    assert store.head().position == 0
    assert store.find_delivery("nope") is None


def test_read_stream_and_pages(store: EventStore) -> None:
    for i in range(10):
        store.append([submitted(f"w{i}")])
        store.append([accepted("shared", i + 1)])
    assert [e.version for e in store.read_stream("work/shared")] == list(range(1, 11))
    assert [e.version for e in store.read_stream("work/shared", after=7)] == [8, 9, 10]
    assert store.stream_version("work/shared") == 10
    pages, position = [], 0
    while batch := store.read(position, limit=3):
        pages.append([e.position for e in batch])
        position = batch[-1].position
    assert pages[0] == [1, 2, 3]
    assert [p for page in pages for p in page] == list(range(1, 21))


def test_multi_stream_append_is_atomic_and_versioned(store: EventStore) -> None:
    store.append([submitted("a")])
    result = store.append(
        [accepted("a", 1), submitted("b"), accepted("b", 1), accepted("a", 2)],
        expected={"work/a": 1, "work/b": 0},
    )
    assert [(e.stream, e.version) for e in result.recorded] == [
        ("work/a", 2),
        ("work/b", 1),
        ("work/b", 2),
        ("work/a", 3),
    ]
    assert [e.position for e in result.recorded] == [2, 3, 4, 5]


def test_stale_expected_version_writes_nothing(store: EventStore) -> None:
    store.append([submitted("a")])
    before = store.head()
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append([submitted("b"), accepted("a", 1)], expected={"work/b": 0, "work/a": 0})
    assert caught.value.stream == "work/a"
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert caught.value.code == "concurrency_conflict"
    assert store.head() == before
    assert store.read_stream("work/b") == []


def test_a_stream_can_fence_without_receiving_an_event(store: EventStore) -> None:
    store.append([NewEvent("pool/jobs", WorkSubmitted(work_id="p", scope="r", binding="b"))])
    with pytest.raises(ConcurrencyConflict):
        store.append([submitted("x")], expected={"pool/jobs": 0})
    assert store.read_stream("work/x") == []
    store.append([submitted("x")], expected={"pool/jobs": 1})
    assert store.stream_version("work/x") == 1


def test_duplicate_delivery_identity_returns_the_original(store: EventStore) -> None:
    first = store.append([submitted("a"), accepted("a", 1, {"v": 1}, "input/a/1")])
    head = store.head()
    again = store.append([accepted("a", 1, {"v": 1}, "input/a/1")], expected={"work/a": 0})
    assert again.written == 0 and again.duplicate
    assert again.recorded == [first.recorded[1]]
    assert store.head() == head
    assert store.find_delivery("input/a/1") == first.recorded[1]


def test_partial_duplicate_writes_only_the_new_events(store: EventStore) -> None:
    store.append([accepted("a", 1, None, "d1")])
    result = store.append([accepted("a", 1, None, "d1"), accepted("a", 2, None, "d2")])
    assert result.written == 1
    assert [e.position for e in result.recorded] == [1, 2]
    assert [e.delivery_id for e in store.read()] == ["d1", "d2"]


def test_same_identity_with_another_payload_is_refused(store: EventStore) -> None:
    store.append([accepted("a", 1, {"v": 1}, "input/a/1")])
    head = store.head()
    with pytest.raises(DeliveryConflict) as caught:
        store.append([submitted("z"), accepted("a", 1, {"v": 2}, "input/a/1")])
    assert caught.value.position == 1
    assert caught.value.code == "delivery_conflict"
    with pytest.raises(DeliveryConflict):
        store.append([NewEvent("work/other", accepted("a", 1, {"v": 1}).event, "input/a/1")])
    assert store.head() == head
    assert store.read_stream("work/z") == []


def test_identity_repeated_inside_one_append(store: EventStore) -> None:
    with pytest.raises(DeliveryConflict, match="earlier in this append"):
        store.append([accepted("a", 1, None, "same"), accepted("a", 2, None, "same")])
    assert store.head().position == 0
    result = store.append([accepted("a", 1, None, "same"), accepted("a", 1, None, "same")])
    assert result.written == 1
    assert result.recorded[0] == result.recorded[1]
    again = store.append([accepted("a", 1, None, "same"), accepted("a", 1, None, "same")])
    assert again.duplicate and again.recorded == result.recorded


def test_an_input_under_a_definitions_carried_input_identity_is_that_input(
    store: EventStore,
) -> None:
    """A definition carrying its first input holds the input's identity: the same input
    appended under it is that delivery (the original returned, in another append or in
    the same one); another payload under it is refused; another definition under it is a
    concurrency conflict (the Work exists), decided again as without the identity."""
    carried = CarriedInput(key="k1", payload={"v": 1})
    defined = WorkSubmitted(work_id="a", scope="root", binding="b", input=carried)
    first = store.append([NewEvent("work/a", defined, "input/a/1")], expected={"work/a": 0})
    head = store.head()
    again = store.append([accepted("a", 1, {"v": 1}, "input/a/1")])
    assert again.duplicate and again.recorded == first.recorded
    with pytest.raises(DeliveryConflict):
        store.append([accepted("a", 1, {"v": 2}, "input/a/1")])
    other = NewEvent("work/a", msgspec.structs.replace(defined, binding="c"), "input/a/1")
    with pytest.raises(ConcurrencyConflict):
        store.append([other], expected={"work/a": 0})
    assert store.head() == head
    both = store.append(
        [
            NewEvent("work/b", msgspec.structs.replace(defined, work_id="b"), "input/b/1"),
            NewEvent("work/b", InputAccepted(work_id="b", key="k1", payload={"v": 1}), "input/b/1"),
        ]
    )
    assert both.written == 1 and both.recorded[0] == both.recorded[1]


def test_positions_are_gapless_across_handles(open_store: OpenStore) -> None:
    one, two = open_store(), open_store()
    for i in range(20):
        (one if i % 2 else two).append([submitted(f"w{i}"), accepted(f"w{i}", 1)])
    positions = [e.position for e in one.read(limit=1000)]
    assert positions == list(range(1, 41))
    assert verify_chain(two).ok


def test_recorded_time_comes_from_the_store_clock(open_store: OpenStore) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = open_store(clock)
    store.append([submitted("a")])
    clock.advance(-3600)
    store.append([submitted("b")])
    assert [e.recorded_at for e in store.read()] == [
        "2030-01-01T00:00:00.000000Z",
        "2029-12-31T23:00:00.000000Z",
    ]
    assert store.now() == clock.now()


def test_hash_chain_links_every_append(store: EventStore) -> None:
    for i in range(5):
        store.append([submitted(f"w{i}"), accepted(f"w{i}", 1, {"i": i})])
    report = verify_chain(store)
    assert report.ok, report
    assert report.checked == 10
    assert report.head_hash == store.head().hash


def test_read_prefix_reads_the_streams_that_start_with_it(store: EventStore) -> None:
    for i in range(6):
        store.append([submitted(f"w{i}")])  # work/w0 ... work/w5
    store.append([accepted("worker", 1)])  # work/worker
    wanted = [
        NewEvent("workers/x", WorkSubmitted(work_id="x", scope="root", binding="b")),
        NewEvent("work0", WorkSubmitted(work_id="y", scope="root", binding="b")),
    ]
    store.append(wanted)
    got = store.read_prefix("work/w")
    assert [e.stream for e in got] == [f"work/w{i}" for i in range(6)] + ["work/worker"]
    assert [e.position for e in store.read_prefix("work/w", after=2, limit=2)] == [3, 4]
    assert [e.position for e in store.read_prefix("work/w", upto=3)] == [1, 2, 3]
    assert [e.stream for e in store.read_prefix("workers")] == ["workers/x"]
    assert [e.stream for e in store.read_prefix("work0")] == ["work0"]
    # The port's default (a filtered read) answers the same.
    assert EventStore.read_prefix(store, "work/w", 2, 2) == store.read_prefix("work/w", 2, 2)


def test_read_prefix_of_the_schedule_streams(store: EventStore) -> None:
    # The schedule streams' reads go through an index of their own: the same answers.
    def on(stream: str) -> NewEvent:
        return NewEvent(stream, WorkSubmitted(work_id=stream, scope="root", binding="b"))

    streams = ["schedule/a", "work/w", "schedules/leader", "schedulf", "schedule/b", "schedul"]
    for stream in streams * 2:
        store.append([on(stream)])
    got = store.read_prefix("schedule")
    assert [e.stream for e in got] == ["schedule/a", "schedules/leader", "schedule/b"] * 2
    assert [e.position for e in got] == [1, 3, 5, 7, 9, 11]
    assert [e.position for e in store.read_prefix("schedule/")] == [1, 5, 7, 11]
    assert [e.position for e in store.read_prefix("schedule", after=3, limit=2)] == [5, 7]
    assert [e.position for e in store.read_prefix("schedule/", upto=7)] == [1, 5, 7]
    assert [e.position for e in store.read_prefix("schedules/")] == [3, 9]
    assert [e.position for e in store.read_prefix("schedul")] == [1, 3, 4, 5, 6, 7, 9, 10, 11, 12]
    assert EventStore.read_prefix(store, "schedule", 1, 3) == store.read_prefix("schedule", 1, 3)


def test_read_streams_reads_several_streams_at_once(store: EventStore) -> None:
    for i in range(3):
        store.append([submitted(f"w{i}")])
        store.append([accepted("w1", i + 1)])
    found = store.read_streams(["work/w1", "work/none", "work/w0"])
    assert sorted(found) == ["work/w0", "work/w1"]
    for stream, events in found.items():
        assert events == store.read_stream(stream)
    assert [e.version for e in found["work/w1"]] == [1, 2, 3, 4]
    assert store.read_streams([]) == {}


def test_a_bulk_append_expecting_new_streams_conflicts_on_an_existing_one(
    open_store: OpenStore,
) -> None:
    writer, other = open_store(), open_store()
    writer.append([submitted("a"), submitted("b")], {"work/a": 0, "work/b": 0})
    other.append([submitted("c")])  # another handle: the writer's caches do not know it
    new = [submitted("d"), submitted("c"), submitted("e")]
    with pytest.raises(ConcurrencyConflict):
        writer.append(new, {"work/d": 0, "work/c": 0, "work/e": 0})
    assert writer.read_streams(["work/d", "work/e"]) == {}
    written = writer.append([submitted("d"), submitted("e")], {"work/d": 0, "work/e": 0})
    assert [r.version for r in written.recorded] == [1, 1]
    assert writer.stream_version("work/c") == 1
