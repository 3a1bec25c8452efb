"""A rebuild alone on its SQLite projection file folds (in this process) into a staging table
in that file, and the swap renames it into place (each row written once); a fold in a
forked child spills to a scratch file, copied by the swap. The same rows and digests as a
fold in memory; a crash or a failure before the swap's commit leaves the old projection,
and the staging tables are gone once a rebuild ends. With another connection on the file,
every fold spills to a scratch file as before."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import apsw
import pytest

from rota.domain.submission import SubmitWork, WorkInput
from rota.infrastructure import spill as spill_module
from rota.infrastructure.sqlite.projection_store import SQLiteProjectionStore
from rota.infrastructure.sqlite.store import SQLiteStore
from rota.projections import HistoryProjection, SchedulerProjection
from rota.replay import rebuild as rebuild_module
from rota.replay.rebuild import fold, rebuild, verify

from .test_rebuild_journal import journal_mode, stored_rows
from .test_rebuild_spill import busy_log


def tables(path: Path) -> set[str]:
    conn = apsw.Connection(str(path))
    try:
        return {
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")
        }
    finally:
        conn.close()


def folded_rows(store: SQLiteStore) -> dict[str, list[tuple[str, bytes]]]:
    scheduler, history = SchedulerProjection(), HistoryProjection()
    fold(store, [scheduler, history])
    return {
        f"rows_{p.name}": sorted((k, v) for k in p.row_keys() if (v := p.row(k)) is not None)
        for p in (scheduler, history)
    }


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rebuild's own temporary directory (to see whether scratch spill files were made)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(rebuild_module.tempfile, "tempdir", str(temporary))
    return temporary


def spill_files_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    init = spill_module.SpillFile.__init__

    def spying(self: Any, path: Any, table: str = "rows", *, staged: bool = False) -> None:
        made.append("staged" if staged else "scratch")
        init(self, path, table, staged=staged)

    monkeypatch.setattr(spill_module.SpillFile, "__init__", spying)
    return made


@pytest.mark.parametrize("small", [False, True])
def test_a_rebuild_alone_folds_into_staging_tables_renamed_into_place(
    tmp_path: Path,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
    small: bool,
) -> None:
    if small:  # many spills of a few rows each, read-backs included
        monkeypatch.setattr(rebuild_module, "PAGE", 7)
        monkeypatch.setattr(spill_module, "HOLD", 4)
    service = busy_log(tmp_path / "rota.db")
    made = spill_files_made(monkeypatch)
    path = tmp_path / "rota.db.projections"
    with SQLiteProjectionStore(path) as store:
        report = rebuild(service.store, store)
        # Both folds (from one read of the log, in this process) spill to staging tables.
        assert made == ["staged", "staged"]
        assert report.digests["scheduler"] == service.projection.digest()
        assert verify(service.store, store).ok
        assert journal_mode(store._conn) == "wal"
        again = rebuild(service.store, store)  # over the old rows
        assert again.digests == report.digests and again.rows == report.rows
    assert stored_rows(path) == folded_rows(service.store)
    assert report.rows == {name[5:]: len(rows) for name, rows in folded_rows(service.store).items()}
    assert tables(path) == {"projection_meta", "rows_scheduler", "rows_history"}
    assert not Path(f"{path}-journal").exists()


def test_with_another_connection_open_the_folds_spill_to_scratch_files(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = busy_log(tmp_path / "rota.db")
    path = tmp_path / "rota.db.projections"
    made = spill_files_made(monkeypatch)
    with SQLiteProjectionStore(path) as other, SQLiteProjectionStore(path) as store:
        with store.staging(["scheduler"]) as staged:
            assert staged is None
        report = rebuild(service.store, store)
        assert set(made) == {"scratch"}
        assert verify(service.store, store).ok
        meta = other.meta("scheduler")
        assert meta is not None and meta.digest == report.digests["scheduler"]
    assert stored_rows(path) == folded_rows(service.store)
    assert tables(path) == {"projection_meta", "rows_scheduler", "rows_history"}


def test_a_failed_rebuild_leaves_the_old_projection_and_no_staging_tables(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = busy_log(tmp_path / "rota.db")
    path = tmp_path / "rota.db.projections"
    with SQLiteProjectionStore(path) as store:
        rebuild(service.store, store)
        before, metas = stored_rows(path), store.metas()
        service.lifecycle.submit(
            SubmitWork(work_id="late", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
        )

        def broken(self: Any) -> Any:
            raise RuntimeError("the fold failed")

        monkeypatch.setattr(spill_module.Spiller, "finish", broken)
        with pytest.raises(RuntimeError):
            rebuild(service.store, store)
        assert store.metas() == metas
        assert journal_mode(store._conn) == "wal"
    assert stored_rows(path) == before
    assert tables(path) == {"projection_meta", "rows_scheduler", "rows_history"}


def _crash_in_the_fold(log_path: str, path: str) -> None:
    """In a child: rebuild, and die (no rollback, no cleanup) once the folds have written
    rows into the staging tables, before the swap."""

    def dying(self: Any, *args: Any, **kwargs: Any) -> None:
        os._exit(3)

    SQLiteProjectionStore.replace = dying  # type: ignore[method-assign]
    rebuild(SQLiteStore(log_path), SQLiteProjectionStore(path))
    os._exit(0)


def test_a_crash_before_the_swap_leaves_the_old_projection(tmp_path: Path) -> None:
    service = busy_log(tmp_path / "rota.db")
    path = tmp_path / "rota.db.projections"
    with SQLiteProjectionStore(path) as store:
        rebuild(service.store, store)
        before_meta = store.metas()
    before = stored_rows(path)
    service.lifecycle.submit(
        SubmitWork(work_id="late", binding="b", kind="run-once", inputs=(WorkInput(None, "s"),))
    )
    child = multiprocessing.get_context("fork").Process(
        target=_crash_in_the_fold, args=(str(service.store.path), str(path))
    )
    child.start()
    child.join()
    assert child.exitcode == 3
    assert "rows_scheduler_rebuild" in tables(path), "the crash left the staging tables"
    with SQLiteProjectionStore(path) as store:
        assert store.metas() == before_meta
    assert stored_rows(path) == before
    with SQLiteProjectionStore(path) as store:
        report = rebuild(service.store, store)  # the next rebuild drops them
        assert report.digests["scheduler"] == service.projection.digest()
        assert verify(service.store, store).ok
    assert tables(path) == {"projection_meta", "rows_scheduler", "rows_history"}
