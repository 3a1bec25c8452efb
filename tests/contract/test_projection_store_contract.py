"""The projection-store contract, run unchanged against every backend (memory, SQLite,
PostgreSQL), as the store contract suite is: what every `ProjectionStore` promises.

Each test gets a log on the backend under test (`open_store`, `conftest.py`) with Works in
it, and opens the projection store that log keeps by default (`open_projection_store`, the
one rule `rota.open` and replay's commands share): the file beside an SQLite log, the
PostgreSQL log's schema, the in-memory log's own tables. Another call opens another handle
on the same projections (as another process would).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

import rota
from rota.application.errors import ProjectionStoreError
from rota.application.ports import EventStore, LogHead
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.clock import ManualClock
from rota.infrastructure.projection_stores import open_projection_store
from rota.infrastructure.stored_projections import StoredProjections
from rota.projections import HistoryProjection, SchedulerProjection
from rota.replay.rebuild import fold

from .conftest import CLOCK_START, OpenStore

WORKS = ["a", "b", "c", "d", "e"]
OpenProjections = Callable[[], StoredProjections]


def populate(open_store: OpenStore) -> None:
    """Works submitted, inputs accepted and attempts claimed: a log worth projecting."""
    with rota.Scheduler(open_store(ManualClock(CLOCK_START)), owner="host") as scheduler:
        scheduler.register("job", lambda ctx: None)
        for work in WORKS:
            scheduler.submit(work, binding="job", input={"n": work})
        scheduler.service.lifecycle.start_pass()


@pytest.fixture
def log(open_store: OpenStore) -> EventStore:
    populate(open_store)
    return open_store(ManualClock(CLOCK_START))


@pytest.fixture
def open_projections(log: EventStore) -> Iterator[OpenProjections]:
    opened: list[StoredProjections] = []

    def factory() -> StoredProjections:
        found = open_projection_store(log)
        assert found is not None
        opened.append(found)
        return found

    yield factory
    for store in opened:
        store.close()


def folded(log: EventStore) -> tuple[SchedulerProjection, HistoryProjection]:
    scheduler, history = SchedulerProjection(), HistoryProjection()
    fold(log, [scheduler, history])
    return scheduler, history


def test_a_fresh_store_is_empty(log: EventStore, open_projections: OpenProjections) -> None:
    store = open_projections()
    assert store.metas() == {}
    assert store.meta("scheduler") is None
    assert store.rows("scheduler") == (None, [])
    assert store.row("scheduler", "work/a") is None
    assert store.work_rows("", 10) == (None, [])
    assert store.load_scheduler(log) is None
    assert store.last_refusal is not None and "nothing stored" in store.last_refusal
    assert store.load_history(log) is None


def test_keep_then_load_equals_the_live_projection(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, history = folded(log)
    store = open_projections()
    assert store.save([scheduler, history], log) > 0
    assert not scheduler.dirty and not history.dirty
    loaded = store.load_scheduler(log)
    assert loaded is not None, store.last_refusal
    assert store.last_refusal is None
    assert loaded.digest() == scheduler.digest()
    assert [w.work_id for w in loaded.ready_order()] == [w.work_id for w in scheduler.ready_order()]
    lazy = store.load_scheduler(log, lazy=True)
    assert lazy is not None and lazy.digest() == scheduler.digest()
    loaded_history = store.load_history(log)
    assert loaded_history is not None and loaded_history.digest() == history.digest()


def test_meta_keeps_version_position_log_hash_and_counts_generations(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(scheduler, log)
    meta = store.meta("scheduler")
    head = log.head()
    assert meta is not None
    assert (meta.name, meta.version, meta.position) == (
        "scheduler",
        scheduler.version,
        head.position,
    )
    assert meta.log_hash == head.hash and meta.digest is None and meta.rebuilt_at is None
    assert meta.generation == 1
    store.save(scheduler, log, digest=True)
    again = store.meta("scheduler")
    assert again is not None and again.generation == 2
    assert again.digest == scheduler.digest()
    assert store.metas() == {"scheduler": again}


def test_a_save_writes_only_the_rows_that_changed(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(scheduler, log)
    assert store.save(scheduler, log) == 0  # nothing changed since
    scheduler.dirty.add("work/c")
    assert store.save(scheduler, log) == 1
    assert store.row("scheduler", "work/c") == scheduler.row("work/c")


def test_another_handle_sees_what_was_kept(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, history = folded(log)
    first = open_projections()
    first.save([scheduler, history], log)
    first.close()
    reopened = open_projections()
    assert reopened.meta("scheduler") is not None
    loaded = reopened.load_scheduler(log)
    assert loaded is not None and loaded.digest() == scheduler.digest()
    assert dict(reopened.rows("history")[1]) == dict(first_rows(history))


def first_rows(projection: Any) -> list[tuple[str, bytes]]:
    return [(key, projection.row(key)) for key in projection.row_keys()]


def test_rows_and_sorted_rows_hold_every_row(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(scheduler, log)
    meta, rows = store.rows("scheduler")
    assert meta == store.meta("scheduler")
    assert dict(rows) == dict(first_rows(scheduler))
    with store.snapshot():
        ordered = list(store.sorted_rows("scheduler"))
    assert ordered == sorted(first_rows(scheduler))
    assert [key for key, _ in ordered] == sorted(key for key, _ in ordered)


def test_work_rows_page_through_the_works_in_key_order(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(scheduler, log)
    position, page = store.work_rows("", 2)
    assert position == log.head().position
    assert [key for key, _ in page] == ["work/a", "work/b"]
    _, rest = store.work_rows("b", 10)
    assert [key for key, _ in rest] == ["work/c", "work/d", "work/e"]
    assert dict(page + rest) == {f"work/{w}": scheduler.row(f"work/{w}") for w in WORKS}


def test_a_stored_projection_that_does_not_extend_the_log_is_refused(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(scheduler, log)
    meta = store.meta("scheduler")
    assert meta is not None
    assert store.refusal(meta, scheduler.version, log) is None
    assert "fold version" in str(store.refusal(meta, scheduler.version + 1, log))
    ahead = msgspec.structs.replace(meta, position=log.head().position + 1)
    assert "log ends at" in str(store.refusal(ahead, scheduler.version, log))
    other = msgspec.structs.replace(meta, log_hash=GENESIS_HEX)
    assert "hash" in str(store.refusal(other, scheduler.version, log))


def test_a_projection_of_another_log_is_not_loaded(
    open_store: OpenStore, open_projections: OpenProjections
) -> None:
    empty = SchedulerProjection()
    store = open_projections()
    store.save(empty, LogHead(position=0, hash=GENESIS_HEX))
    # The log's first position and hash are not what the stored one was built on, only
    # when the stored one claims a position: one at position 0 extends every log.
    scheduler = SchedulerProjection()
    scheduler.position = 1
    store.save(scheduler, LogHead(position=1, hash="ab" * 32))
    assert store.load_scheduler(open_store()) is None
    assert store.last_refusal is not None and "hash" in store.last_refusal


def test_replace_swaps_in_a_rebuild_and_stamps_it(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, history = folded(log)
    store = open_projections()
    store.save(SchedulerProjection(), LogHead(position=0, hash=GENESIS_HEX))
    store.replace([scheduler, history], log)
    meta = store.meta("scheduler")
    assert meta is not None and meta.generation == 2 and meta.rebuilt_at is not None
    assert meta.digest == scheduler.digest()
    loaded = store.load_scheduler(log)
    assert loaded is not None and loaded.digest() == scheduler.digest()


class Breaks:
    """A scheduler projection whose rows cannot all be encoded: a write fails midway."""

    name = SchedulerProjection.name
    version = SchedulerProjection.version

    def __init__(self, real: SchedulerProjection) -> None:
        self.real, self.position, self.dirty = real, real.position, set(real.dirty)

    def row_keys(self) -> Iterator[str]:
        return self.real.row_keys()

    def row(self, key: str) -> bytes | None:
        if key == "work/c":
            raise RuntimeError("cannot encode work/c")
        return self.real.row(key)

    def digest(self) -> str:
        return self.real.digest()


def test_a_failed_write_leaves_the_store_as_it_was(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    store = open_projections()
    store.save(SchedulerProjection(), LogHead(position=0, hash=GENESIS_HEX))
    before = store.rows("scheduler")
    with pytest.raises(RuntimeError, match="cannot encode"):
        store.replace([Breaks(scheduler)], log)
    assert store.rows("scheduler") == before
    assert open_projections().rows("scheduler") == before


def test_drop_forgets_a_projection(log: EventStore, open_projections: OpenProjections) -> None:
    scheduler, history = folded(log)
    store = open_projections()
    store.save([scheduler, history], log)
    store.drop("scheduler")
    assert store.meta("scheduler") is None and store.rows("scheduler") == (None, [])
    assert set(store.metas()) == {"history"}


def test_a_name_that_is_not_a_stored_projection_is_refused(
    open_projections: OpenProjections,
) -> None:
    with pytest.raises(ProjectionStoreError, match="no stored projection is named"):
        open_projections().row("nope", "k")


def test_the_writer_lock_admits_one_holder_at_a_time(open_projections: OpenProjections) -> None:
    first, second = open_projections().writer_lock(), open_projections().writer_lock()
    assert first.acquire()
    assert first.acquire()  # its holder may ask again
    assert not second.acquire()
    first.release()
    assert second.acquire()
    assert not first.acquire()
    second.release()
    first.release()  # not held: nothing happens


def test_attach_continues_a_stored_projection_with_changed_rows_only(
    log: EventStore, open_projections: OpenProjections
) -> None:
    scheduler, _ = folded(log)
    open_projections().save(scheduler, log)
    keeper = open_projections()
    meta = keeper.meta("scheduler")
    assert meta is not None
    keeper.attach(meta)
    scheduler.dirty.add("work/a")
    assert keeper.save(scheduler, log) == 1  # not written whole: it continues the stored one
