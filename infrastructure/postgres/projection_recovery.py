"""Isolating damaged PostgreSQL projection tables (what `rota recover-corrupt` moves aside).

On SQLite, recover-corrupt moves the projection FILE into a backup directory. On
PostgreSQL the projections are rows in the log's schema, so it moves the ROWS: in one
transaction, every row of `rota_projection_meta` and of each `rota_projection_rows_*`
table is copied into `rota_projection_recovery(backup, source, key, value)` under the
backup name, a manifest row (per source table: rows, bytes and SHA-256) goes into
`rota_projection_recovery_manifest`, and the projection tables are emptied. Either all of
it commits or none of it does; the log's tables are never touched.

The SHA-256 of a source table is over its rows in key order (byte order, `COLLATE "C"`),
each `key NUL value LF`; a meta row's value is its JSON (`row_to_json`). Compare a backup
with `SELECT ... FROM rota_projection_recovery WHERE backup = NAME AND source = TABLE
ORDER BY key COLLATE "C"`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rota.application.errors import PortCode, ProjectionStoreError
from rota.infrastructure.backend import IsolatedCopy, Isolation, IsolationRefused
from rota.infrastructure.postgres.projection_store import PostgresProjectionStore
from rota.infrastructure.postgres.projection_tables import META_TABLE, PG_ROW_TABLES

RECOVERY_TABLE = "rota_projection_recovery"
MANIFEST_TABLE = "rota_projection_recovery_manifest"
Fingerprint = tuple[str, int, str, int]  # (source table, bytes, sha256, rows)


def _sources(schema: str) -> dict[str, str]:
    """Each source table's name -> a query of its (key, value) rows in byte order."""
    meta = (
        f"SELECT name, convert_to(row_to_json(m)::text, 'UTF8') "
        f'FROM "{schema}".{META_TABLE} m ORDER BY name COLLATE "C"'
    )
    found = {META_TABLE: meta}
    for table in PG_ROW_TABLES.values():
        found[table] = f'SELECT key, value FROM "{schema}".{table} ORDER BY key COLLATE "C"'
    return found


def _fingerprint(conn: Any, source: str, query: str, params: tuple[str, ...] = ()) -> Fingerprint:
    digest, size, count = hashlib.sha256(), 0, 0
    for key, value in conn.cursor(binary=True).execute(query, params):
        data = bytes(value)
        digest.update(key.encode() + b"\0" + data + b"\n")
        size, count = size + len(data), count + 1
    return source, size, digest.hexdigest(), count


def fingerprints(store: PostgresProjectionStore) -> list[Fingerprint]:
    """What an isolation would move, read in one snapshot (nothing is written)."""
    queries = _sources(store.schema)
    return store._read(lambda conn: [_fingerprint(conn, s, q) for s, q in queries.items()])


def backup_exists(store: PostgresProjectionStore, name: str) -> bool:
    def body(conn: Any) -> bool:
        table = f'"{store.schema}".{MANIFEST_TABLE}'
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            return False
        found = conn.execute(f"SELECT 1 FROM {table} WHERE backup = %s", (name,)).fetchone()
        return found is not None

    return store._read(body)


def isolate(
    store: PostgresProjectionStore, name: str, manifest: dict[str, object]
) -> list[Fingerprint]:
    """Move every projection row into the backup `name` with its manifest, in one
    transaction (see the module docstring); returns the fingerprints of what moved."""
    s = store.schema
    recovery, manifests = f'"{s}".{RECOVERY_TABLE}', f'"{s}".{MANIFEST_TABLE}'

    def body(conn: Any) -> list[Fingerprint]:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {recovery} (backup TEXT NOT NULL, source TEXT NOT NULL, "
            "key TEXT NOT NULL, value BYTEA NOT NULL, PRIMARY KEY (backup, source, key))"
        )
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {manifests} (backup TEXT PRIMARY KEY, "
            "created_at TEXT NOT NULL, manifest TEXT NOT NULL)"
        )
        if conn.execute(f"SELECT 1 FROM {manifests} WHERE backup = %s", (name,)).fetchone():
            raise ProjectionStoreError(
                f"a backup named {name!r} exists in {manifests}: choose a new name",
                code=PortCode.BACKUP_EXISTS,
            )
        moved = []
        for source, query in _sources(s).items():
            conn.execute(
                f"INSERT INTO {recovery} (backup, source, key, value) "
                f"SELECT %s, %s, k, v FROM ({query}) AS r(k, v)",
                (name, source),
            )
            copied = (
                f"SELECT key, value FROM {recovery} WHERE backup = %s AND source = %s "
                'ORDER BY key COLLATE "C"'
            )
            moved.append(_fingerprint(conn, source, copied, (name, source)))
            conn.execute(f'DELETE FROM "{s}".{source}')
        files = [{"table": t, "bytes": b, "sha256": h, "rows": n} for t, b, h, n in moved]
        conn.execute(
            f"INSERT INTO {manifests} (backup, created_at, manifest) VALUES (%s, %s, %s)",
            (name, manifest["created_at"], json.dumps({**manifest, "tables": files}, indent=2)),
        )
        return moved

    result = store._write(body)
    store._generations.clear()  # every projection is gone: the next write is whole
    return result


class RowIsolation(Isolation):
    """The projection rows of `store` (its schema's tables), to move under the backup
    `name` (`PostgresBackend.isolate_projections`); refused at once when the tables are
    not there or the backup name is taken."""

    def __init__(self, store: PostgresProjectionStore, name: str) -> None:
        self.store, self.name, s = store, name, store.schema
        if not store.exists():
            raise IsolationRefused(
                f"no projection tables in {store.where}: nothing to isolate "
                "('rota replay rebuild' creates them)",
                code=PortCode.NO_PROJECTION_STORE,
            )
        if backup_exists(store, name):
            raise IsolationRefused(
                f'a backup named {name!r} exists in "{s}".{MANIFEST_TABLE}: choose a new name',
                code=PortCode.BACKUP_EXISTS,
            )
        self.backup = f'"{s}".{RECOVERY_TABLE} backup {name!r}'
        self.manifest = f'"{s}".{MANIFEST_TABLE} backup {name!r}'

    def _copies(self, found: list[Fingerprint]) -> list[IsolatedCopy]:
        s = self.store.schema
        return [IsolatedCopy(t, f'"{s}".{t} ({n} rows)', b, h, n) for t, b, h, n in found]

    def planned(self) -> list[IsolatedCopy]:
        return self._copies(fingerprints(self.store))

    def run(self, manifest: dict[str, object]) -> list[IsolatedCopy]:
        return self._copies(isolate(self.store, self.name, manifest))


__all__ = [
    "MANIFEST_TABLE",
    "RECOVERY_TABLE",
    "RowIsolation",
    "backup_exists",
    "fingerprints",
    "isolate",
]
