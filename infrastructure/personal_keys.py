"""The per-Work personal data keys (`PersonalKeys`), one small table beside the log.

The table `rota_personal_keys (work_id, key)` is created with the first personal input a
store receives (a store without personal data has no such table and nothing changes), in
its own committed write before the append that holds ciphertext under the key. Nothing
else reads it: `rota export`, replay, the projections and the eventsourcing follower read
the log's tables only, so a key is never exported, logged or folded.

Destroying a key (`rota forget`):
- SQLite: the writer connection runs with `PRAGMA secure_delete=ON` from the first key
  write on (SQLite then zeroes deleted and freed content, so neither the key's cell nor a
  stale copy of it left on a freed page survives in the file), and after the DELETE the
  write-ahead log is checkpointed and truncated (`wal_checkpoint(TRUNCATE)`), so the old
  page images holding the key leave the `-wal` file. A checkpoint that a reader blocks is
  logged (`SQLiteKeys.last_checkpoint` keeps its answer); the next destroy truncates again,
  and until then later writes overwrite the WAL from its start.
- PostgreSQL: the row is deleted. Its bytes stay in the table's heap page as a dead tuple
  until (auto)vacuum prunes the page and later writes reuse the space; VACUUM marks space
  free without zeroing it, and the server's WAL segments, replicas and base backups taken
  before keep it as long as they are kept. A `pg_dump` (or `rota export`) made after the
  forget reads live rows only and holds no key. Operators who need the bytes gone from the
  disk run `VACUUM FULL <schema>.rota_personal_keys` (it rewrites the table) and rotate
  their WAL archives and backups (docs/operator.md).
- Memory: the dict entry is dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from rota.application.errors import PortCode
from rota.application.ports import EventStore, PersonalKeys
from rota.domain.errors import RotaError

if TYPE_CHECKING:
    from rota.infrastructure.memory.log import MemoryLog
    from rota.infrastructure.postgres.store import PostgresStore
    from rota.infrastructure.sqlite.store import SQLiteStore

log = logging.getLogger("rota.personal")
TABLE = "rota_personal_keys"
KEY_BYTES = 32


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


class SQLiteKeys:
    """`PersonalKeys` in the SQLite log file (see the module docstring)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        # (busy, WAL frames, frames checkpointed) of the last destroy's checkpoint.
        self.last_checkpoint: tuple[int, int, int] | None = None

    def get(self, work_id: str) -> bytes | None:
        import apsw

        try:
            rows = self.store._query(f"SELECT key FROM {TABLE} WHERE work_id = ?", (work_id,))
        except apsw.SQLError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return bytes(rows[0][0]) if rows else None

    def create(self, work_id: str) -> bytes:
        def body(cursor: Any) -> bytes:
            cursor.execute("PRAGMA secure_delete=ON")
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (work_id TEXT PRIMARY KEY, key BLOB NOT NULL)"
            )
            cursor.execute(
                f"INSERT OR IGNORE INTO {TABLE} (work_id, key) VALUES (?, ?)", (work_id, new_key())
            )
            row = cursor.execute(f"SELECT key FROM {TABLE} WHERE work_id = ?", (work_id,))
            return bytes(row.fetchone()[0])

        return self.store.write(body)

    def destroy(self, work_id: str) -> bool:
        def body(cursor: Any) -> bool:
            cursor.execute("PRAGMA secure_delete=ON")
            found = cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
            ).fetchone()
            if found is None:
                return False
            cursor.execute(f"DELETE FROM {TABLE} WHERE work_id = ?", (work_id,))
            return bool(cursor.connection.changes())

        deleted = self.store.write(body)
        rows = self.store._query("PRAGMA wal_checkpoint(TRUNCATE)", ())
        self.last_checkpoint = tuple(int(v) for v in rows[0]) if rows else None  # type: ignore[assignment]
        if self.last_checkpoint is None or self.last_checkpoint[0]:
            log.warning(
                "a forgotten key's old pages may stay in %s-wal until its next truncating "
                "checkpoint (a reader held it): run rota forget again later to finish it",
                self.store.path,
            )
        return deleted


class PostgresKeys:
    """`PersonalKeys` in the PostgreSQL log's schema (see the module docstring)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.table = f'"{store.schema}".{TABLE}'

    def get(self, work_id: str) -> bytes | None:
        found = self.store._query("SELECT to_regclass(%s)", (self.table,))
        if found[0][0] is None:
            return None
        rows = self.store._query(f"SELECT key FROM {self.table} WHERE work_id = %s", (work_id,))
        return bytes(rows[0][0]) if rows else None

    def create(self, work_id: str) -> bytes:
        schema = self.store.schema

        def body(tx: Any) -> bytes:
            cursor = tx.cursor
            cursor.execute("SELECT to_regclass(%s)", (self.table,))
            if cursor.fetchone()[0] is None:
                # (CREATE TABLE IF NOT EXISTS races with itself: the schema's lock orders it)
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rota {schema}",))
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.table} "
                    "(work_id text PRIMARY KEY, key bytea NOT NULL)"
                )
            cursor.execute(
                f"INSERT INTO {self.table} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (work_id, new_key()),
            )
            cursor.execute(f"SELECT key FROM {self.table} WHERE work_id = %s", (work_id,))
            return bytes(cursor.fetchone()[0])

        key: bytes = self.store.write(body)
        return key

    def destroy(self, work_id: str) -> bool:
        def body(tx: Any) -> bool:
            cursor = tx.cursor
            cursor.execute("SELECT to_regclass(%s)", (self.table,))
            if cursor.fetchone()[0] is None:
                return False
            cursor.execute(f"DELETE FROM {self.table} WHERE work_id = %s", (work_id,))
            return bool(cursor.rowcount)

        deleted: bool = self.store.write(body)
        return deleted


_MEMORY: weakref.WeakKeyDictionary[MemoryLog, dict[str, bytes]] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


class MemoryKeys:
    """`PersonalKeys` of an in-memory log: shared by every handle on it, gone with it."""

    def __init__(self, log: MemoryLog) -> None:
        with _MEMORY_LOCK:
            self._keys = _MEMORY.setdefault(log, {})

    def get(self, work_id: str) -> bytes | None:
        with _MEMORY_LOCK:
            return self._keys.get(work_id)

    def create(self, work_id: str) -> bytes:
        with _MEMORY_LOCK:
            return self._keys.setdefault(work_id, new_key())

    def destroy(self, work_id: str) -> bool:
        with _MEMORY_LOCK:
            return self._keys.pop(work_id, None) is not None


class NoKeys:
    """The key table of a store that keeps none (a wrapper, a test double): personal input
    is refused (`personal_unavailable`), and nothing is ever found or destroyed."""

    def __init__(self, store: EventStore) -> None:
        self.kind = type(store).__name__

    def get(self, work_id: str) -> bytes | None:
        return None

    def create(self, work_id: str) -> bytes:
        raise RotaError(
            f"this store ({self.kind}) keeps no personal data keys: personal input fields "
            "need a SQLite, PostgreSQL or in-memory store",
            code=PortCode.PERSONAL_UNAVAILABLE,
        )

    def destroy(self, work_id: str) -> bool:
        return False


def personal_keys_for(store: EventStore) -> PersonalKeys:
    """The key table of `store`'s backend (PostgreSQL's imported only when it is used)."""
    from rota.infrastructure.memory.log import MemoryStore
    from rota.infrastructure.sqlite.store import SQLiteStore

    if isinstance(store, SQLiteStore):
        return SQLiteKeys(store)
    if isinstance(store, MemoryStore):
        return MemoryKeys(store.log)
    if type(store).__module__.startswith("rota.infrastructure.postgres"):
        from rota.infrastructure.postgres.store import PostgresStore

        if isinstance(store, PostgresStore):
            return PostgresKeys(store)
    return NoKeys(store)


__all__ = ["MemoryKeys", "NoKeys", "PostgresKeys", "SQLiteKeys", "personal_keys_for"]
