"""The SQLite writer's WAL checkpoints (sqlite.checkpoints): taken out of its commits and run
on a thread of the store's own, the WAL still bounded, nothing lost across a restart of
the WAL, the thread stopped with the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.application.ports import NewEvent
from rota.domain.events import WorkCancelled
from rota.infrastructure.sqlite.checkpoints import Checkpoints
from rota.infrastructure.sqlite.store import SQLiteStore


def event(n: int) -> NewEvent:
    # About a page of payload each, so the WAL grows by pages a commit.
    return NewEvent(f"work-{n}", WorkCancelled(work_id=str(n), reason="x" * 3000), None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "log.db", synchronous="normal")  # no fsync a commit: faster
    yield s
    s.close()


def checkpoints(store: SQLiteStore, *, pages: int, limit: int) -> Checkpoints:
    found = store._checkpoints
    assert found is not None
    found.pages, found.limit = pages, limit
    return found


def test_the_writer_does_not_checkpoint_inside_its_commits(store: SQLiteStore) -> None:
    # Negative control for the thread: with nothing asking for one, no checkpoint runs
    # (SQLite's automatic one would have run at 1,000 pages) and the WAL keeps every frame.
    ckpt = checkpoints(store, pages=10**9, limit=10**9)
    size = store.path.stat().st_size
    for n in range(400):
        store.append([event(n)])
    assert store.path.stat().st_size == size  # nothing copied into the database file
    assert ckpt.wal_pages > 1000
    assert ckpt.runs == 0 and ckpt.inline == 0


def test_the_thread_checkpoints_and_a_commit_finishes_what_came_after(store: SQLiteStore) -> None:
    ckpt = checkpoints(store, pages=20, limit=10**9)
    size = store.path.stat().st_size
    restarts, last = 0, 0
    for n in range(100):
        store.append([event(n)])
        restarts += ckpt.wal_pages < last
        last = ckpt.wal_pages
        ckpt.wait_idle()  # (a test's commits wait for the thread; a store's never do)
    assert ckpt.runs >= 1
    # Each of the thread's checkpoints is completed once, by the next commit (the frames
    # committed while it ran), and the WAL starts over: the thread does not chase commits.
    assert 1 <= ckpt.inline <= ckpt.runs
    assert ckpt.runs <= restarts + 1
    assert store.path.stat().st_size > size  # the WAL's frames reached the database file
    assert ckpt.wal_pages < 40
    assert [e.position for e in store.read(0, 1000)] == list(range(1, 101))


def test_a_commit_checkpoints_itself_when_the_wal_reaches_the_limit(store: SQLiteStore) -> None:
    ckpt = checkpoints(store, pages=10**9, limit=30)  # the thread is never asked
    for n in range(200):
        store.append([event(n)])
        assert ckpt.wal_pages < 30 + 10  # bounded: one commit past the limit at most
    assert ckpt.inline >= 1 and ckpt.runs == 0
    assert store.integrity_check() == ["ok"]


def test_commits_made_across_restarts_of_the_wal_are_synced_and_kept(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    ckpt = checkpoints(store, pages=8, limit=10**9)
    sync = store._wal_sync
    assert sync is not None
    for n in range(120):
        store.append([event(n)])
        assert sync.synced == sync.committed  # told only once fsynced, restarts or not
    ckpt.wait_idle()
    assert ckpt.runs >= 1
    store.close()
    again = SQLiteStore(tmp_path / "log.db")
    try:
        assert again.head().position == 120
        assert again.integrity_check() == ["ok"]
    finally:
        again.close()


def test_the_thread_stops_with_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    ckpt = checkpoints(store, pages=4, limit=10**9)
    for n in range(20):
        store.append([event(n)])
    thread = ckpt._thread
    assert thread is not None
    store.close()
    assert not thread.is_alive()
    ckpt.request()  # after close: nothing starts
    assert ckpt._thread is thread
