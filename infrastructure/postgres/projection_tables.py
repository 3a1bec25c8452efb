"""The projection tables in a PostgreSQL schema: their names, their DDL, the SQL on their rows.

Beside the log's `events` and `head`:
- `rota_projection_meta(name, version, position, log_hash, digest, rebuilt_at, saved_at,
  generation)`: per projection the fold version, the log position applied, the log's hash
  there, its digest when one was computed, and the generation counter every write bumps;
- `rota_projection_rows_scheduler(key, value)`, `rota_projection_rows_history(key, value)`:
  msgspec JSON values as `bytea` (`convert_from(value, 'UTF8')` shows one in psql).
The `rota_` prefix keeps them apart from the log's tables and from anything else that
shares the schema. Keys are `COLLATE "C"`, so key ranges compare bytes, as SQLite's do.
Identifiers come only from these names and a validated schema; every value is bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from rota.application.ports import Persisted, ProjectionMeta
from rota.infrastructure.projection_tables import META_COLUMNS, ROW_TABLES, RowsToWrite

META_TABLE = "rota_projection_meta"
PG_ROW_TABLES = {name: f"rota_projection_{table}" for name, table in ROW_TABLES.items()}


def ddl(s: str) -> str:
    """The statements creating the projection tables of schema `s` (if they are missing)."""
    rows = "".join(
        f'CREATE TABLE IF NOT EXISTS "{s}".{table} '
        '(key TEXT COLLATE "C" PRIMARY KEY, value BYTEA NOT NULL);\n'
        for table in PG_ROW_TABLES.values()
    )
    return f"""
CREATE SCHEMA IF NOT EXISTS "{s}";
CREATE TABLE IF NOT EXISTS "{s}".{META_TABLE} (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, position BIGINT NOT NULL,
    log_hash TEXT NOT NULL, digest TEXT, rebuilt_at TEXT, saved_at TEXT NOT NULL,
    generation BIGINT NOT NULL);
{rows}"""


def fetch_rows(conn: Any, sql: str, args: tuple[Any, ...]) -> list[tuple[str, bytes]]:
    """The (key, value) rows a query returns, values as bytes."""
    found = conn.cursor(binary=True).execute(sql, args).fetchall()
    return [(key, bytes(value)) for key, value in found]


def count_rows(conn: Any, meta_table: str, row_tables: dict[str, str]) -> dict[str, int]:
    """Rows per projection table, every row read (doctor's scan of the tables)."""
    counts = {META_TABLE: int(conn.execute(f"SELECT count(*) FROM {meta_table}").fetchone()[0])}
    for name, table in row_tables.items():
        found = conn.execute(f"SELECT count(*), sum(length(value)) FROM {table}")
        counts[PG_ROW_TABLES[name]] = int(found.fetchone()[0])
    return counts


def write_rows(
    conn: Any, table: str, projection: Persisted, keys: Iterable[str], *, cleared: bool
) -> int:
    """Upsert each key's row, deleting the rows that no longer exist; into a table
    emptied in this transaction, COPY the rows (no conflicts are possible)."""
    rows = RowsToWrite(projection, keys)
    cursor = conn.cursor(binary=True)
    if cleared:
        with cursor.copy(f"COPY {table} (key, value) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "bytea"])
            for row in rows:
                copy.write_row(row)
        return rows.count
    cursor.executemany(
        f"INSERT INTO {table} (key, value) VALUES (%s, %b) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(rows),
    )
    if rows.deletes:
        cursor.executemany(f"DELETE FROM {table} WHERE key = %s", rows.deletes)
    return rows.count


def put_meta(conn: Any, meta_table: str, meta: ProjectionMeta) -> int:
    """Store a projection's meta row (insert or update); its generation."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in META_COLUMNS.split(", ")[1:])
    conn.execute(
        f"INSERT INTO {meta_table} ({META_COLUMNS}) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET {updates}",
        msgspec.structs.astuple(meta),
    )
    return meta.generation
