"""The per-Work personal data keys (`PersonalKeys`), one small table beside the log.

The table `rota_personal_keys (work_id, key)` is created with the first personal input a
store receives (a store without personal data has no such table and nothing changes), in
its own committed write before the append that holds ciphertext under the key. Nothing
else reads it: `rota export`, replay, the projections and the eventsourcing follower read
the log's tables only, so a key is never exported, logged or folded.

Destroying a key (`rota forget`) leaves a tombstone in its place (the Work's id, `key`
NULL), so the Work never gets another key, not even from a submit racing the forget:
- SQLite: the writer connection runs with `PRAGMA secure_delete=ON` from the first key
  write on (SQLite then zeroes deleted and freed content, so neither the key's cell nor a
  stale copy of it left on a freed page survives in the file), and after the write the
  write-ahead log is checkpointed and truncated (`wal_checkpoint(TRUNCATE)`), so the old
  page images holding the key leave the `-wal` file. A checkpoint that a reader blocks is
  logged (`SQLiteKeys.last_checkpoint` keeps its answer); the next destroy truncates again,
  and until then later writes overwrite the WAL from its start.
- PostgreSQL: the row is updated (a new version without the key). The old version's bytes
  stay in the table's heap page as a dead tuple until (auto)vacuum prunes the page and
  later writes reuse the space; VACUUM marks space free without zeroing it, and the
  server's WAL segments, replicas and base backups taken before keep it as long as they
  are kept. A `pg_dump` (or `rota export`) made after the
  forget reads live rows only and holds no key. Operators who need the bytes gone from the
  disk run `VACUUM FULL <schema>.rota_personal_keys` (it rewrites the table) and rotate
  their WAL archives and backups (docs/operator.md).
- Memory: the dict entry's key is dropped.
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
# `key` NULL: the Work's key was destroyed, and it never gets another (a tombstone, which
# holds the Work's id and nothing of its data).
SQLITE_COLUMNS = "(work_id TEXT PRIMARY KEY, key BLOB)"
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

        try:  # (`_query`: the store's reader connection of this thread, as its reads use)
            rows = self.store._query(f"SELECT key FROM {TABLE} WHERE work_id = ?", (work_id,))
        except apsw.SQLError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    def create(self, work_id: str) -> bytes | None:
        def body(cursor: Any) -> bytes | None:
            cursor.execute("PRAGMA secure_delete=ON")
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} {SQLITE_COLUMNS}")
            cursor.execute(
                f"INSERT OR IGNORE INTO {TABLE} (work_id, key) VALUES (?, ?)", (work_id, new_key())
            )
            row = cursor.execute(f"SELECT key FROM {TABLE} WHERE work_id = ?", (work_id,))
            key = row.fetchone()[0]
            return None if key is None else bytes(key)

        return self.store.write(body)

    def destroy(self, work_id: str) -> bool:
        def body(cursor: Any) -> bool:
            cursor.execute("PRAGMA secure_delete=ON")
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} {SQLITE_COLUMNS}")
            had = cursor.execute(
                f"SELECT 1 FROM {TABLE} WHERE work_id = ? AND key IS NOT NULL", (work_id,)
            ).fetchone()
            cursor.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, NULL)", (work_id,))
            return had is not None

        destroyed = self.store.write(body)
        rows = self.store._query("PRAGMA wal_checkpoint(TRUNCATE)", ())
        self.last_checkpoint = tuple(int(v) for v in rows[0]) if rows else None  # type: ignore[assignment]
        if self.last_checkpoint is None or self.last_checkpoint[0]:
            log.warning(
                "a forgotten key's old pages may stay in %s-wal until its next truncating "
                "checkpoint (a reader held it): run rota forget again later to finish it",
                self.store.path,
            )
        return destroyed


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
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    def _table(self, cursor: Any) -> None:
        cursor.execute("SELECT to_regclass(%s)", (self.table,))
        if cursor.fetchone()[0] is None:
            # (CREATE TABLE IF NOT EXISTS races with itself: the schema's lock orders it)
            lock = f"rota {self.store.schema}"
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (work_id text PRIMARY KEY, key bytea)"
            )

    def create(self, work_id: str) -> bytes | None:
        def body(tx: Any) -> bytes | None:
            cursor = tx.cursor
            self._table(cursor)
            cursor.execute(
                f"INSERT INTO {self.table} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (work_id, new_key()),
            )
            cursor.execute(f"SELECT key FROM {self.table} WHERE work_id = %s", (work_id,))
            key = cursor.fetchone()[0]
            return None if key is None else bytes(key)

        key: bytes | None = self.store.write(body)
        return key

    def destroy(self, work_id: str) -> bool:
        def body(tx: Any) -> bool:
            cursor = tx.cursor
            self._table(cursor)
            cursor.execute(
                f"SELECT 1 FROM {self.table} WHERE work_id = %s AND key IS NOT NULL FOR UPDATE",
                (work_id,),
            )
            had = cursor.fetchone() is not None
            cursor.execute(
                f"INSERT INTO {self.table} VALUES (%s, NULL) "
                "ON CONFLICT (work_id) DO UPDATE SET key = NULL",
                (work_id,),
            )
            return had

        destroyed: bool = self.store.write(body)
        return destroyed


_MEMORY: weakref.WeakKeyDictionary[MemoryLog, dict[str, bytes | None]] = weakref.WeakKeyDictionary()
_MEMORY_LOCK = threading.Lock()


class MemoryKeys:
    """`PersonalKeys` of an in-memory log: shared by every handle on it, gone with it."""

    def __init__(self, log: MemoryLog) -> None:
        with _MEMORY_LOCK:
            self._keys = _MEMORY.setdefault(log, {})

    def get(self, work_id: str) -> bytes | None:
        with _MEMORY_LOCK:
            return self._keys.get(work_id)

    def create(self, work_id: str) -> bytes | None:
        with _MEMORY_LOCK:
            return self._keys.setdefault(work_id, new_key())

    def destroy(self, work_id: str) -> bool:
        with _MEMORY_LOCK:
            had = self._keys.get(work_id) is not None
            self._keys[work_id] = None
            return had


class NoKeys:
    """The key table of a store that keeps none (a wrapper, a test double): personal input
    is refused (`personal_unavailable`), and nothing is ever found or destroyed."""

    def __init__(self, store: EventStore) -> None:
        self.kind = type(store).__name__

    def get(self, work_id: str) -> bytes | None:
        return None

    def create(self, work_id: str) -> bytes | None:
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
