"""A commit's poke (sqlite.nudges) lists the wake directory again only when it changed: the
listing is reused while the directory's mtime stays (and was old enough to be trusted), a
listener that starts later is poked all the same, and a dead one is still forgotten."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.infrastructure.sqlite.store import SQLiteStore

from .test_wake_on_commit import _Sender


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every directory `os.listdir` lists while the test runs."""
    seen: list[str] = []
    listdir = os.listdir

    def counting(path: str | os.PathLike[str] = ".") -> list[str]:
        seen.append(os.fspath(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    yield seen


def _age(directory: Path) -> None:
    """Make the directory's mtime an hour old (as if no marker had come or gone since)."""
    info = directory.stat()
    os.utime(directory, ns=(info.st_atime_ns, info.st_mtime_ns - 3600 * 10**9))


def _pokes(listings: list[str], directory: Path) -> int:
    return sum(1 for p in listings if p == os.fspath(directory))


def test_the_listing_is_reused_while_the_directory_stays(
    tmp_path: Path, listings: list[str]
) -> None:
    path = tmp_path / "log.db"
    store, other = SQLiteStore(path, synchronous="normal"), SQLiteStore(path)
    try:
        assert other.wait_for_commit(other.head().position, 0.01) is False  # listens
        assert store._nudges is not None and other._nudges is not None
        directory = store._nudges.directory
        sender = _Sender()
        store._nudges._sender = sender  # type: ignore[assignment]
        _age(directory)
        listings.clear()
        for _ in range(5):
            store.write(lambda cursor: None)
        assert _pokes(listings, directory) == 1  # listed once, then reused
        theirs = other._nudges._marker
        assert theirs is not None
        assert sender.sent == [store._nudges._address(theirs.name)] * 5  # poked every time
    finally:
        if store._nudges is not None:
            store._nudges._sender = None
        store.close()
        other.close()


def test_a_listener_that_starts_later_is_poked(tmp_path: Path, listings: list[str]) -> None:
    path = tmp_path / "log.db"
    store, first, late = (SQLiteStore(path, synchronous="normal") for _ in range(3))
    try:
        assert first.wait_for_commit(first.head().position, 0.01) is False
        assert store._nudges is not None and late._nudges is not None
        sender = _Sender()
        store._nudges._sender = sender  # type: ignore[assignment]
        _age(store._nudges.directory)
        store.write(lambda cursor: None)
        store.write(lambda cursor: None)  # the listing reused
        assert late.wait_for_commit(late.head().position, 0.01) is False  # a new marker
        sender.sent.clear()
        store.write(lambda cursor: None)
        marker = late._nudges._marker
        assert marker is not None
        assert store._nudges._address(marker.name) in sender.sent
    finally:
        if store._nudges is not None:
            store._nudges._sender = None
        for s in (store, first, late):
            s.close()


def test_a_fresh_listing_is_not_trusted(tmp_path: Path, listings: list[str]) -> None:
    # Negative control: a directory changed just now may change again within its mtime's
    # granularity, unseen: every poke lists it.
    path = tmp_path / "log.db"
    store, other = SQLiteStore(path, synchronous="normal"), SQLiteStore(path)
    try:
        assert other.wait_for_commit(other.head().position, 0.01) is False  # marker: just now
        assert store._nudges is not None
        listings.clear()
        for _ in range(3):
            store.write(lambda cursor: None)
        assert _pokes(listings, store._nudges.directory) == 3
    finally:
        store.close()
        other.close()


def test_a_dead_listener_is_forgotten_after_a_reused_listing(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = SQLiteStore(path, synchronous="normal")
    try:
        directory = tmp_path / "log.db.wake"
        directory.mkdir()
        (directory / "1-deadbeef0000").touch()  # no socket behind it
        _age(directory)
        (directory / "2-deadbeef0000").touch()  # moves the mtime; listed, not trusted
        _age(directory)
        store.write(lambda cursor: None)
        assert list(directory.iterdir()) == []  # both refused, both removed
        (directory / "3-deadbeef0000").touch()
        store.write(lambda cursor: None)
        assert list(directory.iterdir()) == []
    finally:
        store.close()
