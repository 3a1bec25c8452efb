"""Wake on commit, sleep when idle (issue 18 item 5): a waiter learns of another process's
commit from a nudge (SQLite) or a NOTIFY (PostgreSQL), not from polling; the daemon loop
is woken by it; a stop ends a wait at once."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from postgres import require_postgres, schema_url, temporary_schema

import rota
from rota.infrastructure.postgres.store import PostgresStore
from rota.infrastructure.sqlite import store as sqlite_store
from rota.infrastructure.sqlite.store import SQLiteStore

NEVER = 3600.0  # a poll that never comes within a test: only a nudge can wake the waiter


def _submit_elsewhere(url: str, work_id: str) -> None:
    """Submit one Work from another process (a fresh interpreter)."""
    script = (
        "import sys, rota\n"
        "s = rota.open(sys.argv[1], projections=False)\n"
        "s.register('job', lambda ctx: None)\n"  # the submitter knows the binding
        "s.submit(sys.argv[2], binding='job', input={'n': 1})\n"
        "s.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", script, url, work_id],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_sqlite_waiter_is_nudged_by_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "FALLBACK_POLL", NEVER)
    path = tmp_path / "log.db"
    store = SQLiteStore(path)
    try:
        head = store.head().position
        assert store.wait_for_commit(head, 0.01) is False  # starts listening
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for_commit(head, 60)))
        waiter.start()
        _submit_elsewhere(str(path), "w1")
        waiter.join(60)
        assert result == [True]
        assert store.head().position > head
        assert store._nudges.received >= 1  # woken by the writer's poke, not by a poll
    finally:
        store.close()
    assert list((tmp_path / "log.db.wake").iterdir()) == []  # its marker is gone


def test_a_dead_listener_is_forgotten_by_the_next_poke(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = SQLiteStore(path)
    try:
        (tmp_path / "log.db.wake").mkdir()
        (tmp_path / "log.db.wake" / "1-deadbeef0000").touch()  # no socket behind it
        store.write(lambda cursor: None)
        assert list((tmp_path / "log.db.wake").iterdir()) == []
    finally:
        store.close()


class _Sender:
    """Records where a store's pokes go (instead of sending them)."""

    def __init__(self) -> None:
        self.sent: list[str | bytes] = []

    def sendto(self, data: bytes, address: str | bytes) -> int:
        self.sent.append(address)
        return len(data)


def test_a_commit_pokes_the_other_stores_listening_not_its_own(tmp_path: Path) -> None:
    """Its own waiters a store wakes itself, even one that read the head just before the
    commit (the generation moves on every commit); a nudge would only cost a thread."""
    path = tmp_path / "log.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    try:
        for s in (store, other):
            assert s.wait_for_commit(s.head().position, 0.01) is False  # starts listening
        assert store._nudges is not None and other._nudges is not None
        sender = _Sender()
        store._nudges._sender = sender  # type: ignore[assignment]
        generation = store._generation
        assert store._waiting == 0
        store.write(lambda cursor: None)
        assert store._generation == generation + 1  # no waiter, and still moved
        own, theirs = store._nudges._marker, other._nudges._marker
        assert own is not None and theirs is not None
        assert sender.sent == [store._nudges._address(theirs.name)]
    finally:
        store._nudges._sender = None  # type: ignore[union-attr]
        store.close()
        other.close()


def test_wake_waiters_ends_a_wait_at_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    try:
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(store.wait_for_commit(10**9, NEVER)))
        waiter.start()
        while not store._waiting:  # until the waiter is inside its wait
            waiter.join(0.005)
        store.wake_waiters()
        waiter.join(30)
        assert result == [False]
    finally:
        store.close()


def test_the_daemon_loop_wakes_on_a_submit_from_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "FALLBACK_POLL", NEVER)
    path = tmp_path / "log.db"
    scheduler = rota.open(path)
    started = threading.Event()
    scheduler.register("job", lambda ctx: started.set())
    daemon = scheduler._daemon
    loop = threading.Thread(target=scheduler.run)
    loop.start()
    try:
        while daemon.passes.passes == 0 or not (tmp_path / "log.db.wake").exists():
            started.wait(0.01)
        _submit_elsewhere(str(path), "w1")
        assert started.wait(60)
        assert daemon.commits_seen >= 1  # the watcher was woken by the other process's commit
        assert daemon.watch_timeouts == 0  # and never by a timeout
    finally:
        scheduler.stop()
        loop.join(60)
        scheduler.close()
    assert not loop.is_alive()


def test_postgres_daemon_loop_wakes_on_notify() -> None:
    require_postgres()
    with temporary_schema() as schema:
        store_url = schema_url(schema)
        scheduler = rota.open(store_url)
        assert isinstance(scheduler.store, PostgresStore)
        scheduler.store.poll_interval = NEVER  # only a NOTIFY can wake the watcher
        started = threading.Event()
        scheduler.register("job", lambda ctx: started.set())
        daemon = scheduler._daemon
        loop = threading.Thread(target=scheduler.run)
        loop.start()
        try:
            while daemon.passes.passes == 0 or not scheduler.store._listening.is_set():
                started.wait(0.01)
            _submit_elsewhere(store_url, "w1")
            assert started.wait(60)
            assert daemon.commits_seen >= 1  # the NOTIFY of the other process's commit
            assert daemon.watch_timeouts == 0
        finally:
            scheduler.stop()
            loop.join(60)
            scheduler.close()
        assert not loop.is_alive()


def test_reader_connections_of_ended_threads_are_closed(tmp_path: Path) -> None:
    """Launch threads come and go; their SQLite readers must not pile up as open files."""
    store = SQLiteStore(tmp_path / "log.db")
    try:
        before = len(store._connections)
        for _ in range(20):
            reader = threading.Thread(target=store.head)
            reader.start()
            reader.join()
            del reader
        assert len(store._connections) <= before + 1  # at most the last one, not yet collected
    finally:
        store.close()
