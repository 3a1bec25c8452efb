"""The projection store's tables and the SQL on them (see `projection_store`).

Identifiers come only from `ROW_TABLES`, a fixed allowlist; every value is bound.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import apsw

from rota.application.errors import PortCode, ProjectionStoreError
from rota.application.ports import EventStore, LogHead, Persisted, ProjectionMeta
from rota.infrastructure.chain import GENESIS_HEX
from rota.infrastructure.config import EntryCode
from rota.projections import PERSISTED

SCHEMA = """
CREATE TABLE IF NOT EXISTS projection_meta (
    name       TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    log_hash   TEXT    NOT NULL,
    digest     TEXT,
    rebuilt_at TEXT,
    saved_at   TEXT    NOT NULL,
    generation INTEGER NOT NULL
);
"""
ROW_TABLES = {kind.name: f"rows_{kind.name}" for kind in PERSISTED}
META_COLUMNS = "name, version, position, log_hash, digest, rebuilt_at, saved_at, generation"


def default_path(log: str | os.PathLike[str] | EventStore) -> Path | None:
    """`rota.db` -> `rota.db.projections`; None for a store that is not a file (its
    backend's `log_file`: PostgreSQL, memory)."""
    if isinstance(log, EventStore):
        path = log.path
    else:
        from rota.infrastructure.store_url import backend

        path = backend(log).log_file
    return None if path is None else Path(f"{path}.projections")


def log_hash_at(log: EventStore, position: int) -> str | None:
    """The log's stored hash at `position` (the genesis hash at 0; None past the head)."""
    if position == 0:
        return GENESIS_HEX
    rows = log.read_raw(position - 1, 1)
    return rows[0].hash if rows and rows[0].position == position else None


def read_meta(conn: apsw.Connection, name: str) -> ProjectionMeta | None:
    row = conn.execute(
        f"SELECT {META_COLUMNS} FROM projection_meta WHERE name = ?", (name,)
    ).fetchone()
    return None if row is None else ProjectionMeta(*row)


def row_table(name: str) -> str:
    table = ROW_TABLES.get(name)
    if table is None:
        raise ProjectionStoreError(f"no stored projection is named {name!r}", code=EntryCode.USAGE)
    return table


def hash_for(log: EventStore | LogHead, position: int) -> str:
    if isinstance(log, LogHead):
        if log.position != position:
            raise ValueError(
                f"the log head given is at {log.position}, the projection at {position}"
            )
        return log.hash
    found = log_hash_at(log, position)
    if found is None:
        raise ProjectionStoreError(
            f"the log has no position {position}: a projection cannot be ahead of its log",
            code=PortCode.PROJECTION_AHEAD,
        )
    return found


class RowsToWrite:
    """The rows a write stores for `keys`, each encoded as it is iterated (so a whole
    projection is never held encoded at once); the keys whose row no longer exists are
    collected in `deletes`, and `count` says how many keys were gone through."""

    def __init__(self, projection: Persisted, keys: Iterable[str]) -> None:
        self.projection, self.keys = projection, keys
        self.deletes: list[tuple[str]] = []
        self.count = 0

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        # A projection's own `rows_of(keys)` (the same values as `row(key)` each, without a
        # call per row) where it has one.
        rows_of = getattr(self.projection, "rows_of", None)
        row = self.projection.row
        pairs = rows_of(self.keys) if rows_of is not None else ((k, row(k)) for k in self.keys)
        count, deletes = 0, self.deletes
        try:
            for key, value in pairs:
                count += 1
                if value is None:
                    deletes.append((key,))
                else:
                    yield key, value
        finally:
            self.count += count


def write_rows(conn: apsw.Connection, projection: Persisted, keys: Iterable[str]) -> int:
    """Upsert each key's row (deleting the rows that no longer exist), encoding lazily."""
    table = row_table(projection.name)
    rows = RowsToWrite(projection, keys)
    conn.executemany(
        f"INSERT INTO {table} (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        rows,
    )
    if rows.deletes:
        conn.executemany(f"DELETE FROM {table} WHERE key = ?", rows.deletes)
    return rows.count


def next_meta(
    projection: Persisted,
    log_hash: str,
    digest: str | None,
    now: str,
    previous: ProjectionMeta | None,
    *,
    rebuilt: bool,
) -> ProjectionMeta:
    """The meta row a write stores: the next generation, `rebuilt_at` kept unless rebuilt."""
    return ProjectionMeta(
        name=projection.name,
        version=projection.version,
        position=projection.position,
        log_hash=log_hash,
        digest=digest,
        rebuilt_at=now if rebuilt else (previous.rebuilt_at if previous else None),
        saved_at=now,
        generation=(previous.generation if previous else 0) + 1,
    )
