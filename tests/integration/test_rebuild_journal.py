"""The swap of a rebuild into an SQLite projection file: through the rollback journal when
the rebuilding connection is the file's only one (each new page written once), through the
WAL as before when another connection has the file open; the file is in WAL mode again
after it either way, the rows are the same, and a crash in the middle of the swap leaves the
old projection."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import apsw
import pytest

from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.replay.rebuild import rebuild, verify

from .test_rebuild_spill import busy_log


def journal_mode(conn: apsw.Connection) -> str:
    found = conn.execute("PRAGMA main.journal_mode").fetchone()
    assert found is not None
    return str(found[0]).lower()


def synchronous(conn: apsw.Connection) -> int:
    found = conn.execute("PRAGMA synchronous").fetchone()
    assert found is not None
    return int(found[0])


def modes_during_swap(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The journal mode of the projection file each time the swap writes a projection's rows
    (with `+full` when the connection syncs FULL then, as a rollback journal needs)."""
    seen: list[str] = []
    write_rows = SQLiteProjectionStore._write_rows

    def spying(self: SQLiteProjectionStore, conn: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(journal_mode(conn) + ("+full" if synchronous(conn) == 2 else ""))
        return write_rows(self, conn, *args, **kwargs)

    monkeypatch.setattr(SQLiteProjectionStore, "_write_rows", spying)
    return seen


def stored_rows(path: Path) -> dict[str, list[tuple[str, bytes]]]:
    conn = apsw.Connection(str(path))
    try:
        return {
            table: sorted(conn.execute(f"SELECT key, value FROM {table}").fetchall())  # type: ignore[arg-type]
            for table in ("rows_scheduler", "rows_history")
        }
    finally:
        conn.close()


def test_a_rebuild_alone_on_the_file_swaps_through_the_rollback_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = busy_log(tmp_path / "rota.db")
    seen = modes_during_swap(monkeypatch)
    with SQLiteProjectionStore(tmp_path / "rota.db.projections") as store:
        first = rebuild(service.store, store)
        assert seen == ["delete+full", "delete+full"]
        assert journal_mode(store._conn) == "wal"
        assert synchronous(store._conn) == 1  # NORMAL again, as every connection opens it
        assert not Path(f"{store.path}-journal").exists()
        assert first.digests["scheduler"] == service.projection.digest()
        assert verify(service.store, store).ok
        again = rebuild(service.store, store)  # over the old rows, in the same file
        assert again.digests == first.digests
        loaded = store.load_scheduler(service.store)
        assert loaded is not None and loaded.digest() == service.projection.digest()


def test_with_another_connection_open_the_swap_goes_through_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = busy_log(tmp_path / "rota.db")
    path = tmp_path / "rota.db.projections"
    with SQLiteProjectionStore(path) as alone:
        rebuild(service.store, alone)
    expected = stored_rows(path)
    seen = modes_during_swap(monkeypatch)
    # A scheduler keeping the store (or any reader) has the file open meanwhile.
    with SQLiteProjectionStore(path) as other, SQLiteProjectionStore(path) as store:
        assert other.meta("scheduler") is not None
        report = rebuild(service.store, store)
        assert seen == ["wal", "wal"]
        assert journal_mode(store._conn) == "wal"
        assert verify(service.store, store).ok
        meta = other.meta("scheduler")  # the other connection sees the new generation
        assert meta is not None and meta.digest == report.digests["scheduler"]
    assert stored_rows(path) == expected


def _crash_in_the_swap(log_path: str, path: str) -> None:
    """In a child: rebuild, and die (no rollback, no cleanup) once every new row is written
    but before the commit, with the page cache so small that the rows reached the file."""
    put_meta = SQLiteProjectionStore._put_meta

    def dying(self: SQLiteProjectionStore, conn: Any, meta: Any) -> int:
        if meta.name == "history":
            os._exit(3)
        return put_meta(self, conn, meta)

    SQLiteProjectionStore._put_meta = dying  # type: ignore[method-assign]
    log = SQLiteStore(log_path)
    store = SQLiteProjectionStore(path)
    store._conn.execute("PRAGMA main.cache_size=1")
    rebuild(log, store)
    os._exit(0)


def test_a_crash_in_the_middle_of_the_swap_leaves_the_old_projection(tmp_path: Path) -> None:
    service = busy_log(tmp_path / "rota.db")
    path = tmp_path / "rota.db.projections"
    lifecycle = service.lifecycle
    with SQLiteProjectionStore(path) as store:
        rebuild(service.store, store)
        before_meta = store.metas()
    before = stored_rows(path)
    lifecycle.submit(
        SubmitWork(work_id="late", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_crash_in_the_swap, args=(str(service.store.path), str(path)))
    child.start()
    child.join()
    assert child.exitcode == 3
    assert Path(f"{path}-journal").exists(), "the crash left a hot journal"
    with SQLiteProjectionStore(path) as store:  # opening rolls the hot journal back
        assert store.metas() == before_meta
        assert journal_mode(store._conn) == "wal"
    assert stored_rows(path) == before
    with SQLiteProjectionStore(path) as store:
        report = rebuild(service.store, store)
        assert report.digests["scheduler"] == service.projection.digest()
        assert verify(service.store, store).ok
