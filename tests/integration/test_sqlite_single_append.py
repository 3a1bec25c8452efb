"""The SQLite store's one-event append path, where the unique indexes stand in for two reads.

A single event expecting a new stream is inserted as version 1 without reading the stream's
version, and an event with a delivery identity is inserted without looking the identity up:
UNIQUE(stream, version) and the delivery index refuse a wrong guess. These tests pin that a
refused guess answers exactly as the general path does (same error, same fields, nothing
written) and leaves the log, its hash chain and the writer's caches sound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.application.errors import ConcurrencyConflict, DeliveryConflict
from rota.application.ports import NewEvent
from rota.domain.events import InputAccepted, WorkSubmitted
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.audit import verify_chain


def submitted(work: str, binding: str = "b") -> NewEvent:
    return NewEvent(f"work/{work}", WorkSubmitted(work_id=work, scope="root", binding=binding))


def accepted(work: str, key: str, delivery: str | None = None) -> NewEvent:
    return NewEvent(f"work/{work}", InputAccepted(work_id=work, key=key), delivery)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "log.db") as opened:
        assert isinstance(opened, SQLiteStore)
        yield opened


def test_expecting_a_new_stream_that_has_events_is_a_conflict_that_writes_nothing(
    store: SQLiteStore,
) -> None:
    store.append([submitted("a")])
    store.append([accepted("a", "k1")])
    before = store.head()
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append([submitted("a", binding="other")], expected={"work/a": 0})
    assert (caught.value.stream, caught.value.expected, caught.value.actual) == ("work/a", 0, 2)
    assert str(caught.value) == (
        "stream 'work/a' is at version 2, not the expected 0; re-read and decide again"
    )
    assert store.head() == before
    assert [e.version for e in store.read_stream("work/a")] == [1, 2]


def test_a_stale_expected_version_on_one_event_is_a_conflict(store: SQLiteStore) -> None:
    store.append([submitted("a")], expected={"work/a": 0})
    store.append([accepted("a", "k1")], expected={"work/a": 1})
    before = store.head()
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append([accepted("a", "k2")], expected={"work/a": 1})
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert store.head() == before


def test_the_log_goes_on_after_a_refused_insert(store: SQLiteStore) -> None:
    store.append([submitted("a")])
    with pytest.raises(ConcurrencyConflict):
        store.append([submitted("a")], expected={"work/a": 0})
    first = store.append([submitted("b")], expected={"work/b": 0}).recorded[0]
    second = store.append([accepted("a", "k1", "input/a/k1")]).recorded[0]
    assert (first.position, first.stream, first.version) == (2, "work/b", 1)
    assert (second.position, second.stream, second.version) == (3, "work/a", 2)
    assert store.read() == [*store.read(limit=1), first, second]
    report = verify_chain(store)
    assert report.ok and report.checked == 3


def test_a_repeated_delivery_returns_the_original_and_writes_nothing(store: SQLiteStore) -> None:
    store.append([submitted("a")])
    original = store.append([accepted("a", "k1", "input/a/k1")]).recorded[0]
    head = store.head()
    for expected in (None, {"work/a": 0}, {"work/a": 2}):
        again = store.append([accepted("a", "k1", "input/a/k1")], expected)
        assert again.written == 0 and again.duplicate
        assert again.recorded == [original]
    assert store.head() == head


def test_a_delivery_identity_reused_for_another_event_is_refused(store: SQLiteStore) -> None:
    store.append([submitted("a")])
    store.append([accepted("a", "k1", "input/a/k1")])
    head = store.head()
    with pytest.raises(DeliveryConflict) as caught:
        store.append([accepted("b", "k1", "input/a/k1")], expected={"work/b": 0})
    assert caught.value.position == 2
    assert store.head() == head
    assert store.read_stream("work/b") == []


def test_a_stream_another_handle_created_is_not_new(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "log.db") as mine, SQLiteStore(tmp_path / "log.db") as theirs:
        mine.append([submitted("seed")])
        theirs.append([submitted("a")], expected={"work/a": 0})
        with pytest.raises(ConcurrencyConflict) as caught:
            mine.append([submitted("a")], expected={"work/a": 0})
        assert caught.value.actual == 1
        recorded = mine.append([accepted("a", "k1")], expected={"work/a": 1}).recorded[0]
        assert (recorded.position, recorded.version) == (3, 2)
        assert verify_chain(theirs).ok


def test_the_recorded_event_returned_is_what_a_read_sees(store: SQLiteStore) -> None:
    results = [
        store.append([submitted("a")], expected={"work/a": 0}),
        store.append([accepted("a", "k1", "input/a/k1")]),
        store.append([accepted("a", "k2")], expected={"work/a": 2}),
    ]
    assert [r.written for r in results] == [1, 1, 1]
    assert [r.recorded[0] for r in results] == store.read()


def test_a_commit_wakes_a_thread_waiting_for_it(store: SQLiteStore) -> None:
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait_for_commit(0, 60.0)))
    waiter.start()
    store.append([submitted("a")])
    waiter.join()
    assert woke == [True]
