"""Optimisation: a rebuild's swap into the SQLite projection file writes each row once
(bench rebuild_phases).

Measured by bench/rebuild_phases.py and bench/replay.py: the rows a fold spilled are copied by
SQLite itself, table to table (an attached spill file), or the staging table the fold wrote
into this very file is renamed into place; and the swap runs in the rollback journal when this
connection is the file's only one, so a new page is written once, not twice.

`SwappedFile` is the part of `SQLiteProjectionStore` (`sqlite.projection_store`) that does
it: `replace`, `staging` and the `_write_rows` hook they steer. Without it a swap writes
every row through `write_rows`, as a save does; atomicity is the same either way (one
transaction).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw

from rota.application.errors import ProjectionStoreError
from rota.application.ports import EventStore, LogHead, Persisted
from rota.infrastructure.projection_tables import row_table, write_rows
from rota.infrastructure.spill import SpillFile
from rota.infrastructure.stored_projections import StoredProjections

log = logging.getLogger("rota.projections")
STAGED = "_rebuild"  # a rebuild's staging table: `rows_<name>_rebuild` (`staging`)


class SwappedFile(StoredProjections):
    """The swap of a rebuild into an SQLite projection file; see the module docstring."""

    path: Path
    _conn: apsw.Connection
    _lock: threading.RLock
    _busy_ms: int
    _attached: dict[int, str]  # id of a projection being replaced -> its spill's alias
    _staged: dict[str, str] = {}  # projection -> its staging table, while `staging` runs

    def _write_rows(
        self, conn: Any, projection: Persisted, keys: Iterable[str], *, cleared: bool
    ) -> int:
        """Write `keys`' rows; `cleared`: the table was emptied in this transaction.

        A rebuild's rows still in their spill file (attached by `replace`) are copied by
        SQLite itself, table to table, without passing through Python one row at a time."""
        staged = self._staged.get(projection.name)
        spill = getattr(projection, "spill", None)
        if (
            cleared
            and staged is not None
            and isinstance(spill, SpillFile)
            and spill.staged
            and spill.table == staged
            and spill.path.resolve() == self.path.resolve()
        ):
            # The fold wrote its rows into this file's staging table: it becomes the table.
            table = row_table(projection.name)
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {staged} RENAME TO {table}")
            found = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return int(found[0]) if found else 0
        attached = self._attached.get(id(projection))
        if cleared and attached is not None:
            conn.execute(
                f"INSERT INTO {row_table(projection.name)} (key, value) "
                f"SELECT key, value FROM {attached}.rows ORDER BY key"
            )
            return int(conn.changes())
        return write_rows(conn, projection, keys)

    def replace(self, projections: Sequence[Persisted], log: EventStore | LogHead) -> None:
        """As `StoredProjections.replace`; the spill file of a projection folded with
        spilling (`SpilledRows`) is attached first (SQLite cannot attach in a transaction)
        so `_write_rows` copies its rows inside SQLite."""
        with self._lock:
            attached: list[str] = []
            journal = self._rollback_journal()
            try:
                for n, projection in enumerate(projections):
                    spill = getattr(projection, "spill", None)
                    path = getattr(spill, "path", None)
                    if path is None or getattr(spill, "staged", False):
                        continue
                    if not self._conn.getautocommit():
                        continue
                    alias = f"spill{n}"
                    self._conn.execute("ATTACH DATABASE ? AS " + alias, (str(path),))
                    attached.append(alias)
                    self._attached[id(projection)] = alias
                super().replace(projections, log)
            except apsw.Error as exc:
                raise ProjectionStoreError(
                    f"a write to the projection store at {self.path} failed: {exc}"
                ) from exc
            finally:
                self._attached.clear()
                for alias in attached:
                    with contextlib.suppress(apsw.Error):
                        self._conn.execute("DETACH DATABASE " + alias)
                if journal and not self._staged:  # else when the staging ends
                    self._back_to_wal()

    @contextlib.contextmanager
    def staging(self, names: Sequence[str]) -> Iterator[Callable[[str], SpillFile] | None]:
        """For a rebuild of the projections `names`: staging tables in this file that their
        folds in this process spill to (a function giving each name its `SpillFile`), so
        the swap (`replace`) renames each into place instead of copying every row from a
        scratch file: each row is written once. A staging table no fold wrote to (its
        projection folded in a child, into a scratch file) is dropped at the end.

        Only when this connection is the file's only one (as for the swap's rollback
        journal, `_rollback_journal`, which stays on until the staging ends: the folds'
        writes go through it, synced FULL); else None, and the folds spill to scratch
        files as before. Atomicity is the swap's: the live tables change only in its one
        transaction; a crash before its commit leaves them (and staging tables, dropped by
        the next staging) as they were. On the way out the staging tables that were not
        swapped in are dropped and the file is in WAL mode again.
        """
        with self._lock:
            if not self._rollback_journal():
                yield None
                return
            tables = {name: row_table(name) + STAGED for name in names}

            def make(conn: apsw.Connection) -> None:
                for table in tables.values():
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                    conn.execute(
                        f"CREATE TABLE {table} (key TEXT PRIMARY KEY, value BLOB NOT NULL)"
                    )

            try:
                self._write(make)
            except BaseException:
                self._back_to_wal()
                raise
            self._staged = dict(tables)
        try:
            yield lambda name: SpillFile(self.path, tables[name], staged=True)
        finally:
            with self._lock:
                self._staged = {}
                try:
                    self._write(lambda conn: self._drop_staging(conn, tables.values()))
                except ProjectionStoreError as exc:
                    log.warning("a rebuild's staging tables stay in %s: %s", self.path, exc)
                self._back_to_wal()

    @staticmethod
    def _drop_staging(conn: apsw.Connection, tables: Iterable[str]) -> None:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    def _rollback_journal(self) -> bool:
        """Before a swap: leave WAL mode for the rollback journal if this connection is the
        file's only one; whether it did.

        A swap writes every row anew (millions at a million Works). Through the WAL each new
        page is written twice (to the WAL, then by the checkpoint into the file); with the
        rollback journal a page the file did not have yet is written once, and only the
        pages the transaction changes that existed before it go to the journal. The
        transaction is as atomic either way (a crash leaves a hot journal, rolled back when
        the file is next opened, so the old projection). SQLite leaves WAL mode only when
        no other connection has the file open (a scheduler keeping it, a reader): then the
        attempt fails at once and the swap goes through the WAL as before.
        """
        conn = self._conn
        if not conn.getautocommit():
            return False
        conn.setbusytimeout(0)  # another connection: fail at once, do not wait for it
        try:
            found = conn.execute("PRAGMA main.journal_mode=DELETE").fetchone()
        except (apsw.BusyError, apsw.LockedError):
            return False
        finally:
            conn.setbusytimeout(self._busy_ms)
        if found is None or str(found[0]).lower() != "delete":
            return False
        # NORMAL is enough for WAL; a rollback journal needs FULL to stay atomic across a
        # power loss (a few syncs for the whole swap, not one per page).
        conn.execute("PRAGMA synchronous=FULL")
        return True

    def _back_to_wal(self) -> None:
        """After a swap in the rollback journal: the file in WAL mode again (as every
        connection opens it). If that fails, the next open sets it."""
        try:
            self._conn.execute("PRAGMA main.journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        except apsw.Error as exc:
            log.warning("the projection store at %s stays in rollback mode: %s", self.path, exc)
